"""Persistent SQLite cache of LLM calls (chapter 3).

With greedy decoding a reply is a function of (backend, model, messages, decoding parameters):
the key is the sha256 of their canonical JSON. A row failing its checksum is deleted, counted as
``corrupt`` and missed. WAL mode and a busy timeout let processes share one file; a non-SQLite
file is refused, a read-only or damaged one worked around (:class:`SQLiteCache`)."""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

from .base import (Generation, Generator, GeneratorError, Message, OptionScores, check_messages,
                   option_scores, replay_miss, replay_only)

__all__ = ["CallCache", "CacheError", "CachedGenerator", "SQLiteCache", "default_cache_path",
           "make_key", "canonical_json", "open_sqlite", "cache_dir", "is_corruption",
           "CALLS_SCHEMA", "CALLS_COLUMNS"]

_FIELDS = ("text", "prompt_tokens", "completion_tokens", "seconds")
CALLS_COLUMNS = ("key", "value", "checksum", "created")
# the calls table (also read by experiments.maintenance.merge_cache); {db}: a schema prefix
CALLS_SCHEMA = ("CREATE TABLE IF NOT EXISTS {db}calls ("
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
    """A connection to the cache file ``path``: WAL, a busy timeout, autocommit, ``schema`` (a
    CREATE TABLE IF NOT EXISTS) applied. CacheError naming ``what`` and the variable
    ``env_hint`` when the path is a folder or not an SQLite database (never overwritten)."""
    if path.is_dir():
        raise CacheError(f"{what} {path} is a folder, not an SQLite file; "
                         f"point {env_hint} (or the cache argument) at a file path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # e.g. $DYNAKRAG_CACHE_DIR names a file
        raise CacheError(f"{what} {path}: cannot create its folder {path.parent} ({e}); "
                         f"point {env_hint} / DYNAKRAG_CACHE_DIR at a folder") from e
    conn = None
    try:
        conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # durable enough with WAL, much faster
        conn.execute(schema)
    except sqlite3.DatabaseError as e:
        # sqlite3 opens lazily: a foreign file fails here. Never overwrite it: it may be someone's.
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


def _is_read_only(e: sqlite3.DatabaseError) -> bool:
    """SQLITE_READONLY (the error code from Python 3.11, else the message)."""
    code = getattr(e, "sqlite_errorcode", None)
    return code & 0xFF == 8 if code is not None else "readonly" in str(e)


def is_corruption(e: sqlite3.DatabaseError) -> bool:
    """SQLITE_CORRUPT or SQLITE_NOTADB (the error code from Python 3.11, else the message)."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (11, 26)
    return any(m in str(e) for m in ("malformed", "not a database"))


class SQLiteCache:
    """What this package's cache files share: the connection (:func:`open_sqlite`, reopened in a
    forked child), a lock for threads, and the failures met in use (:meth:`_run`)."""

    what, env_hint, schema = "cache", "DYNAKRAG_CACHE_DIR", ""

    def __init__(self, path: Path, timeout: float = 60.0) -> None:
        self.path, self.timeout = path, timeout
        self.hits = self.misses = self.corrupt = self.writes = 0
        # set (each with one warning) when the file cannot be written / turns out damaged
        self.read_only = self.damaged = False
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._connect()
        if not os.access(self.path, os.W_OK):
            self._now_read_only()

    def _connect(self) -> sqlite3.Connection:
        # A connection must not cross a fork: reopen when running in a child process.
        if self._conn is None or self._pid != os.getpid():
            self._conn = open_sqlite(self.path, self.schema, self.timeout, what=self.what,
                                     env_hint=self.env_hint)
            self._pid = os.getpid()
        return self._conn

    def _now_read_only(self) -> None:
        if not self.read_only:
            self.read_only = True
            warnings.warn(f"{self.what} {self.path} is read-only: stored entries are reused, "
                          "new ones are computed but not stored (make the file writable, or "
                          f"point {self.env_hint} at a writable copy)", RuntimeWarning,
                          stacklevel=4)

    def _run(self, sql: str, args: tuple = (), write: bool = False) -> list | None:
        """The rows of one statement, or None when the file cannot serve it (read-only, or
        damaged: the cache is then off for the process), with one warning each."""
        if self.damaged or (write and self.read_only):
            return None
        try:
            return self._connect().execute(sql, args).fetchall()
        except sqlite3.DatabaseError as e:
            if _is_read_only(e):
                self._now_read_only()
                return None
            if not is_corruption(e):
                raise  # e.g. still busy after the timeout: not the file's fault
            self.damaged = True
            warnings.warn(f"{self.what} {self.path} is damaged ({e}); going on without it. "
                          f"Move it away (e.g. mv {self.path} {self.path}.bad) or choose "
                          f"another file with {self.env_hint}", RuntimeWarning, stacklevel=4)
            return None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> "SQLiteCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CallCache(SQLiteCache):
    """Key -> {text, prompt_tokens, completion_tokens, seconds} in an SQLite file."""

    what, env_hint, schema = "LLM call cache", "DYNAKRAG_LLM_CACHE", CALLS_SCHEMA.format(db="")

    def __init__(self, path: str | Path | None = None, timeout: float = 60.0) -> None:
        super().__init__(Path(path).expanduser() if path is not None else default_cache_path(),
                         timeout)

    # -- access -------------------------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        """The stored value, or None on a miss (a corrupt row is deleted and counts as both)."""
        with self._lock:
            rows = self._run("SELECT value, checksum FROM calls WHERE key = ?", (key,))
            row = rows[0] if rows else None
            if row is None:
                self.misses += 1
                return None
            value = self._decode(key, row[0], row[1])
            if value is None:
                self.corrupt += 1
                self.misses += 1
                # Delete only the row we judged, in case another process already rewrote it.
                self._run("DELETE FROM calls WHERE key = ? AND value = ? AND checksum = ?",
                          (key, row[0], row[1]), write=True)
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
            if self._run("INSERT OR REPLACE INTO calls (key, value, checksum, created) "
                         "VALUES (?, ?, ?, ?)", (key, value, _checksum(key, value),
                                                 time.time()), write=True) is not None:
                self.writes += 1

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return bool(self._run("SELECT 1 FROM calls WHERE key = ?", (key,)))

    def __len__(self) -> int:
        with self._lock:
            rows = self._run("SELECT COUNT(*) FROM calls")
            return rows[0][0] if rows else 0

    def delete(self, key: str) -> None:
        with self._lock:
            self._run("DELETE FROM calls WHERE key = ?", (key,), write=True)

    def clear(self) -> None:
        with self._lock:
            self._run("DELETE FROM calls", write=True)

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
    """Wraps a generator with a :class:`CallCache` keyed by backend, ``model_id``, messages,
    ``max_tokens``, ``stop`` and ``decoding``; a miss under $DYNAKRAG_REPLAY_ONLY raises
    ``ReplayMissError``. A generation cut by the time limit is not stored (machine speed)."""

    def __init__(self, inner: Generator, cache: CallCache) -> None:
        self.inner = inner
        self.cache = cache
        self.spec = inner.spec
        self.model_id = inner.model_id
        self.backend = getattr(inner, "backend", type(inner).__name__)

    def check(self) -> None:
        """The inner backend's check before a run (a server asked for its model list), unless
        replay-only runs never call it."""
        check = getattr(self.inner, "check", None)
        if callable(check) and not replay_only():
            check()

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
        """The inner backend's ``option_logprobs`` through the cache, as :meth:`generate`."""
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
