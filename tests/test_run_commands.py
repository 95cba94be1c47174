"""Every committed run folder's recorded command writes to that folder (issue 34).

A command is the record of how a folder's rows were made: pasted back, it must resume that
folder. A folder copied or renamed by hand (``dynakrag`` to ``dynakrag-cont``) keeps the
command of the other folder, whose ``--out`` then names the wrong run. These tests read the
committed records only: run.json, the summary's ``"run"`` block, and results/README.md's
"Commands" lists, which are generated from the summaries.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


def recorded_commands(folder: Path) -> dict[str, str]:
    """The commands a run folder records, by where they are recorded."""
    found = {}
    run = folder / "run.json"
    if run.exists():
        found["run.json"] = json.loads(run.read_text()).get("command")
    summary = folder / "summary.json"
    if summary.exists():
        found["summary.json run.command"] = (json.loads(summary.read_text()).get("run")
                                             or {}).get("command")
    return {k: v for k, v in found.items() if v}


def out_of(command: str) -> str | None:
    """The ``--out`` of a recorded command (``--out DIR`` or ``--out=DIR``), else None."""
    argv = shlex.split(command)
    for i, a in enumerate(argv):
        if a == "--out" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--out="):
            return a.split("=", 1)[1]
    return None


RUN_FOLDERS = sorted({p.parent for name in ("run.json", "summary.json")
                      for p in RESULTS.rglob(name)})


def test_there_are_committed_runs():
    assert len(RUN_FOLDERS) > 50, "results/ lost its run folders?"


@pytest.mark.parametrize("folder", RUN_FOLDERS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_recorded_command_writes_to_its_own_folder(folder):
    commands = recorded_commands(folder)
    assert commands, f"{folder}: a run folder without a recorded command"
    want = folder.relative_to(ROOT).as_posix()
    for where, command in commands.items():
        out = out_of(command)
        assert out is not None, f"{folder}/{where}: the command has no --out: {command}"
        assert Path(out).as_posix().rstrip("/") == want, (
            f"{folder}/{where} records --out {out}, not its own folder {want}: copied or "
            "renamed by hand? Pasted back, the command would resume another run")


def test_results_readme_commands_name_their_runs():
    """results/README.md lists ``- `RUN`: `COMMAND``` per table: RUN's command must write to a
    folder named RUN, and be the command that folder records."""
    text = (RESULTS / "README.md").read_text()
    bullets = re.findall(r"^- `([^`]+)`: `(python [^`]+)`$", text, re.M)
    assert len(bullets) > 50
    for run, command in bullets:
        out = out_of(command)
        assert out is not None and Path(out).name == run, (
            f"results/README.md: the command listed for {run!r} writes to {out}")
        folder = ROOT / out
        assert command in recorded_commands(folder).values(), (
            f"results/README.md: {run!r}'s command is not the one {out} records "
            "(regenerate results/README.md)")


def test_out_of():
    assert out_of("python -m dynakrag_lite evaluate --out a/b --limit 3") == "a/b"
    assert out_of("python -m dynakrag_lite evaluate --out=a/b") == "a/b"
    assert out_of("python -m dynakrag_lite evaluate --limit 3") is None
