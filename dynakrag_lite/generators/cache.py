"""Persistent SQLite cache of LLM calls.

Experiments call the same model with the same prompt many times (re-runs, ablations sharing a
first hop). With greedy decoding the answer is a function of (backend, model, messages,
decoding parameters), so the cache key is the sha256 of a canonical JSON of exactly those.

Each row also stores a checksum over key and value. A row that fails to parse or whose checksum
does not match (a torn write, a manual edit, disk trouble) is deleted, counted as ``corrupt`` and
treated as a miss, so the caller recomputes it.

The database runs in WAL mode with a busy timeout, so several processes (two experiment runs)
can share one file, and a lock makes one :class:`CallCache` safe to use from several threads.

Default file: ``$DYNAKRAG_CACHE_DIR/llm_calls.sqlite`` if the variable is set, else
``~/.cache/dynakrag_lite/llm_calls.sqlite``.

:func:`merge_cache` adds the rows of one cache file that another lacks (the book's recorded
calls into a working copy, and a working copy's new calls back into the book's file):

    python -m dynakrag_lite cache merge SRC DST [--missing-ok] [--vacuum]

:class:`CachedGenerator` wraps any generator with the cache: its replies
(:meth:`~CachedGenerator.generate`) and its option log-probabilities
(:meth:`~CachedGenerator.option_logprobs`, key kind ``option_logprobs``), so re-runs are free.
The book teaches it in chapter 3.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Sequence

from .base import (Generation, Generator, GeneratorError, Message, OptionScores, check_messages,
                   option_scores, replay_miss, replay_only)

__all__ = ["CallCache", "CacheError", "CachedGenerator", "default_cache_path", "make_key",
           "canonical_json", "merge_cache", "open_sqlite", "cache_dir"]

_FIELDS = ("text", "prompt_tokens", "completion_tokens", "seconds")
_COLUMNS = ("key", "value", "checksum", "created")
_SCHEMA = ("CREATE TABLE IF NOT EXISTS {db}calls ("
           " key TEXT PRIMARY KEY,"
           " value TEXT NOT NULL,"
           " checksum TEXT NOT NULL,"
           " created REAL NOT NULL)")


class CacheError(RuntimeError):
    """The cache file cannot be used (not an SQLite database, unreadable, a folder...)."""


def default_cache_path() -> Path:
    """$DYNAKRAG_LLM_CACHE (a file), else llm_calls.sqlite in $DYNAKRAG_CACHE_DIR or
    ~/.cache/dynakrag_lite. The book's make targets point $DYNAKRAG_LLM_CACHE at a copy of the
    committed book/_llm_cache.sqlite, so quick-mode chapters replay recorded calls."""
    if os.environ.get("DYNAKRAG_LLM_CACHE"):
        return Path(os.environ["DYNAKRAG_LLM_CACHE"]).expanduser()
    return cache_dir() / "llm_calls.sqlite"


def open_sqlite(path: Path, schema: str, timeout: float, *, what: str,
                env_hint: str) -> sqlite3.Connection:
    """A connection to the cache file ``path`` as every cache of this package opens it: WAL
    (several processes may share the file), a busy timeout, autocommit (each statement is its
    own short transaction), ``schema`` (a CREATE TABLE IF NOT EXISTS) applied. CacheError
    naming ``what`` and the variable ``env_hint`` (which chooses another file) when the path
    is a folder or not an SQLite database; such a file is never overwritten."""
    if path.is_dir():
        raise CacheError(f"{what} {path} is a folder, not an SQLite file; "
                         f"point {env_hint} (or the cache argument) at a file path")
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = None
    try:
        conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # durable enough with WAL, much faster
        conn.execute(schema)
    except sqlite3.DatabaseError as e:
        # sqlite3 opens lazily: a text file (or any foreign file) fails on the first
        # statement with "file is not a database". Never overwrite it: it may be someone's.
        if conn is not None:
            conn.close()
        raise CacheError(
            f"{what} {path} is not a usable SQLite database ({e}); move or "
            f"delete that file (e.g. mv {path} {path}.bad) or choose another "
            f"cache file with {env_hint} / DYNAKRAG_CACHE_DIR") from e
    return conn


def cache_dir() -> Path:
    """$DYNAKRAG_CACHE_DIR, else ~/.cache/dynakrag_lite: the folder of the default cache files."""
    env = os.environ.get("DYNAKRAG_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dynakrag_lite"


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace, unicode kept (``é`` and ``\\u00e9`` agree)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def make_key(backend: str, model_id: str, messages: list[dict], **params: Any) -> str:
    """Cache key for one call. ``params`` are all decoding parameters (max_tokens, stop, ...)."""
    payload = {
        "backend": backend,
        "model_id": model_id,
        "messages": [{"role": m["role"], "content": m["content"]} for m in messages],
        "params": params,
    }
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def _checksum(key: str, value_json: str) -> str:
    return hashlib.sha256(f"{key}\n{value_json}".encode("utf-8")).hexdigest()


class CallCache:
    """Key -> {text, prompt_tokens, completion_tokens, seconds} in an SQLite file."""

    def __init__(self, path: str | Path | None = None, timeout: float = 60.0) -> None:
        self.path = Path(path).expanduser() if path is not None else default_cache_path()
        self.timeout = timeout
        self.hits = 0
        self.misses = 0
        self.corrupt = 0
        self.writes = 0
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._connect()

    # -- connection ---------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        # A connection must not cross a fork: reopen when running in a child process.
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        conn = open_sqlite(self.path, _SCHEMA.format(db=""), self.timeout,
                           what="LLM call cache", env_hint="DYNAKRAG_LLM_CACHE")
        self._conn, self._pid = conn, os.getpid()
        return conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> "CallCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- access -------------------------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        """The stored value, or None on a miss (a corrupt row is deleted and counts as both)."""
        with self._lock:
            row = self._connect().execute(
                "SELECT value, checksum FROM calls WHERE key = ?", (key,)).fetchone()
            if row is None:
                self.misses += 1
                return None
            value = self._decode(key, row[0], row[1])
            if value is None:
                self.corrupt += 1
                self.misses += 1
                # Delete only the row we judged, in case another process already rewrote it.
                self._connect().execute(
                    "DELETE FROM calls WHERE key = ? AND value = ? AND checksum = ?",
                    (key, row[0], row[1]))
                return None
            self.hits += 1
            return value

    @staticmethod
    def _decode(key: str, value_json: Any, checksum: Any) -> dict | None:
        if not isinstance(value_json, str) or checksum != _checksum(key, value_json):
            return None
        try:
            value = json.loads(value_json)
        except ValueError:
            return None
        if not isinstance(value, dict) or not all(f in value for f in _FIELDS):
            return None
        if not isinstance(value["text"], str):
            return None
        if not all(isinstance(value[f], int) and not isinstance(value[f], bool)
                   for f in ("prompt_tokens", "completion_tokens")):
            return None
        return value

    def put(self, key: str, text: str, prompt_tokens: int, completion_tokens: int,
            seconds: float) -> None:
        value = canonical_json({"text": text, "prompt_tokens": int(prompt_tokens),
                                "completion_tokens": int(completion_tokens),
                                "seconds": float(seconds)})
        with self._lock:
            self._connect().execute(
                "INSERT OR REPLACE INTO calls (key, value, checksum, created) VALUES (?, ?, ?, ?)",
                (key, value, _checksum(key, value), time.time()))
            self.writes += 1

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._connect().execute(
                "SELECT 1 FROM calls WHERE key = ?", (key,)).fetchone() is not None

    def __len__(self) -> int:
        with self._lock:
            return self._connect().execute("SELECT COUNT(*) FROM calls").fetchone()[0]

    def delete(self, key: str) -> None:
        with self._lock:
            self._connect().execute("DELETE FROM calls WHERE key = ?", (key,))

    def clear(self) -> None:
        with self._lock:
            self._connect().execute("DELETE FROM calls")

    def stats(self) -> dict:
        """Counters of this instance (not of other processes) and the file's entry count."""
        with self._lock:
            looked_up = self.hits + self.misses
            return {
                "path": str(self.path),
                "entries": len(self),
                "hits": self.hits,
                "misses": self.misses,
                "corrupt": self.corrupt,
                "writes": self.writes,
                "hit_rate": self.hits / looked_up if looked_up else 0.0,
            }

    def __repr__(self) -> str:
        return (f"CallCache({str(self.path)!r}, hits={self.hits}, misses={self.misses}, "
                f"corrupt={self.corrupt})")


