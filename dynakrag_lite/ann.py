"""Approximate FAISS indexes for Wikipedia-sized corpora: index-factory strings
(``"IVF4096,PQ48"``, ``"HNSW32"``), their training sample, search knobs, memory-mapped reading,
and corpus vectors streamed through a ``.npy`` file. The paper and every run of this project
use the exact ``IndexFlatIP``; the rest serves ``index --index-factory`` and
``benchmarks/bench_index.py``. Search knobs are not part of a saved index's identity."""
from __future__ import annotations

import hashlib
import json
import mmap as _mmap
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from .storage import atomic_write_json, atomic_writer

__all__ = ["TRAIN_SAMPLE", "ADD_CHUNK", "ENCODE_CHUNK", "DEFAULT_NPROBE", "DEFAULT_EF_SEARCH",
           "normalize_factory", "make_index", "train_rows", "iter_chunks", "training_sample",
           "set_search_params", "build_index", "read_index", "write_index_atomic", "write_vectors",
           "stored_vectors"]

TRAIN_SAMPLE = 100_000  # default cap of the training sample of trained (IVF/PQ/SQ) indexes
# Vectors read and added per step: bounds build memory to one chunk (faiss's PQ encoder
# allocates n x 256 x M floats per call: 561 MB for 65,536 vectors of IVF64,PQ16, 140 MB here).
ADD_CHUNK = 8_192
ENCODE_CHUNK = 16_384  # texts encoded per write in write_vectors
DEFAULT_NPROBE = 16  # IVF lists probed per query
DEFAULT_EF_SEARCH = 64  # HNSW candidate list per query (faiss's own default, 16, loses recall)


def normalize_factory(factory: str | None) -> str | None:
    """None for the exact flat index (None, ``""`` or ``"Flat"`` in any case), else the
    factory string stripped of surrounding blanks."""
    if factory is None:
        return None
    if not isinstance(factory, str):
        raise ValueError(f"FAISS index factory must be a string, got {factory!r}")
    f = factory.strip()
    return None if f == "" or f.lower() == "flat" else f


def _faiss_reason(e: BaseException) -> str:
    """The readable part of a faiss C++ error ("Error in <signature> at <file>:<line>: why")."""
    msg = (str(e).strip().splitlines() or [type(e).__name__])[0]
    msg = re.sub(r"^Error in .*? at \S+:\d+: ", "", msg)
    return msg.removeprefix("Error: ")


def make_index(dim: int, factory: str | None = None):
    """An empty inner-product index over ``dim``-dimensional vectors: ``IndexFlatIP`` for the
    flat default, else ``faiss.index_factory``; ValueError naming the string when faiss cannot
    make it for ``dim`` (a typo, or e.g. ``PQ48`` on a dimension 48 does not divide)."""
    import faiss  # heavy optional dependency
    f = normalize_factory(factory)
    if f is None:
        return faiss.IndexFlatIP(int(dim))
    try:
        return faiss.index_factory(int(dim), f, faiss.METRIC_INNER_PRODUCT)
    except Exception as e:  # faiss raises RuntimeError with a C++ message
        raise ValueError(f"invalid FAISS index factory string {factory!r} for {dim}-dimensional "
                         f"inner-product vectors: {_faiss_reason(e)}") from None


def _nlist(index) -> int:
    """Number of IVF lists (0 when the index has no IVF part)."""
    import faiss  # heavy optional dependency
    try:
        return int(faiss.extract_index_ivf(index).nlist)
    except RuntimeError:
        return 0


def train_rows(index, n: int, train_size: int | None = None) -> int:
    """How many of ``n`` vectors train ``index``: ``train_size``, else :data:`TRAIN_SAMPLE` raised
    to 40 per IVF list (faiss's k-means asks for 39 per centroid), never more than ``n``."""
    cap = train_size if train_size is not None else max(TRAIN_SAMPLE, 40 * _nlist(index))
    return max(0, min(int(n), int(cap)))


