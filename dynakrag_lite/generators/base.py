"""One generator interface: chat messages in; text and token counts out.

Backends (chosen by a spec string, see :func:`make_generator`):

* ``smollm2-135m`` / ``qwen2.5-coder-0.5b`` / ``qwen2.5-coder-1.5b``: bundled GGUF models
  assembled from registry packages (:mod:`dynakrag_lite.generators.models`), run with llama.cpp.
* ``gguf:<path>``: any local GGUF file with llama.cpp.
* ``hf:<hub-id-or-folder>[#file.gguf]``: transformers (hub id where a network exists).
* ``openai:<model>@<base_url>``: any OpenAI-compatible server (vLLM, llama.cpp server,
  Ollama, OpenAI).

Every backend is greedy by default and reports prompt and completion tokens as counted by the
model's own tokenizer (or the server's ``usage`` field). :class:`CachedGenerator` wraps any of
them with the persistent SQLite call cache.

llama.cpp keeps the KV cache of the previous prompt and only evaluates the part of a new prompt
after the longest common prefix. Prompts therefore put the (shared) documents first and the
varying instruction last, and one ``Llama`` object is kept per model file for the life of the
process, so repeated :func:`make_generator` calls neither reload the weights nor lose that cache.
:class:`LlamaCppGenerator` counts what that reuse saves on its live calls (``prompt_tokens_sent``,
``prompt_tokens_evaluated``, ``last_reused_tokens``...; benchmarks/bench_prefix_reuse.py).

Every call has a time limit (``timeout`` argument, else ``$DYNAKRAG_GEN_TIMEOUT`` seconds,
else a default):

* OpenAI-compatible servers (default 120 s): the client's request timeout, with a bounded
  number of retries (``max_retries``, default 2) on connection errors and timeouts. A server
  that cannot be reached, times out or answers an error raises :class:`GeneratorError` naming
  the server URL (credentials redacted). A reply whose message content is ``null`` yields empty
  text (some servers send null for an empty completion); a reply with no ``choices`` raises.
* llama.cpp and transformers run in-process (default 600 s, so only a runaway or starved call
  is cut): a wall-clock cap that stops *decoding*. llama.cpp gets a logits processor that,
  once the deadline has passed, leaves only the end-of-generation token possible, so decoding
  ends at the next token; transformers gets ``generate(max_time=...)``. Prompt evaluation
  itself is not interrupted. The call returns the text decoded so far with
  ``Generation.truncated = True`` instead of hanging, and :class:`CachedGenerator` does not
  store truncated generations (they depend on machine speed, not on the inputs).

The heavy libraries (llama_cpp, torch, transformers, openai) are imported inside the backends,
so importing this module is cheap.
"""
from __future__ import annotations

import atexit

import os
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..storage import redact

if TYPE_CHECKING:
    from .cache import CallCache

__all__ = [
    "Message", "Generation", "Generator", "GeneratorError", "LlamaCppGenerator",
    "TransformersGenerator", "OpenAIGenerator", "CachedGenerator", "make_generator",
    "parse_spec", "approx_token_count", "unload_models", "resolve_timeout", "TIMEOUT_ENV",
]

Message = dict  # {"role": "system"|"user"|"assistant", "content": str}


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float = 0.0
    cached: bool = False
    truncated: bool = False  # stopped by the time limit, not by EOS, a stop string or max_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@runtime_checkable
class Generator(Protocol):
    """What every backend offers. ``model_id`` identifies the weights (a sha256 where known)."""

    spec: str
    model_id: str

    def generate(self, messages: list[Message], max_tokens: int = 64,
                 stop: list[str] | None = None) -> Generation: ...


class GeneratorError(RuntimeError):
    """A backend failed to load or to generate (missing package, bad file, server error)."""


REPLAY_ONLY_ENV = "DYNAKRAG_REPLAY_ONLY"