# -- the cache wrapper -----------------------------------------------------------------------
class CachedGenerator:
    """Wraps a generator with a :class:`CallCache`.

    The key covers the backend, ``model_id``, the messages, ``max_tokens``, ``stop`` and the
    inner generator's ``decoding`` parameters. A hit returns the stored text and token counts
    with ``cached=True`` and ``seconds`` = the time the lookup took. A miss while
    $DYNAKRAG_REPLAY_ONLY is set raises :class:`~dynakrag_lite.generators.base.ReplayMissError`
    instead of generating. A generation cut by the time limit (``truncated``) is returned but
    not stored: it reflects machine speed. Option log-probabilities go through the same cache
    under their own key kind (:meth:`option_logprobs`).
    """

    def __init__(self, inner: Generator, cache: CallCache) -> None:
        self.inner = inner
        self.cache = cache
        self.spec = inner.spec
        self.model_id = inner.model_id
        self.backend = getattr(inner, "backend", type(inner).__name__)

    def key(self, messages: list[Message], max_tokens: int = 64,
            stop: list[str] | None = None) -> str:
        return make_key(self.backend, self.model_id, check_messages(messages),
                        max_tokens=max_tokens, stop=list(stop) if stop else None,
                        **getattr(self.inner, "decoding", {}))

    def generate(self, messages: list[Message], max_tokens: int = 64,
                 stop: list[str] | None = None) -> Generation:
        t0 = time.perf_counter()
        k = self.key(messages, max_tokens, stop)
        hit = self.cache.get(k)
        if hit is not None:
            return Generation(text=hit["text"], prompt_tokens=hit["prompt_tokens"],
                              completion_tokens=hit["completion_tokens"],
                              seconds=time.perf_counter() - t0, cached=True)
        if replay_only():
            raise replay_miss(self.spec, messages)
        g = self.inner.generate(messages, max_tokens=max_tokens, stop=stop)
        if not getattr(g, "truncated", False):
            self.cache.put(k, g.text, g.prompt_tokens, g.completion_tokens, g.seconds)
        return g

    def option_key(self, messages: list[Message], options: Sequence[str], mode: str) -> str:
        """Cache key of an option scoring: kind ``option_logprobs``, the scoring mode and the
        options besides what :meth:`key` covers (no ``max_tokens`` or ``stop``)."""
        return make_key(self.backend, str(self.model_id), check_messages(list(messages)),
                        kind="option_logprobs", mode=mode, options=list(options),
                        **getattr(self.inner, "decoding", {}))

    def option_logprobs(self, messages: list[Message], options: Sequence[str],
                        mode: str = "auto") -> OptionScores:
        """The inner backend's ``option_logprobs`` through the cache: a hit returns the stored
        scores with ``cached=True`` without touching the model; a miss while
        $DYNAKRAG_REPLAY_ONLY is set raises ``ReplayMissError``."""
        if not callable(getattr(self.inner, "option_logprobs", None)):
            raise GeneratorError(f"{type(self.inner).__name__}: this backend cannot score "
                                 "log-probabilities (supported: llama.cpp, transformers, "
                                 "OpenAI-compatible servers, or a backend with "
                                 "option_logprobs)")
        t0 = time.perf_counter()
        options = list(dict.fromkeys(options))
        msgs = check_messages(list(messages))
        key = self.option_key(msgs, options, mode)
        hit = self.cache.get(key)
        if hit is not None:
            v = json.loads(hit["text"])
            return OptionScores({o: float(v["logprobs"][o]) for o in options},
                                hit["prompt_tokens"], time.perf_counter() - t0, True,
                                v["method"], {o: int(n) for o, n in v["n_tokens"].items()},
                                hit["completion_tokens"])
        if replay_only():
            raise replay_miss(self.spec, msgs, "option scoring")
        sc = option_scores(self.inner.option_logprobs(msgs, options, mode), msgs, options,
                           time.perf_counter() - t0)
        value = canonical_json({"logprobs": sc.logprobs, "method": sc.method,
                                "n_tokens": sc.n_tokens})
        # "auto" is also stored under the mode it resolved to, so both lookups agree (llama.cpp
        # numbers move by ~0.05 nats with what the KV cache held; the first result sticks).
        for k in {key} | ({self.option_key(msgs, options, sc.method)} if mode == "auto" and
                          sc.method in ("first_token", "sequence") else set()):
            self.cache.put(k, value, sc.prompt_tokens, sc.completion_tokens, sc.seconds)
        return sc

    def __repr__(self) -> str:
        return f"CachedGenerator({self.inner!r}, {self.cache!r})"