def _file_source(vectors) -> tuple[str, int, int] | None:
    """(file, byte offset, dim) when ``vectors`` is a whole float32 C-order memory map of a
    file (as np.load(mmap_mode="r") returns), else None. Slices of a memmap keep the parent's
    offset attribute, so only an array whose buffer is the mmap itself qualifies."""
    if (isinstance(vectors, np.memmap) and isinstance(vectors.base, _mmap.mmap)
            and vectors.filename and vectors.ndim == 2 and vectors.flags.c_contiguous
            and vectors.dtype == np.dtype("<f4")):
        return str(vectors.filename), int(vectors.offset), int(vectors.shape[1])
    return None


def iter_chunks(vectors, rows: int = ADD_CHUNK) -> Iterator[tuple[int, np.ndarray]]:
    """``(start, block)`` over the rows of ``vectors``, each block float32 and C-contiguous. A
    memory map of a ``.npy`` file is read with plain file reads: pages touched through a
    mapping count as resident memory, as if a file larger than RAM were held whole."""
    n = len(vectors)
    src = _file_source(vectors)
    if src is None:
        for s in range(0, n, rows):
            yield s, np.ascontiguousarray(vectors[s:s + rows], dtype="float32")
        return
    path, offset, dim = src
    with open(path, "rb") as fh:
        fh.seek(offset)
        for s in range(0, n, rows):
            block = np.empty((min(rows, n - s), dim), dtype="<f4")
            got = fh.readinto(memoryview(block).cast("B"))
            if got != block.nbytes:
                raise ValueError(f"{path}: file ends inside row {s + got // (4 * dim)} of {n}")
            yield s, block


def training_sample(vectors, size: int, seed: int = 0) -> np.ndarray:
    """``size`` rows of ``vectors`` drawn without replacement with ``seed`` (all rows, in order,
    when ``size >= len(vectors)``), gathered in one sequential pass over the rows."""
    n = len(vectors)
    if size >= n:
        return np.concatenate([b for _, b in iter_chunks(vectors)]) if n else \
            np.zeros((0, vectors.shape[1]), dtype="float32")
    picked = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
    parts = []
    for s, block in iter_chunks(vectors):
        lo, hi = np.searchsorted(picked, [s, s + len(block)])
        parts.append(block[picked[lo:hi] - s])
    return np.ascontiguousarray(np.concatenate(parts))


def set_search_params(index, nprobe: int | None = DEFAULT_NPROBE,
                      ef_search: int | None = DEFAULT_EF_SEARCH) -> dict[str, int]:
    """Set ``nprobe`` (IVF) and ``efSearch`` (HNSW, also an HNSW coarse quantizer) where the
    index has them, through pre-transforms and refine wrappers (``faiss.ParameterSpace``).
    Returns what was set; a knob the index lacks is skipped (a flat index takes neither)."""
    import faiss  # heavy optional dependency
    ps = faiss.ParameterSpace()
    done: dict[str, int] = {}
    for name, value in (("nprobe", nprobe), ("efSearch", ef_search)):
        if value is None:
            continue
        try:
            ps.set_index_parameter(index, name, int(value))
            done[name] = int(value)
        except RuntimeError:  # "could not set parameter": not this kind of index
            pass
    return done


def _skip_polysemous_training(index) -> None:
    """Turn off IVF-PQ's polysemous training: it only matters with a polysemous threshold (never
    set here) and costs over a second per sub-quantizer (a minute for PQ48)."""
    import faiss  # heavy optional dependency
    try:
        ivf = faiss.downcast_index(faiss.extract_index_ivf(index))
    except RuntimeError:
        return
    if getattr(ivf, "do_polysemous_training", False):
        ivf.do_polysemous_training = False


def build_index(vectors, factory: str | None = None, *, train_size: int | None = None,
                seed: int = 0, nprobe: int | None = DEFAULT_NPROBE,
                ef_search: int | None = DEFAULT_EF_SEARCH, chunk_rows: int = ADD_CHUNK):
    """An inner-product index over ``vectors`` (n x d float32, normalized; in memory or a
    memory-mapped ``.npy``). ``factory`` None/"Flat": exact ``IndexFlatIP``; else a FAISS
    factory string, trained when needed on a seeded :func:`training_sample`. Vectors are added
    in order, so index position i is row i. ValueError naming the string when faiss cannot
    make, train or fill it. HNSW built by several threads may differ in a few links."""
    n, dim = vectors.shape
    f = normalize_factory(factory)
    index = make_index(dim, f)
    _skip_polysemous_training(index)
    if not index.is_trained:
        size = train_rows(index, n, train_size)
        try:
            index.train(training_sample(vectors, size, seed))
        except RuntimeError as e:
            raise ValueError(f"FAISS index {f!r} cannot be trained on {size} vectors: "
                             f"{_faiss_reason(e)}") from None
    for _, block in iter_chunks(vectors, chunk_rows):
        try:
            index.add(block)
        except RuntimeError as e:
            raise ValueError(f"FAISS index {f!r} cannot add vectors: {_faiss_reason(e)}") from None
    if f is not None:
        set_search_params(index, nprobe, ef_search)
    return index


