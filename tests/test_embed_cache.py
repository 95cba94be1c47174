"""The persistent embedding cache (embed_cache.py) and the retriever's use of it: exact replay
of earlier encode calls, lazy model loading, $DYNAKRAG_N_THREADS for torch, sharing a file."""
from __future__ import annotations

import multiprocessing as mp
import sqlite3

import numpy as np
import pytest

from dynakrag_lite import retriever as retriever_mod
from dynakrag_lite.embed_cache import EmbeddingCache, default_embed_cache_path, encode_key
from dynakrag_lite.retriever import DenseRetriever, limit_torch_threads

TEXTS = ["Who wrote the novel about the whale?",
         "Herman Melville wrote Moby-Dick, a long novel about the hunt for a white whale.",
         "Short one."]


class _FakeTorch:
    def __init__(self, n: int = 2) -> None:
        self.n, self.calls = n, []

    def get_num_threads(self) -> int:
        return self.n

    def set_num_threads(self, n: int) -> None:
        self.calls.append(n)
        self.n = n


# -- a. torch threads ------------------------------------------------------------------------
def test_n_threads_env_limits_torch_threads(monkeypatch):
    t = _FakeTorch(2)
    monkeypatch.setenv("DYNAKRAG_N_THREADS", "1")
    assert limit_torch_threads(t) == 1 and t.calls == [1] and t.n == 1


@pytest.mark.parametrize("value", [None, "", "0", "many"])
def test_torch_threads_untouched_without_a_positive_n_threads(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("DYNAKRAG_N_THREADS", raising=False)
    else:
        monkeypatch.setenv("DYNAKRAG_N_THREADS", value)
    t = _FakeTorch(2)
    assert limit_torch_threads(t) is None and t.calls == []


def test_load_embedder_applies_n_threads(monkeypatch, library_retriever):
    import torch
    before = torch.get_num_threads()
    monkeypatch.setenv("DYNAKRAG_N_THREADS", "1")
    try:
        retriever_mod.load_embedder(library_retriever.embedder_name)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


# -- b. the cache file -------------------------------------------------------------------------
def test_default_path_sits_beside_the_llm_cache_and_env_overrides_or_disables(
        monkeypatch, private_cache, tmp_path):
    from dynakrag_lite.generators.cache import default_cache_path
    assert default_embed_cache_path() == private_cache / "embeddings.sqlite"
    assert default_embed_cache_path().parent == default_cache_path().parent
    monkeypatch.setenv("DYNAKRAG_EMBED_CACHE", str(tmp_path / "e.sqlite"))
    assert default_embed_cache_path() == tmp_path / "e.sqlite"
    for off in ("off", "0", "false", "NO", "none"):
        monkeypatch.setenv("DYNAKRAG_EMBED_CACHE", off)
        assert default_embed_cache_path() is None


def test_stored_array_comes_back_bit_identical(tmp_path):
    c = EmbeddingCache(tmp_path / "e.sqlite")
    a = np.random.default_rng(0).standard_normal((3, 5)).astype("float32")
    a[0, 0] = np.float32(1e-45)  # a denormal survives too
    c.put("k", a)
    got = c.get("k")
    assert got.dtype == np.float32 and got.shape == (3, 5) and got.tobytes() == a.tobytes()
    got[0, 0] = 7  # a writable copy, not a view of the row
    assert c.get("missing") is None
    assert (c.hits, c.misses, c.writes) == (1, 1, 1)


def test_corrupt_row_is_deleted_and_counts_as_a_miss(tmp_path):
    path = tmp_path / "e.sqlite"
    c = EmbeddingCache(path)
    c.put("k", np.ones((2, 4), dtype="float32"))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE embeddings SET vectors = ? WHERE key = 'k'", (b"\0" * 32,))
    assert c.get("k") is None and c.corrupt == 1 and len(c) == 0


def test_a_file_that_is_not_sqlite_is_refused_not_overwritten(tmp_path):
    from dynakrag_lite.generators.cache import CacheError
    bad = tmp_path / "e.sqlite"
    bad.write_text("someone's notes\n" * 100)
    with pytest.raises(CacheError, match="embedding cache.*DYNAKRAG_EMBED_CACHE"):
        EmbeddingCache(bad)
    assert bad.read_text().startswith("someone's notes")


def test_key_depends_on_text_order_and_settings():
    m = {"name": "x"}
    assert encode_key(m, {}, ["a", "b"]) != encode_key(m, {}, ["b", "a"])
    assert encode_key(m, {}, ["a"]) != encode_key(m, {"normalize": False}, ["a"])
    assert encode_key(m, {}, ["a"]) != encode_key({"name": "y"}, {}, ["a"])


def _writer(path: str, start: int) -> None:
    c = EmbeddingCache(path)
    for i in range(start, start + 40):
        c.put(f"k{i}", np.full((2, 3), i, dtype="float32"))


def test_two_processes_write_one_file(tmp_path):
    path = tmp_path / "e.sqlite"
    EmbeddingCache(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), s)) for s in (0, 40)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    c = EmbeddingCache(path)
    assert len(c) == 80
    assert all(c.get(f"k{i}")[0, 0] == i for i in range(80))