def replay_only() -> bool:
    """Whether $DYNAKRAG_REPLAY_ONLY asks for replay-only runs (1/true/yes/on)."""
    return os.environ.get(REPLAY_ONLY_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class ReplayMissError(GeneratorError):
    """A call missed the LLM call cache while $DYNAKRAG_REPLAY_ONLY (or ``evaluate
    --replay-only``) forbids generating: the run stops instead of calling the model."""


def _prompt_excerpt(messages: list[Message], limit: int = 300) -> str:
    """The question line of the last user message when it has one, else its start."""
    text = next((str(m.get("content", "")) for m in reversed(messages)
                 if m.get("role") == "user"), "")
    for line in reversed(text.splitlines()):
        if line.strip().lower().startswith("question:"):
            return line.strip()[:limit]
    text = " ".join(text.split())
    return text[:limit] + ("..." if len(text) > limit else "")


def replay_miss(spec: str, messages: list[Message], what: str = "call") -> ReplayMissError:
    return ReplayMissError(
        f"replay-only (${REPLAY_ONLY_ENV}): an LLM {what} of {spec} is not in the call cache; "
        f"prompt: {_prompt_excerpt(messages)!r}")


TIMEOUT_ENV = "DYNAKRAG_GEN_TIMEOUT"
DEFAULT_SERVER_TIMEOUT = 120.0  # seconds per request to an OpenAI-compatible server
DEFAULT_LOCAL_TIMEOUT = 600.0  # seconds per in-process call: generous, only stops runaways


def resolve_timeout(timeout: float | None, default: float) -> float:
    """``timeout`` if given, else ``$DYNAKRAG_GEN_TIMEOUT``, else ``default`` (seconds, > 0)."""
    if timeout is None:
        env = os.environ.get(TIMEOUT_ENV, "").strip()
        if env:
            try:
                timeout = float(env)
            except ValueError:
                raise ValueError(f"${TIMEOUT_ENV} must be a number of seconds, got {env!r}") \
                    from None
        else:
            timeout = default
    timeout = float(timeout)
    if not timeout > 0:
        raise ValueError(f"generation timeout must be > 0 seconds, got {timeout!r}")
    return timeout


class _DecodingMixin:
    """The ``decoding`` property every backend shares (part of the call-cache key)."""

    temperature: float
    seed: int | None

    @property
    def decoding(self) -> dict:
        """Decoding parameters that change the output (part of the call-cache key)."""
        return {"temperature": self.temperature, "seed": self.seed}


def _check_messages(messages: list[Message]) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    out = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) \
                or m.get("role") not in ("system", "user", "assistant"):
            raise ValueError(f"bad chat message: {m!r}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def _check_max_tokens(max_tokens: int) -> int:
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    return max_tokens


def approx_token_count(text: str) -> int:
    """Whitespace token count: the fallback when an OpenAI-compatible server reports no usage.

    It undercounts subword tokens (roughly 0.75 words per token for English), so figures based on
    it are marked as approximate (see :attr:`OpenAIGenerator.approximate_usage_calls`).
    """
    return len(text.split())


# ---------------------------------------------------------------------------------------------
# llama.cpp
# ---------------------------------------------------------------------------------------------

# One Llama object (plus a lock: a Llama is not thread-safe) per (file, context, threads, seed).
_LLAMA_CACHE: dict[tuple, tuple[Any, threading.Lock]] = {}
_LLAMA_CACHE_LOCK = threading.Lock()


def _close_llamas() -> None:
    """Free llama.cpp models before interpreter teardown: left to ``Llama.__del__`` at exit,
    they print 'NoneType object is not callable' tracebacks once the C bindings are gone."""
    for llm, _ in list(_LLAMA_CACHE.values()):
        try:
            llm.close()
        except Exception:  # already closed or half-initialised: nothing left to free
            pass


atexit.register(_close_llamas)


def _load_llama(path: Path, n_ctx: int, n_threads: int, seed: int,
                verbose: bool) -> tuple[Any, threading.Lock]:
    key = (str(path.resolve()), n_ctx, n_threads, seed)
    with _LLAMA_CACHE_LOCK:
        if key in _LLAMA_CACHE:
            return _LLAMA_CACHE[key]
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise GeneratorError(
                "the llama.cpp backend needs llama-cpp-python: pip install llama-cpp-python "
                f"(compiles from source on CPU machines, several minutes) [{e}]") from e
        if not path.is_file():
            raise GeneratorError(f"GGUF file not found: {path}")
        try:
            llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads,
                        n_threads_batch=n_threads, seed=seed, verbose=verbose)
        except Exception as e:  # llama_cpp raises ValueError/RuntimeError on bad files
            raise GeneratorError(f"llama.cpp could not load {path}: {e}") from e
        _EvalProbe.install(llm)
        _LLAMA_CACHE[key] = (llm, threading.Lock())
        return _LLAMA_CACHE[key]


