"""Writing files so that nothing is lost or half-written, and one writer per folder.

* :func:`atomic_write_bytes` / :func:`atomic_write_text` / :func:`atomic_write_json` write to a
  temporary file with a unique name in the target's folder, fsync it, then ``os.replace`` it
  over the target. A reader sees the old file or the new one, never a torn one, and two writers
  never share a temporary name (a fixed ``.tmp`` suffix lets one writer rename the other's
  half-written file).
* :class:`FolderLock` is an exclusive, non-blocking lock on ``<folder>/.lock`` (``fcntl.flock``
  on POSIX). The kernel drops it when the process dies, so a killed run never leaves a stale
  lock behind. A second process that tries the same folder gets :class:`LockedError` naming
  the folder and the holder's pid.
* :func:`relative_command` turns ``sys.argv`` into a command worth committing: paths relative to
  the working directory where they lie under it, and credentials in ``openai:`` specs and URLs
  redacted.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Sequence

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_json", "FolderLock",
           "LockedError", "relative_command", "redact", "sha256_file"]


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Replace ``path`` with ``data`` in one step (unique temp file + fsync + os.replace)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any, indent: int | None = 2) -> Path:
    """:func:`atomic_write_text` of ``obj`` as JSON (UTF-8, trailing newline)."""
    return atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False) + "\n")


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class LockedError(RuntimeError):
    """Another live process holds the folder's lock."""


class FolderLock:
    """``with FolderLock(folder): ...``: exclusive use of ``folder`` by this process.

    Re-entrant within one process for the same folder object only; a second ``FolderLock`` on
    the same folder, in this or any other process, raises :class:`LockedError`.
    """

    def __init__(self, folder: str | Path, what: str = "run") -> None:
        self.folder = Path(folder)
        self.what = what
        self.path = self.folder / ".lock"
        self._fh = None

    def acquire(self) -> "FolderLock":
        if self._fh is not None:
            return self
        self.folder.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks; keep going unlocked
            self._fh = fh
            return self
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            fh.close()
            raise LockedError(f"{self.what} folder {self.folder} is in use by another process "
                              f"(pid {holder}); wait for it to finish or use another folder")
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh is not None:
            self._fh.close()  # closing the descriptor drops the flock
            self._fh = None

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


_SECRET_URL = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@\s:]+(:[^/@\s]*)?@", re.I)
# openai:<model>@<user:password>@<host>: a base URL given without a scheme still has userinfo
_SECRET_SPEC = re.compile(r"^(?P<head>openai:[^@\s]*@)(?![a-z][a-z0-9+.-]*://)[^/@\s]+@", re.I)
_SECRET_FLAG = re.compile(r"(?i)^(--?(api[-_]?key|token|password|secret))(=.*)?$")
_SECRET_KV = re.compile(r"(?i)\b(api[-_]?key|token|password|secret)=([^&\s]+)")
# Where a path may sit inside one argument: after "--flag=" or a generator kind ("gguf:").
_EMBEDDED_PATH = re.compile(r"^(?P<head>--?[\w-]+=|(gguf|hf):)(?P<path>/.*)$")


def redact(arg: str) -> str:
    """``arg`` with credentials replaced by ``***`` (user:pass@ in URLs and ``openai:`` specs,
    key=... pairs)."""
    arg = _SECRET_SPEC.sub(lambda m: m.group("head") + "***@", arg)
    arg = _SECRET_URL.sub(lambda m: m.group("scheme") + "***@", arg)
    return _SECRET_KV.sub(lambda m: m.group(1) + "=***", arg)


def _relative(path: str, base: Path) -> str:
    try:
        return os.path.relpath(Path(path).resolve(), base)
    except ValueError:  # another drive (Windows)
        return path


def relative_command(argv: Sequence[str], prefix: str = "python -m dynakrag_lite",
                     cwd: str | Path | None = None) -> str:
    """A shell command for the record: paths relative to ``cwd`` (default: the working
    directory; ``/work/shared/data`` seen from ``/work/main`` becomes ``../shared/data``),
    including paths inside ``--flag=PATH`` and ``gguf:PATH``; no credentials. Arguments with
    spaces or shell metacharacters are quoted, so the command can be pasted back."""
    import shlex
    base = Path(cwd or os.getcwd()).resolve()
    out: list[str] = [prefix] if prefix else []
    hide_next = False
    for a in argv:
        a = str(a)
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        m = _SECRET_FLAG.match(a)
        if m:
            if m.group(3):
                out.append(m.group(1) + "=***")
            else:
                out.append(a)
                hide_next = True
            continue
        a = redact(a)
        if os.path.isabs(a):
            a = _relative(a, base)
        else:
            e = _EMBEDDED_PATH.match(a)
            if e:
                a = e.group("head") + _relative(e.group("path"), base)
        out.append(shlex.quote(a))
    return " ".join(out)
