"""data_scripts/main_experiment.py trains as the committed policies were trained, and carries
an unfinished training run's LLM calls from a committed snapshot into the active cache."""
from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pytest

from helpers import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def mx():
    return load_script("main_experiment")


def _train_command(mx, monkeypatch, tmp_path, generator: str) -> list[str]:
    seen: list[list[str]] = []
    monkeypatch.setattr(mx, "run", lambda args, log: seen.append(args) or 1)
    monkeypatch.setenv("DYNAKRAG_LLM_CACHE", str(tmp_path / "calls.sqlite"))
    monkeypatch.setattr(sys, "argv", [
        "main_experiment.py", "--dataset", "hotpotqa", "--generator", generator,
        "--n-eval", "150", "--train-limit", "300", "--runs", "dynakrag",
        "--data-dir", str(ROOT.parent / "shared" / "data")])
    assert mx.main() == 1  # the (stubbed) training failed: nothing is evaluated
    assert len(seen) == 1 and seen[0][0] == "train"
    return seen[0]


def test_training_command_is_the_committed_policys_recorded_command(mx, monkeypatch,
                                                                     tmp_path):
    """A user who re-runs the script for a generator without a policy gets the settings the
    committed HotpotQA policy was trained with (learned sufficiency signal, answer calls on 80
    questions, trajectories saved), not the CLI's defaults."""
    from dynakrag_lite.policy import Policy
    committed = "hotpotqa-qwen2.5-coder-0.5b"
    recorded = Policy.load(ROOT / "results" / "policies" / f"{committed}.joblib").meta["command"]
    made = _train_command(mx, monkeypatch, tmp_path, "smollm2-135m")
    expected = recorded.replace("qwen2.5-coder-0.5b", "smollm2-135m")
    assert "python -m dynakrag_lite " + " ".join(made) == expected


def test_committed_training_snapshot_is_merged_into_the_active_cache(mx, monkeypatch,
                                                                     tmp_path):
    from dynakrag_lite.generators.cache import CallCache
    snap = tmp_path / "snapshot.sqlite"
    cache = CallCache(snap)
    cache.put("k1", "a", 1, 1, 0.1)
    cache.close()
    monkeypatch.setattr(mx, "training_cache_snapshot", lambda dataset, generator: snap)
    _train_command(mx, monkeypatch, tmp_path, "smollm2-135m")
    with sqlite3.connect(tmp_path / "calls.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 1


def test_uniform_stop_k_runs_are_uniform_s_command_with_a_stop_after_k(mx, monkeypatch):
    """uniform-stop<k> (k = 1..4): the uniform run's command (the generator's own policy for
    the sufficiency signal, the extractive compressor) plus --stop-after k, each into its own
    folder, as dynakrag-cont-stop<k> are the continuation policy's."""
    seen: list[list[str]] = []
    monkeypatch.setattr(mx, "run", lambda args, log: seen.append(args) or 0)
    runs = ["uniform"] + [f"uniform-stop{k}" for k in (1, 2, 3, 4)]
    monkeypatch.setattr(sys, "argv", [
        "main_experiment.py", "--dataset", "hotpotqa", "--generator", "qwen2.5-coder-1.5b",
        "--n-eval", "150", "--eval-limit", "150", "--runs", ",".join(runs),
        "--data-dir", "../shared/data"])
    assert mx.main() == 0
    uniform, *stops = seen
    for k, cmd in zip((1, 2, 3, 4), stops):
        out = cmd.index("--out")
        assert cmd[out + 1].endswith(f"hotpotqa/qwen2.5-coder-1.5b/uniform-stop{k}")
        assert cmd[:out] == [*uniform[:uniform.index("--policy")], "--stop-after", str(k),
                             *uniform[uniform.index("--policy"):uniform.index("--out")]]


def test_fixed_k12_is_the_committed_fixed_k12_runs_command(mx, monkeypatch):
    """--runs fixed_k12 starts (or resumes) exactly the command the committed HotpotQA run
    records, so the results chapter's instruction to extend it is the run itself."""
    import json
    import shlex
    seen: list[list[str]] = []
    monkeypatch.setattr(mx, "run", lambda args, log: seen.append(args) or 0)
    monkeypatch.setattr(sys, "argv", [
        "main_experiment.py", "--dataset", "hotpotqa", "--generator", "qwen2.5-coder-1.5b",
        "--n-eval", "150", "--eval-limit", "150", "--runs", "fixed_k12",
        "--data-dir", "../shared/data"])
    assert mx.main() == 0
    run = ROOT / "results/experiments/hotpotqa/qwen2.5-coder-1.5b/fixed_k12/run.json"
    recorded = shlex.split(json.loads(run.read_text())["command"])
    assert seen == [recorded[recorded.index("evaluate"):]]