class _EvalProbe:
    """Stands in for a ``Llama``'s ``eval`` to see how much of a prompt was really evaluated.

    ``Llama.generate`` matches the new prompt's token ids against those of the previous
    evaluation, keeps the KV cache of that prefix (less the last token when the whole prompt
    matched: it is evaluated again for fresh logits; nothing when the identical prompt's
    logits are still current), sets ``n_tokens`` to the kept length and then calls
    ``self.eval(rest)``. Reading ``n_tokens`` and ``len(rest)`` at that first call, when armed,
    gives exactly what llama.cpp kept and evaluated, without tokenizing the prompt again or
    re-implementing its matching rule. Later calls (one per decoded token) and calls outside a
    generation (sufficiency scoring) pass straight through.
    """

    warned = False  # the fallback in LlamaCppGenerator.generate warns once per process

    def __init__(self, llm: Any) -> None:
        import weakref
        self._llm = weakref.ref(llm)  # no cycle: unload_models frees the model at once
        self._eval = type(llm).eval
        self.armed = False
        self.kept: int | None = None
        self.evaluated: int | None = None

    @classmethod
    def install(cls, llm: Any) -> "_EvalProbe":
        probe = llm.__dict__.get("eval")
        if not isinstance(probe, cls):
            probe = cls(llm)
            llm.eval = probe  # an instance attribute: generate's self.eval() finds it first
        return probe

    def arm(self) -> None:
        self.armed, self.kept, self.evaluated = True, None, None

    def __call__(self, tokens: Any, *args: Any, **kwargs: Any) -> Any:
        llm = self._llm()
        if self.armed:
            self.armed = False
            self.kept, self.evaluated = int(llm.n_tokens), len(tokens)
        return self._eval(llm, tokens, *args, **kwargs)


class _Deadline:
    """llama.cpp logits processor: a no-op until the deadline, then only EOS stays possible.

    ``create_chat_completion`` takes no stopping criteria (its chat handler sets its own), but
    it passes ``logits_processor`` to the sampler, which calls this once per decoded token.
    """

    def __init__(self, seconds: float, eos: int) -> None:
        self.deadline = time.monotonic() + seconds
        self.eos = eos
        self.hit = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.hit or time.monotonic() >= self.deadline:
            self.hit = True
            import numpy as np
            keep = scores[self.eos]
            scores[:] = -np.inf
            scores[self.eos] = max(float(keep), 0.0)
        return scores


