"""data_scripts/primary_lanes.sh: two lanes share one queue of primary runs.

The lanes run with a fake experiment (PRIMARY_LANES_COMMAND) that writes the summary.json a
finished run leaves and logs when it started and ended, so the queue's rules are checked
without a model: every run exactly once, a stop-at-2 schedule only after its full run, finished
runs skipped, both lanes busy, a failing run stops its lane and names itself.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "data_scripts" / "primary_lanes.sh"
GEN = "qwen2.5-coder-1.5b"

pytestmark = pytest.mark.skipif(shutil.which("flock") is None or shutil.which("bash") is None,
                                reason="needs bash and util-linux flock")

FAKE = r'''
import json, os, sys, time
args = sys.argv[1:]
get = lambda flag: args[args.index(flag) + 1]
split = "check" if "--split" in args else "eval"
item = f"{split} {get('--dataset')} {get('--runs')}"
log = os.environ["FAKE_LOG"]
with open(log, "a") as f:
    f.write(json.dumps({"item": item, "event": "start", "t": time.time(), "pid": os.getpid()}) + "\n")
if item == os.environ.get("FAKE_FAIL"):
    sys.exit(3)
time.sleep(float(os.environ.get("FAKE_SECONDS", "0.05")))
folder = os.path.join(get("--out-root"), get("--dataset"), "GEN", get("--runs"))
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "summary.json"), "w") as f:
    json.dump({"n": int(get("--eval-limit"))}, f)
with open(log, "a") as f:
    f.write(json.dumps({"item": item, "event": "end", "t": time.time()}) + "\n")
'''.replace("GEN", GEN)

DATASETS = {"hotpotqa": 150, "2wikimultihopqa": 150, "musique": 100}
FULL = ["fixed_k12", "uniform-seed13", "uniform-seed14", "uniform-seed15", "fixed_k6",
        "dynakrag-cont"]
STOP2 = ["dynakrag-cont-stop2", "uniform-seed13-stop2", "uniform-seed14-stop2",
         "uniform-seed15-stop2"]
QUEUE = ([f"eval {d} {r}" for d in DATASETS for r in FULL + STOP2]
         + [f"check hotpotqa {r}" for r in FULL])


def _finish(results: Path, item: str, n: int | None = None) -> None:
    split, dataset, run = item.split()
    folder = results / split / dataset / GEN / run
    folder.mkdir(parents=True, exist_ok=True)
    size = 100 if split == "check" or dataset == "musique" else 150
    (folder / "summary.json").write_text(json.dumps({"n": size if n is None else n}))


def _lanes(tmp_path: Path, lanes: int = 2, **env: str) -> tuple[list, list]:
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    full = {**os.environ, "PRIMARY_LANES_COMMAND": f"{sys.executable} {fake}",
            "PRIMARY_LANES_RESULTS": str(tmp_path / "primary"), "PRIMARY_LANES_WAIT": "0.1",
            "FAKE_LOG": str(tmp_path / "log.jsonl"), **env}
    procs = [subprocess.Popen(["bash", str(SCRIPT), str(i + 1)], env=full, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(lanes)]
    outs = [(p.wait(timeout=240), *p.communicate()) for p in procs]
    log = tmp_path / "log.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return outs, events


def test_two_lanes_run_every_primary_run_once_and_each_stop2_after_its_full_run(tmp_path):
    outs, events = _lanes(tmp_path)
    assert [rc for rc, _, _ in outs] == [0, 0], outs
    starts = [e for e in events if e["event"] == "start"]
    assert sorted(e["item"] for e in starts) == sorted(QUEUE)
    end = {e["item"]: e["t"] for e in events if e["event"] == "end"}
    for e in starts:
        split, dataset, run = e["item"].split()
        if run.endswith("-stop2"):
            assert e["t"] > end[f"{split} {dataset} {run.removesuffix('-stop2')}"], e
    # both lanes did work: two processes of the fake ran at once at some point
    busy = sorted([(e["t"], 1) for e in starts] + [(t, -1) for t in end.values()])
    running = [sum(step for _, step in busy[:i + 1]) for i in range(len(busy))]
    assert max(running) == 2


def test_finished_runs_are_skipped_and_a_short_run_is_resumed(tmp_path):
    results = tmp_path / "primary"
    for item in QUEUE[1:]:
        _finish(results, item)
    _finish(results, "eval 2wikimultihopqa fixed_k12", n=87)  # part done: goes on
    outs, events = _lanes(tmp_path, lanes=1)
    assert outs[0][0] == 0
    assert [e["item"] for e in events if e["event"] == "start"] == [
        QUEUE[0], "eval 2wikimultihopqa fixed_k12"]


def test_a_failing_run_stops_its_lane_and_names_the_run(tmp_path):
    outs, events = _lanes(tmp_path, lanes=1, FAKE_FAIL="eval hotpotqa uniform-seed13")
    rc, _, err = outs[0]
    assert rc == 3 and "eval hotpotqa uniform-seed13 failed (3)" in err
    assert [e["item"] for e in events if e["event"] == "start"] == QUEUE[:2]


def test_a_run_that_ends_unfinished_is_not_retried_nor_are_its_stop2_schedules(tmp_path):
    results = tmp_path / "primary"
    for item in QUEUE:
        if item.split()[1] != "musique":
            _finish(results, item)
    # the fake finishes every run; make one end short by pre-writing a smaller --eval-limit
    fake = tmp_path / "short.py"
    fake.write_text(FAKE.replace('int(get("--eval-limit"))',
                                 '(5 if "uniform-seed14" == get("--runs") else '
                                 'int(get("--eval-limit")))'))
    env = {"PRIMARY_LANES_COMMAND": f"{sys.executable} {fake}"}
    outs, events = _lanes(tmp_path, lanes=1, **env)
    rc, out, err = outs[0]
    assert rc == 0 and "eval musique uniform-seed14 unfinished" in err
    started = [e["item"] for e in events if e["event"] == "start"]
    assert started.count("eval musique uniform-seed14") == 1
    assert "eval musique uniform-seed14-stop2" not in started
    assert "eval musique uniform-seed13-stop2" in started