def read_index(path: str | Path, mmap: bool = False) -> tuple[Any, bool]:
    """``(index, mapped)``: the index at ``path``, memory-mapped when ``mmap`` is set and faiss
    can (the retriever only replaces index files with ``os.replace``), else read."""
    import faiss  # heavy optional dependency
    if mmap:
        for flag in (faiss.IO_FLAG_MMAP_IFC, faiss.IO_FLAG_MMAP):
            try:
                return faiss.read_index(str(path), flag), True
            except RuntimeError:
                continue
    return faiss.read_index(str(path)), False


def write_index_atomic(index, path: str | Path) -> tuple[int, str]:
    """Write ``index`` to ``path`` atomically, streamed so a large index is never held twice in
    memory; returns (bytes, sha256) of the file."""
    import faiss  # heavy optional dependency
    digest = hashlib.sha256()
    size = 0
    with atomic_writer(path) as fh:
        def sink(chunk: bytes) -> None:
            nonlocal size
            fh.write(chunk)
            digest.update(chunk)
            size += len(chunk)
        faiss.write_index(index, faiss.PyCallbackIOWriter(sink))
    return size, digest.hexdigest()


def write_vectors(encode: Callable[[list[str]], np.ndarray], texts: Sequence[str],
                  path: str | Path, dim: int, chunk_size: int = ENCODE_CHUNK,
                  show_progress: bool = False) -> np.memmap:
    """``encode`` (normalized float32 rows of ``dim`` columns) of ``texts`` into the ``.npy``
    file ``path``, ``chunk_size`` texts at a time, so memory holds one chunk whatever the
    corpus size; written atomically. Returns it opened read-only as a memory map."""
    n = len(texts)
    bar = tqdm(total=n, unit="text", desc="encode") if show_progress else None
    try:
        with atomic_writer(path) as fh:
            np.lib.format.write_array_header_1_0(
                fh, {"descr": "<f4", "fortran_order": False, "shape": (n, dim)})
            for start in range(0, n, chunk_size):
                vecs = encode(list(texts[start:start + chunk_size]))
                if vecs.shape != (min(chunk_size, n - start), dim):
                    raise ValueError(f"embedder returned shape {vecs.shape} for texts "
                                     f"{start}..{start + chunk_size} (dim {dim} expected)")
                fh.write(vecs.astype("<f4", copy=False).tobytes())
                if bar is not None:
                    bar.update(len(vecs))
    finally:
        if bar is not None:
            bar.close()
    return np.load(path, mmap_mode="r")


def stored_vectors(path: Path, key: str, n: int, write: Callable[[], np.memmap],
                   info: dict) -> tuple[np.memmap, bool]:
    """``(vectors, reused)``: the rows of the ``.npy`` file ``path`` when its sidecar records
    ``key``, size and ``n`` rows, else ``write()``'s new file (its sidecar written last)."""
    side = path.with_name(path.name + ".json")
    try:
        rec = json.loads(side.read_text())
        vecs = np.load(path, mmap_mode="r")
        if (isinstance(rec, dict) and rec.get("key") == key
                and rec.get("bytes") == path.stat().st_size and vecs.ndim == 2
                and vecs.shape[0] == n and vecs.dtype == np.dtype("<f4")):
            return vecs, True
    except (OSError, ValueError):
        pass  # missing or unreadable: encode
    side.unlink(missing_ok=True)
    vecs = write()
    atomic_write_json(side, {"key": key, **info, "n": int(vecs.shape[0]),
                             "dim": int(vecs.shape[1]), "bytes": path.stat().st_size})
    return vecs, False