class LlamaCppGenerator(_DecodingMixin):
    """A GGUF model run by llama.cpp (llama-cpp-python), greedy by default.

    The chat template comes from the GGUF metadata. Token counts are llama.cpp's ``usage``.
    ``n_ctx=4096`` holds a prompt of 12 retrieved paragraphs plus the answer. ``timeout``
    (seconds; default ``$DYNAKRAG_GEN_TIMEOUT`` or 600) caps decoding wall-clock time: past it
    the model is made to emit end-of-generation, and the result is marked ``truncated``.

    ``lazy=True`` (what :func:`make_generator` passes when the generator is wrapped in the
    call cache) loads the model on its first live use (:attr:`llama`), not in the constructor:
    a re-run whose calls all hit the cache never loads it. The file must exist either way.

    Prefix reuse, per live call of this generator (a :class:`CachedGenerator` hit never gets
    here, so replays leave them alone; :class:`Generation` and cache keys are unchanged):

    * ``last_reused_tokens``: prompt tokens whose KV cache llama.cpp kept from its previous
      evaluation (the longest common prefix of token ids, less the one token it re-evaluates
      when the whole prompt matched); ``last_evaluated_tokens``: prompt tokens it evaluated.
      Their sum is the call's ``prompt_tokens``. None before the first call.
    * running totals since construction or :meth:`reset_counters`: ``live_calls``,
      ``prompt_tokens_sent``, ``prompt_tokens_evaluated`` (``prompt_tokens_reused`` = their
      difference), ``completion_tokens_generated``, ``generation_seconds``; :meth:`counters`
      returns them as a dict, so a caller can difference two snapshots.

    The ``Llama`` object is shared by generators on the same file; each generator counts its
    own calls. Option scoring (:func:`dynakrag_lite.sufficiency.score_options`) evaluates on
    the ``Llama`` directly and is not counted.
    """

    backend = "llama.cpp"

    def __init__(self, model_path: str | Path, *, spec: str | None = None,
                 model_id: str | None = None, n_ctx: int = 4096, n_threads: int | None = None,
                 seed: int = 0, temperature: float = 0.0, verbose: bool = False,
                 timeout: float | None = None, lazy: bool = False) -> None:
        self.model_path = Path(model_path).expanduser()
        self.timeout = resolve_timeout(timeout, DEFAULT_LOCAL_TIMEOUT)
        self.spec = spec or f"gguf:{self.model_path}"
        self.n_ctx = n_ctx
        # $DYNAKRAG_N_THREADS overrides the default (1 is much faster when several processes
        # share few cores: llama.cpp's threads spin-wait on each other).
        self.n_threads = n_threads or int(os.environ.get("DYNAKRAG_N_THREADS") or 0) \
            or os.cpu_count() or 1
        self.seed = seed
        self.temperature = float(temperature)
        if model_id is None:
            if not self.model_path.is_file():
                raise GeneratorError(f"GGUF file not found: {self.model_path}")
            from .models import file_sha256, models_dir
            model_id = file_sha256(self.model_path, sidecar_dir=models_dir())
        self.model_id = model_id
        self.verbose = verbose
        self._llama: Any = None
        self._llama_lock: threading.Lock | None = None
        if lazy:
            if not self.model_path.is_file():  # fail now, as an eager load would
                raise GeneratorError(f"GGUF file not found: {self.model_path}")
        else:
            self._load()
        self.last_reused_tokens: int | None = None
        self.last_evaluated_tokens: int | None = None
        self.reset_counters()

    def _load(self) -> None:
        if self._llama is None:
            self._llama, self._llama_lock = _load_llama(self.model_path, self.n_ctx,
                                                        self.n_threads, self.seed, self.verbose)

    @property
    def loaded(self) -> bool:
        """Whether this generator holds its ``Llama`` yet (``lazy=True`` defers it)."""
        return self._llama is not None

    @property
    def llama(self) -> Any:
        """The shared ``Llama`` object, loaded on first use when the generator is lazy."""
        self._load()
        return self._llama

    @property
    def _lock(self) -> threading.Lock:
        self._load()
        return self._llama_lock

    def reset_counters(self) -> None:
        """Zero the running totals (the ``last_*`` figures stay)."""
        self.live_calls = 0
        self.prompt_tokens_sent = 0
        self.prompt_tokens_evaluated = 0
        self.completion_tokens_generated = 0
        self.generation_seconds = 0.0

    @property
    def prompt_tokens_reused(self) -> int:
        """Prompt tokens served from llama.cpp's KV cache over the counted calls."""
        return self.prompt_tokens_sent - self.prompt_tokens_evaluated

    def counters(self) -> dict:
        """A snapshot of the running totals (see the class docstring)."""
        return {"live_calls": self.live_calls, "prompt_tokens_sent": self.prompt_tokens_sent,
                "prompt_tokens_evaluated": self.prompt_tokens_evaluated,
                "prompt_tokens_reused": self.prompt_tokens_reused,
                "completion_tokens_generated": self.completion_tokens_generated,
                "generation_seconds": self.generation_seconds}

    def generate(self, messages: list[Message], max_tokens: int = 64,
                 stop: list[str] | None = None) -> Generation:
        msgs = _check_messages(messages)
        _check_max_tokens(max_tokens)
        with self._lock:
            t0 = time.perf_counter()  # the deadline counts from here, not from waiting
            deadline = _Deadline(self.timeout, int(self.llama.token_eos()))
            # Armed under the lock: the shared Llama's first eval of this call is the prompt's.
            probe = _EvalProbe.install(self.llama)
            probe.arm()
            try:
                # temperature 0 selects llama.cpp's greedy sampler; repeat_penalty 1 keeps it
                # plain argmax.
                out = self.llama.create_chat_completion(
                    messages=msgs, max_tokens=max_tokens, stop=list(stop) if stop else None,
                    temperature=self.temperature, repeat_penalty=1.0, seed=self.seed,
                    logits_processor=[deadline])
            except Exception as e:
                raise GeneratorError(f"llama.cpp generation failed ({self.spec}): {e}") from e
            finally:
                probe.armed = False
            kept, evaluated = probe.kept, probe.evaluated
        seconds = time.perf_counter() - t0
        try:
            text = out["choices"][0]["message"]["content"] or ""
            usage = out["usage"]
            n_prompt = int(usage["prompt_tokens"])
            n_completion = int(usage["completion_tokens"])
        except (KeyError, IndexError, TypeError) as e:
            raise GeneratorError(f"unexpected llama.cpp response ({self.spec}): {out!r}") from e
        if evaluated is None or kept is None or kept + evaluated != n_prompt:
            # The probe did not see the prompt's evaluation as expected (another
            # llama-cpp-python version?): count the whole prompt as evaluated, never a saving
            # that was not observed, and say so once.
            if not _EvalProbe.warned:
                _EvalProbe.warned = True
                warnings.warn(f"{self.spec}: could not observe llama.cpp's prompt evaluation "
                              f"(kept={kept}, evaluated={evaluated}, prompt={n_prompt}); "
                              "prefix reuse is counted as 0", RuntimeWarning, stacklevel=2)
            kept, evaluated = 0, n_prompt
        self.last_reused_tokens, self.last_evaluated_tokens = kept, evaluated
        self.live_calls += 1
        self.prompt_tokens_sent += n_prompt
        self.prompt_tokens_evaluated += evaluated
        self.completion_tokens_generated += n_completion
        self.generation_seconds += seconds
        if deadline.hit:
            warnings.warn(f"{self.spec}: generation stopped at the {self.timeout:g} s time "
                          f"limit (${TIMEOUT_ENV}); the text is truncated",
                          RuntimeWarning, stacklevel=2)
        return Generation(text=text, prompt_tokens=n_prompt, completion_tokens=n_completion,
                          seconds=seconds, truncated=deadline.hit)

    def __repr__(self) -> str:
        return f"LlamaCppGenerator({self.spec!r}, n_ctx={self.n_ctx}, n_threads={self.n_threads})"


