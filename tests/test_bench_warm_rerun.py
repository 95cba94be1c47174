"""benchmarks/bench_warm_rerun.py: its pure helpers, and one end-to-end pass on SmolLM2-135M
and the embedded library (a cold run made here, re-run warm; then re-run with calls deleted
from the cache, which the benchmark must report as live calls, naming the question)."""
import json
import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from helpers import load_script, require_model

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_warm_rerun", folder="benchmarks")


def test_recorded_args_and_options(bench):
    cmd = ("python -m dynakrag_lite evaluate --data musique --data-dir ../shared/data "
           "--method fixed_k --fixed-k 3 --limit 100 --out results/x/fixed_k3")
    args = bench.recorded_args(cmd)
    assert args[0] == "evaluate" and args[-2:] == ["--out", "results/x/fixed_k3"]
    out = bench.set_option(args, "--out", "/tmp/w")
    assert out.count("--out") == 1 and out[-2:] == ["--out", "/tmp/w"]
    assert "results/x/fixed_k3" not in out
    assert bench.set_option(["evaluate", "--out=a", "--limit", "3"], "--out", "b") == \
        ["evaluate", "--limit", "3", "--out", "b"]
    assert bench.set_option(["evaluate", "--limit", "3"], "--limit", None) == ["evaluate"]
    quoted = bench.recorded_args("python -m dynakrag_lite evaluate --out 'a b'")
    assert quoted == ["evaluate", "--out", "a b"]
    for bad in ("python -m dynakrag_lite train --data x", "python other.py evaluate", ""):
        with pytest.raises(ValueError):
            bench.recorded_args(bad)


def test_cold_seconds_uses_latest_rows(bench):
    rows = [{"id": "a", "seconds": 2.0, "error": {"type": "X"}},
            {"id": "b", "seconds": 3.0}, {"id": "a", "seconds": 4.0}]
    c = bench.cold_seconds(rows, {"n": 2, "seconds_mean": 3.5})
    assert c["seconds"] == 7.0 and c["questions"] == 2 and c["errors"] == 0
    assert c["all_rows_seconds"] == 9.0 and c["summary_seconds_mean_x_n"] == 7.0
    assert bench.cold_seconds(rows, {}, ids=["b"])["seconds"] == 3.0


def _row(i, pred="Paris", f1=1.0, seconds=1.0, **kw):
    return {"id": i, "prediction": pred, "em": f1, "f1": f1, "support_recall": 0.5,
            "trace": [], "seconds": seconds, **kw}


def test_compare_rows(bench):
    same = bench.compare_rows([_row("a"), _row("b")], [_row("a", seconds=0.01),
                                                       _row("b", seconds=0.02)])
    assert same["equal"] and same["identical_rows_but_seconds"] == 2
    diff = bench.compare_rows([_row("a"), _row("b"), _row("c")],
                              [_row("a", pred="Rome", f1=0.0), _row("b", trace=[1])])
    assert not diff["equal"] and diff["missing_in_rerun"] == ["c"]
    assert diff["mismatch_questions"] == ["a"]
    assert {m["field"] for m in diff["mismatches"]} == {"prediction", "em", "f1"}
    assert diff["other_fields_differ"] == {"b": ["trace"]}
    err = bench.compare_rows([_row("a")], [{"id": "a", "error": {"type": "E"}, "seconds": 0}])
    assert err["mismatches"][0]["field"] == "error"
    limited = bench.compare_rows([_row("a"), _row("b")], [_row("a")], ids=["a"])
    assert limited["equal"] and limited["questions"] == 1


def test_live_calls_named_and_counted(bench):
    zero = {k: 0 for k in bench.COUNTERS}
    child = {"evaluate": {"cache_before": dict(zero, hits=1)},
             "cache_end": dict(zero, hits=6, misses=1, writes=1),
             "questions": [{"id": "q1", **dict(zero, hits=3), "backend_generations": 0},
                           {"id": "q2", **dict(zero, hits=2, misses=1, writes=1),
                            "backend_generations": 1}]}
    r = bench.live_calls(child, 10, 11)
    assert r["live"] and r["live_calls"] == 1 and r["new_rows"] == 1
    assert [q["id"] for q in r["questions_with_live_calls"]] == ["q2"]
    assert r["questions"]["lookups"] == 6 and r["setup"]["hits"] == 1
    assert r["after_loop"]["misses"] == 0
    clean = dict(child, cache_end=dict(zero, hits=6),
                 questions=[{"id": "q1", **dict(zero, hits=5), "backend_generations": 0}])
    r = bench.live_calls(clean, 10, 10)
    assert not r["live"] and r["live_calls"] == 0 and r["questions_with_live_calls"] == []
    # a miss outside any question (setup) is a live call too
    assert bench.live_calls(dict(clean, evaluate={"cache_before": dict(zero, misses=2)},
                                 cache_end=dict(zero, hits=5, misses=2)), 10, 10)["live"]
    plain = bench.live_calls(None, 10, 12)
    assert plain["live"] and plain["live_calls"] is None
    assert not bench.live_calls(None, 10, 10)["live"]


