"""Continuation targets collected with the trajectories (answer utility of continuing), the
no-call counterfactual sufficiency branches, and the offline tuning of the stop rule."""
import math

import numpy as np
import pytest

from dynakrag_lite.actions import apply_action
from dynakrag_lite.config import ControlConfig, Environment
from dynakrag_lite.data.corpus import gold_titles
from dynakrag_lite.generators.base import Generation
from dynakrag_lite.policy import CostModel, train_policy
from dynakrag_lite.state import initial_state
from dynakrag_lite.training.tuning import tune_continuation
from dynakrag_lite.trajectories import PrefixSample, TrainingData
from dynakrag_lite.trajectories import collect, collect_question, sr

from helpers import ScriptedGenerator


class AnswerAware(ScriptedGenerator):
    """Answers a question correctly exactly when its answer string is in the shown documents."""

    def __init__(self, questions, **replies):
        super().__init__(**replies)
        self.answers = {q.question: q.answers[0] for q in questions}

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        g = super().generate(messages, max_tokens, stop)
        if self.calls[-1] != "answer":
            return g
        user = messages[-1]["content"]
        docs, _, rest = user.partition("\n\nQuestion: ")
        question = rest.split("\n", 1)[0]
        gold = self.answers.get(question, "")
        return Generation(gold if gold and gold in docs else "no idea", g.prompt_tokens, 3)


@pytest.fixture(scope="module")
def qs(library_questions):
    return library_questions[:6]


def env_for(retriever, gen) -> Environment:
    return Environment(retriever, gen, ControlConfig(use_spacy=False, doc_chars=None))


def path_states(q, samples, env):
    """The states the rollout visited, rebuilt from its chosen actions."""
    chosen = {s.step: s.action for s in samples if s.chosen}
    s, out = initial_state(q.question, q.id), []
    while True:
        out.append(s)
        if len(s.history) not in chosen:
            return out
        s = apply_action(s, chosen[len(s.history)], env)


def test_f1_targets_are_end_minus_now_along_the_path(qs, library_retriever):
    gen = AnswerAware(qs)
    env = env_for(library_retriever, gen)
    checked = 0
    for q in qs:
        samples, prefixes = collect_question(q, env, continuation="f1")
        states = [s for s in path_states(q, samples, env) if s.docs]
        assert [p.step for p in prefixes] == [len(s.history) for s in states]
        gold = gold_titles(q)
        f1s = [float(q.answers[0] in "\n".join(d.text for d in s.docs)) for s in states]
        for p, s, f1 in zip(prefixes, states, f1s):
            assert p.sr_now == pytest.approx(sr(s, gold))
            assert p.f1_now == pytest.approx(f1)
            assert p.f1_end == pytest.approx(f1s[-1]) and p.sr_end == pytest.approx(
                sr(states[-1], gold))
            assert p.gain == pytest.approx(f1s[-1] - f1)
            assert p.tokens == s.ledger.tokens and p.answer_tokens > 0
            checked += 1
        assert prefixes[-1].gain == 0.0  # the end of the rollout gains nothing by continuing
    assert checked > len(qs)


def test_sr_target_makes_no_answer_calls_and_targets_convert(qs, library_retriever):
    gen = AnswerAware(qs)
    data = collect(qs[:3], env_for(library_retriever, gen), progress=False,
                   continuation="sr")
    assert "answer" not in gen.calls and data.continuation_target == "sr"
    for p in data.prefixes:
        assert p.gain == pytest.approx(p.sr_end - p.sr_now) and math.isnan(p.f1_now)
    data.set_continuation_target("onestep")
    assert all(p.gain == p.onestep for p in data.prefixes)
    with pytest.raises(ValueError, match="lack"):
        data.set_continuation_target("f1")


def test_hand_built_prefixes_give_each_target():
    p = PrefixSample("q", np.zeros(3), 0.0, 2, onestep=0.5, sr_now=0.5, sr_end=1.0,
                     f1_now=0.25, f1_end=1.0)
    assert (p.target("f1"), p.target("sr"), p.target("onestep")) == (0.75, 0.5, 0.5)
    data = TrainingData(prefixes=[p]).set_continuation_target("f1")
    assert data.prefixes[0].gain == 0.75 and data.continuation_target == "f1"
    with pytest.raises(ValueError):
        p.target("other")


def test_counterfactual_sufficiency_branches_make_no_llm_call(qs, library_retriever):
    gen = AnswerAware(qs)
    data = collect(qs, env_for(library_retriever, gen), progress=False, continuation="sr")
    probes = [s for s in data.samples if s.action == "sufficiency_check"]
    on_path = [s for s in probes if s.chosen]
    assert len(probes) > len(on_path) > 0  # some were only counterfactual
    assert gen.calls.count("sufficiency") == len(on_path)
    assert all(s.executed and s.cost_tokens > 0 for s in on_path)
    assert all(not s.executed and s.cost_tokens == 0 for s in probes if not s.chosen)
    for s in probes:  # labels still there: 1[SR(s) = 1]
        assert s.target in (0.0, 1.0)
    # the cost model learns the probe's cost from executed probes only
    cm = CostModel().fit(data)
    a0, b = cm.coef["sufficiency_check"]
    assert a0 + b * on_path[0].n_docs > 0


@pytest.fixture(scope="module")
def collected(qs, library_retriever):
    data = collect(qs, env_for(library_retriever, AnswerAware(qs)), progress=False,
                   continuation="f1")
    return data, train_policy(data, n_estimators=10, min_samples_leaf=2, n_jobs=1)


def test_answer_calls_on_the_first_questions_only_train_continuation_on_those(
        qs, library_retriever):
    gen = AnswerAware(qs)
    data = collect(qs, env_for(library_retriever, gen), progress=False, continuation="f1",
                   answer_questions=3)
    with_f1 = {p.qid for p in data.prefixes if np.isfinite(p.f1_now)}
    assert with_f1 == {q.id for q in qs[:3]}
    # no answer call was made for the other questions; their targets are missing, not 0
    assert all(math.isnan(p.gain) for p in data.prefixes if p.qid not in with_f1)
    # the value model sees every question's samples
    assert {s.qid for s in data.samples} == {q.id for q in qs}
    pol = train_policy(data, n_estimators=10, min_samples_leaf=2, n_jobs=1)
    n_targeted = sum(p.qid in with_f1 for p in data.prefixes)
    assert pol.meta["n_continuation_prefixes"] == n_targeted
    assert pol.meta["n_continuation_questions"] == 3
    assert pol.meta["n_questions"] == len(qs)
    # F1 tuning holds out and scores only the questions that have answer F1s
    _, _, frame = tune_continuation(data, lams=(0.0,), thresholds=(0.1,), folds=3,
                                    metric="f1", n_estimators=10, min_samples_leaf=2,
                                    n_jobs=1)
    assert frame.n_questions.iloc[0] == 3 and np.isfinite(frame.f1.iloc[0])


def test_action_gains_count_executed_branches_and_gold_hits(collected):
    data, _ = collected
    gains = data.action_gains()
    for a, g in gains.items():
        ss = [s for s in data.samples if s.action == a and s.executed]
        assert g["calls"] == len(ss)
        assert g["hit_rate"] == pytest.approx(np.mean([s.target > 0 for s in ss]), abs=1e-4)
        assert g["chosen"] == sum(s.chosen for s in ss) <= g["calls"]
    assert "sufficiency_check" not in gains and "retrieve_more" in gains
