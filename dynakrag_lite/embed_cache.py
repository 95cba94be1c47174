"""Persistent SQLite cache of embedder calls (query and sentence encodes), used by chapter 2's
retriever, so a warm re-run never loads the model.

The key is one whole encode CALL (embedder identity, settings, texts in order), not single
texts: sentence-transformers pads each batch to its longest text, which changes the last bits
of the other vectors (up to 1.3e-7). Rows carry a sha256 over key, shape and bytes (a mismatch
is a miss); the file is handled like :class:`~dynakrag_lite.generators.cache.SQLiteCache`:
``$DYNAKRAG_EMBED_CACHE`` (``off`` disables it), else ``embeddings.sqlite`` beside the LLM cache."""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from .generators.cache import SQLiteCache, cache_dir, canonical_json

__all__ = ["EmbeddingCache", "default_embed_cache_path", "encode_key", "DISABLED_VALUES"]

DISABLED_VALUES = ("off", "0", "false", "no", "none")
_SCHEMA = ("CREATE TABLE IF NOT EXISTS embeddings ("
           " key TEXT PRIMARY KEY,"
           " n INTEGER NOT NULL,"
           " dim INTEGER NOT NULL,"
           " vectors BLOB NOT NULL,"
           " checksum TEXT NOT NULL,"
           " created REAL NOT NULL)")


def default_embed_cache_path() -> Path | None:
    """The cache file the library uses, or None when $DYNAKRAG_EMBED_CACHE disables it."""
    env = os.environ.get("DYNAKRAG_EMBED_CACHE", "").strip()
    if env.lower() in DISABLED_VALUES:
        return None
    if env:
        return Path(env).expanduser()
    return cache_dir() / "embeddings.sqlite"


def encode_key(model: dict, settings: dict, texts: Sequence[str]) -> str:
    """Key of one encode call: the embedder's identity (``model``), the encode settings and
    the texts in their order (their order and batch decide the padding, so the last bits)."""
    payload = {"model": model, "settings": settings, "texts": list(texts)}
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


def _checksum(key: str, n: int, dim: int, blob: bytes) -> str:
    h = hashlib.sha256(f"{key}\n{n}\n{dim}\n".encode("utf-8"))
    h.update(blob)
    return h.hexdigest()


class EmbeddingCache(SQLiteCache):
    """Key -> float32 array (n x dim) in an SQLite file; counters as in CallCache."""

    what, env_hint, schema = "embedding cache", "DYNAKRAG_EMBED_CACHE", _SCHEMA

    def __init__(self, path: str | Path | None = None, timeout: float = 60.0) -> None:
        if path is None:
            path = default_embed_cache_path()
            if path is None:
                raise ValueError("the embedding cache is disabled ($DYNAKRAG_EMBED_CACHE)")
        super().__init__(Path(path).expanduser(), timeout)

    def get(self, key: str) -> np.ndarray | None:
        """The stored array (a fresh writable copy), or None on a miss."""
        with self._lock:
            rows = self._run("SELECT n, dim, vectors, checksum FROM embeddings WHERE key = ?",
                             (key,))
            row = rows[0] if rows else None
            if row is None:
                self.misses += 1
                return None
            n, dim, blob, checksum = row
            ok = (isinstance(blob, bytes) and isinstance(n, int) and isinstance(dim, int)
                  and len(blob) == 4 * n * dim and checksum == _checksum(key, n, dim, blob))
            if not ok:
                self.corrupt += 1
                self.misses += 1
                self._run("DELETE FROM embeddings WHERE key = ? AND checksum = ?",
                          (key, checksum), write=True)
                return None
            self.hits += 1
            return np.frombuffer(blob, dtype="<f4").reshape(n, dim).astype("float32")

    def put(self, key: str, vectors: np.ndarray) -> None:
        arr = np.asarray(vectors)
        if arr.ndim != 2 or arr.dtype != np.float32:
            raise ValueError(f"expected a 2-d float32 array, got {arr.dtype} {arr.shape}")
        blob = arr.astype("<f4", copy=False).tobytes()
        n, dim = int(arr.shape[0]), int(arr.shape[1])
        with self._lock:
            if self._run("INSERT OR REPLACE INTO embeddings (key, n, dim, vectors, checksum, "
                         "created) VALUES (?, ?, ?, ?, ?, ?)",
                         (key, n, dim, blob, _checksum(key, n, dim, blob), time.time()),
                         write=True) is not None:
                self.writes += 1

    def __len__(self) -> int:
        with self._lock:
            rows = self._run("SELECT COUNT(*) FROM embeddings")
            return rows[0][0] if rows else 0

    def stats(self) -> dict:
        return {"path": str(self.path), "entries": len(self), "hits": self.hits,
                "misses": self.misses, "corrupt": self.corrupt, "writes": self.writes}

    def __repr__(self) -> str:
        return (f"EmbeddingCache({str(self.path)!r}, hits={self.hits}, misses={self.misses}, "
                f"corrupt={self.corrupt})")
