"""dynakrag_lite.storage: atomic writes, the per-folder lock (across real processes, including
a killed holder) and commands fit for the record (relative paths, no credentials)."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynakrag_lite import storage
from dynakrag_lite.storage import (FolderLock, LockedError, atomic_write_bytes,
                                   atomic_write_json, atomic_write_text, redact,
                                   relative_command, sha256_file)

REPO = Path(__file__).resolve().parents[1]


# -- atomic writes ----------------------------------------------------------------------
def test_atomic_writes_replace_content_and_leave_no_temp_files(tmp_path):
    p = tmp_path / "sub" / "x.json"
    atomic_write_json(p, {"a": 1, "é": [1, 2]})
    assert json.loads(p.read_text(encoding="utf-8")) == {"a": 1, "é": [1, 2]}
    assert p.read_text(encoding="utf-8").endswith("\n")
    atomic_write_text(p, "second")
    assert p.read_text() == "second"
    atomic_write_bytes(p, b"\x00third")
    assert p.read_bytes() == b"\x00third"
    assert sorted(os.listdir(p.parent)) == ["x.json"]


def test_failed_write_keeps_the_old_file_and_removes_its_temp(tmp_path, monkeypatch):
    p = tmp_path / "summary.json"
    atomic_write_json(p, {"n": 1})
    old = p.read_bytes()

    def boom(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(storage.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_json(p, {"n": 2})
    assert p.read_bytes() == old
    assert sorted(os.listdir(tmp_path)) == ["summary.json"]
    monkeypatch.undo()
    with pytest.raises(TypeError):  # unserializable: fails before touching anything
        atomic_write_json(p, {"n": object()})
    assert p.read_bytes() == old


def test_two_writers_never_share_a_temp_name(tmp_path, monkeypatch):
    seen = []
    real = storage.os.replace

    def spy(src, dst):
        seen.append(Path(src).name)
        real(src, dst)
    monkeypatch.setattr(storage.os, "replace", spy)
    for i in range(3):
        atomic_write_text(tmp_path / "f.txt", str(i))
    assert len(set(seen)) == 3 and all(s.startswith(".f.txt.") for s in seen)


def test_sha256_file(tmp_path):
    p = tmp_path / "blob"
    data = os.urandom(3 << 20)  # more than one read block
    p.write_bytes(data)
    assert sha256_file(p) == hashlib.sha256(data).hexdigest()


# -- the folder lock --------------------------------------------------------------------
HOLDER = """
import sys, time
sys.path.insert(0, {repo!r})
from dynakrag_lite.storage import FolderLock
lock = FolderLock({folder!r}, "run").acquire()
print("locked", flush=True)
time.sleep(60)
"""


def _holder(folder: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER.format(repo=str(REPO), folder=str(folder))],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "locked"
    return p


def test_lock_is_exclusive_within_a_process_and_released(tmp_path):
    with FolderLock(tmp_path, "evaluation") as lock:
        assert lock.acquire() is lock  # the same object: re-entrant
        with pytest.raises(LockedError, match=rf"evaluation folder .* in use .*pid {os.getpid()}"):
            FolderLock(tmp_path, "evaluation").acquire()
    with FolderLock(tmp_path):  # released on exit
        pass


def test_lock_held_by_another_process_fails_fast_and_dies_with_it(tmp_path):
    p = _holder(tmp_path)
    try:
        t0 = time.perf_counter()
        with pytest.raises(LockedError, match=rf"in use by another process \(pid {p.pid}\)"):
            FolderLock(tmp_path).acquire()
        assert time.perf_counter() - t0 < 2  # non-blocking
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    # a killed holder leaves no stale lock: the kernel dropped it
    with FolderLock(tmp_path):
        assert (tmp_path / ".lock").read_text() == str(os.getpid())


# -- commands for the record ------------------------------------------------------------
def test_relative_command_relativizes_paths(tmp_path):
    base = tmp_path / "main"
    base.mkdir()
    data = tmp_path / "shared" / "data"
    cmd = relative_command(["evaluate", "--data-dir", str(data), "--out", str(base / "r" / "x"),
                            f"--corpus={data / 'c.jsonl'}", "--generator",
                            f"gguf:{tmp_path / 'm.gguf'}", "--limit", "3"], cwd=base)
    assert cmd == ("python -m dynakrag_lite evaluate --data-dir ../shared/data --out r/x "
                   "--corpus=../shared/data/c.jsonl --generator gguf:../m.gguf --limit 3")
    assert str(tmp_path) not in cmd
    assert relative_command(["x"], prefix="python data_scripts/run.py", cwd=base) == \
        "python data_scripts/run.py x"
    assert relative_command(["--prompt", "two words"], prefix="", cwd=base) == \
        "--prompt 'two words'"


@pytest.mark.parametrize("arg, secret", [
    ("openai:gpt-4o-mini@https://alice:s3cret@api.example.com/v1", "s3cret"),
    ("openai:gpt-4o-mini@alice:s3cret@localhost:8000/v1", "s3cret"),
    ("https://host/v1?api_key=s3cret&x=1", "s3cret"),
    ("--api-key=s3cret", "s3cret"),
])
def test_credentials_are_redacted(arg, secret):
    cmd = relative_command(["evaluate", "--generator", arg])
    assert secret not in cmd and "***" in cmd
    assert secret not in redact(arg) or arg.startswith("--")


def test_separate_secret_flag_value_is_hidden():
    cmd = relative_command(["generate", "--token", "s3cret", "--prompt", "hi"], prefix="")
    assert cmd == "generate --token *** --prompt hi"
    # model and host stay readable: only the credentials go
    assert redact("openai:gpt-4o-mini@https://alice:pw@api.example.com/v1") == \
        "openai:gpt-4o-mini@https://***@api.example.com/v1"
    assert redact("openai:llama3@http://localhost:8000/v1") == \
        "openai:llama3@http://localhost:8000/v1"