def test_timings_and_verdict(bench):
    t = 1000.0
    child = {"t_start_main": t + 1, "build_setup": {"t0": t + 2, "t1": t + 8},
             "index": {"loaded_from_disk": False, "load_seconds": 0.0,
                       "encode_seconds": 3.0, "build_seconds": 1.0},
             "evaluate": {"t0": t + 10, "t1": t + 14},
             "questions": [{"id": "a", "t0": t + 10, "t1": t + 11.5},
                           {"id": "b", "t0": t + 11.5, "t1": t + 13.9}]}
    w = bench.timings(child, t, t + 15, [{"seconds": 1.4}, {"seconds": 2.3}])
    assert w["wall_seconds"] == 15 and w["setup_seconds"] == 10 and w["loop_seconds"] == 4
    assert w["setup_parts"] == {"interpreter_and_imports": 1, "build_setup": 6,
                                "after_build_setup": 2}
    assert w["index"]["rebuilt"] and w["index"]["rebuild_seconds"] == 4
    assert w["wall_seconds_without_index_build"] == 11 and w["exit_seconds"] == 1
    assert w["loop_seconds_after_first_question"] == 2.5
    assert w["question_seconds_sum"] == 3.7 and w["first_question_seconds"] == 1.4
    v = bench.verdict(600.0, w, 50)
    assert v["ratios"]["whole"] == 40 and v["ratios"]["without_setup"] == 150
    assert not v["target_met_whole"] and v["target_met_without_setup"]
    plain = bench.timings(None, t, t + 20, [{"seconds": 0.1}])
    assert plain["loop_seconds"] is None and plain["setup_seconds"] is None
    v = bench.verdict(600.0, plain, 50)
    assert v["ratios"]["whole"] == 30 and v["ratios"]["question_seconds"] == 6000
    assert v["target_met_without_setup"] and not v["target_met_whole"]


def test_snapshot_cache_is_a_private_copy(bench, tmp_path):
    from dynakrag_lite.generators.cache import CallCache
    src = tmp_path / "calls.sqlite"
    with CallCache(src) as c:
        c.put("k1", "a", 1, 1, 0.1)
        c.put("k2", "b", 1, 1, 0.1)
        snap = tmp_path / "snap.sqlite"
        assert bench.snapshot_cache(src, snap) == 2  # while the source is open (WAL)
    with CallCache(snap) as s:
        assert s.get("k1")["text"] == "a"
        s.put("k3", "c", 1, 1, 0.1)
    assert bench.sqlite_rows(snap) == 3 and bench.sqlite_rows(src) == 2
    with pytest.raises(SystemExit):
        bench.snapshot_cache(tmp_path / "absent.sqlite", snap)


@pytest.mark.slow
def test_warm_rerun_end_to_end(bench, tmp_path):
    """A cold run made here, then the benchmark: all hits and the same rows; then with the
    cache's newest call deleted: that live call is reported and its question named."""
    require_model("smollm2-135m")
    cache = tmp_path / "calls.sqlite"
    run = tmp_path / "cold"
    cold = subprocess.run(
        [sys.executable, "-m", "dynakrag_lite", "evaluate", "--data", "library", "--method",
         "fixed_k", "--fixed-k", "3", "--generator", "smollm2-135m", "--limit", "2",
         "--out", str(run)],
        cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "DYNAKRAG_LLM_CACHE": str(cache)})
    assert cold.returncode == 0, cold.stderr[-2000:]
    out = tmp_path / "warm.json"
    assert bench.main([str(run), "--cache", str(cache), "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    for key in ("date", "command", "cpu_model", "machine", "versions", "settings", "runs"):
        assert key in r
    assert len(r["machine"]["loadavg_start"]) == 3
    (res,) = r["runs"]
    assert res["n_questions"] == 2 and res["warm"]["exit_code"] == 0
    assert res["committed_complete"] is True
    assert res["calls"]["live_calls"] == 0 and not res["calls"]["live"]
    assert res["calls"]["questions"]["hits"] >= 2 and res["calls"]["new_rows"] == 0
    assert res["predictions"]["equal"], res["predictions"]
    assert res["fingerprint_diff"] == []
    assert res["cold"]["seconds"] > 0 and res["warm"]["loop_seconds"] > 0
    assert res["warm"]["setup_seconds"] > 0 and res["warm"]["index"]["rebuilt"] is False
    assert res["ratios"]["whole"] > 0

    with closing(sqlite3.connect(cache)) as c, c:  # forget the second question's call
        c.execute("DELETE FROM calls WHERE key = (SELECT key FROM calls "
                  "ORDER BY created DESC LIMIT 1)")
    second = json.loads((run / "predictions.jsonl").read_text().splitlines()[1])["id"]
    assert bench.main([str(run), "--cache", str(cache), "--out", str(out),
                       "--strict"]) == 1
    (res,) = json.loads(out.read_text())["runs"]
    assert res["calls"]["live"] and res["calls"]["live_calls"] == 1
    assert res["calls"]["new_rows"] == 1
    assert [q["id"] for q in res["calls"]["questions_with_live_calls"]] == [second]
    assert res["calls"]["questions_with_live_calls"][0]["backend_generations"] == 1
