"""$DYNAKRAG_N_THREADS sets llama.cpp's thread count when none is given."""
import pytest

from helpers import require_model


@pytest.mark.slow
def test_env_sets_llama_threads(monkeypatch):
    require_model("smollm2-135m")  # skips when absent; fails under CI
    from dynakrag_lite.generators import models
    from dynakrag_lite.generators.llamacpp import LlamaCppGenerator
    path = models.gguf_path("smollm2-135m")
    sha = models.REGISTRY["smollm2-135m"].sha256
    monkeypatch.setenv("DYNAKRAG_N_THREADS", "1")
    assert LlamaCppGenerator(path, model_id=sha).n_threads == 1
    assert LlamaCppGenerator(path, model_id=sha, n_threads=2).n_threads == 2  # explicit wins
    monkeypatch.delenv("DYNAKRAG_N_THREADS")
    import os
    assert LlamaCppGenerator(path, model_id=sha).n_threads == (os.cpu_count() or 1)
