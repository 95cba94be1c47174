"""The llama.cpp backend (chapter 3): a GGUF model run in-process by llama-cpp-python.

llama.cpp reuses the KV cache of the previous prompt's longest common prefix, so prompts put
the shared documents first and one ``Llama`` object is kept per model file for the process.
The time limit (default 600 s) is a logits processor that, past the deadline, leaves only
end-of-generation possible: the text so far comes back with ``truncated=True``."""
from __future__ import annotations

import atexit
import os
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .base import (DEFAULT_LOCAL_TIMEOUT, TIMEOUT_ENV, DecodingMixin, Generation, GeneratorError,
                   Message, OptionScores, check_max_tokens, check_messages, first_token_scores,
                   log_softmax, option_tokens, resolve_timeout, scoring_mode)
from .models import file_sha256, models_dir

__all__ = ["LlamaCppGenerator", "check_gguf", "unload_llamas"]

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
            from llama_cpp import Llama  # heavy optional dependency
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


def check_gguf(path: Path) -> None:
    """GeneratorError naming ``path`` unless it starts with the magic ``GGUF``: a lazy
    generator would otherwise take any file and fail on every question of a run."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except FileNotFoundError:
        raise GeneratorError(f"GGUF file not found: {path}") from None
    except OSError as e:
        raise GeneratorError(f"cannot read the GGUF file {path} ({e.strerror or e})") from None
    if magic != b"GGUF":
        raise GeneratorError(f"{path} is not a GGUF model file (it does not start with "
                             f"'GGUF' but with {magic!r}); give a .gguf model")


class _EvalProbe:
    """Stands in for a ``Llama``'s ``eval`` to see how much of a prompt was really evaluated:
    ``Llama.generate`` sets ``n_tokens`` to the kept prefix and calls ``self.eval(rest)``, so
    reading both at that first call, when armed, needs no copy of llama.cpp's matching rule."""

    warned = False  # the fallback in LlamaCppGenerator.generate warns once per process

    def __init__(self, llm: Any) -> None:
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
    """llama.cpp logits processor (``create_chat_completion`` takes no stopping criteria): a
    no-op until the deadline, then only EOS stays possible."""

    def __init__(self, seconds: float, eos: int) -> None:
        self.deadline = time.monotonic() + seconds
        self.eos = eos
        self.hit = False

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if self.hit or time.monotonic() >= self.deadline:
            self.hit = True
            keep = scores[self.eos]
            scores[:] = -np.inf
            scores[self.eos] = max(float(keep), 0.0)
        return scores


class LlamaCppGenerator(DecodingMixin):
    """A GGUF model run by llama.cpp, greedy by default; ``n_ctx=4096`` holds 12 paragraphs
    plus the answer. ``lazy=True`` (behind the call cache) loads the model on its first live
    call. ``last_reused_tokens`` / ``last_evaluated_tokens`` and :meth:`counters` measure prefix
    reuse (benchmarks/bench_prefix_reuse.py)."""

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
        check_gguf(self.model_path)  # a missing or foreign file fails here, lazy or not
        if model_id is None:
            model_id = file_sha256(self.model_path, sidecar_dir=models_dir())
        self.model_id = model_id
        self.verbose = verbose
        self._llama: Any = None
        self._llama_lock: threading.Lock | None = None
        if not lazy:
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
        msgs = check_messages(messages)
        check_max_tokens(max_tokens)
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
            # Not observed as expected (another llama-cpp-python?): never count a saving
            # that was not seen.
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

    def option_logprobs(self, messages: list[Message], options: Sequence[str],
                        mode: str = "auto") -> OptionScores:
        """Log-probabilities of each reply option after the chat-templated prompt (see
        :class:`~dynakrag_lite.generators.base.Generator`), reusing the KV cache's prefix."""
        msgs = check_messages(list(messages))
        t0 = time.perf_counter()
        llm = self.llama
        with self._lock:
            text, add_bos, ptoks = _llama_prompt(llm, msgs)

            def tokenize(s: str, standalone: bool = False) -> list[int]:
                return list(llm.tokenize(s.encode("utf-8"),
                                         add_bos=False if standalone else add_bos,
                                         special=not standalone))
            opt = {o: option_tokens(tokenize, text, ptoks, o) for o in options}
            mode = scoring_mode(mode, opt)
            lp = _llama_eval_last(llm, ptoks)
            if mode == "first_token":
                return first_token_scores(lp, opt, len(ptoks), time.perf_counter() - t0)
            out, counts = {}, {}
            for o, toks in opt.items():
                total, ctx = 0.0, list(ptoks)
                for i, t in enumerate(toks):
                    step = lp if i == 0 else _llama_eval_last(llm, ctx)
                    total += float(step[t])
                    ctx.append(t)
                out[o], counts[o] = total, len(toks)
        return OptionScores(out, len(ptoks), time.perf_counter() - t0, False, "sequence", counts)

    def __repr__(self) -> str:
        return f"LlamaCppGenerator({self.spec!r}, n_ctx={self.n_ctx}, n_threads={self.n_threads})"