def unload_models() -> int:
    """Drop every loaded llama.cpp and transformers model (frees RAM); returns how many.

    Generators created earlier keep working on their own reference until they are dropped too.
    """
    with _LLAMA_CACHE_LOCK, _HF_CACHE_LOCK:
        n = len(_LLAMA_CACHE) + len(_HF_CACHE)
        _LLAMA_CACHE.clear()
        _HF_CACHE.clear()
    import gc
    gc.collect()
    return n


# ---------------------------------------------------------------------------------------------
# transformers
# ---------------------------------------------------------------------------------------------

_HF_CACHE: dict[tuple, tuple[Any, Any, threading.Lock]] = {}
_HF_CACHE_LOCK = threading.Lock()


def _load_hf(model: str, gguf_file: str | None, device: str) -> tuple[Any, Any, threading.Lock]:
    key = (model, gguf_file, device)
    with _HF_CACHE_LOCK:
        if key in _HF_CACHE:
            return _HF_CACHE[key]
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:
            raise GeneratorError(
                f"the transformers backend needs torch and transformers [{e}]") from e
        kw = {"gguf_file": gguf_file} if gguf_file else {}
        try:
            tok = AutoTokenizer.from_pretrained(model, **kw)
            lm = AutoModelForCausalLM.from_pretrained(model, **kw)
        except Exception as e:  # OSError (not found / offline), ImportError (gguf missing), ...
            extra = " (GGUF loading needs the gguf and accelerate packages)" if gguf_file else ""
            raise GeneratorError(f"transformers could not load {model!r}"
                                 f"{' file ' + gguf_file if gguf_file else ''}{extra}: {e}") from e
        lm.to(device)
        lm.eval()
        _HF_CACHE[key] = (tok, lm, threading.Lock())
        return _HF_CACHE[key]


