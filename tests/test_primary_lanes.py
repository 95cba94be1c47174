"""data_scripts/primary_lanes.sh: two lanes share one queue of primary runs.

The lanes run with a fake experiment (PRIMARY_LANES_COMMAND) that writes the summary.json a
finished run leaves and logs when it started and ended, so the queue's rules are checked
without a model: every run exactly once, a stop-at-2 schedule only after its full run, finished
runs skipped, both lanes busy, a failing run stops its lane and names itself, a run left
unfinished is retried by neither lane and named when they end, and the queue holds the runs
results/primary_tests.toml reads, with the commands results/configs/primary-*.toml make.
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
    f.write(json.dumps({"item": item, "event": "start", "t": time.time(), "pid": os.getpid(),
                        "argv": args}) + "\n")
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
CHECK = ["dynakrag-cont", "fixed_k6", "fixed_k12", "uniform-seed13", "uniform-seed14",
         "uniform-seed15"]  # cheapest test first
QUEUE = ([f"eval {d} {r}" for d in DATASETS for r in FULL + STOP2]
         + [f"check hotpotqa {r}" for r in CHECK])


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


def _musique_left_with_a_short_run(tmp_path: Path) -> str:
    """Every run but MuSiQue's finished; a fake that finishes every run but uniform-seed14,
    whose summary counts 5 questions (so it ends unfinished). Returns the fake's command."""
    for item in QUEUE:
        if item.split()[1] != "musique":
            _finish(tmp_path / "primary", item)
    fake = tmp_path / "short.py"
    fake.write_text(FAKE.replace('int(get("--eval-limit"))',
                                 '(5 if "uniform-seed14" == get("--runs") else '
                                 'int(get("--eval-limit")))'))
    return f"{sys.executable} {fake}"


def test_a_run_that_ends_unfinished_is_not_retried_nor_are_its_stop2_schedules(tmp_path):
    command = _musique_left_with_a_short_run(tmp_path)
    outs, events = _lanes(tmp_path, lanes=1, PRIMARY_LANES_COMMAND=command)
    rc, out, err = outs[0]
    assert rc == 1 and "eval musique uniform-seed14 unfinished" in err
    assert "left unfinished: eval musique uniform-seed14, eval musique uniform-seed14-stop2" in err
    started = [e["item"] for e in events if e["event"] == "start"]
    assert started.count("eval musique uniform-seed14") == 1
    assert "eval musique uniform-seed14-stop2" not in started
    assert "eval musique uniform-seed13-stop2" in started


def test_a_run_one_lane_left_unfinished_is_not_retried_by_the_other_lane(tmp_path):
    """'Not retried' holds for the queue, not per lane: the other lane reads the mark."""
    command = _musique_left_with_a_short_run(tmp_path)
    outs, events = _lanes(tmp_path, PRIMARY_LANES_COMMAND=command, FAKE_SECONDS="0.3")
    started = [e["item"] for e in events if e["event"] == "start"]
    assert started.count("eval musique uniform-seed14") == 1, started
    assert "eval musique uniform-seed14-stop2" not in started
    # both lanes end saying which run is left, and not with success
    for rc, out, err in outs:
        assert rc == 1 and "left unfinished: eval musique uniform-seed14" in out + err, outs


def test_a_corrupt_summary_counts_as_unfinished_and_is_named_without_a_traceback(tmp_path):
    results = tmp_path / "primary"
    for item in QUEUE:
        _finish(results, item)
    summary = results / "eval" / "musique" / GEN / "fixed_k6" / "summary.json"
    summary.write_text('{"n": 1')  # cut short by hand or a full disk
    outs, events = _lanes(tmp_path, lanes=1)
    rc, out, err = outs[0]
    assert rc == 0, outs
    assert [e["item"] for e in events if e["event"] == "start"] == ["eval musique fixed_k6"]
    assert "Traceback" not in err and f"{summary}: unreadable" in err


def test_the_queue_runs_what_the_primary_tests_read_with_the_primary_configs_commands(
        tmp_path, monkeypatch):
    """Every run a test of results/primary_tests.toml reads is queued once, and the script's
    own command (its default ME, the fake in place of main_experiment.py) makes the command
    results/configs/primary-<split>-<dataset>.toml makes for that run."""
    from dynakrag_lab.report.family import load_tests, run_names
    from helpers import load_script

    cfg = load_tests(ROOT / "results" / "primary_tests.toml")
    read = {f"{fam['root'].rsplit('/', 1)[-1]} {d} {r}" for fam in cfg["family"].values()
            for d in fam["datasets"] for t in fam["test"]
            for r in [t["a"], *run_names(t["b"], cfg["seeds"])]}
    script = SCRIPT.read_text()
    default = next(line.split('"')[1] for line in script.splitlines()
                   if line.startswith('ME="python data_scripts/main_experiment.py'))
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    outs, events = _lanes(tmp_path, PRIMARY_LANES_COMMAND=default.replace(
        "python data_scripts/main_experiment.py", f"{sys.executable} {fake}"))
    assert [rc for rc, _, _ in outs] == [0, 0], outs
    starts = [e for e in events if e["event"] == "start"]
    assert sorted(e["item"] for e in starts) == sorted(read) == sorted(QUEUE)

    mx = load_script("main_experiment")
    seen: list[list[str]] = []
    monkeypatch.setattr(mx, "run", lambda args, log: seen.append(args) or 0)
    monkeypatch.setenv("DYNAKRAG_DATA_DIR", "../shared/data")  # what the script exports
    monkeypatch.chdir(ROOT)
    results = str(tmp_path / "primary")
    for e in starts:
        split, dataset, run = e["item"].split()
        argv = [a.replace(results, "results/primary") for a in e["argv"]]
        config = f"results/configs/primary-{split}-{dataset}.toml"
        for args in (argv, ["--config", config, "--runs", run]):
            monkeypatch.setattr(sys, "argv", ["main_experiment.py", *args])
            assert mx.main() == 0
        assert seen[-2] == seen[-1], e["item"]