def unload_llamas() -> int:
    """Drop every loaded llama.cpp model; returns how many (``spec.unload_models``)."""
    with _LLAMA_CACHE_LOCK:
        n = len(_LLAMA_CACHE)
        _LLAMA_CACHE.clear()
    return n


# -- option scoring on a Llama ---------------------------------------------------------------
def _llama_formatter(llm: Any):
    """The chat formatter ``create_chat_completion`` would use (same prompt, same tokens)."""
    from llama_cpp import llama_chat_format  # heavy optional dependency
    handler = llm.chat_handler or llm._chat_handlers.get(llm.chat_format) \
        or llama_chat_format.get_chat_completion_handler(llm.chat_format)
    code = getattr(handler, "__code__", None)
    if code is not None and "chat_formatter" in code.co_freevars and handler.__closure__:
        return handler.__closure__[code.co_freevars.index("chat_formatter")].cell_contents
    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        raise GeneratorError(f"cannot find the chat template of {llm.model_path}")
    eos, bos = llm.token_eos(), llm.token_bos()
    return llama_chat_format.Jinja2ChatFormatter(
        template=template,
        eos_token=llm._model.token_get_text(eos) if eos != -1 else "",
        bos_token=llm._model.token_get_text(bos) if bos != -1 else "")


def _llama_prompt(llm: Any, msgs: list[dict]) -> tuple[str, bool, list[int]]:
    result = _llama_formatter(llm)(messages=msgs)
    add_bos = not result.added_special
    toks = llm.tokenize(result.prompt.encode("utf-8"), add_bos=add_bos, special=True)
    return result.prompt, add_bos, list(toks)


def _llama_eval_last(llm: Any, tokens: Sequence[int]) -> np.ndarray:
    """Log-softmax of the logits after ``tokens``. Reuses the KV cache of the longest common
    prefix with what the model last evaluated (at least the last token is evaluated again, so
    the logits are fresh); reads only the last position's logits."""
    tokens = list(tokens)
    if not tokens:
        raise GeneratorError("empty prompt")
    if len(tokens) >= llm.n_ctx():
        raise GeneratorError(f"prompt of {len(tokens)} tokens exceeds n_ctx={llm.n_ctx()}")
    lim = min(int(llm.n_tokens), len(tokens) - 1)
    prefix = 0
    if lim > 0:
        diff = np.nonzero(np.asarray(llm.input_ids[:lim]) != np.asarray(tokens[:lim]))[0]
        prefix = int(diff[0]) if len(diff) else lim
    llm.n_tokens = prefix  # Llama.eval drops the KV cache beyond n_tokens first
    llm.eval(tokens[prefix:])
    row = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))
    return log_softmax(np.array(row, dtype=np.float64))
