"""Lazy model loading for warm re-runs: the llama.cpp model is loaded on the first call that
misses the LLM call cache, the embedder on the first encode that misses the embedding cache;
a cold run then a warm run of the same experiment give identical rows, and the warm run loads
neither model."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import require_model, untimed

REPO = Path(__file__).resolve().parents[1]
MSGS = [{"role": "user", "content": "Name one colour. Answer in one word."}]


@pytest.fixture()
def fresh_llamas(monkeypatch):
    """An empty table of loaded Llama objects for the test (a new process, as far as the
    generators can tell); the session's loaded models are left alone."""
    from dynakrag_lite.generators import llamacpp
    monkeypatch.setattr(llamacpp, "_LLAMA_CACHE", {})
    return llamacpp._LLAMA_CACHE


@pytest.mark.slow
def test_cache_hit_never_loads_the_llama_model(tmp_path, fresh_llamas):
    require_model("smollm2-135m")
    from dynakrag_lite.generators.spec import make_generator
    cache = tmp_path / "calls.sqlite"
    cold = make_generator("smollm2-135m", cache=cache)
    assert not cold.inner.loaded and not fresh_llamas  # made lazily behind the cache
    first = cold.generate(MSGS, max_tokens=8)  # a miss: loads, generates, stores
    assert cold.inner.loaded and cold.inner.counters()["live_calls"] == 1

    fresh_llamas.clear()
    warm = make_generator("smollm2-135m", cache=cache)
    again = warm.generate(MSGS, max_tokens=8)
    assert again.cached and again.text == first.text
    assert not warm.inner.loaded and not fresh_llamas
    assert warm.inner.counters()["live_calls"] == 0  # counters work without a model
    warm.generate(MSGS, max_tokens=9)  # another call: a miss loads the model now
    assert warm.inner.loaded and warm.inner.counters()["live_calls"] == 1


@pytest.mark.slow
def test_generator_made_directly_or_without_a_cache_loads_at_once(fresh_llamas):
    require_model("smollm2-135m")
    from dynakrag_lite.generators import models
    from dynakrag_lite.generators.llamacpp import LlamaCppGenerator
    from dynakrag_lite.generators.spec import make_generator
    path, sha = models.gguf_path("smollm2-135m"), models.REGISTRY["smollm2-135m"].sha256
    assert LlamaCppGenerator(path, model_id=sha).loaded
    assert make_generator("smollm2-135m", cache=False).loaded


def test_lazy_generator_still_refuses_a_missing_file_at_once(tmp_path):
    from dynakrag_lite.generators.base import GeneratorError
    from dynakrag_lite.generators.llamacpp import LlamaCppGenerator
    with pytest.raises(GeneratorError, match="GGUF file not found"):
        LlamaCppGenerator(tmp_path / "absent.gguf", model_id="x", lazy=True)


@pytest.mark.slow
def test_option_scoring_cache_hit_does_not_load_the_model(tmp_path, fresh_llamas):
    require_model("smollm2-135m")
    from dynakrag_lite.generators.cache import canonical_json
    from dynakrag_lite.generators.spec import make_generator
    from dynakrag_lite.sufficiency import score_options
    gen = make_generator("smollm2-135m", cache=tmp_path / "calls.sqlite")
    stored = {"logprobs": {"Red": -0.5, "Blue": -1.5}, "method": "first_token",
              "n_tokens": {"Red": 1, "Blue": 1}}
    gen.cache.put(gen.option_key(MSGS, ["Red", "Blue"], "auto"), canonical_json(stored), 12, 1,
                  0.0)
    sc = score_options(gen, MSGS, ["Red", "Blue"])
    assert sc.cached and sc.logprobs == stored["logprobs"] and sc.prompt_tokens == 12
    assert not gen.inner.loaded and not fresh_llamas


# -- a whole experiment, cold then warm, in fresh processes ----------------------------------
DRIVER = """
import json, sys
from dynakrag_lite import retriever
from dynakrag_lite.experiments import cli
from dynakrag_lite.generators import llamacpp
code = cli.main(sys.argv[1:])
print(json.dumps({"code": code, "embedder_loaded": bool(retriever._MODELS),
                  "llama_loaded": bool(llamacpp._LLAMA_CACHE)}))
"""


def _run(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", DRIVER, *args], cwd=REPO, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-3000:]
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr[-3000:]}


def _rows(run: Path) -> list[dict]:
    return [untimed(json.loads(line)) for line in
            (run / "predictions.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fixed_k", "uniform_extractive"])
def test_cold_then_warm_run_identical_rows_and_no_model_loaded(method, tmp_path,
                                                               private_cache,
                                                               library_questions,
                                                               library_retriever):
    """The embedded library with SmolLM2: the first run fills the LLM and embedding caches
    (this test's own, empty at the start), the second replays them: same rows (all but the
    wall-clock seconds), and neither the llama.cpp model nor the embedder is loaded."""
    require_model("smollm2-135m")
    args = ["evaluate", "--data", "library", "--generator", "smollm2-135m", "--limit", "3"]
    if method == "fixed_k":
        args += ["--method", "fixed_k", "--fixed-k", "3"]
    else:
        from dynakrag_lab.studies.selector import train_sentence_selector
        from dynakrag_lite.data.sources import split_questions
        train, _ = split_questions(library_questions, min(100, len(library_questions) // 2), 0)
        sel = train_sentence_selector(train[:20], library_retriever, k_docs=6)  # as the CLI splits
        path = sel.save(tmp_path / "selector.joblib")
        args += ["--method", "uniform", "--compressor", "extractive", "--selector", str(path),
                 "--doc-chars", "300"]
    cold = _run(args + ["--out", str(tmp_path / "cold")])
    assert cold["code"] == 0, cold["stderr"]
    assert cold["llama_loaded"] and cold["embedder_loaded"]
    assert (private_cache / "embeddings.sqlite").exists()
    warm = _run(args + ["--out", str(tmp_path / "warm")])
    assert warm["code"] == 0, warm["stderr"]
    assert not warm["llama_loaded"] and not warm["embedder_loaded"]
    assert _rows(tmp_path / "warm") == _rows(tmp_path / "cold")
