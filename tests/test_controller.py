"""The control loop: termination within caps from random states, for every chooser; the learned
policy's selection rule; features never read gold labels; policy persistence."""
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from dynakrag_lite.actions import apply_action
from dynakrag_lite.config import ControlConfig, Environment, RunSettings
from dynakrag_lite.controller import UniformChooser, run_controller
from dynakrag_lite.data.corpus import Corpus, gold_titles
from dynakrag_lite.data.schema import Paragraph, Question
from dynakrag_lite.features import FEATURE_NAMES, phi
from dynakrag_lite.policy import CostModel, Policy, PolicyError, train_policy
from dynakrag_lite.state import (ACTIONS, RETRIEVAL_ACTIONS, EvidenceState, RetrievedDoc,
                                 initial_state)
from dynakrag_lite.oracle import OracleChooser
from dynakrag_lite.trajectories import collect, label
from dynakrag_lite.validity import valid_actions

from helpers import ScriptedGenerator


@pytest.fixture(scope="module")
def trained(library_questions, library_retriever):
    env = Environment(library_retriever, ScriptedGenerator(), ControlConfig())
    data = collect(library_questions[:12], env, progress=False)
    return data, train_policy(data, n_estimators=20, min_samples_leaf=2, n_jobs=1)


def random_walk(q, env, actions_seq):
    """A state reached by following valid actions picked by the sequence of integers."""
    s = initial_state(q.question, q.id)
    for pick in actions_seq:
        valid = [a for a in valid_actions(s, env.config) if a != "stop_answer"]
        if not valid:
            break
        s = apply_action(s, valid[pick % len(valid)], env)
    return s


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(qi=st.integers(0, 59), walk=st.lists(st.integers(0, 6), max_size=5),
       max_steps=st.integers(1, 5), max_docs=st.integers(3, 12),
       cap=st.one_of(st.none(), st.integers(1, 3)), chooser=st.sampled_from(
           ["learned", "uniform", "oracle"]))
def test_every_policy_terminates_within_caps_from_random_states(
        library_questions, library_retriever, trained, qi, walk, max_steps, max_docs, cap,
        chooser):
    cfg = ControlConfig(max_steps=max_steps, max_docs=max_docs, retrieval_cap=cap)
    env = Environment(library_retriever, ScriptedGenerator(), cfg)
    q = library_questions[qi]
    start = random_walk(q, env, walk)
    ch = {"learned": trained[1], "uniform": UniformChooser(3),
          "oracle": OracleChooser(env, gold_titles(q))}[chooser]
    before = start.steps
    res = run_controller(q.question, env, ch, start=start)
    st_ = res.state
    assert st_.stopped
    assert st_.steps <= max(max_steps, before)
    assert len(st_.docs) <= max(max_docs, len(start.docs))
    if cap is not None:
        assert st_.ledger.retrieval_calls <= max(cap, start.ledger.retrieval_calls)
    for t in res.trace:
        if t.action != "compress_answer_evidence":
            assert t.action in t.valid


def test_uniform_controller_runs_to_fixed_horizon(library_questions, library_retriever):
    env = Environment(library_retriever, ScriptedGenerator(), ControlConfig())
    res = run_controller(library_questions[0].question, env, UniformChooser(1))
    assert res.state.steps == env.config.max_steps or len(res.state.docs) == 12


@pytest.mark.parametrize("k", [1, 2, 3])
def test_uniform_stop_after_k_stops_at_the_k_th_acquisition_with_the_same_choices(
        library_questions, library_retriever, k):
    """evaluate --method uniform --stop-after K: the fixed horizon's seeded choices, cut by
    stop_answer once K acquisitions were made (budgets wide enough that no cap comes first)."""
    env = Environment(library_retriever, ScriptedGenerator(),
                      ControlConfig(max_steps=8, max_docs=40))
    for q in library_questions[:4]:
        horizon = [t.action for t in run_controller(q.question, env, UniformChooser(1)).trace]
        cut = run_controller(q.question, env, UniformChooser(1, stop_after=k)).trace
        acts = [t.action for t in cut if t.action != "compress_answer_evidence"]
        assert acts[-1] == "stop_answer"
        assert cut[len(acts) - 1].scores == {"stop_answer": {"schedule": float(k)}}
        assert sum(a in RETRIEVAL_ACTIONS for a in acts) == k
        assert acts[:-1] == horizon[:len(acts) - 1]


