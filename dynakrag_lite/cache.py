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
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["CallCache", "CacheError", "default_cache_path", "make_key", "canonical_json"]

_FIELDS = ("text", "prompt_tokens", "completion_tokens", "seconds")


class CacheError(RuntimeError):
    """The cache file cannot be used (not an SQLite database, unreadable, a folder...)."""


def default_cache_path() -> Path:
    """$DYNAKRAG_LLM_CACHE (a file), else llm_calls.sqlite in $DYNAKRAG_CACHE_DIR or
    ~/.cache/dynakrag_lite. The book's make targets point $DYNAKRAG_LLM_CACHE at a copy of the
    committed book/_llm_cache.sqlite, so quick-mode chapters replay recorded calls."""
    if os.environ.get("DYNAKRAG_LLM_CACHE"):
        return Path(os.environ["DYNAKRAG_LLM_CACHE"]).expanduser()
    env = os.environ.get("DYNAKRAG_CACHE_DIR")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "dynakrag_lite"
    return root / "llm_calls.sqlite"


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
        if self.path.is_dir():
            raise CacheError(f"LLM call cache {self.path} is a folder, not an SQLite file; "
                             "point DYNAKRAG_LLM_CACHE (or the cache argument) at a file path")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = None
        try:
            conn = sqlite3.connect(str(self.path), timeout=self.timeout, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # durable enough with WAL, much faster
            conn.execute(
                "CREATE TABLE IF NOT EXISTS calls ("
                " key TEXT PRIMARY KEY,"
                " value TEXT NOT NULL,"
                " checksum TEXT NOT NULL,"
                " created REAL NOT NULL)"
            )
        except sqlite3.DatabaseError as e:
            # sqlite3 opens lazily: a text file (or any foreign file) fails on the first
            # statement with "file is not a database". Never overwrite it: it may be someone's.
            if conn is not None:
                conn.close()
            raise CacheError(
                f"LLM call cache {self.path} is not a usable SQLite database ({e}); move or "
                f"delete that file (e.g. mv {self.path} {self.path}.bad) or choose another "
                "cache file with DYNAKRAG_LLM_CACHE / DYNAKRAG_CACHE_DIR") from e
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
