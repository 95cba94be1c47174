"""The stop-rule study (dynakrag_lab.studies.stop_rule): replayed outcomes stop where the
replayed decisions stop, the lambda sweep, and its command line writing both rules' grids."""
import json

import pytest

from dynakrag_lite.training.files import save_training_data
from dynakrag_lite.training.tuning import replay_decisions, tune_continuation
from dynakrag_lab.studies.stop_rule import __main__ as stop_rule_cli
from dynakrag_lab.studies.stop_rule import lambda_sweep, replay_outcomes

from test_continuation import collected, qs  # noqa: F401  (module-scoped fixtures)


@pytest.mark.parametrize("lam,thr", [(0.0, 1.0), (0.0, -1.0), (1e-3, 0.05)])
def test_replay_outcomes_stop_where_replayed_decisions_stop(collected, lam, thr):  # noqa: F811
    data, pol = collected
    out = replay_outcomes(pol, data, lam=lam, veto_threshold=thr).set_index("qid")
    dec = replay_decisions(pol, data, lam=lam, veto_threshold=thr)
    pref = {(p.qid, p.step): p for p in data.prefixes}
    for qid in data.questions:
        steps = sorted(d["step"] for d in dec if d["qid"] == qid)
        chosen = {d["step"]: d["chosen"] for d in dec if d["qid"] == qid}
        stop = next((st for st in steps if chosen[st] == "stop_answer"), steps[-1])
        row = out.loc[qid]
        assert row.stop_step == stop and row.early == (stop != steps[-1])
        assert row.f1 == pref[(qid, stop)].f1_now and row.sr == pref[(qid, stop)].sr_now
        assert row.tokens == pref[(qid, stop)].tokens + pref[(qid, stop)].answer_tokens
    if thr == -1.0:  # always veto: never stops before the cap
        assert not out.early.any()


def test_tune_continuation_grid_and_lambda_sweep(collected):  # noqa: F811
    data, _ = collected
    lam, thr, frame = tune_continuation(data, lams=(0.0, 1e-3), thresholds=(-1.0, 0.1, 1.0),
                                        folds=3, metric="f1", n_estimators=10,
                                        min_samples_leaf=2, n_jobs=1)
    assert len(frame) == 6 and frame.best.sum() == 1
    best = frame[frame.best].iloc[0]
    assert (best.lam, best.veto_threshold) == (lam, thr)
    assert best.f1 == frame.f1.max()
    assert set(frame.n_questions) == {len(data.questions)}  # every question held out once
    sweep = lambda_sweep(data, lams=(0.0, 1e-3, 1e-2), veto_threshold=0.1, folds=3,
                         n_estimators=10, min_samples_leaf=2, n_jobs=1)
    assert list(sweep.lam) == [0.0, 1e-3, 1e-2]
    assert {"f1", "sr", "tokens"} <= set(sweep.columns)
    # a large lambda makes acquisition expensive: it never spends more tokens than lambda 0
    assert sweep.tokens.iloc[-1] <= sweep.tokens.iloc[0] + 1e-9


def test_stop_rule_script_writes_both_rules_grids(collected, tmp_path):  # noqa: F811
    data, _ = collected
    traj = save_training_data(data, tmp_path / "t.npz")
    out = tmp_path / "stop.json"
    assert stop_rule_cli.main(["--trajectories", str(traj), "--folds", "3", "--trees", "5",
                               "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert set(res["rules"]) == {"level", "gain"}
    for rule, r in res["rules"].items():
        assert sum(row["best"] for row in r["grid"]) == 1
        assert {row["stop_rule"] for row in r["grid"]} == {rule}
        assert r["best"]["lam"] == r["lam"]
