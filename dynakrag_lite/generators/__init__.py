"""One generator interface and its backends (chapter 3): chat messages in; text, token counts
and option log-probabilities out.

=================  ==========================================================================
``base``           :class:`Generation`, :class:`OptionScores`, the :class:`Generator`
                   protocol, errors, replay-only mode, time limits
``llamacpp``       :class:`LlamaCppGenerator`: bundled and ``gguf:`` models in-process
``hf``             :class:`TransformersGenerator`: ``hf:`` models in-process
``server``         :class:`OpenAIGenerator`: ``openai:<model>@<base_url>`` servers
``cache``          :class:`CallCache` (the persistent SQLite call cache), :class:`CachedGenerator`
``spec``           :func:`parse_spec`, :func:`make_generator`, :func:`unload_models`
``models``         the bundled offline models (GGUF files assembled from registry packages)
=================  ==========================================================================

The names below are the package's public face: ``from dynakrag_lite.generators import
make_generator``. Importing it is cheap: llama_cpp, torch, transformers and openai are imported
by the backends when they are used.
"""
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
