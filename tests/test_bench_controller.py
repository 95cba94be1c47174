"""Smoke test of benchmarks/bench_controller.py's pure helpers (the benchmark itself is not run)."""
import numpy as np
import pytest

from helpers import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_controller", folder="benchmarks")


def test_cpu_model_reads_model_name_or_arm_fallback(bench):
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n"
    assert bench.cpu_model(x86) == "AMD EPYC 7B13"
    assert bench.cpu_model("processor\t: 0\nModel\t: Raspberry Pi 4\n") == "Raspberry Pi 4"
    assert bench.cpu_model("") is None


def test_summarize_and_verdict(bench):
    s = bench.summarize([0.001] * 19 + [0.010], [0.0005] * 20)
    assert s["median_ms"] == 1.0 and s["n"] == 20 and s["cpu_median_ms"] == 0.5
    assert 1.0 <= s["p95_ms"] <= 10.0 and s["min_ms"] == 1.0
    with pytest.raises(ValueError):
        bench.summarize([])
    assert bench.verdict({"3": 0.5, "12": 1.9})["under_target"] is True
    v = bench.verdict({"3": 0.5, "12": 2.0})
    assert v["under_target"] is False and v["worst_median_ms"] == 2.0


def test_time_call_respects_repetition_bounds(bench):
    calls = []
    out = bench.time_call(calls.append, min_reps=5, max_reps=8, budget_s=0.0, warmup=2)
    assert out["n"] == 5 and len(calls) == 7  # 2 warm-up calls, then min_reps with no budget
    out = bench.time_call(lambda i: None, min_reps=1, max_reps=8, budget_s=10.0, warmup=0)
    assert out["n"] == 8


def test_fast_predictors_match_the_forest_and_n_jobs_copy_leaves_policy_alone(bench):
    from sklearn.ensemble import RandomForestRegressor
    from dynakrag_lite.policy import CostModel, Policy
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 6))
    y = X[:, 0] - 2 * X[:, 1] + rng.normal(scale=0.1, size=60)
    forest = RandomForestRegressor(n_estimators=5, min_samples_leaf=2, random_state=0,
                                   n_jobs=-1).fit(X, y)
    rows = rng.normal(size=(4, 6))
    ref = forest.predict(rows)
    for kind in (bench.TreeLoopForest, bench.FlatForest):
        np.testing.assert_allclose(kind(forest).predict(rows), ref, rtol=0, atol=1e-12)
    pol = Policy(forest, None, CostModel())
    one = bench.with_n_jobs(pol, 1)
    assert one.value_model.n_jobs == 1 and pol.value_model.n_jobs == -1
    assert one.value_model.estimators_ is forest.estimators_
    assert one.continuation_model is None
