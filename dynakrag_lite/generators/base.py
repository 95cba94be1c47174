"""The generator interface every backend offers (chapter 3): chat messages in; text, token
counts and log-probabilities of given reply options out. Every call has a time limit
(``timeout``, else ``$DYNAKRAG_GEN_TIMEOUT``, else a backend default), after which the text so
far comes back with ``Generation.truncated = True``."""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = [
    "Message", "Generation", "OptionScores", "Generator", "GeneratorError", "ReplayMissError",
    "REPLAY_ONLY_ENV", "replay_only", "replay_miss", "TIMEOUT_ENV", "DEFAULT_SERVER_TIMEOUT",
    "DEFAULT_LOCAL_TIMEOUT", "resolve_timeout", "DecodingMixin", "check_messages",
    "check_max_tokens", "approx_token_count", "SCORING_MODES", "LOGPROB_FLOOR",
    "option_scores", "log_softmax", "option_tokens", "scoring_mode", "first_token_scores",
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


@dataclass(frozen=True)
class OptionScores:
    """Log-probabilities of reply options, with their cost (one forward pass, completion_tokens
    = 1); ``method``: how they were obtained; ``n_tokens``: tokens per option."""
    logprobs: dict[str, float]
    prompt_tokens: int
    seconds: float = 0.0
    cached: bool = False
    method: str = "first_token"
    n_tokens: dict[str, int] = field(default_factory=dict)
    completion_tokens: int = 1

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@runtime_checkable
class Generator(Protocol):
    """What every backend offers. ``model_id`` identifies the weights (a sha256 where known).

    A backend that can read log-probabilities also offers
    ``option_logprobs(messages, options, mode) -> OptionScores``: the log-probability of each
    reply option right after the chat-templated prompt, ``mode`` "first_token" (each option's
    first token), "sequence" (the sum over its tokens) or "auto" (first tokens when they
    differ between the options, else sequences). llama.cpp, transformers and OpenAI-compatible
    servers offer it (servers: first tokens only), and so does the call cache's wrapper; a
    minimal backend may return just ``{option: log-prob}`` (see :func:`option_scores`)."""

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


class DecodingMixin:
    """The ``decoding`` property every backend shares (part of the call-cache key)."""

    temperature: float
    seed: int | None

    @property
    def decoding(self) -> dict:
        """Decoding parameters that change the output (part of the call-cache key)."""
        return {"temperature": self.temperature, "seed": self.seed}


def check_messages(messages: list[Message]) -> list[dict]:
    """The chat messages as plain {"role", "content"} dicts; ValueError on anything else."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    out = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) \
                or m.get("role") not in ("system", "user", "assistant"):
            raise ValueError(f"bad chat message: {m!r}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def check_max_tokens(max_tokens: int) -> int:
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    return max_tokens


def approx_token_count(text: str) -> int:
    """Whitespace token count: the fallback when an OpenAI-compatible server reports no usage
    (it undercounts subword tokens; such calls are counted as approximate)."""
    return len(text.split())


# -- option scoring: what the backends share --------------------------------------------------

SCORING_MODES = ("auto", "first_token", "sequence")
LOGPROB_FLOOR = -1e4  # stands for a missing or infinite log-prob: JSON and margins stay finite


def option_scores(result: OptionScores | Mapping[str, float], messages: list[dict],
                  options: Sequence[str], seconds: float) -> OptionScores:
    """An ``option_logprobs`` result as :class:`OptionScores` over exactly ``options``, every
    log-prob finite (:data:`LOGPROB_FLOOR`). A plain ``{option: log-prob}`` (a test double)
    gets whitespace prompt-token estimates, method "backend" and the caller's ``seconds``."""
    if isinstance(result, Mapping):
        result = OptionScores(dict(result), sum(approx_token_count(m["content"])
                                                for m in messages),
                              seconds, False, "backend", {o: 1 for o in options})
    logprobs = {}
    for o in options:
        v = float(result.logprobs.get(o, LOGPROB_FLOOR))
        logprobs[o] = v if np.isfinite(v) else LOGPROB_FLOOR
    return replace(result, logprobs=logprobs, prompt_tokens=int(result.prompt_tokens))


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    m = float(np.max(x))
    return x - (m + math.log(float(np.sum(np.exp(x - m)))))


def option_tokens(tokenize: Callable[..., list[int]], prompt_text: str,
                  prompt_tokens: list[int], option: str) -> list[int]:
    """Tokens of ``option`` as the reply right after the prompt (tokenized in context so a
    merge across the boundary is seen; standalone when the context changes the prompt)."""
    both = list(tokenize(prompt_text + option))
    n = len(prompt_tokens)
    if both[:n] == list(prompt_tokens) and len(both) > n:
        return both[n:]
    return list(tokenize(option, standalone=True))


def scoring_mode(mode: str, tokens: dict[str, list[int]]) -> str:
    """``mode`` with "auto" resolved: first tokens when every option's first token differs,
    else whole sequences."""
    if mode != "auto":
        return mode
    firsts = [t[0] for t in tokens.values() if t]
    return "first_token" if len(set(firsts)) == len(tokens) else "sequence"


def first_token_scores(lp: np.ndarray, tokens: dict[str, list[int]], prompt_tokens: int,
                       seconds: float) -> OptionScores:
    """Scores from the log-softmax ``lp`` at the first reply position (an option without
    tokens gets -inf, floored later)."""
    return OptionScores({o: float(lp[t[0]]) if t else -math.inf for o, t in tokens.items()},
                        prompt_tokens, seconds, False, "first_token", {o: 1 for o in tokens})