class FixedValues:
    """A value model with hand-set v(s, a): it reads which action phi(s, a) encodes (the act_*
    one-hot) and returns that action's number, so the expected choice is hand-computable."""

    def __init__(self, table: dict[str, float]):
        self.table = table
        self.cols = {a: FEATURE_NAMES.index(f"act_{a}") for a in ACTIONS}

    def predict(self, X):
        return np.array([self.table[next(a for a, c in self.cols.items() if row[c] == 1.0)]
                         for row in X])


def one_doc_state() -> EvidenceState:
    doc = RetrievedDoc("d1", "Velmora Records", "Velmora Records was founded by Orlen Vasko.",
                       0.8, "retrieve_more", 0)
    return EvidenceState(question="Where was the founder of Velmora Records born?", docs=(doc,),
                         history=("retrieve_more",))


# v(s, a) and c(s, a) chosen so that each lambda below has a different winner.
VALUES = {"retrieve_more": 0.30, "rewrite_query": 0.10, "sufficiency_check": 0.28,
          "stop_answer": 0.25}
VALID = ("retrieve_more", "rewrite_query", "sufficiency_check", "stop_answer")


@pytest.mark.parametrize("lam, expected, retrieve_score", [
    (0.0, "retrieve_more", 0.30),        # .30 > .28 > .25 > .10
    (1e-4, "sufficiency_check", 0.255),  # .30-.045=.255, .10-.045=.055, .28-.02=.26, .25
    (1e-3, "stop_answer", -0.15),        # .30-.45=-.15, .10-.45=-.35, .28-.2=.08, .25
])
def test_learned_policy_picks_argmax_of_value_minus_lambda_cost(lam, expected, retrieve_score):
    # Retrieval actions cost retrieval_tokens (450); the probe a + b * n_docs = 100 + 100 * 1.
    costs = CostModel(coef={"sufficiency_check": (100.0, 100.0)}, retrieval_tokens=450.0)
    pol = Policy(FixedValues(VALUES), None, costs, lam=lam)
    action, scores = pol.choose(one_doc_state(), VALID)
    assert action == expected
    assert scores["retrieve_more"] == {"value": 0.30, "cost": 450.0,
                                       "score": pytest.approx(retrieve_score)}
    assert scores["sufficiency_check"]["cost"] == 200.0 and scores["stop_answer"]["cost"] == 0.0


def test_continuation_model_can_veto_stop(library_questions, library_retriever, trained):
    env = Environment(library_retriever, ScriptedGenerator(), ControlConfig())
    s = apply_action(initial_state(library_questions[3].question), "retrieve_more", env)
    valid = valid_actions(s, env.config)
    always_veto = replace(trained[1], veto_threshold=-1.0)
    a, scores = always_veto.choose(s, valid)
    assert a != "stop_answer" and scores["stop_answer"].get("vetoed") == 1.0
    never_veto = replace(trained[1], veto_threshold=10.0)
    _, scores = never_veto.choose(s, valid)
    assert "vetoed" not in scores["stop_answer"]


def state_with_titles(*titles: str) -> EvidenceState:
    docs = tuple(RetrievedDoc(f"d{i}", t, "text", 0.5, "retrieve_more", 0)
                 for i, t in enumerate(titles))
    return EvidenceState(question="q?", docs=docs)