class TransformersGenerator(_DecodingMixin):
    """A causal LM run by transformers: a hub id, a local folder, or a GGUF file in a folder.

    GGUF weights are dequantised to fp32 on load (RAM about 9x the GGUF size for the 4-bit
    files). The prompt is the tokenizer's chat template; decoding is greedy (``do_sample=False``)
    unless ``temperature > 0``. Token counts come from the tokenizer: prompt = template tokens,
    completion = generated tokens up to and excluding the end-of-sequence token. ``timeout``
    (seconds; default ``$DYNAKRAG_GEN_TIMEOUT`` or 600) is passed as ``generate(max_time=...)``:
    decoding stops once it has passed and the result is marked ``truncated``.
    """

    backend = "transformers"

    def __init__(self, model: str, *, gguf_file: str | None = None, spec: str | None = None,
                 device: str | None = None, temperature: float = 0.0, seed: int = 0,
                 timeout: float | None = None) -> None:
        self.timeout = resolve_timeout(timeout, DEFAULT_LOCAL_TIMEOUT)
        local = Path(model).expanduser()
        # A folder is identified by its absolute path, so the cache key does not depend on cwd.
        self.model = str(local.resolve()) if local.is_dir() else model
        self.gguf_file = gguf_file
        self.spec = spec or f"hf:{model}" + (f"#{gguf_file}" if gguf_file else "")
        self.model_id = self.model + (f"#{gguf_file}" if gguf_file else "")
        self.temperature = float(temperature)
        self.seed = seed
        if device is None:
            import torch
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        self.tokenizer, self.model_obj, self._lock = _load_hf(self.model, gguf_file, device)
        if not getattr(self.tokenizer, "chat_template", None):
            raise GeneratorError(f"{self.model_id} has no chat template; use an instruct model")

    def generate(self, messages: list[Message], max_tokens: int = 64,
                 stop: list[str] | None = None) -> Generation:
        import torch

        msgs = _check_messages(messages)
        _check_max_tokens(max_tokens)
        tok, lm = self.tokenizer, self.model_obj
        with self._lock:
            t0 = time.perf_counter()
            try:
                prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
                # The template already carries any BOS token.
                enc = tok(prompt, return_tensors="pt", add_special_tokens=False).to(self.device)
                n_prompt = int(enc["input_ids"].shape[1])
                kw: dict[str, Any] = {"max_new_tokens": max_tokens, "max_time": self.timeout}
                if self.temperature > 0:
                    torch.manual_seed(self.seed)
                    kw.update(do_sample=True, temperature=self.temperature, top_k=0, top_p=1.0)
                else:
                    kw.update(do_sample=False, temperature=None, top_k=None, top_p=None)
                if stop:
                    kw.update(stop_strings=list(stop), tokenizer=tok)
                pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
                with torch.inference_mode():
                    out = lm.generate(**enc, pad_token_id=pad, **kw)
            except Exception as e:
                raise GeneratorError(f"transformers generation failed ({self.spec}): {e}") from e
        seconds = time.perf_counter() - t0
        new = out[0, n_prompt:].tolist()
        eos = lm.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
        ended = False  # stopped by EOS, a stop string or max_tokens: not by the clock
        for i, t in enumerate(new):
            if t in eos_ids:
                new, ended = new[:i], True
                break
        text = tok.decode(new, skip_special_tokens=True)
        if stop:  # generation halts *after* the stop string; callers expect it cut off
            cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
            if cut >= 0:
                text, ended = text[:cut], True
        truncated = not ended and len(new) < max_tokens and seconds >= self.timeout
        if truncated:
            warnings.warn(f"{self.spec}: generation stopped at the {self.timeout:g} s time limit "
                          f"(${TIMEOUT_ENV}); the text is truncated", RuntimeWarning,
                          stacklevel=2)
        return Generation(text=text, prompt_tokens=n_prompt, completion_tokens=len(new),
                          seconds=seconds, truncated=truncated)

    def __repr__(self) -> str:
        return f"TransformersGenerator({self.spec!r}, device={self.device!r})"


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible servers
# ---------------------------------------------------------------------------------------------

