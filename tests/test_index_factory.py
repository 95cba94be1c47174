"""Large-corpus options of the dense retriever: FAISS index-factory strings beside the exact flat
default, memory-mapped indexes, and corpus embeddings streamed to disk.

Most tests use a deterministic bag-of-words embedder (no model, milliseconds) or random
clustered vectors; the flat-default and streaming-encode tests use the real embedder on the
library corpus, as tests/test_retrieval.py does."""
from __future__ import annotations

import hashlib
import json
import warnings

import numpy as np
import pytest

from dynakrag_lite import retriever as retriever_mod
from dynakrag_lite.ann import (build_index, iter_chunks, read_index, training_sample,
                               write_index_atomic)
from dynakrag_lite.data.corpus import Corpus, Document, doc_id_for
from dynakrag_lite.retriever import DenseRetriever, embedder_identity, resolve_embedder

from helpers import HashEmbedder, require_modules

# The meta.json keys of a flat index as every earlier version wrote them.
FLAT_META_KEYS = {"key", "embedder", "n", "corpus_hash", "corpus_name", "index_bytes",
                  "index_sha256", "ntotal", "dim"}
WORDS = ("river castle music label founder album city bridge painter novel war king film "
         "studio actor born island mountain harbor tower queen poet opera garden").split()
QUERIES = ("who founded the music label", "castle on the island", "painter born in the city",
           "opera about a queen", "bridge over the river by the tower")


@pytest.fixture(autouse=True)
def one_faiss_thread():
    """Small indexes: OpenMP threads only spin against each other (and against whatever else
    the machine runs), turning a second of k-means into tens."""
    try:
        import faiss
    except ImportError:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


@pytest.fixture
def embedder(monkeypatch) -> HashEmbedder:
    require_modules("faiss")
    emb = HashEmbedder()
    monkeypatch.setattr(retriever_mod, "load_embedder", lambda name: emb)
    return emb


