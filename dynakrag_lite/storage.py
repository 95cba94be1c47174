"""Writing files so that nothing is lost or half-written, and one writer per folder.

* ``atomic_write_*``: a reader sees the old file or the new one, never a torn one.
* :class:`FolderLock`: a non-blocking ``flock`` on ``<folder>/.lock``; the kernel drops it
  when the process dies, so a killed run never leaves a stale lock.
* Manifests: a folder's ``MANIFEST.sha256`` (``sha256sum`` format) lists the files that may be
  unpickled; policy and selector loaders refuse an unlisted file before unpickling it."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import tempfile
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Sequence

try:
    import fcntl
except ImportError:  # Windows: no advisory locks (FolderLock then keeps going unlocked)
    fcntl = None

__all__ = ["atomic_writer", "atomic_write_bytes", "atomic_write_text", "atomic_write_json",
           "FolderLock", "LockedError", "relative_command", "redact", "sha256_file",
           "MANIFEST_NAME", "ManifestError", "read_manifest", "update_manifest",
           "register_in_manifest", "verify_manifest", "verified_sha256", "in_folder",
           "installed_versions"]


def _umask() -> int:
    """The process's umask. Read from /proc on Linux (no side effect); elsewhere set and
    restored at once (``os.umask`` can only be read by setting it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@contextmanager
def atomic_writer(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file that replaces ``path`` atomically (temp file + fsync + os.replace) when the
    block ends without an exception, else is removed; mode as ``open()`` gives, not ``0600``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            mode = 0o666 & ~_umask()
            if hasattr(os, "fchmod"):
                os.fchmod(fh.fileno(), mode)
            else:  # Windows: only a read-only bit exists
                os.chmod(tmp, mode)
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Replace ``path`` with ``data`` in one step (:func:`atomic_writer`)."""
    with atomic_writer(path) as fh:
        fh.write(data)
    return Path(path)


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


# -- manifests of files that may be unpickled ---------------------------------------------
MANIFEST_NAME = "MANIFEST.sha256"
_MANIFEST_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


class ManifestError(RuntimeError):
    """A manifest that cannot be read or written, or a file it does not vouch for."""


def read_manifest(folder: str | Path) -> dict[str, str]:
    """``{file name: sha256}`` from ``folder/MANIFEST.sha256`` (``sha256sum`` format); {} if
    absent."""
    path = Path(folder) / MANIFEST_NAME
    if not path.exists():
        return {}
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _MANIFEST_LINE.match(line)
        if m is None:
            raise ManifestError(f"{path}, line {n}: not a sha256sum line: {line!r}")
        out[m.group(2)] = m.group(1).lower()
    return out


def update_manifest(folder: str | Path, files: Iterable[str | Path] | None = None,
                    pattern: str = "*.joblib",
                    check: Callable[[Path], str | None] | None = None) -> Path:
    """Record the sha256 of ``files`` (else of every ``pattern`` file) in
    ``folder/MANIFEST.sha256``, dropping deleted files; returns its path. ``check`` may refuse
    a file by raising, or return the sha256 of the bytes it accepted, which is recorded."""
    folder = Path(folder)
    if files is None:
        entries: dict[str, str] = {}
        targets = sorted(folder.glob(pattern))
    else:
        entries = read_manifest(folder)
        targets = [Path(f) for f in files]
    for f in targets:
        f = f if f.is_absolute() or f.parent != Path(".") else folder / f
        if f.resolve().parent != folder.resolve():
            raise ManifestError(f"{f} is not in {folder}; a manifest lists its own folder only")
        # the bytes checked are the bytes vouched for, even if the file changes meanwhile
        digest = check(f) if check is not None else None
        entries[f.name] = digest or sha256_file(f)
    entries = {k: v for k, v in entries.items() if (folder / k).exists()}
    text = "".join(f"{h}  {name}\n" for name, h in sorted(entries.items()))
    return atomic_write_text(folder / MANIFEST_NAME, text)


def in_folder(path: str | Path, folder: str | Path) -> bool:
    """True when ``path`` lies directly in ``folder`` (symlinks resolved)."""
    try:
        return Path(path).resolve().parent == Path(folder).resolve()
    except OSError:
        return False


def register_in_manifest(path: str | Path, project_folder: str | Path | None = None) -> Path | None:
    """After saving ``path``: record it (only it) in its folder's manifest when that folder is
    ``project_folder`` or already keeps a manifest. Returns the manifest path, or None."""
    path = Path(path)
    if (project_folder is not None and in_folder(path, project_folder)) or \
            (path.parent / MANIFEST_NAME).exists():
        return update_manifest(path.parent, files=[path])
    return None


def verify_manifest(path: str | Path, data: bytes, what: str = "file", fix: str = "") -> str:
    """sha256 of ``data`` (the bytes read from ``path``, about to be unpickled);
    :class:`ManifestError` naming ``path`` unless the manifest of ``path``'s folder lists that
    hash for it. ``what`` names the kind of file, ``fix`` says how to register one."""
    path = Path(path)
    digest = hashlib.sha256(data).hexdigest()
    manifest = path.parent / MANIFEST_NAME
    try:
        entries = read_manifest(path.parent)
    except OSError as e:
        raise ManifestError(f"{path}: cannot read {manifest} ({e})") from None
    fix = f" {fix}" if fix else ""
    if path.name not in entries:
        raise ManifestError(f"{path}: not listed in {manifest}; refusing to unpickle an "
                            f"unverified {what} (unpickling runs code).{fix}")
    if entries[path.name] != digest:
        raise ManifestError(f"{path}: sha256 {digest[:12]}... does not match {manifest} "
                            f"({entries[path.name][:12]}...); the file changed since it was "
                            f"recorded. Refusing to unpickle it.{fix}")
    return digest


def verified_sha256(path: str | Path, data: bytes, trusted: bool | None = None,
                    what: str = "file", fix: str = "") -> str:
    """sha256 of ``data`` (read from ``path``, about to be unpickled), checked by
    :func:`verify_manifest` when ``trusted`` is ``None`` and the folder keeps a manifest, or
    ``False``; never when ``True`` (the caller vouches for the file)."""
    path = Path(path)
    if trusted is None:
        trusted = not (path.parent / MANIFEST_NAME).exists()
    if trusted:
        return hashlib.sha256(data).hexdigest()
    return verify_manifest(path, data, what=what, fix=fix)


class LockedError(RuntimeError):
    """Another live process holds the folder's lock."""


class FolderLock:
    """``with FolderLock(folder): ...``: exclusive use of ``folder`` by this process (a second
    ``FolderLock`` on it, here or elsewhere, raises :class:`LockedError`)."""

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
        if fcntl is None:  # Windows: no advisory locks; keep going unlocked
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


def relative_path(path: str | os.PathLike, base: str | os.PathLike) -> str:
    """``path`` relative to the folder ``base``, for a record: a path inside ``base`` (symlinks
    resolved) as the part under it; any other path without resolving symlinks, so that a
    ``../shared`` linked elsewhere stays ``../shared`` rather than the link's target."""
    base = Path(base).resolve()
    try:
        real = Path(path).resolve()
        return os.path.relpath(real if real.is_relative_to(base) else os.path.abspath(path),
                               base)
    except ValueError:  # another drive (Windows)
        return str(path)


def relative_command(argv: Sequence[str], prefix: str = "python -m dynakrag_lite",
                     cwd: str | Path | None = None) -> str:
    """A shell command for the record, pasteable: paths relative to ``cwd`` (default: the working
    directory), also inside ``--flag=PATH`` and ``gguf:PATH``; no credentials."""
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
            a = relative_path(a, base)
        else:
            e = _EMBEDDED_PATH.match(a)
            if e:
                a = e.group("head") + relative_path(e.group("path"), base)
        out.append(shlex.quote(a))
    return " ".join(out)


def installed_versions(packages) -> dict:
    """{distribution: installed version, or None when it is not installed}, read from package
    metadata without importing anything (what a cache key or a record names)."""
    out = {}
    for pkg in packages:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out