class OpenAIGenerator(_DecodingMixin):
    """Any server speaking the OpenAI chat-completions API (vLLM, llama.cpp server, Ollama...).

    The API key is ``OPENAI_API_KEY`` or ``"none"`` (local servers ignore it). Token counts come
    from the response's ``usage``. A server that omits ``usage`` gets whitespace-token estimates
    (:func:`approx_token_count`); every such call increments :attr:`approximate_usage_calls`,
    sets :attr:`last_usage_approximate` and warns once, so reports can flag the figures.

    ``timeout`` (seconds per request; default ``$DYNAKRAG_GEN_TIMEOUT`` or 120) and
    ``max_retries`` (connection errors, timeouts, 408/429/5xx; default 2) bound a call to about
    ``(max_retries + 1) * timeout`` plus the client's short back-off. Failures raise
    :class:`GeneratorError` naming the server URL with any credentials redacted.
    """

    backend = "openai"

    def __init__(self, model: str, base_url: str | None = None, *, api_key: str | None = None,
                 spec: str | None = None, temperature: float = 0.0, seed: int | None = None,
                 timeout: float | None = None, max_retries: int = 2) -> None:
        try:
            import openai
        except ImportError as e:
            raise GeneratorError(f"the OpenAI backend needs the openai package: "
                                 f"pip install openai [{e}]") from e
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        self.timeout = resolve_timeout(timeout, DEFAULT_SERVER_TIMEOUT)
        self.max_retries = max_retries
        self.model = model
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.spec = spec or f"openai:{model}@{self.base_url}"
        self.model_id = f"{model}@{self.base_url}"
        self.temperature = float(temperature)
        self.seed = seed
        self.approximate_usage_calls = 0
        self.last_usage_approximate = False
        self._warned = False
        self._openai = openai
        self.client = openai.OpenAI(
            base_url=self.base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY") or "none",
            timeout=self.timeout, max_retries=max_retries)

    def generate(self, messages: list[Message], max_tokens: int = 64,
                 stop: list[str] | None = None) -> Generation:
        msgs = _check_messages(messages)
        _check_max_tokens(max_tokens)
        kw: dict[str, Any] = {"model": self.model, "messages": msgs, "max_tokens": max_tokens,
                              "temperature": self.temperature}
        if stop:
            kw["stop"] = list(stop)
        if self.seed is not None:
            kw["seed"] = self.seed
        t0 = time.perf_counter()
        url = redact(self.base_url)
        tries = f"{self.max_retries + 1} attempt{'s' if self.max_retries else ''}"
        openai = self._openai
        try:
            resp = self.client.chat.completions.create(**kw)
        except openai.APITimeoutError as e:  # (a subclass of APIConnectionError: test first)
            raise GeneratorError(
                f"OpenAI-compatible call failed: {url} did not answer within {self.timeout:g} s "
                f"({tries}; raise ${TIMEOUT_ENV} or timeout= for slow servers)") from e
        except openai.APIConnectionError as e:
            raise GeneratorError(
                f"OpenAI-compatible call failed: cannot connect to {url} ({tries}): "
                f"{redact(str(e.__cause__ or e))}. Is the server running at that address?"
            ) from e
        except openai.APIStatusError as e:
            raise GeneratorError(f"OpenAI-compatible call failed: {url} answered HTTP "
                                 f"{e.status_code}: {redact(str(e))}") from e
        except openai.OpenAIError as e:
            raise GeneratorError(f"OpenAI-compatible call failed ({url}): {redact(str(e))}") \
                from e
        seconds = time.perf_counter() - t0
        choices = getattr(resp, "choices", None)
        if not choices:
            raise GeneratorError(f"OpenAI-compatible call failed: {url} returned no choices "
                                 f"for model {self.model!r} (empty 'choices' in the response)")
        message = getattr(choices[0], "message", None)
        # A null content (some servers send it for an empty completion) is empty text.
        text = getattr(message, "content", None) or ""
        if not isinstance(text, str):
            raise GeneratorError(f"OpenAI-compatible call failed: {url} returned non-text "
                                 f"content {text!r}")
        usage = getattr(resp, "usage", None)
        if usage is not None and usage.prompt_tokens is not None \
                and usage.completion_tokens is not None:
            self.last_usage_approximate = False
            return Generation(text=text, prompt_tokens=int(usage.prompt_tokens),
                              completion_tokens=int(usage.completion_tokens), seconds=seconds)
        self.approximate_usage_calls += 1
        self.last_usage_approximate = True
        if not self._warned:
            self._warned = True
            warnings.warn(f"{self.base_url} reports no token usage; token counts are "
                          "whitespace-token approximations", RuntimeWarning, stacklevel=2)
        return Generation(
            text=text,
            prompt_tokens=sum(approx_token_count(m["content"]) for m in msgs),
            completion_tokens=approx_token_count(text), seconds=seconds)

    def __repr__(self) -> str:
        return f"OpenAIGenerator({self.spec!r})"


# ---------------------------------------------------------------------------------------------
# cache wrapper and factory
# ---------------------------------------------------------------------------------------------