@pytest.fixture
def hash_corpus(embedder) -> Corpus:
    docs = []
    for i in range(400):
        title = f"Doc {i}"
        text = " ".join(WORDS[(i * k + i // 7) % len(WORDS)] for k in range(1, 10))
        docs.append(Document(doc_id_for(title, text), title, text))
    return Corpus(docs, name="hash")


def _build(corpus, folder, **kw) -> DenseRetriever:
    return DenseRetriever(corpus, embedder="hash", index_dir=folder, show_progress=False, **kw)


def _ids(r: DenseRetriever, k: int = 10) -> list[list[str]]:
    return [[h.doc.id for h in r.search(q, k)] for q in QUERIES]


def _scores(r: DenseRetriever, k: int = 10) -> list[list[float]]:
    return [[round(h.score, 5) for h in r.search(q, k)] for q in QUERIES]


def clustered(n: int, dim: int = 64, clusters: int = 40, seed: int = 0) -> np.ndarray:
    """Unit vectors around random centres (noise about 0.6 of a centre's length)."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((clusters, dim)).astype("float32")
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    x = c[rng.integers(0, clusters, n)]
    x = x + 0.6 * rng.standard_normal((n, dim)).astype("float32") / np.sqrt(dim)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype("float32")


def recall_at_10(ids: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, truth)]))


# -- the flat default is what it always was ------------------------------------------------

def test_flat_default_keeps_key_files_meta_and_exact_results(library_retriever,
                                                              library_corpus):
    import faiss
    r = library_retriever
    folder = r.index_dir
    # The flat key: embedder, corpus texts and the embedder's identity (issue 23), no factory.
    assert r.key == hashlib.sha256(
        f"{resolve_embedder(r.embedder_name)}|{r.embedder_name}|"
        f"{library_corpus.content_hash()}|"
        f"{json.dumps(embedder_identity(r.embedder_name), sort_keys=True)}".encode()
    ).hexdigest()[:16]
    assert r.index_factory is None and type(r.index).__name__ == "IndexFlatIP"
    assert {p.name for p in folder.iterdir() if not p.name.startswith(".")} == \
        {"index.faiss", "ids.json", "meta.json"}
    meta = json.loads((folder / "meta.json").read_text())
    assert set(meta) == FLAT_META_KEYS
    # index.faiss holds exactly the bytes the earlier code saved: IndexFlatIP + add, serialized.
    vecs = r.index.reconstruct_n(0, r.index.ntotal)
    old = faiss.IndexFlatIP(vecs.shape[1])
    old.add(vecs)
    blob = (folder / "index.faiss").read_bytes()
    assert blob == faiss.serialize_index(old).tobytes()
    assert meta["index_sha256"] == hashlib.sha256(blob).hexdigest()
    # Exact search: the top scores are the brute-force top cosine similarities.
    q = "Who founded a record label?"
    scores = vecs @ r.encode([q])[0]
    np.testing.assert_allclose([h.score for h in r.search(q, 8)],
                               np.sort(scores)[::-1][:8], atol=1e-5)
    # "Flat" spelled out is the default: it loads the same folder instead of rebuilding.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = DenseRetriever(library_corpus, index_dir=folder, show_progress=False,
                               index_factory="Flat")
    assert again.loaded_from_disk and again.key == r.key
    assert [h.doc.id for h in again.search(q, 8)] == [h.doc.id for h in r.search(q, 8)]


# -- factory indexes -----------------------------------------------------------------------

@pytest.mark.parametrize("factory,floor", [("IVF32,Flat", 0.95), ("HNSW16", 0.95),
                                           ("IVF16,SQ8", 0.9), ("IVF32,PQ32", 0.75)])
def test_factory_index_recall_at_10_against_flat_is_high_on_clustered_data(factory, floor):
    require_modules("faiss")
    x = clustered(4200)
    base, queries = x[:4000], x[4000:]
    _, truth = build_index(base).search(queries, 10)
    index = build_index(base, factory, nprobe=8)
    assert index.ntotal == len(base)
    _, ids = index.search(queries, 10)
    assert recall_at_10(ids, truth) >= floor


def test_factory_retriever_records_its_kind_and_loads_it_back(embedder, hash_corpus, tmp_path):
    flat = _build(hash_corpus, tmp_path / "flat")
    r = _build(hash_corpus, tmp_path / "ivf", index_factory="IVF8,Flat", nprobe=8)
    assert type(r.index).__name__ == "IndexIVFFlat" and r.index.ntotal == len(hash_corpus)
    assert r.key != flat.key  # its own default cache folder
    meta = json.loads((tmp_path / "ivf" / "meta.json").read_text())
    assert meta["index_factory"] == "IVF8,Flat" and meta["train_seed"] == 0
    assert set(meta) - FLAT_META_KEYS == {"index_factory", "train_size", "train_seed"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = _build(hash_corpus, tmp_path / "ivf", index_factory="IVF8,Flat", nprobe=8)
    assert back.loaded_from_disk and _ids(back) == _ids(r)
    # 8 of 8 lists probed: exhaustive, the flat index's scores (ties may come in another order)
    assert _scores(r) == _scores(flat)


def test_search_knobs_are_set_after_loading_not_taken_from_the_file(embedder, hash_corpus,
                                                                    tmp_path):
    import faiss
    _build(hash_corpus, tmp_path, index_factory="IVF8,Flat", nprobe=2)
    r = _build(hash_corpus, tmp_path, index_factory="IVF8,Flat", nprobe=5)
    assert r.loaded_from_disk and faiss.extract_index_ivf(r.index).nprobe == 5
    h = _build(hash_corpus, tmp_path / "hnsw", index_factory="HNSW8", ef_search=77)
    assert faiss.downcast_index(h.index).hnsw.efSearch == 77


def test_cached_index_built_with_another_factory_is_not_reused(embedder, hash_corpus,
                                                               tmp_path):
    flat = _build(hash_corpus, tmp_path)
    encoded = embedder.encoded
    hnsw = _build(hash_corpus, tmp_path, index_factory="HNSW16")
    assert not hnsw.loaded_from_disk and type(hnsw.index).__name__ == "IndexHNSWFlat"
    assert embedder.encoded > encoded  # really rebuilt
    assert json.loads((tmp_path / "meta.json").read_text())["index_factory"] == "HNSW16"
    back = _build(hash_corpus, tmp_path)  # the default again: the HNSW file is not taken
    assert not back.loaded_from_disk and type(back.index).__name__ == "IndexFlatIP"
    assert _ids(back) == _ids(flat)
    assert "index_factory" not in json.loads((tmp_path / "meta.json").read_text())
    _build(hash_corpus, tmp_path, index_factory="IVF8,Flat")
    other_seed = _build(hash_corpus, tmp_path, index_factory="IVF8,Flat", seed=1)
    assert not other_seed.loaded_from_disk  # another training sample: another index
    # A meta that names another kind under this index's key is refused too (belt and braces).
    meta_p = tmp_path / "meta.json"
    meta_p.write_text(json.dumps({**json.loads(meta_p.read_text()), "index_factory": "HNSW16"}))
    assert not _build(hash_corpus, tmp_path, index_factory="IVF8,Flat", seed=1).loaded_from_disk


# -- memory-mapped indexes -----------------------------------------------------------------

@pytest.mark.parametrize("factory", [None, "IVF8,Flat", "HNSW16", "IVF8,PQ8"])
def test_mmap_load_returns_the_same_search_results(embedder, hash_corpus, tmp_path, factory):
    built = _build(hash_corpus, tmp_path, index_factory=factory)
    assert not built.mmapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mapped = _build(hash_corpus, tmp_path, index_factory=factory, mmap=True)
    assert mapped.loaded_from_disk and mapped.mmapped
    assert [[(h.doc.id, round(h.score, 5)) for h in mapped.search(q, 10)] for q in QUERIES] == \
        [[(h.doc.id, round(h.score, 5)) for h in built.search(q, 10)] for q in QUERIES]
    # Built fresh with mmap=True: saved, then served from the mapped file.
    fresh = _build(hash_corpus, tmp_path / "fresh", index_factory=factory, mmap=True)
    assert not fresh.loaded_from_disk and fresh.mmapped and _ids(fresh) == _ids(built)


def test_mapped_index_survives_its_file_being_replaced(tmp_path):
    require_modules("faiss")
    x = clustered(2000)
    path = tmp_path / "index.faiss"
    write_index_atomic(build_index(x, "IVF16,Flat", nprobe=16), path)
    index, mapped = read_index(path, mmap=True)
    assert mapped
    before = index.search(x[:20], 5)[1]
    write_index_atomic(build_index(x[:500]), path)  # os.replace: a new file, old one kept alive
    assert np.array_equal(index.search(x[:20], 5)[1], before)


# -- streaming encode ----------------------------------------------------------------------

def test_streaming_encode_to_disk_equals_in_memory_encode(library_retriever, library_corpus,
                                                          tmp_path):
    texts = [d.render() for d in library_corpus.documents[:100]]
    path = tmp_path / "vecs.npy"
    on_disk = library_retriever.encode_to_disk(texts, path, chunk_size=40)  # 40 + 40 + 20
    in_memory = library_retriever.encode(texts)
    assert isinstance(on_disk, np.memmap) and on_disk.dtype == np.float32
    assert on_disk.shape == in_memory.shape == (100, 384)
    # Other batch boundaries pad differently: equal up to float rounding.
    np.testing.assert_allclose(np.asarray(on_disk), in_memory, atol=1e-5)
    assert np.array_equal(np.load(path), np.asarray(on_disk))  # a plain, complete .npy
    assert [p.name for p in tmp_path.iterdir()] == ["vecs.npy"]  # no temp file left


def test_index_built_from_vectors_file_matches_in_memory_build_and_file_is_reused(
        embedder, hash_corpus, tmp_path):
    vec_path = tmp_path / "vectors" / "corpus.npy"
    mem = _build(hash_corpus, tmp_path / "a", index_factory="IVF8,Flat", nprobe=8)
    disk = _build(hash_corpus, tmp_path / "b", index_factory="IVF8,Flat", nprobe=8,
                  vectors_path=vec_path)
    assert not disk.vectors_reused and _ids(disk) == _ids(mem)
    assert np.allclose(np.load(vec_path), embedder.encode(
        [d.render() for d in hash_corpus.documents]))
    sidecar = json.loads(vec_path.with_name("corpus.npy.json").read_text())
    assert sidecar["key"] == mem.vectors_key and sidecar["n"] == len(hash_corpus)
    # Another kind of index from the same vectors: no text is encoded again.
    encoded = embedder.encoded
    hnsw = _build(hash_corpus, tmp_path / "c", index_factory="HNSW16", vectors_path=vec_path)
    assert hnsw.vectors_reused and embedder.encoded == encoded
    # Vectors of another corpus are not taken for this one.
    smaller = Corpus(hash_corpus.documents[:300], name="smaller")
    r = _build(smaller, tmp_path / "d", vectors_path=vec_path)
    assert not r.vectors_reused and np.load(vec_path).shape[0] == 300


def test_vectors_file_is_read_in_chunks_with_a_seeded_training_sample(tmp_path):
    x = clustered(1000, dim=16)
    path = tmp_path / "x.npy"
    np.save(path, x)
    mm = np.load(path, mmap_mode="r")
    blocks = list(iter_chunks(mm, rows=300))
    assert [s for s, _ in blocks] == [0, 300, 600, 900]
    assert np.array_equal(np.concatenate([b for _, b in blocks]), x)
    assert np.array_equal(np.concatenate([b for _, b in iter_chunks(mm[100:], 300)]), x[100:])
    sample = training_sample(mm, 200, seed=3)
    assert np.array_equal(sample, training_sample(x, 200, seed=3))  # file or memory: same rows
    assert not np.array_equal(sample, training_sample(x, 200, seed=4))
    assert {r.tobytes() for r in sample} <= {r.tobytes() for r in x}
    assert len({r.tobytes() for r in sample}) == 200  # without replacement


# -- bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize("factory", ["IVF4096,PQ48x", "PQ7", "NotAnIndex"])
def test_bad_factory_string_is_a_value_error_naming_it_before_any_encoding(
        embedder, hash_corpus, tmp_path, factory):
    with pytest.raises(ValueError, match=f"index factory string '{factory}'"):
        _build(hash_corpus, tmp_path, index_factory=factory)
    assert embedder.encoded == 0  # failed before the corpus was encoded
    assert not (tmp_path / "index.faiss").exists()


def test_factory_too_big_for_the_corpus_is_a_value_error_naming_it(embedder, hash_corpus,
                                                                   tmp_path):
    with pytest.raises(ValueError, match=r"'IVF1024,Flat' cannot be trained on 400 vectors"):
        _build(hash_corpus, tmp_path, index_factory="IVF1024,Flat")
    assert not (tmp_path / "index.faiss").exists()
