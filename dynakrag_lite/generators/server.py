"""The OpenAI-compatible server backend (chapter 3): ``openai:<model>@<base_url>``, any server
speaking the chat-completions API (vLLM, the llama.cpp server, Ollama, OpenAI).

A reply whose message content is ``null`` yields empty text (some servers send null for an
empty completion); a reply with no ``choices`` raises. Option scoring asks for the top-20
log-probabilities of the first reply token. The openai package is imported by the constructor."""
from __future__ import annotations

import math
import os
import time
import warnings
from typing import Any, Sequence

from ..storage import redact
from .base import (DEFAULT_SERVER_TIMEOUT, TIMEOUT_ENV, DecodingMixin, Generation, GeneratorError,
                   Message, OptionScores, approx_token_count, check_max_tokens, check_messages,
                   resolve_timeout)

__all__ = ["OpenAIGenerator"]


class OpenAIGenerator(DecodingMixin):
    """Any server speaking the OpenAI chat-completions API (key: ``OPENAI_API_KEY`` or
    ``"none"``). A reply without ``usage`` gets whitespace-token estimates; failures raise
    :class:`GeneratorError` naming the server URL, credentials redacted."""

    backend = "openai"

    def __init__(self, model: str, base_url: str | None = None, *, api_key: str | None = None,
                 spec: str | None = None, temperature: float = 0.0, seed: int | None = None,
                 timeout: float | None = None, max_retries: int = 2) -> None:
        try:
            import openai  # heavy optional dependency
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
        msgs = check_messages(messages)
        check_max_tokens(max_tokens)
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

    def check(self) -> None:
        """GeneratorError naming the URL unless the server answers one model-list request (no
        retries, at most 30 s): checked before a run, not failed by every question. Any
        answer, even an HTTP error of a server without that endpoint, means it is up."""
        try:
            self.client.with_options(max_retries=0, timeout=min(self.timeout, 30.0)).models.list()
        except self._openai.APIConnectionError as e:  # (timeouts too)
            raise GeneratorError(f"no OpenAI-compatible server answers at {redact(self.base_url)}"
                                 f" ({redact(str(e.__cause__ or e))}); is it running there?") \
                from e
        except self._openai.APIStatusError:
            pass  # it answered

    def option_logprobs(self, messages: list[Message], options: Sequence[str],
                        mode: str = "auto") -> OptionScores:
        """Top-20 log-probs of the first reply token: an option gets the log of the summed
        probability of listed tokens that begin it and no other ("S", "SU" for SUFFICIENT), else
        the smallest listed log-prob. Servers give log-probs of generated tokens only."""
        if mode == "sequence":
            raise GeneratorError("an OpenAI-compatible server returns log-probs of generated "
                                 "tokens only; sequence scoring of given options is "
                                 "unavailable")
        msgs = check_messages(list(messages))
        t0 = time.perf_counter()
        kw: dict[str, Any] = {"model": self.model, "messages": msgs, "max_tokens": 1,
                              "temperature": 0.0, "logprobs": True, "top_logprobs": 20}
        if self.seed is not None:
            kw["seed"] = self.seed
        try:
            resp = self.client.chat.completions.create(**kw)
            top = resp.choices[0].logprobs.content[0].top_logprobs
        except Exception as e:  # server without logprobs support, network error, ...
            raise GeneratorError(f"log-prob request failed ({self.spec}): {e}") from e
        pairs = [(t.token, float(t.logprob)) for t in top]
        floor = min((lp for _, lp in pairs), default=-50.0)
        out = {}
        for o in options:
            ps = [math.exp(lp) for tk, lp in pairs if tk.strip() and o.startswith(tk.strip())
                  and not any(x != o and x.startswith(tk.strip()) for x in options)]
            out[o] = math.log(sum(ps)) if ps else floor
        usage = getattr(resp, "usage", None)
        n_prompt = int(getattr(usage, "prompt_tokens", 0) or 0) if usage is not None else 0
        return OptionScores(out, n_prompt, time.perf_counter() - t0, False, "top_logprobs",
                            {o: 1 for o in options})

    def __repr__(self) -> str:
        return f"OpenAIGenerator({self.spec!r})"