# -- merging cache files ---------------------------------------------------------------------
def _has_calls_table(conn: sqlite3.Connection, db: str, path: Path) -> bool:
    """Whether ``db`` (a schema name of ``conn``) holds a ``calls`` table of this module's
    layout; CacheError naming ``path`` when it holds another one or is no SQLite file."""
    try:
        info = conn.execute(f"PRAGMA {db}.table_info(calls)").fetchall()
    except sqlite3.DatabaseError as e:
        raise CacheError(f"{path} is not a usable SQLite database ({e})") from e
    if not info:
        return False
    columns = sorted(row[1] for row in info)
    primary = [row[1] for row in info if row[5]]
    if columns != sorted(_COLUMNS) or primary != ["key"]:
        raise CacheError(
            f"{path}: table 'calls' has columns {columns} (primary key {primary}), expected "
            f"{sorted(_COLUMNS)} with primary key ['key']; it is not an LLM call cache of "
            "this version of dynakrag_lite, so nothing was merged")
    return True


def _is_corruption(e: sqlite3.DatabaseError) -> bool:
    """SQLITE_CORRUPT or SQLITE_NOTADB (the error code from Python 3.11, else the message)."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (11, 26)
    return any(m in str(e) for m in ("malformed", "not a database"))


def _damaged(conn: sqlite3.Connection, dbs) -> Path | None:
    """The first (schema name, path) of ``dbs`` whose database fails SQLite's quick_check."""
    for db, path in dbs:
        try:
            if conn.execute(f"PRAGMA {db}.quick_check(1)").fetchone()[0] != "ok":
                return path
        except sqlite3.DatabaseError:
            return path
    return None


