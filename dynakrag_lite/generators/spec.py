"""Generator spec strings (chapter 3): one string names a backend and its model, and
:func:`make_generator` builds it, wrapped in the call cache.

* ``smollm2-135m`` / ``qwen2.5-coder-0.5b`` / ``qwen2.5-coder-1.5b``: bundled GGUF models
  (:mod:`dynakrag_lite.generators.models`); ``gguf:<path>``: any local GGUF file (llama.cpp).
* ``hf:<hub-id-or-folder>[#file.gguf]``: transformers.
* ``openai:<model>@<base_url>``: any OpenAI-compatible server.

Every backend is greedy by default and counts tokens with its own tokenizer (or server)."""
from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from .base import Generator, GeneratorError
from .cache import CachedGenerator, CallCache
from .hf import TransformersGenerator, unload_hf_models
from .llamacpp import LlamaCppGenerator, unload_llamas
from .models import REGISTRY, ModelError, gguf_path
from .server import OpenAIGenerator

__all__ = ["parse_spec", "make_generator", "unload_models"]


def parse_spec(spec: str) -> tuple[str, dict]:
    """Split a spec string into (kind, arguments) without loading anything: ("bundled",
    {"name"}), ("gguf", {"path"}), ("hf", {"model", "gguf_file"}) or ("openai", {"model",
    "base_url"})."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError("empty generator spec")
    spec = spec.strip()
    if spec in REGISTRY:
        return "bundled", {"name": spec}
    kind, sep, rest = spec.partition(":")
    if sep and rest:
        if kind == "gguf":
            return "gguf", {"path": rest}
        if kind == "hf":
            model, _, gguf_file = rest.partition("#")
            if not model:
                raise ValueError(f"hf spec without a model: {spec!r}")
            return "hf", {"model": model, "gguf_file": gguf_file or None}
        if kind == "openai":
            # Model names carry no "@"; the base URL may (user:password@host).
            model, _, base_url = rest.partition("@")
            if not model:
                raise ValueError(f"openai spec without a model: {spec!r}")
            return "openai", {"model": model, "base_url": base_url or None}
    raise ValueError(
        f"unknown generator spec {spec!r}; use a bundled model ({', '.join(REGISTRY)}), "
        "gguf:<path>, hf:<hub-id-or-folder>[#file.gguf] or openai:<model>@<base_url>")


def make_generator(spec: str, cache: str | Path | None | bool | CallCache = True,
                   **kwargs: Any) -> Generator:
    """Build the generator named by ``spec`` (:func:`parse_spec`), wrapped in the call cache
    (``cache``: True = the default file, a path, a ``CallCache``, or False/None = none)."""
    kind, args = parse_spec(spec)
    gen: Generator
    if kind in ("bundled", "gguf") and cache is not False and cache is not None:
        # behind the call cache the model loads on the first miss (a cached re-run never does)
        kwargs.setdefault("lazy", True)
    if kind == "bundled":
        try:
            path = gguf_path(args["name"])
        except ModelError as e:
            raise GeneratorError(str(e)) from e
        gen = LlamaCppGenerator(path, spec=spec, model_id=REGISTRY[args["name"]].sha256, **kwargs)
    elif kind == "gguf":
        gen = LlamaCppGenerator(args["path"], spec=spec, **kwargs)
    elif kind == "hf":
        gen = TransformersGenerator(args["model"], gguf_file=args["gguf_file"], spec=spec, **kwargs)
    else:
        gen = OpenAIGenerator(args["model"], args["base_url"], spec=spec, **kwargs)

    if cache is True:
        return CachedGenerator(gen, CallCache())
    if cache is False or cache is None:
        return gen
    if isinstance(cache, CallCache):
        return CachedGenerator(gen, cache)
    return CachedGenerator(gen, CallCache(cache))


def unload_models() -> int:
    """Drop every loaded llama.cpp and transformers model (frees RAM once generators made
    earlier are dropped too); returns how many."""
    n = unload_llamas() + unload_hf_models()
    gc.collect()
    return n
