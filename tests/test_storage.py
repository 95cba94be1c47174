"""dynakrag_lite.storage: atomic writes, the per-folder lock (across real processes, including
a killed holder) and commands fit for the record (relative paths, no credentials)."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dynakrag_lite import storage
from dynakrag_lite.storage import (MANIFEST_NAME, FolderLock, LockedError, ManifestError,
                                   atomic_write_bytes, atomic_write_json, atomic_write_text,
                                   read_manifest, redact, register_in_manifest,
                                   relative_command, sha256_file, update_manifest,
                                   verify_manifest)

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


@pytest.fixture
def umask():
    """Set the process umask for one test; the old one comes back afterwards."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda m: os.umask(m)
    os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.skipif(os.name == "nt", reason="POSIX permission bits")
def test_atomic_writes_get_the_mode_open_gives_a_new_file(tmp_path, umask):
    """Not mkstemp's 0600: 0666 minus the umask (0644 under the usual 022), like open()."""
    umask(0o022)
    with open(tmp_path / "by_open.txt", "w") as fh:
        fh.write("x")
    for write, name in ((atomic_write_json, "summary.json"), (atomic_write_text, "p.jsonl"),
                        (atomic_write_bytes, "m.joblib")):
        p = write(tmp_path / name, {"a": 1} if write is atomic_write_json else
                  ("x" if write is atomic_write_text else b"x"))
        assert _mode(p) == 0o644 == _mode(tmp_path / "by_open.txt"), name
    # An existing private file (written by the old 0600 code) gets the normal mode back.
    old = tmp_path / "old.json"
    old.write_text("{}")
    old.chmod(0o600)
    atomic_write_json(old, {"n": 2})
    assert _mode(old) == 0o644
    # Another umask is respected, as open() respects it.
    umask(0o027)
    assert _mode(atomic_write_text(tmp_path / "group.txt", "x")) == 0o640
    umask(0o077)
    assert _mode(atomic_write_text(tmp_path / "private.txt", "x")) == 0o600


@pytest.mark.skipif(os.name == "nt", reason="POSIX umask")
def test_umask_is_read_with_and_without_proc(umask, monkeypatch):
    umask(0o027)
    assert storage._umask() == 0o027

    def no_proc(*a, **k):
        raise OSError("no /proc here")
    monkeypatch.setattr(storage, "open", no_proc, raising=False)
    assert storage._umask() == 0o027
    assert os.umask(0o027) == 0o027  # the fallback put the umask back


def test_sha256_file(tmp_path):
    p = tmp_path / "blob"
    data = os.urandom(3 << 20)  # more than one read block
    p.write_bytes(data)
    assert sha256_file(p) == hashlib.sha256(data).hexdigest()


# -- manifests of files that may be unpickled -------------------------------------------
def test_manifest_round_trip_and_verification_names_the_file(tmp_path):
    a, b = tmp_path / "a.joblib", tmp_path / "b.joblib"
    a.write_bytes(b"aaa")
    b.write_bytes(b"bbb")
    assert read_manifest(tmp_path) == {}
    assert update_manifest(tmp_path, files=[a]) == tmp_path / MANIFEST_NAME
    assert read_manifest(tmp_path) == {"a.joblib": sha256_file(a)}  # b is not vouched for
    assert verify_manifest(a, a.read_bytes()) == hashlib.sha256(b"aaa").hexdigest()
    with pytest.raises(ManifestError, match=r"b\.joblib: not listed in .*MANIFEST\.sha256.*"
                                            r"unverified thing.*register it like so"):
        verify_manifest(b, b.read_bytes(), what="thing", fix="register it like so")
    with pytest.raises(ManifestError, match=r"a\.joblib: sha256 .* does not match"):
        verify_manifest(a, b"tampered")
    # sha256sum format, checkable by hand; deleted files drop out on a rebuild
    line = (tmp_path / MANIFEST_NAME).read_text()
    assert line == f"{sha256_file(a)}  a.joblib\n"
    a.unlink()
    update_manifest(tmp_path)
    assert list(read_manifest(tmp_path)) == ["b.joblib"]
    with pytest.raises(ManifestError, match="its own folder only"):
        update_manifest(tmp_path / "sub", files=[b])
    (tmp_path / MANIFEST_NAME).write_text("not a line\n")
    with pytest.raises(ManifestError, match=r"line 1: not a sha256sum line"):
        read_manifest(tmp_path)


def test_register_in_manifest_only_where_a_manifest_is_kept(tmp_path):
    project, own = tmp_path / "project", tmp_path / "own"
    project.mkdir()
    own.mkdir()
    (project / "x.joblib").write_bytes(b"x")
    (own / "y.joblib").write_bytes(b"y")
    assert register_in_manifest(own / "y.joblib", project) is None
    assert not (own / MANIFEST_NAME).exists()  # a user's folder: no manifest imposed
    assert register_in_manifest(project / "x.joblib", project) == project / MANIFEST_NAME
    assert list(read_manifest(project)) == ["x.joblib"]
    (own / MANIFEST_NAME).write_text("")  # a folder that keeps one is kept up to date
    assert register_in_manifest(own / "y.joblib") == own / MANIFEST_NAME
    assert list(read_manifest(own)) == ["y.joblib"]


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