class CachedGenerator:
    """Wraps a generator with a :class:`~dynakrag_lite.generators.cache.CallCache`.

    The key covers the backend, ``model_id``, the messages, ``max_tokens``, ``stop`` and the
    inner generator's ``decoding`` parameters. A hit returns the stored text and token counts
    with ``cached=True`` and ``seconds`` = the time the lookup took. A miss while
    $DYNAKRAG_REPLAY_ONLY is set raises :class:`ReplayMissError` instead of generating. A
    generation cut by the time limit (``truncated``) is returned but not stored: it reflects
    machine speed.
    """

    def __init__(self, inner: Generator, cache: "CallCache") -> None:
        self.inner = inner
        self.cache = cache
        self.spec = inner.spec
        self.model_id = inner.model_id
        self.backend = getattr(inner, "backend", type(inner).__name__)

    def key(self, messages: list[Message], max_tokens: int = 64,
            stop: list[str] | None = None) -> str:
        from .cache import make_key
        return make_key(self.backend, self.model_id, _check_messages(messages),
                        max_tokens=max_tokens, stop=list(stop) if stop else None,
                        **getattr(self.inner, "decoding", {}))

    def generate(self, messages: list[Message], max_tokens: int = 64,
                 stop: list[str] | None = None) -> Generation:
        t0 = time.perf_counter()
        k = self.key(messages, max_tokens, stop)
        hit = self.cache.get(k)
        if hit is not None:
            return Generation(text=hit["text"], prompt_tokens=hit["prompt_tokens"],
                              completion_tokens=hit["completion_tokens"],
                              seconds=time.perf_counter() - t0, cached=True)
        if replay_only():
            raise replay_miss(self.spec, messages)
        g = self.inner.generate(messages, max_tokens=max_tokens, stop=stop)
        if not getattr(g, "truncated", False):
            self.cache.put(k, g.text, g.prompt_tokens, g.completion_tokens, g.seconds)
        return g

    def __repr__(self) -> str:
        return f"CachedGenerator({self.inner!r}, {self.cache!r})"


def parse_spec(spec: str) -> tuple[str, dict]:
    """Split a spec string into (kind, arguments) without loading anything.

    ``smollm2-135m`` -> ("bundled", {"name"}); ``gguf:<path>`` -> ("gguf", {"path"});
    ``hf:<id-or-folder>[#file.gguf]`` -> ("hf", {"model", "gguf_file"});
    ``openai:<model>[@<base_url>]`` -> ("openai", {"model", "base_url"}).
    """
    from .models import REGISTRY

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


def make_generator(spec: str, cache: "str | Path | None | bool | CallCache" = True,
                   **kwargs: Any) -> Generator:
    """Build the generator named by ``spec`` (see :func:`parse_spec`), wrapped in the call cache.

    ``cache``: True = the default cache file, a path = that file, an existing ``CallCache``,
    False or None = no cache. ``kwargs`` go to the backend (``n_ctx``, ``temperature``, ...).
    """
    from .cache import CallCache

    kind, args = parse_spec(spec)
    gen: Generator
    if kind in ("bundled", "gguf") and cache is not False and cache is not None:
        # Behind the call cache the model is loaded on the first miss, not here: a re-run
        # whose calls are all cached never loads it.
        kwargs.setdefault("lazy", True)
    if kind == "bundled":
        from .models import REGISTRY, ModelError, gguf_path
        try:
            path = gguf_path(args["name"])
        except ModelError as e:
            raise GeneratorError(str(e)) from e
        gen = LlamaCppGenerator(path, spec=spec, model_id=REGISTRY[args["name"]].sha256, **kwargs)
    elif kind == "gguf":
        gen = LlamaCppGenerator(args["path"], spec=spec, **kwargs)
    elif kind == "hf":
        gen = TransformersGenerator(args["model"], gguf_file=args["gguf_file"], spec=spec,
                                    **kwargs)
    else:
        gen = OpenAIGenerator(args["model"], args["base_url"], spec=spec, **kwargs)

    if cache is True:
        return CachedGenerator(gen, CallCache())
    if cache is False or cache is None:
        return gen
    if isinstance(cache, CallCache):
        return CachedGenerator(gen, cache)
    return CachedGenerator(gen, CallCache(cache))
