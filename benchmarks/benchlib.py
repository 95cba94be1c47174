"""What every benchmark record states about its run: versions, command, machine, date.

The scripts in this folder import it after putting the project root and this folder on
``sys.path`` (their four-line preamble: it is what makes this module importable, so it cannot
live here). Each helper reads the process or the machine only where its arguments leave it
to; given them, it is a pure function (tests/test_benchlib.py).
"""
from __future__ import annotations

import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
THREAD_ENV = ("DYNAKRAG_N_THREADS",)  # the setting that shapes llama.cpp's timings


def module_version(name: str) -> str | None:
    """``name``'s ``__version__`` after importing it (None: not installed, or no version)."""
    try:
        return __import__(name).__version__
    except Exception:  # not installed, a broken install, or no __version__
        return None


def distribution_version(name: str) -> str | None:
    """The installed distribution ``name``'s version, from its metadata (None: absent)."""
    from dynakrag_lite.storage import installed_versions
    return installed_versions((name,))[name]


def versions(packages: Iterable[str], *, metadata: bool = False) -> dict[str, str | None]:
    """``{"python": ..., package: version or None, ...}`` in the order given. A package is a
    module name whose ``__version__`` is read (``llama_cpp``), or with ``metadata=True`` an
    installed distribution's name (``llama-cpp-python``)."""
    read = distribution_version if metadata else module_version
    return {"python": platform.python_version(), **{p: read(p) for p in packages}}


def recorded_command(argv: Sequence[str], script: str | Path,
                     env_keys: Sequence[str] = THREAD_ENV, *,
                     env: Mapping[str, str] | None = None, niceness: int | None = None,
                     root: Path = ROOT) -> str:
    """The command as run, to paste back: ``python <script> <argv>`` with paths relative to
    ``root`` (credentials hidden, as :func:`dynakrag_lite.storage.relative_command` does),
    ``nice -n N`` when the process ran niced, and ``KEY=value`` first for each of
    ``env_keys`` that is set. ``env`` and ``niceness`` default to this process's."""
    from dynakrag_lite.storage import relative_command
    cmd = relative_command(list(argv), prefix=f"python {shown_path(script, root)}", cwd=root)
    nice = os.nice(0) if niceness is None else niceness
    if nice:
        cmd = f"nice -n {nice} {cmd}"
    env = os.environ if env is None else env
    set_vars = [f"{k}={env[k]}" for k in env_keys if env.get(k)]
    return " ".join([*set_vars, cmd])


def cpu_model() -> str:
    """The processor name as data_scripts/install_llama.py reads it (lscpu's "Model name",
    else the platform's): one reader for every benchmark record."""
    folder = str(ROOT / "data_scripts")
    if folder not in sys.path:
        sys.path.append(folder)
    from install_llama import cpu_model as read_cpu_model
    return read_cpu_model()


def usable_cpus() -> int | None:
    """The CPUs this process may run on (its affinity mask; None where it cannot be read)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def loadavg(ndigits: int | None = 2, values: Sequence[float] | None = None) -> list[float]:
    """The 1/5/15-minute load averages (``values``, else read now), rounded to ``ndigits``
    (None: as read)."""
    vals = os.getloadavg() if values is None else values
    return [float(v) if ndigits is None else round(v, ndigits) for v in vals]


def utc_date() -> str:
    """Now in UTC, ISO 8601 to the second (the ``date`` of a record)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def shown_path(path: str | Path, root: Path = ROOT) -> str:
    """``path`` relative to ``root`` (posix) when it lies inside it, else as given."""
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def _machine_prefixes(root: Path = ROOT) -> list[tuple[str, str]]:
    """(prefix, stand-in) pairs, longest first: this checkout, the folder beside it (as
    ``../``, where the data folder lives), the temp folder (absolute and as seen from the
    checkout), the home folder."""
    import os
    import tempfile
    root_s = str(root.resolve())
    tmp = str(Path(tempfile.gettempdir()).resolve())
    pairs = [(root_s + "/", ""), (str(Path(root_s).parent) + "/", "../"), (tmp, "$TMPDIR"), (os.path.relpath(tmp, root_s), "$TMPDIR"),
             (str(Path.home()), "~")]
    return sorted(pairs, key=lambda p: -len(p[0]))


def portable(value, root: Path = ROOT):
    """``value`` (a report: dicts, lists, strings...) with this machine's absolute paths
    replaced in every string, so a committed record carries none: paths in the checkout become
    relative, the temp folder ``$TMPDIR``, the home folder ``~``."""
    if isinstance(value, dict):
        return {k: portable(v, root) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(portable(v, root) for v in value)
    if isinstance(value, str):
        for prefix, stand_in in _machine_prefixes(root):
            value = value.replace(prefix, stand_in)
    return value

