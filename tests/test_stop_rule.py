"""The selection rule and its two stop rules (policy.select), and the trajectories saved for
re-tuning without model calls (training.files save/load); the lab's stop-rule study is
tested in tests/lab/test_stop_rule_study.py."""
import numpy as np
import pytest

from dynakrag_lite.experiments.cli import build_parser
from dynakrag_lite.policy import select, train_policy
from dynakrag_lite.training.tuning import replay_decisions, tune_continuation
from dynakrag_lite.training.files import load_training_data, save_training_data

from test_continuation import collected, qs  # noqa: F401  (module-scoped fixtures)

VALUES = {"retrieve_more": 0.20, "rewrite_query": 0.15, "stop_answer": 0.60}
COSTS = {"retrieve_more": 400.0, "rewrite_query": 150.0, "stop_answer": 0.0}


def test_level_rule_stops_when_support_in_hand_beats_every_gain():
    best, scores, veto = select(VALUES, COSTS, None, 0.0, 0.05, "level")
    assert best == "stop_answer" and not veto and scores["stop_answer"] == 0.60


def test_under_the_level_rule_lambda_can_only_make_stopping_likelier():
    for lam in (0.0, 1e-4, 1e-3, 1e-2):
        assert select(VALUES, COSTS, None, lam, 0.05, "level")[0] == "stop_answer"


def test_gain_rule_continues_while_a_gain_exceeds_its_price():
    assert select(VALUES, COSTS, None, 0.0, 0.05, "gain")[0] == "retrieve_more"
    # scores 0.20 - 400 lam (retrieve), 0.15 - 150 lam (rewrite), 0 (stop):
    assert select(VALUES, COSTS, None, 1e-4, 0.05, "gain")[0] == "retrieve_more"
    # past lam = 2e-4 the cheaper rewrite is the better buy ...
    assert select(VALUES, COSTS, None, 5e-4, 0.05, "gain")[0] == "rewrite_query"
    # ... and past lam = 1e-3 nothing is worth its price: stop.
    assert select(VALUES, COSTS, None, 2e-3, 0.05, "gain")[0] == "stop_answer"


def test_veto_removes_stop_only_when_something_else_is_valid():
    best, _, veto = select(VALUES, COSTS, 0.3, 0.0, 0.05, "level")
    assert veto and best == "retrieve_more"
    best, _, veto = select({"stop_answer": 0.6}, {"stop_answer": 0.0}, 0.3, 0.0, 0.05)
    assert best == "stop_answer" and not veto


def test_continuation_rule_stops_iff_the_estimate_is_below_tau():
    values = {"retrieve_more": 0.02, "sufficiency_check": 0.9, "stop_answer": 0.6}
    costs = {"retrieve_more": 400.0, "sufficiency_check": 300.0, "stop_answer": 0.0}
    assert select(values, costs, 0.01, 0.0, 0.02, "continuation")[0] == "stop_answer"
    # above tau it continues with the best acquisition, whatever the levels of stop and probe
    best, _, veto = select(values, costs, 0.03, 0.0, 0.02, "continuation")
    assert best == "retrieve_more" and not veto
    # a state without an estimate (no documents yet) never stops early
    assert select(values, costs, None, 0.0, 0.02, "continuation")[0] == "retrieve_more"


def test_continuation_rule_never_spends_a_step_on_a_probe_while_support_can_come():
    values = {"sufficiency_check": 1.0, "gap_query": 0.05, "stop_answer": 0.9}
    costs = dict.fromkeys(values, 0.0)
    assert select(values, costs, 0.5, 0.0, 0.02, "continuation")[0] == "gap_query"
    # with nothing to acquire, it stops rather than probe
    only = {"sufficiency_check": 1.0, "stop_answer": 0.9}
    assert select(only, dict.fromkeys(only, 0.0), 0.5, 0.0, 0.02,
                  "continuation")[0] == "stop_answer"


