"""One generator interface and its backends (chapter 3): ``base`` (the :class:`Generator`
protocol), the backends ``llamacpp``, ``hf`` and ``server``, ``cache`` (the call cache),
``spec`` (spec strings) and ``models`` (bundled offline models). Importing this package is
cheap: each backend imports its heavy library when it is used."""
from .base import (REPLAY_ONLY_ENV, TIMEOUT_ENV, Generation, Generator, GeneratorError, Message,
                   OptionScores, ReplayMissError, approx_token_count, replay_only,
                   resolve_timeout)
from .cache import CacheError, CachedGenerator, CallCache, default_cache_path
from .hf import TransformersGenerator
from .llamacpp import LlamaCppGenerator
from .models import REGISTRY, ModelError, gguf_path, list_models
from .server import OpenAIGenerator
from .spec import make_generator, parse_spec, unload_models

__all__ = [
    "Message", "Generation", "OptionScores", "Generator", "GeneratorError", "ReplayMissError",
    "REPLAY_ONLY_ENV", "replay_only", "TIMEOUT_ENV", "resolve_timeout", "approx_token_count",
    "LlamaCppGenerator", "TransformersGenerator", "OpenAIGenerator", "CallCache", "CacheError",
    "CachedGenerator", "default_cache_path", "make_generator", "parse_spec",
    "unload_models", "REGISTRY", "ModelError", "gguf_path", "list_models",
]