# -- b/c. the retriever through the cache ----------------------------------------------------
def test_cached_encode_equals_a_fresh_encode_bit_for_bit(library_retriever):
    r = library_retriever
    fresh = r.encode(TEXTS)
    first = r.encode_cached(TEXTS)  # miss: encoded and stored
    second = r.encode_cached(TEXTS)  # hit
    assert first.tobytes() == fresh.tobytes() and second.tobytes() == fresh.tobytes()
    assert second.dtype == np.float32 and second.shape == fresh.shape


def test_same_text_in_another_call_is_encoded_as_that_call(library_retriever):
    """A text's last bits depend on the batch it is padded with, so a call is never assembled
    from rows of other calls: each call returns what a fresh encode of that call returns."""
    r = library_retriever
    r.encode_cached(TEXTS)
    for call in ([TEXTS[0]], [TEXTS[2], TEXTS[0]], TEXTS[:2]):
        assert r.encode_cached(call).tobytes() == r.encode(call).tobytes()


def test_rerun_reads_vectors_without_loading_the_embedder(library_corpus, library_retriever,
                                                        monkeypatch):
    """A second retriever over the same saved index answers repeated queries and sentence
    encodes from the cache, with the SentenceTransformer never loaded, and ranks as the
    first did."""
    queries = ["Who wrote the novel about the whale?", "Where is the library?"]
    cold = DenseRetriever(library_corpus, index_dir=library_retriever.index_dir,
                          show_progress=False)
    cold_hits = [[(h.doc.id, h.score) for h in hs] for hs in cold.search_many(queries, 3)]
    cold_vecs = cold.encode_cached(TEXTS)

    real = retriever_mod._MODELS.copy()
    monkeypatch.setattr(retriever_mod, "_MODELS", {})  # a new process: nothing loaded yet
    warm = DenseRetriever(library_corpus, index_dir=library_retriever.index_dir,
                          show_progress=False)
    assert warm.loaded_from_disk and warm._model is None
    warm_hits = [[(h.doc.id, h.score) for h in hs] for hs in warm.search_many(queries, 3)]
    assert warm.encode_cached(TEXTS).tobytes() == cold_vecs.tobytes()
    assert warm_hits == cold_hits
    assert warm._model is None and retriever_mod._MODELS == {}
    assert warm.embed_cache.hits == 2 and warm.embed_cache.misses == 0
    retriever_mod._MODELS.update(real)


def test_stand_in_embedder_never_shares_the_real_ones_rows(library_corpus, library_retriever,
                                                          monkeypatch):
    library_retriever.encode_cached(TEXTS)

    class Const:
        def encode(self, texts, **kw):
            return np.zeros((len(texts), 384), dtype="float32")

    monkeypatch.setattr(retriever_mod, "load_embedder", lambda name: Const())
    r = DenseRetriever(library_corpus, index_dir=library_retriever.index_dir,
                       show_progress=False)
    assert not r.encode_cached(TEXTS).any()  # the stand-in's vectors, not the cached real ones


def test_disabled_cache_encodes_and_writes_no_file(library_corpus, library_retriever,
                                                   monkeypatch, private_cache):
    monkeypatch.setenv("DYNAKRAG_EMBED_CACHE", "off")
    r = DenseRetriever(library_corpus, index_dir=library_retriever.index_dir,
                       show_progress=False)
    assert r.embed_cache is None
    assert r.encode_cached(TEXTS).tobytes() == r.encode(TEXTS).tobytes()
    assert not (private_cache / "embeddings.sqlite").exists()


def test_extractive_compressor_encodes_through_the_cache(library_retriever):
    from dynakrag_lite.compression import SentenceSelector
    from dynakrag_lite.pipeline import extractive_compressor
    sel = SentenceSelector(object(), meta={"use_embeddings": True,
                                           "embedder": library_retriever.embedder_name})
    assert extractive_compressor(sel, library_retriever).encode == library_retriever.encode_cached
    other = SentenceSelector(object(), meta={"use_embeddings": True, "embedder": "other-model"})
    with pytest.raises(ValueError, match="trained with embedder 'other-model'"):
        extractive_compressor(other, library_retriever)


# -- scikit-learn's OpenMP threads (the sentence selector) -----------------------------------
def test_n_threads_env_limits_openmp_only_inside_the_block(monkeypatch):
    from threadpoolctl import threadpool_info
    from dynakrag_lite.threads import openmp_limit
    import sklearn.ensemble  # noqa: F401  (loads the OpenMP runtime threadpoolctl sees)

    def omp() -> list[int]:
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "openmp"]

    outside = omp()
    monkeypatch.setenv("DYNAKRAG_N_THREADS", "1")
    with openmp_limit() as n:
        assert n == 1 and all(t == 1 for t in omp())
    assert omp() == outside
    monkeypatch.delenv("DYNAKRAG_N_THREADS")
    with openmp_limit() as n:
        assert n is None and omp() == outside


def test_selector_probabilities_do_not_depend_on_the_thread_limit(monkeypatch):
    from sklearn.ensemble import HistGradientBoostingClassifier
    from dynakrag_lite.compression import FEATURES, SentenceSelector
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, len(FEATURES)))
    y = (X[:, 0] + 0.3 * rng.standard_normal(300) > 0).astype(int)
    sel = SentenceSelector(HistGradientBoostingClassifier(max_iter=30, random_state=0).fit(X, y))
    monkeypatch.delenv("DYNAKRAG_N_THREADS", raising=False)
    free = sel.predict_proba(X)
    monkeypatch.setenv("DYNAKRAG_N_THREADS", "1")
    assert sel.predict_proba(X).tobytes() == free.tobytes()