def test_a_stop_at_k_schedule_withholds_then_forces_the_stop(collected):  # noqa: F811
    from dynakrag_lite.state import EvidenceState
    data, _ = collected
    pol = train_policy(data, n_estimators=10, min_samples_leaf=2, n_jobs=1,
                       stop_rule="continuation", veto_threshold=1.0)  # would stop at once
    pol.stop_after = 2
    valid = ("retrieve_more", "rewrite_query", "sufficiency_check", "stop_answer")
    docs_state = EvidenceState("q?", history=("retrieve_more",))
    best, _ = pol.choose(docs_state, valid)
    assert best != "stop_answer"  # one acquisition made: the stop is withheld
    two = EvidenceState("q?", history=("retrieve_more", "sufficiency_check", "rewrite_query"))
    assert pol.choose(two, valid)[0] == "stop_answer"  # two made: forced


def test_unknown_stop_rule_is_refused():
    with pytest.raises(ValueError, match="stop rule"):
        select(VALUES, COSTS, None, 0.0, 0.05, "sometimes")


def test_replayed_decisions_follow_the_policys_stop_rule(collected):  # noqa: F811
    data, _ = collected
    pol = train_policy(data, n_estimators=10, min_samples_leaf=2, n_jobs=1, stop_rule="gain")
    assert pol.stop_rule == "gain" and pol.meta["stop_rule"] == "gain"
    for d in replay_decisions(pol, data, lam=0.0, veto_threshold=np.inf):
        # lambda 0: stopping is worth 0, so a valid action with a positive predicted gain wins
        if any(v > 0 for a, v in d["values"].items() if a != "stop_answer"):
            assert d["chosen"] != "stop_answer"


def test_saved_trajectories_load_back_identical(collected, tmp_path):  # noqa: F811
    data, _ = collected
    path = save_training_data(data, tmp_path / "t.npz")
    back = load_training_data(path)
    assert back.questions == data.questions
    assert back.continuation_target == data.continuation_target
    assert len(back.samples) == len(data.samples) and len(back.prefixes) == len(data.prefixes)
    for a, b in zip(data.samples, back.samples):
        assert (a.qid, a.step, a.action, a.chosen, a.executed, a.n_docs) == \
            (b.qid, b.step, b.action, b.chosen, b.executed, b.n_docs)
        assert a.target == b.target and a.cost_tokens == b.cost_tokens
        assert np.array_equal(a.features, b.features)
    for a, b in zip(data.prefixes, back.prefixes):
        assert a.qid == b.qid and a.step == b.step and np.array_equal(a.features, b.features)
        assert np.allclose([a.gain, a.sr_now, a.f1_now, a.tokens],
                           [b.gain, b.sr_now, b.f1_now, b.tokens], equal_nan=True)
    # the same forests come out of the reloaded data
    kw = dict(lams=(0.0,), thresholds=(0.1, 1.0), folds=3, n_estimators=5,
              min_samples_leaf=2, n_jobs=1)
    assert tune_continuation(data, **kw)[2].equals(tune_continuation(back, **kw)[2])


def test_a_file_that_is_not_saved_trajectories_is_named_in_the_error(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="bad.npz"):
        load_training_data(bad)


def test_command_line_accepts_the_continuation_rule_and_a_stop_at_k_schedule():
    # the flags main_experiment.py passes for dynakrag-cont and dynakrag-cont-stop<k>

    ap = build_parser()
    train = ap.parse_args(["train", "--data", "library", "--stop-rule", "continuation",
                           "--token-price", "1e-5", "--generator", "smollm2-135m",
                           "--out", "p.joblib"])
    assert train.stop_rule == "continuation" and train.token_price == 1e-5
    ev = ap.parse_args(["evaluate", "--data", "library", "--method", "dynakrag",
                        "--stop-after", "3", "--generator", "smollm2-135m"])
    assert ev.stop_after == 3
    assert ap.parse_args(["evaluate", "--data", "library", "--method", "dynakrag", "--generator",
                          "smollm2-135m"]).stop_after is None
