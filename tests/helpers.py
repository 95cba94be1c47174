"""Test doubles and the one gate for tests that need real models.

The library has no fake generator; tests that check control logic (not model quality) use the
scripted one below so that thousands of states can be explored in seconds. Tests of real
behaviour use the bundled models (see test_generators, test_baselines) and must reach them
through :func:`require_model` / :func:`require_llama` / :func:`require_modules`: on a developer
machine a missing piece skips the test, under CI (``$CI`` set) it fails the run, so a broken
install can never turn the real-model tests into silent skips.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from dynakrag_lite.generators import Generation

# The bundled models `make test` installs (Makefile: SMALL_MODELS, and the smoke check's
# --require list). Only these are mandatory under CI; qwen2.5-coder-1.5b comes from the
# optional `make models-large` and is skipped when absent, CI or not.
CI_MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b")


def in_ci() -> bool:
    """True when $CI is set to anything but an explicit false (GitHub/GitLab set CI=true)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no", "off")


def missing(reason: str, required_in_ci: bool = True) -> None:
    """Skip the calling test, or fail it under CI when the missing piece is mandatory there."""
    if required_in_ci and in_ci():
        pytest.fail(f"CI must run this test, but {reason}", pytrace=False)
    pytest.skip(reason)


def load_script(name: str, folder: str = "data_scripts"):
    """Import ``<folder>/<name>.py`` (a script folder, not a package) as a module."""
    path = Path(__file__).resolve().parents[1] / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"dynakrag_script_{name}", path)
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def require_llama() -> None:
    """llama-cpp-python must be importable (a broken build still fails at import, loudly)."""
    if importlib.util.find_spec("llama_cpp") is None:
        missing("llama-cpp-python is not installed (make llama)")


def require_modules(*names: str) -> None:
    """Every named module must be importable (they are all in requirements/`make install`)."""
    absent = [n for n in names if importlib.util.find_spec(n) is None]
    if absent:
        missing(f"modules not installed: {', '.join(absent)} (make install)")


def require_model(name: str, llama: bool = True) -> None:
    """Bundled model ``name`` must be installed, and llama.cpp too unless ``llama=False``."""
    from dynakrag_lite import models
    if llama:
        require_llama()
    if not models.is_installed(name):
        missing(f"bundled model {name} is not installed: {models.install_command(name)}",
                required_in_ci=name in CI_MODELS)


class ScriptedGenerator:
    """Replies by prompt kind; ``replies`` overrides a kind (e.g. to send garbage)."""
    spec = "scripted"
    model_id = "scripted"

    def __init__(self, **replies: str):
        self.replies = {"sufficiency": "INSUFFICIENT: birthplace of the founder",
                        "rewrite": "founder of the label", "compress": "- [1] a fact\n- [2] b",
                        "answer": "Answer: Paris", **replies}
        self.calls: list[str] = []

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        user = messages[-1]["content"]
        if "contain every fact" in user:
            kind = "sufficiency"
        elif "new search query" in user:
            kind = "rewrite"
        elif "Snippets:" in user or "Facts:" in user:
            kind = "compress"
        else:
            kind = "answer"
        self.calls.append(kind)
        return Generation(self.replies[kind], len(user) // 4, 7, 0.0)


class HashEmbedder:
    """A deterministic bag-of-words sentence embedder (64 dims, normalized): enough to test
    indexes and their persistence without a model. Counts the texts it encodes."""

    dim = 64

    def __init__(self) -> None:
        self.encoded = 0

    def get_embedding_dimension(self) -> int:
        return self.dim

    def encode(self, texts, batch_size=64, show_progress_bar=False, convert_to_numpy=True,
               normalize_embeddings=True):
        self.encoded += len(texts)
        out = np.zeros((len(texts), self.dim), dtype="float32")
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1.0
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
        return out