def test_targets_follow_paper_equation():
    """Eq. 1 on hand-made states with a 3-document gold set, expected values by hand."""
    gold = ["Velmora Records", "Orlen Vasko", "Kotanbrook"]
    s = state_with_titles("Velmora Records", "Velmora Pictures")                # SR = 1/3
    s2 = state_with_titles("Velmora Records", "Velmora Pictures", "orlen  VASKO",
                           "Kotanbrook")                                         # SR = 1
    assert label(s, "retrieve_more", gold, s2) == pytest.approx(2 / 3)  # SR(s') - SR(s)
    assert label(s, "gap_query", gold, s) == 0.0                        # nothing new found
    assert label(s, "stop_answer", gold, None) == pytest.approx(1 / 3)  # SR(s)
    assert label(s2, "stop_answer", gold, None) == 1.0
    assert label(s, "sufficiency_check", gold, None) == 0.0             # 1[SR(s) = 1]
    assert label(s2, "sufficiency_check", gold, None) == 1.0
    with pytest.raises(ValueError):  # terminal compression carries no target
        label(s, "compress_answer_evidence", gold, None)


def test_features_do_not_change_when_gold_labels_change(library_questions, tmp_path):
    """Same question and paragraphs, gold support and answers altered: same phi(s, a)."""
    from dynakrag_lite.retriever import DenseRetriever
    q = library_questions[5]
    flipped = Question(q.id, q.dataset, q.question, ("something else",), q.type,
                       tuple(Paragraph(p.title, p.text, not p.is_supporting)
                             for p in q.paragraphs))
    vecs = []
    for i, variant in enumerate((q, flipped)):
        corpus = Corpus.from_questions([variant] + list(library_questions[6:20]))
        env = Environment(DenseRetriever(corpus, index_dir=tmp_path / f"index{i}",
                                         show_progress=False),
                          ScriptedGenerator(), ControlConfig())
        s = apply_action(apply_action(initial_state(variant.question), "retrieve_more", env),
                         "sufficiency_check", env)
        vecs.append(np.stack([phi(s, a) for a in ACTIONS]))
    assert np.array_equal(vecs[0], vecs[1])
    assert len(FEATURE_NAMES) == vecs[0].shape[1]


def test_policy_round_trips_with_metadata(tmp_path, trained):
    pol = trained[1]
    path = pol.save(tmp_path / "p.joblib")
    back = Policy.load(path)
    assert back.meta["feature_names"] == FEATURE_NAMES
    assert back.meta["data_hash"] == pol.meta["data_hash"]
    X = np.stack([s.features for s in trained[0].samples[:10]])
    assert np.allclose(back.value_model.predict(X), pol.value_model.predict(X))


def test_loading_policy_built_for_other_features_fails_clearly(tmp_path, trained):
    pol = replace(trained[1], meta={**trained[1].meta,
                                    "feature_names": FEATURE_NAMES[:-1] + ("old_feature",)})
    path = pol.save(tmp_path / "old.joblib")
    with pytest.raises(PolicyError, match="other features.*old_feature"):
        Policy.load(path)


def test_loading_garbage_policy_file_fails_clearly(tmp_path):
    p = tmp_path / "bad.joblib"
    p.write_bytes(b"not a policy")
    with pytest.raises(PolicyError, match="bad.joblib"):
        Policy.load(p)


@pytest.mark.parametrize("ablation", [
    {"use_compression": False}, {"use_sufficiency": False}, {"retrieval_cap": 1},
    {"retrieval_cap": 2}, {"retrieval_cap": 3}])
def test_every_ablation_runs_end_to_end(library_questions, library_retriever, trained,
                                        ablation, tmp_path):
    """The paper's ablation switches, through the same evaluate() the CLI uses."""
    from dynakrag_lite.experiments.run import evaluate
    env = Environment(library_retriever, ScriptedGenerator(), ControlConfig(**ablation))
    summary = evaluate(library_questions[50:52], RunSettings(method="dynakrag"), env, tmp_path,
                       policy=trained[1], progress=False)
    assert summary["n"] == 2
    import json
    rows = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    for r in rows:
        actions = [t["action"] for t in r["trace"]]
        if ablation.get("use_compression") is False:
            assert "compress_answer_evidence" not in actions
        if ablation.get("use_sufficiency") is False:
            assert "sufficiency_check" not in actions
        if "retrieval_cap" in ablation:
            assert r["retrieval_calls"] <= ablation["retrieval_cap"]