def _uri(path: Path, mode: str) -> str:
    return f"{path.resolve().as_uri()}?mode={mode}"


def merge_cache(src: str | Path, dst: str | Path, *, vacuum: bool = False,
                timeout: float = 60.0) -> int:
    """Insert the rows of ``src`` whose key ``dst`` lacks; returns how many were added.

    ``dst``'s own rows are never changed or deleted (a key in both keeps ``dst``'s row), and
    ``src`` is opened read-only. ``dst`` (and its folder) is created when missing. The insert
    is one transaction, so a merge that is interrupted leaves ``dst`` as it was; one that runs
    while another process writes ``dst`` waits for it (up to ``timeout`` seconds).
    ``vacuum``: compact ``dst`` after adding rows (for a file kept in git: a merge that added
    nothing leaves the file's bytes unchanged). Raises :class:`CacheError`, naming the file,
    when ``src`` is missing or either file is no SQLite database or has another schema."""
    src, dst = Path(src).expanduser(), Path(dst).expanduser()
    if not src.is_file():
        raise CacheError(f"{src}: no cache file to merge from")
    if dst.is_dir():
        raise CacheError(f"{dst} is a folder, not an SQLite cache file")
    if dst.exists() and src.resolve() == dst.resolve():
        return 0
    # Check src before dst is created, so that a bad src leaves no empty dst behind.
    with closing(sqlite3.connect(_uri(src, "ro"), uri=True, timeout=timeout)) as probe:
        if not _has_calls_table(probe, "main", src):
            raise CacheError(f"{src} has no 'calls' table: not an LLM call cache")
    dst.parent.mkdir(parents=True, exist_ok=True)
    # isolation_level=None: the transaction below is spelled out, not left to the sqlite3
    # module, so the check, the create and the insert commit (or roll back) together.
    conn = sqlite3.connect(_uri(dst, "rwc"), uri=True, timeout=timeout, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        _has_calls_table(conn, "main", dst)  # first, so that an error names the right file
        conn.execute("ATTACH DATABASE ? AS src", (_uri(src, "ro"),))
        _has_calls_table(conn, "src", src)
        conn.execute("BEGIN IMMEDIATE")  # take the write lock before reading the count
        try:
            conn.execute(_SCHEMA.format(db="main."))
            before = conn.execute("SELECT COUNT(*) FROM main.calls").fetchone()[0]
            cols = ", ".join(_COLUMNS)
            conn.execute(f"INSERT OR IGNORE INTO main.calls ({cols}) "
                         f"SELECT {cols} FROM src.calls")
            added = conn.execute("SELECT COUNT(*) FROM main.calls").fetchone()[0] - before
            conn.execute("COMMIT")
        except BaseException as e:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if isinstance(e, sqlite3.DatabaseError) and _is_corruption(e):
                # a damaged page past the header, met only when the rows are read
                bad = _damaged(conn, (("src", src), ("main", dst))) or f"{src} or {dst}"
                raise CacheError(f"{bad} is not a usable SQLite database ({e}); nothing was "
                                 "merged") from e
            raise
        conn.execute("DETACH DATABASE src")
        if added and vacuum:
            conn.execute("VACUUM")  # itself transactional: an interrupted VACUUM loses nothing
    finally:
        conn.close()
    return added
