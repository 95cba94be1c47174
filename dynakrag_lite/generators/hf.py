"""The transformers backend (chapter 3): ``hf:<hub-id-or-folder>[#file.gguf]``, a causal LM
run in-process by transformers (a hub id where a network exists, a local folder, or a GGUF
file in a folder, dequantised on load).

torch and transformers are imported when a model is loaded, so importing this module is cheap."""
from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

from .base import (DEFAULT_LOCAL_TIMEOUT, TIMEOUT_ENV, DecodingMixin, Generation, GeneratorError,
                   Message, OptionScores, check_max_tokens, check_messages, first_token_scores,
                   log_softmax, option_tokens, resolve_timeout, scoring_mode)

__all__ = ["TransformersGenerator", "unload_hf_models"]

# One (tokenizer, model, lock) per (model, GGUF file, device) for the life of the process.
_HF_CACHE: dict[tuple, tuple[Any, Any, threading.Lock]] = {}
_HF_CACHE_LOCK = threading.Lock()


def _load_hf(model: str, gguf_file: str | None, device: str) -> tuple[Any, Any, threading.Lock]:
    key = (model, gguf_file, device)
    with _HF_CACHE_LOCK:
        if key in _HF_CACHE:
            return _HF_CACHE[key]
        try:
            # heavy optional dependency
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


class TransformersGenerator(DecodingMixin):
    """A causal LM run by transformers: a hub id, a local folder, or a GGUF file in a folder
    (dequantised to fp32 on load: RAM about 9x the 4-bit file). Greedy unless ``temperature >
    0``; ``timeout`` is ``generate(max_time=...)``, past which the result is ``truncated``."""

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
            import torch  # heavy optional dependency
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        self.tokenizer, self.model_obj, self._lock = _load_hf(self.model, gguf_file, device)
        if not getattr(self.tokenizer, "chat_template", None):
            raise GeneratorError(f"{self.model_id} has no chat template; use an instruct model")

    def generate(self, messages: list[Message], max_tokens: int = 64,
                 stop: list[str] | None = None) -> Generation:
        import torch  # heavy optional dependency

        msgs = check_messages(messages)
        check_max_tokens(max_tokens)
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

    def option_logprobs(self, messages: list[Message], options: Sequence[str],
                        mode: str = "auto") -> OptionScores:
        """Log-probabilities of each reply option after the chat-templated prompt: one forward
        pass ("first_token"), or one over prompt + option per option ("sequence")."""
        import torch  # heavy optional dependency
        msgs = check_messages(list(messages))
        t0 = time.perf_counter()
        tok, lm, device = self.tokenizer, self.model_obj, self.device
        with self._lock:
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            ptoks = tok(text, add_special_tokens=False)["input_ids"]

            def tokenize(s: str, standalone: bool = False) -> list[int]:
                return list(tok(s, add_special_tokens=False)["input_ids"])
            opt = {o: option_tokens(tokenize, text, ptoks, o) for o in options}
            mode = scoring_mode(mode, opt)
            with torch.inference_mode():
                if mode == "first_token":
                    ids = torch.tensor([ptoks], device=device)
                    logits = lm(input_ids=ids).logits[0, -1].float().cpu().numpy()
                    return first_token_scores(log_softmax(logits), opt, len(ptoks),
                                              time.perf_counter() - t0)
                out, counts = {}, {}
                for o, toks in opt.items():
                    ids = torch.tensor([list(ptoks) + toks], device=device)
                    logp = torch.log_softmax(lm(input_ids=ids).logits[0].float(), dim=-1)
                    pos = range(len(ptoks) - 1, len(ptoks) - 1 + len(toks))
                    out[o] = float(sum(logp[p, t] for p, t in zip(pos, toks)))
                    counts[o] = len(toks)
        return OptionScores(out, len(ptoks), time.perf_counter() - t0, False, "sequence", counts)

    def __repr__(self) -> str:
        return f"TransformersGenerator({self.spec!r}, device={self.device!r})"


def unload_hf_models() -> int:
    """Drop every loaded transformers model; returns how many (``spec.unload_models``)."""
    with _HF_CACHE_LOCK:
        n = len(_HF_CACHE)
        _HF_CACHE.clear()
    return n
