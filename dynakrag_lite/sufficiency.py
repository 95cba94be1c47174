"""Sufficiency signals: how the probe decides "the evidence is enough", and how well it does.

The paper's ``sufficiency_check`` lets the generator judge answerability and, when the
evidence is insufficient, write the missing information (the gap). Small readers are poor
judges *in text*: measured on real HotpotQA pairs, qwen2.5-coder-0.5b and -1.5b both greedily
answer SUFFICIENT to every context, yet the 1.5B model's log-probabilities still separate
complete from incomplete evidence (AUC .75; see ``shared/notes/offline-models.md``). So the
verdict is taken from a *signal* with a calibrated threshold, chosen per generator on training
states, and the text verdict gates nothing where it is at chance. Signals
(score oriented so that higher means "more likely sufficient"):

* ``text``: the greedy reply parsed as before (score 1 = SUFFICIENT, 0 otherwise). One call;
  an INSUFFICIENT reply carries its own gap.
* ``margin``: log P(SUFFICIENT) - log P(INSUFFICIENT) at the first reply position of the
  same prompt (:func:`probe_margin`). One forward pass, no decoding. The two options' first
  tokens must differ (Qwen: "S" vs "INS"); otherwise the full option sequences are scored.
* ``learned``: a classifier on observable state features (:mod:`dynakrag_lite.features`, the
  ``suff_*`` features excluded) trained on 1[SR(s) = 1] over training states
  (:func:`fit_estimator`). No LLM call.
* ``answer_conf``: the reader's own confidence, the mean token log-probability of its greedy
  draft answer from the documents (:func:`answer_confidence`). One answer call (cached and
  shared with a final answer on the same documents) plus a scoring pass over its tokens.

With ``margin``, ``learned`` and ``answer_conf`` the gap is written by a second call
(``prompts.gap_messages``) only when the verdict is insufficient.

Calibration (:func:`calibrate`): on training states with known SR, per signal the AUC of the
score against 1[SR = 1], with a standard error from a bootstrap over *questions*. A signal is
*informative* when AUC - 0.5 exceeds both ``min_gain`` (default .05) and 1.645 standard errors
(one-sided 95%). The most informative signal is chosen (ties: the cheaper one) and its
threshold set on the same training states by maximal Youden J (TPR - FPR), or, with
``rule="precision:0.8"``, the lowest threshold whose "sufficient" verdicts are at least 80%
correct (more recall for that precision; Youden when no threshold reaches it). When no signal
is informative the text probe is kept with ``gates=False``: it still runs and always writes a
gap, but its verdict neither clears the gap nor reaches the value model's features.

Log-probabilities are computed by dispatching on the backend under the generator's own lock
(llama.cpp: the chat-templated prompt is evaluated with the model's prefix KV cache and only the
last position's logits are read, no ``logits_all``; transformers: one forward pass; an
OpenAI-compatible server: ``logprobs=True, top_logprobs=20, max_tokens=1``) and stored in the
same SQLite call cache as generations, under their own key kind, so re-runs are free.
A backend object may also offer ``option_logprobs(messages, options, mode)`` itself (test
doubles do).
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Sequence

import numpy as np

from . import prompts
from .concurrency import check_workers, locked_runner, released, run_in_order
from .features import STATE_FEATURE_NAMES, state_features

__all__ = [
    "OPTIONS", "SIGNALS", "SIGNAL_CHOICES", "SufficiencyError", "OptionScores",
    "score_options",
    "first_token_logprobs", "continuation_logprobs", "probe_margin", "probe_margin_scored",
    "answer_confidence", "LEARNED_FEATURE_NAMES", "learned_features", "SufficiencyEstimator",
    "fit_estimator", "estimator_data", "CalibrationState", "calibration_states", "auc",
    "grouped_auc_se", "youden_threshold", "precision_threshold", "SignalStats",
    "SufficiencySignal", "calibrate", "signal_scores", "Judgement", "judge", "write_gap",
    "configure",
]

SUFFICIENT, INSUFFICIENT = "SUFFICIENT", "INSUFFICIENT"
OPTIONS = (SUFFICIENT, INSUFFICIENT)
SIGNALS = ("text", "margin", "learned", "answer_conf")
# what `train --sufficiency-signal` takes: a signal, or "auto" (calibrate and keep the best)
SIGNAL_CHOICES = ("auto",) + SIGNALS
# Cheaper first: breaks AUC ties in calibrate().
_COST_ORDER = {"learned": 0, "margin": 1, "answer_conf": 2, "text": 3}
DEFAULT_THRESHOLDS = {"text": 0.5, "margin": 0.0, "learned": 0.5, "answer_conf": -1.0}


class SufficiencyError(RuntimeError):
    """A signal cannot be computed (backend without log-probs, missing estimator, ...)."""


# ---------------------------------------------------------------------------------------------
# log-probabilities of reply options
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class OptionScores:
    """Log-probabilities of reply options, with the cost of computing them.

    ``prompt_tokens`` / ``completion_tokens`` / ``seconds`` make it usable wherever a
    :class:`~dynakrag_lite.generators.base.Generation` is charged to a ledger (one forward pass
    reads the prompt and scores one position: completion_tokens = 1). ``method``: how the
    numbers were obtained ("first_token", "sequence", "top_logprobs", "backend").
    ``n_tokens``: tokens per option (sequence scoring; 1 for first-token scoring)."""
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


def _unwrap(generator: Any) -> tuple[Any, Any]:
    """(innermost backend, the first call cache met on the way) of a wrapped generator."""
    cache, g, seen = None, generator, 0
    while True:
        if cache is None and getattr(g, "cache", None) is not None and hasattr(g, "inner"):
            cache = g.cache
        inner = getattr(g, "inner", None)
        if inner is None or seen > 10:
            return g, cache
        g, seen = inner, seen + 1


def _backend_kind(backend: Any) -> str:
    if callable(getattr(backend, "option_logprobs", None)):
        return "custom"
    from .generators.base import LlamaCppGenerator
    # isinstance first: hasattr would load a lazy generator's model just to ask.
    if isinstance(backend, LlamaCppGenerator) or (hasattr(backend, "llama")
                                                  and hasattr(backend, "_lock")):
        return "llama"
    if hasattr(backend, "tokenizer") and hasattr(backend, "model_obj"):
        return "transformers"
    if hasattr(backend, "client") and hasattr(backend, "model"):
        return "openai"
    raise SufficiencyError(f"{type(backend).__name__}: this backend cannot score "
                           "log-probabilities (supported: llama.cpp, transformers, "
                           "OpenAI-compatible servers, or a backend with option_logprobs)")


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    m = float(np.max(x))
    return x - (m + math.log(float(np.sum(np.exp(x - m)))))


def _messages(messages: Sequence[dict]) -> list[dict]:
    from .generators.base import _check_messages
    return _check_messages(list(messages))


# -- llama.cpp --------------------------------------------------------------------------------
def _llama_formatter(llm: Any):
    """The chat formatter ``create_chat_completion`` would use (same prompt, same tokens)."""
    from llama_cpp import llama_chat_format
    handler = llm.chat_handler or llm._chat_handlers.get(llm.chat_format) \
        or llama_chat_format.get_chat_completion_handler(llm.chat_format)
    code = getattr(handler, "__code__", None)
    if code is not None and "chat_formatter" in code.co_freevars and handler.__closure__:
        return handler.__closure__[code.co_freevars.index("chat_formatter")].cell_contents
    template = llm.metadata.get("tokenizer.chat_template")
    if not template:
        raise SufficiencyError(f"cannot find the chat template of {llm.model_path}")
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
        raise SufficiencyError("empty prompt")
    if len(tokens) >= llm.n_ctx():
        raise SufficiencyError(f"prompt of {len(tokens)} tokens exceeds n_ctx={llm.n_ctx()}")
    lim = min(int(llm.n_tokens), len(tokens) - 1)
    prefix = 0
    if lim > 0:
        diff = np.nonzero(np.asarray(llm.input_ids[:lim]) != np.asarray(tokens[:lim]))[0]
        prefix = int(diff[0]) if len(diff) else lim
    llm.n_tokens = prefix  # Llama.eval drops the KV cache beyond n_tokens first
    llm.eval(tokens[prefix:])
    row = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))
    return _log_softmax(np.array(row, dtype=np.float64))


def _option_tokens(tokenize, prompt_text: str, prompt_tokens: list[int], option: str
                   ) -> list[int]:
    """Tokens of ``option`` as the reply right after the prompt (tokenized in context so a
    merge across the boundary is seen; standalone when the context changes the prompt)."""
    both = list(tokenize(prompt_text + option))
    n = len(prompt_tokens)
    if both[:n] == list(prompt_tokens) and len(both) > n:
        return both[n:]
    return list(tokenize(option, standalone=True))


def _llama_scores(backend: Any, msgs: list[dict], options: Sequence[str], mode: str
                  ) -> tuple[dict[str, float], int, str, dict[str, int]]:
    llm = backend.llama
    with backend._lock:
        text, add_bos, ptoks = _llama_prompt(llm, msgs)

        def tokenize(s: str, standalone: bool = False) -> list[int]:
            return list(llm.tokenize(s.encode("utf-8"), add_bos=False if standalone else add_bos,
                                     special=not standalone))
        opt = {o: _option_tokens(tokenize, text, ptoks, o) for o in options}
        firsts = [t[0] for t in opt.values() if t]
        if mode == "auto":
            mode = "first_token" if len(set(firsts)) == len(options) else "sequence"
        lp = _llama_eval_last(llm, ptoks)
        if mode == "first_token":
            return ({o: float(lp[t[0]]) if t else -math.inf for o, t in opt.items()},
                    len(ptoks), "first_token", {o: 1 for o in options})
        out, counts = {}, {}
        for o, toks in opt.items():
            total, ctx = 0.0, list(ptoks)
            for i, t in enumerate(toks):
                step = lp if i == 0 else _llama_eval_last(llm, ctx)
                total += float(step[t])
                ctx.append(t)
            out[o], counts[o] = total, len(toks)
        return out, len(ptoks), "sequence", counts


# -- transformers ---------------------------------------------------------------------------
def _hf_scores(backend: Any, msgs: list[dict], options: Sequence[str], mode: str
               ) -> tuple[dict[str, float], int, str, dict[str, int]]:
    import torch
    tok, lm = backend.tokenizer, backend.model_obj
    device = getattr(backend, "device", "cpu")
    with backend._lock:
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        ptoks = tok(text, add_special_tokens=False)["input_ids"]

        def tokenize(s: str, standalone: bool = False) -> list[int]:
            return list(tok(s, add_special_tokens=False)["input_ids"])
        opt = {o: _option_tokens(tokenize, text, ptoks, o) for o in options}
        firsts = [t[0] for t in opt.values() if t]
        if mode == "auto":
            mode = "first_token" if len(set(firsts)) == len(options) else "sequence"
        with torch.inference_mode():
            if mode == "first_token":
                ids = torch.tensor([ptoks], device=device)
                logits = lm(input_ids=ids).logits[0, -1].float().cpu().numpy()
                lp = _log_softmax(logits)
                return ({o: float(lp[t[0]]) if t else -math.inf for o, t in opt.items()},
                        len(ptoks), "first_token", {o: 1 for o in options})
            out, counts = {}, {}
            for o, toks in opt.items():
                ids = torch.tensor([list(ptoks) + toks], device=device)
                logp = torch.log_softmax(lm(input_ids=ids).logits[0].float(), dim=-1)
                pos = range(len(ptoks) - 1, len(ptoks) - 1 + len(toks))
                out[o] = float(sum(logp[p, t] for p, t in zip(pos, toks)))
                counts[o] = len(toks)
            return out, len(ptoks), "sequence", counts


# -- OpenAI-compatible servers --------------------------------------------------------------
def _openai_scores(backend: Any, msgs: list[dict], options: Sequence[str], mode: str
                   ) -> tuple[dict[str, float], int, str, dict[str, int]]:
    """Top-20 log-probs of the first reply token. An option's log-prob is the log of the summed
    probability of the listed tokens that begin it and begin no other option (so "S", "SU" count
    for SUFFICIENT; "IN", "INS" for INSUFFICIENT); an option with no listed token gets the
    smallest listed log-prob (an upper bound). Sequence scoring is not available here."""
    if mode == "sequence":
        raise SufficiencyError("an OpenAI-compatible server returns log-probs of generated "
                               "tokens only; sequence scoring of given options is unavailable")
    from .generators.base import GeneratorError
    kw: dict[str, Any] = {"model": backend.model, "messages": msgs, "max_tokens": 1,
                          "temperature": 0.0, "logprobs": True, "top_logprobs": 20}
    if getattr(backend, "seed", None) is not None:
        kw["seed"] = backend.seed
    try:
        resp = backend.client.chat.completions.create(**kw)
        top = resp.choices[0].logprobs.content[0].top_logprobs
    except Exception as e:  # server without logprobs support, network error, ...
        raise GeneratorError(f"log-prob request failed ({backend.spec}): {e}") from e
    pairs = [(t.token, float(t.logprob)) for t in top]
    floor = min((lp for _, lp in pairs), default=-50.0)
    out = {}
    for o in options:
        ps = [math.exp(lp) for tk, lp in pairs if tk.strip() and o.startswith(tk.strip())
              and not any(x != o and x.startswith(tk.strip()) for x in options)]
        out[o] = math.log(sum(ps)) if ps else floor
    usage = getattr(resp, "usage", None)
    n_prompt = int(getattr(usage, "prompt_tokens", 0) or 0) if usage is not None else 0
    return out, n_prompt, "top_logprobs", {o: 1 for o in options}


# -- dispatch + cache -----------------------------------------------------------------------
def score_options(generator: Any, messages: Sequence[dict], options: Sequence[str],
                  mode: str = "auto") -> OptionScores:
    """Log-probabilities of each reply option right after the chat-templated prompt.

    ``mode``: "first_token" (log-prob of each option's first token), "sequence" (sum over the
    option's tokens) or "auto" (first tokens when they differ between options, else
    sequences). Results go through the generator's call cache (key kind
    ``option_logprobs``): a repeated call returns ``cached=True`` without touching the model.
    """
    if mode not in ("auto", "first_token", "sequence"):
        raise ValueError(f"unknown scoring mode {mode!r}")
    options = list(dict.fromkeys(options))
    if not options:
        raise ValueError("no options to score")
    msgs = _messages(messages)
    backend, cache = _unwrap(generator)
    kind = _backend_kind(backend)
    key = None
    t0 = time.perf_counter()

    def key_of(m: str) -> str:
        from .generators.cache import make_key
        return make_key(getattr(generator, "backend", getattr(backend, "backend", kind)),
                        str(getattr(backend, "model_id", "")), msgs, kind="option_logprobs",
                        mode=m, options=options, **getattr(backend, "decoding", {}))
    if cache is not None:
        key = key_of(mode)
        hit = cache.get(key)
        if hit is not None:
            v = json.loads(hit["text"])
            return OptionScores({o: float(v["logprobs"][o]) for o in options},
                                hit["prompt_tokens"], time.perf_counter() - t0, True,
                                v["method"], {o: int(n) for o, n in v["n_tokens"].items()},
                                hit["completion_tokens"])
        from .generators.base import replay_miss, replay_only
        if replay_only():
            raise replay_miss(getattr(generator, "spec", type(backend).__name__), msgs,
                              "option scoring")
    if kind == "custom":
        lp = backend.option_logprobs(msgs, options, mode)
        from .generators.base import approx_token_count
        res = (dict(lp), sum(approx_token_count(m["content"]) for m in msgs), "backend",
               {o: 1 for o in options})
    elif kind == "llama":
        res = _llama_scores(backend, msgs, options, mode)
    elif kind == "transformers":
        res = _hf_scores(backend, msgs, options, mode)
    else:
        with released(generator):  # a server call: other workers may run meanwhile
            res = _openai_scores(backend, msgs, options, mode)
    logprobs, n_prompt, method, counts = res
    for o in options:  # a finite floor keeps JSON and margins well defined
        v = float(logprobs.get(o, -1e4))
        logprobs[o] = v if np.isfinite(v) else -1e4
    out = OptionScores({o: float(logprobs[o]) for o in options}, int(n_prompt),
                       time.perf_counter() - t0, False, method, counts)
    if cache is not None and key is not None:
        from .generators.cache import canonical_json
        value = canonical_json({"logprobs": out.logprobs, "method": method, "n_tokens": counts})
        # "auto" is also stored under the mode it resolved to, so both lookups agree (llama.cpp
        # numbers move by ~0.05 nats with what the KV cache held; the first result sticks).
        for k in {key} | ({key_of(method)} if mode == "auto" and method in
                          ("first_token", "sequence") else set()):
            cache.put(k, value, out.prompt_tokens, out.completion_tokens, out.seconds)
    return out


def first_token_logprobs(generator: Any, messages: Sequence[dict], options: Sequence[str]
                         ) -> dict[str, float]:
    """log P(first token of each option) at the next position after the chat-templated prompt
    (options sharing a first token get the same number; see :func:`score_options`)."""
    return dict(score_options(generator, messages, options, mode="first_token").logprobs)


def continuation_logprobs(generator: Any, messages: Sequence[dict], options: Sequence[str]
                          ) -> dict[str, float]:
    """Summed log-probability of each option's full token sequence as the reply."""
    return dict(score_options(generator, messages, options, mode="sequence").logprobs)


def probe_margin_scored(question: str, docs: Sequence, generator: Any,
                        doc_chars: int | None = 600) -> tuple[float, OptionScores]:
    """(margin, the scores behind it) for the project's sufficiency prompt."""
    sc = score_options(generator, prompts.sufficiency_messages(question, docs, doc_chars),
                       OPTIONS, mode="auto")
    return sc.logprobs[SUFFICIENT] - sc.logprobs[INSUFFICIENT], sc


def probe_margin(question: str, docs: Sequence, generator: Any,
                 doc_chars: int | None = 600) -> float:
    """log P(SUFFICIENT) - log P(INSUFFICIENT) as the reply to the sufficiency prompt (first
    tokens where they differ, as for Qwen's "S" vs "INS"; whole sequences otherwise)."""
    return probe_margin_scored(question, docs, generator, doc_chars)[0]


def answer_confidence(question: str, docs: Sequence, generator: Any,
                      doc_chars: int | None = 600) -> tuple[float, str, list]:
    """(mean token log-prob of the reader's greedy draft answer, the draft, the calls made).

    The draft is the ordinary answer call (same prompt and limit as the final answer, so it is
    cached and shared); its reply is then scored as a continuation of the prompt. An empty
    draft scores -10 (no confidence)."""
    msgs = prompts.answer_messages(question, docs, doc_chars)
    gen = generator.generate(msgs, max_tokens=prompts.ANSWER_MAX_TOKENS)
    reply = gen.text.strip()
    if not reply:
        return -10.0, "", [gen]
    sc = score_options(generator, msgs, [reply], mode="sequence")
    n = max(1, sc.n_tokens.get(reply, 1))
    # The scoring pass re-reads only the reply's tokens (the prompt is in the KV cache).
    charged = replace(sc, prompt_tokens=0, completion_tokens=0)
    return sc.logprobs[reply] / n, prompts.parse_answer(gen.text), [gen, charged]


# ---------------------------------------------------------------------------------------------
# the learned estimator (no LLM call)
# ---------------------------------------------------------------------------------------------

# The probe's own verdict is not an input of the estimator that produces it.
LEARNED_FEATURE_NAMES: tuple[str, ...] = tuple(n for n in STATE_FEATURE_NAMES
                                               if not n.startswith("suff_"))
_LEARNED_IDX = np.array([STATE_FEATURE_NAMES.index(n) for n in LEARNED_FEATURE_NAMES])


def learned_features(state) -> np.ndarray:
    f = state_features(state)
    return np.array([f[n] for n in LEARNED_FEATURE_NAMES], dtype=np.float64)


@dataclass
class SufficiencyEstimator:
    """P(SR(s) = 1 | observable state features): a seeded random forest or logistic
    regression. ``constant`` holds the base rate when training saw one class only."""
    model: Any
    kind: str = "forest"
    feature_names: tuple[str, ...] = LEARNED_FEATURE_NAMES
    constant: float | None = None
    n_train: int = 0
    positive_rate: float = 0.0

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        if self.constant is not None:
            return np.full(len(X), self.constant)
        return self.model.predict_proba(X)[:, 1]

    def predict_state(self, state) -> float:
        if tuple(self.feature_names) != LEARNED_FEATURE_NAMES:
            raise SufficiencyError("sufficiency estimator built for other features; retrain it")
        return float(self.predict(learned_features(state)[None, :])[0])


def fit_estimator(X: np.ndarray, y: np.ndarray, kind: str = "forest", seed: int = 13,
                  n_estimators: int = 200, min_samples_leaf: int = 5,
                  n_jobs: int = 1) -> SufficiencyEstimator:
    """Fit the estimator on rows of :data:`LEARNED_FEATURE_NAMES` and labels 1[SR = 1]."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y).astype(int)
    if len(y) == 0:
        raise SufficiencyError("no training states for the sufficiency estimator")
    rate = float(y.mean())
    if len(set(y.tolist())) < 2:
        return SufficiencyEstimator(None, kind, constant=rate, n_train=len(y), positive_rate=rate)
    if kind == "forest":
        from sklearn.ensemble import RandomForestClassifier
        model = RandomForestClassifier(n_estimators=n_estimators,
                                       min_samples_leaf=min_samples_leaf, random_state=seed,
                                       n_jobs=n_jobs, class_weight="balanced")
    elif kind == "logistic":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        model = make_pipeline(StandardScaler(), LogisticRegression(
            C=1.0, max_iter=2000, random_state=seed, class_weight="balanced"))
    else:
        raise ValueError(f"unknown estimator kind {kind!r}")
    model.fit(X, y)
    return SufficiencyEstimator(model, kind, n_train=len(y), positive_rate=rate)


def estimator_data(data) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, groups) for the estimator from collected :class:`TrainingData` prefixes
    (states with documents; their SR is recorded at collection time)."""
    rows = [p for p in data.prefixes if np.isfinite(getattr(p, "sr_now", np.nan))]
    if not rows:
        return np.zeros((0, len(LEARNED_FEATURE_NAMES))), np.zeros(0), np.zeros(0, dtype=object)
    X = np.stack([np.asarray(p.features)[_LEARNED_IDX] for p in rows])
    y = np.array([float(p.sr_now >= 1.0 - 1e-9) for p in rows])
    return X, y, np.array([p.qid for p in rows], dtype=object)


def oof_estimator_scores(X: np.ndarray, y: np.ndarray, groups: Sequence, folds: int = 5,
                         kind: str = "forest", seed: int = 13,
                         train_mask: np.ndarray | None = None, **kw) -> np.ndarray:
    """Out-of-fold P(sufficient) (folds grouped by question), for an honest training AUC.
    ``train_mask``: rows allowed in the training folds (e.g. reachable states only); every
    row of a held-out fold is predicted."""
    from sklearn.model_selection import GroupKFold
    groups = np.asarray(groups, dtype=object)
    mask = np.ones(len(y), bool) if train_mask is None else np.asarray(train_mask, bool)
    k = min(folds, len(set(groups.tolist())))
    out = np.full(len(y), float(np.mean(y[mask])) if mask.any() else 0.0)
    if k < 2:
        return out
    for tr, te in GroupKFold(n_splits=k).split(X, y, groups):
        tr = tr[mask[tr]]
        if len(tr) == 0:
            continue
        est = fit_estimator(X[tr], y[tr], kind=kind, seed=seed, **kw)
        out[te] = est.predict(X[te])
    return out


# ---------------------------------------------------------------------------------------------
# calibration states (training questions only; no LLM call)
# ---------------------------------------------------------------------------------------------

@dataclass
class CalibrationState:
    qid: str
    state: Any  # EvidenceState
    sr: float
    kind: str = "reachable"  # or "contrast" (see calibration_states)

    @property
    def sufficient(self) -> bool:
        return self.sr >= 1.0 - 1e-9


def _contrast(c: CalibrationState, gold: Sequence[str], env) -> CalibrationState | None:
    """The complete state ``c`` with its lower-scored gold document swapped for the best unseen
    non-gold document of the initial ranking: same size, support incomplete."""
    from .bridge import bridge_candidates
    from .data.corpus import normalize_title
    from .metrics import support_recall
    from .state import RetrievedDoc
    st = c.state
    keys = {normalize_title(t) for t in gold}
    golds = [i for i, d in enumerate(st.docs) if normalize_title(d.title) in keys]
    if len(st.docs) < 2 or not golds or st.initial_ranking is None:
        return None
    i = min(golds, key=lambda k: st.docs[k].score)
    ids, titles = set(st.doc_ids), set(st.title_keys)
    for e in st.initial_ranking:
        key = normalize_title(e.title)
        if e.id in ids or key in titles or key in keys:
            continue
        old = st.docs[i]
        docs = st.docs[:i] + (RetrievedDoc(e.id, e.title, e.text, e.score, old.source,
                                           old.step),) + st.docs[i + 1:]
        cfg = env.config
        bridges = bridge_candidates(st.question, docs, exclude=st.expanded_bridges,
                                    max_candidates=cfg.max_bridges, use_spacy=cfg.use_spacy)
        new = replace(st, docs=docs, bridge_candidates=bridges)
        return CalibrationState(c.qid, new, support_recall(new.titles, gold), "contrast")
    return None


def calibration_states(questions: Iterable, env, per_question: int = 4, seed: int = 13,
                       contrast: bool = True) -> list[CalibrationState]:
    """States of training questions with documents at different SR, reached by the
    retrieval-only actions (no LLM call): retrieve_more 1..3 times, and a seeded walk that
    mixes retrieve_more with bridge_entity_expand. Distinct document sets only, at most
    ``per_question`` per question. Gold labels give each state's SR; nothing gold is in a state.

    On a pooled HotpotQA corpus the first three documents often already hold both gold
    paragraphs, so reachable states alone are mostly complete. ``contrast`` adds, per question,
    one matched incomplete state: the first complete state with one gold document swapped for
    the best unseen distractor of its ranking (same size; the contrast of the measurement in
    ``shared/notes/offline-models.md``). It is built with gold labels, on training questions
    only, for calibration; no policy ever visits it.
    """
    import random
    from .actions import apply_action
    from .data.corpus import gold_titles
    from .metrics import support_recall
    from .state import initial_state
    from .validity import valid_actions
    out: list[CalibrationState] = []
    cfg = env.config
    for q in questions:
        gold = gold_titles(q)
        seen: set[tuple[str, ...]] = set()
        found: list[CalibrationState] = []

        def keep(s) -> None:
            if s.docs and s.doc_ids not in seen:
                seen.add(s.doc_ids)
                found.append(CalibrationState(q.id, s, support_recall(s.titles, gold)))
        s = initial_state(q.question, q.id)
        for _ in range(3):
            if "retrieve_more" not in valid_actions(s, cfg):
                break
            s = apply_action(s, "retrieve_more", env)
            keep(s)
        rng = random.Random(f"{seed}|calib|{q.id}")
        s = apply_action(initial_state(q.question, q.id), "retrieve_more", env)
        for _ in range(3):
            opts = [a for a in valid_actions(s, cfg)
                    if a in ("retrieve_more", "bridge_entity_expand")]
            if not opts:
                break
            s = apply_action(s, "bridge_entity_expand" if "bridge_entity_expand" in opts
                             and rng.random() < 0.7 else rng.choice(opts), env)
            keep(s)
        # Keep the first and the last state, then the rest in order; emit them in discovery
        # order (consecutive prompts then share their first documents: KV reuse).
        idx = list(range(len(found)))
        keep_idx = sorted((idx[:1] + idx[-1:] + idx[1:-1] if len(idx) > 2 else idx)
                          [:per_question])
        chosen = [found[i] for i in keep_idx]
        if contrast:
            full = next((k for k, c in enumerate(chosen) if c.sufficient), None)
            alt = _contrast(chosen[full], gold, env) if full is not None else None
            if alt is not None and alt.state.doc_ids not in seen:
                chosen.insert(full + 1, alt)
        out.extend(chosen)
    return out


# ---------------------------------------------------------------------------------------------
# AUC, thresholds, calibration
# ---------------------------------------------------------------------------------------------

def auc(scores: Sequence[float], labels: Sequence[float]) -> float:
    """ROC AUC of ``scores`` for labels 1 (ties count half); nan with one class only."""
    s, y = np.asarray(scores, float), np.asarray(labels).astype(int)
    if len(set(y.tolist())) < 2:
        return float("nan")
    from sklearn.metrics import roc_auc_score
    return float(roc_auc_score(y, s))


def grouped_auc_se(scores: Sequence[float], labels: Sequence[float], groups: Sequence,
                   n_boot: int = 200, seed: int = 13) -> float:
    """Bootstrap standard error of the AUC, resampling whole questions (states of one
    question are not independent)."""
    s, y = np.asarray(scores, float), np.asarray(labels).astype(int)
    g = np.asarray(groups, dtype=object)
    ids = sorted(set(g.tolist()), key=str)
    if len(ids) < 2 or len(set(y.tolist())) < 2:
        return float("nan")
    rows = {i: np.nonzero(g == i)[0] for i in ids}
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(ids), len(ids))
        idx = np.concatenate([rows[ids[k]] for k in pick])
        a = auc(s[idx], y[idx])
        if np.isfinite(a):
            vals.append(a)
    return float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan")


def youden_threshold(scores: Sequence[float], labels: Sequence[float]) -> float:
    """The threshold t maximizing TPR - FPR for the verdict "sufficient iff score >= t"."""
    s, y = np.asarray(scores, float), np.asarray(labels).astype(int)
    if len(set(y.tolist())) < 2:
        return float(np.median(s)) if len(s) else 0.0
    from sklearn.metrics import roc_curve
    fpr, tpr, thr = roc_curve(y, s)
    j = tpr - fpr
    j[~np.isfinite(thr)] = -np.inf
    return float(thr[int(np.argmax(j))])


def precision_threshold(scores: Sequence[float], labels: Sequence[float], target: float
                        ) -> float | None:
    """The lowest t whose verdicts "score >= t" are sufficient with precision >= ``target``
    (most recall at that precision); None when no threshold reaches it."""
    s, y = np.asarray(scores, float), np.asarray(labels).astype(float)
    best = None
    for t in sorted(set(s.tolist()), reverse=True):
        sel = s >= t
        if sel.any() and y[sel].mean() >= target:
            best = t
    return best


def _threshold(scores, labels, rule: str) -> tuple[float, str]:
    if rule.startswith("precision:"):
        t = precision_threshold(scores, labels, float(rule.split(":", 1)[1]))
        if t is not None:
            return float(t), rule
        return youden_threshold(scores, labels), "youden (precision target unreachable)"
    if rule != "youden":
        raise ValueError(f"unknown threshold rule {rule!r} (youden | precision:P)")
    return youden_threshold(scores, labels), "youden"


@dataclass
class SignalStats:
    """One signal on the calibration states."""
    kind: str
    auc: float
    auc_se: float
    informative: bool
    threshold: float
    rule: str
    sufficient_rate: float  # share of states judged sufficient at ``threshold``
    text_sufficient_rate: float | None = None  # text signal: share of SUFFICIENT replies
    n: int = 0
    positives: int = 0
    precision: float | None = None
    recall: float | None = None

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        return {k: (None if isinstance(v, float) and not np.isfinite(v) else
                    round(v, 4) if isinstance(v, float) else v) for k, v in d.items()}


@dataclass
class SufficiencySignal:
    """Which signal decides the probe's verdict, with its calibrated threshold.

    ``gates=False``: the verdict is recorded but gates nothing (a gap is always written and
    the value model's features see no verdict): the setting for a signal at chance.
    ``estimator``: the fitted :class:`SufficiencyEstimator` (``kind="learned"``).
    ``stats``: every candidate's :class:`SignalStats` on the calibration states."""
    kind: str = "text"
    threshold: float | None = None
    gates: bool = True
    rule: str = "youden"
    generator: str | None = None
    estimator: SufficiencyEstimator | None = None
    stats: dict[str, SignalStats] = field(default_factory=dict)
    n_states: int = 0
    n_questions: int = 0

    def __post_init__(self) -> None:
        if self.kind not in SIGNALS:
            raise ValueError(f"unknown sufficiency signal {self.kind!r}; one of {SIGNALS}")

    def describe(self) -> dict:
        """JSON-ready summary (policy metadata, diagnostics files)."""
        return {"kind": self.kind, "threshold": self.threshold, "gates": self.gates,
                "rule": self.rule, "generator": self.generator, "n_states": self.n_states,
                "n_questions": self.n_questions,
                "stats": {k: v.to_json() for k, v in self.stats.items()}}

    def configure(self, env) -> Any:
        """Make ``env``'s sufficiency_check use this signal (replaces ``env.config``, sets
        ``env.sufficiency_estimator``); returns ``env``."""
        return configure(env, self)


def configure(env, signal: "SufficiencySignal | None"):
    """Apply ``signal`` to ``env`` (None: the plain text probe that gates, the old default)."""
    if signal is None:
        env.config = replace(env.config, sufficiency_signal="text", sufficiency_threshold=None,
                             sufficiency_gates=True)
        env.sufficiency_estimator = None
        return env
    if signal.kind == "learned" and signal.estimator is None:
        raise SufficiencyError("a learned sufficiency signal needs its estimator")
    env.config = replace(env.config, sufficiency_signal=signal.kind,
                         sufficiency_threshold=signal.threshold,
                         sufficiency_gates=bool(signal.gates))
    env.sufficiency_estimator = signal.estimator
    return env


def _state_llm_scores(c: CalibrationState, env, llm_kinds: Sequence[str]) -> dict[str, float]:
    """The LLM signals' scores of one calibration state, in ``llm_kinds`` order."""
    cfg, st = env.config, c.state
    got: dict[str, float] = {}
    for kind in llm_kinds:
        if kind == "text":
            gen = env.generate(prompts.sufficiency_messages(st.question, st.docs, cfg.doc_chars),
                               prompts.SUFFICIENCY_MAX_TOKENS)
            got[kind] = 1.0 if prompts.parse_sufficiency(gen.text).sufficient else 0.0
        elif kind == "margin":
            got[kind] = probe_margin(st.question, st.docs, env.generator, cfg.doc_chars)
        else:  # answer_conf
            got[kind] = answer_confidence(st.question, st.docs, env.generator,
                                          cfg.doc_chars)[0]
    return got


def signal_scores(states: Sequence[CalibrationState], env, kinds: Sequence[str],
                  estimator_folds: int = 5, seed: int = 13, progress: bool = False,
                  estimator_kind: str = "forest", workers: int = 1
                  ) -> dict[str, dict[str, np.ndarray]]:
    """Per signal: {"score": ..., "extra": ...} on the calibration states. ``learned`` scores are
    out-of-fold (grouped by question). ``text`` extra: 1 where the reply parsed SUFFICIENT.

    ``workers``: states whose LLM signals are scored at once (> 1 needs a server generator;
    the scheme of :mod:`dynakrag_lite.concurrency`: only the server calls overlap, scores
    are taken in state order, so they are the sequential run's)."""
    check_workers(workers, env.generator, items="calibration states")
    y = np.array([float(c.sufficient) for c in states])
    groups = np.array([c.qid for c in states], dtype=object)
    out: dict[str, dict[str, np.ndarray]] = {}
    from tqdm.auto import tqdm
    llm_kinds = [k for k in kinds if k != "learned"]
    bad = [k for k in llm_kinds if k not in SIGNALS]
    if bad:
        raise ValueError(f"unknown signal(s) {bad}")
    vals: dict[str, list[float]] = {k: [] for k in llm_kinds}
    extra: list[float] = []
    # States outer, signals inner: the signals of one state share its prompt prefix (and the
    # states of one question share their first documents), so llama.cpp reuses the KV cache.
    todo = list(states) if llm_kinds else []
    with tqdm(total=len(todo), desc="signals", disable=not progress or not todo) as bar:
        def emit(c: CalibrationState, got: dict[str, float]) -> None:
            for kind in llm_kinds:
                vals[kind].append(got[kind])
            if "text" in got:
                extra.append(got["text"])
            bar.update(1)
        run_in_order(todo, locked_runner(lambda c, e: _state_llm_scores(c, e, llm_kinds), env,
                                         workers), workers, emit, name="signals")
    for kind in kinds:
        if kind == "learned":
            X = np.stack([learned_features(c.state) for c in states]) if states else \
                np.zeros((0, len(LEARNED_FEATURE_NAMES)))
            reach = np.array([c.kind == "reachable" for c in states], bool)
            out[kind] = {"score": oof_estimator_scores(X, y, groups, estimator_folds,
                                                       kind=estimator_kind, seed=seed,
                                                       train_mask=reach)}
        else:
            out[kind] = {"score": np.array(vals[kind], dtype=np.float64)}
            if kind == "text":
                out[kind]["extra"] = np.array(extra)
    return out


def calibrate(scores: dict[str, np.ndarray], labels: Sequence[float], groups: Sequence,
              rule: str = "youden", min_gain: float = 0.05, generator: str | None = None,
              estimator: SufficiencyEstimator | None = None,
              text_sufficient: np.ndarray | None = None, seed: int = 13) -> SufficiencySignal:
    """Choose the signal and threshold from scores on training states (see the module text).

    ``scores``: {signal: score per state}; ``labels``: 1[SR = 1] per state; ``groups``: the
    question id per state. ``estimator``: the learned estimator fitted on all states (used when
    ``learned`` wins; its AUC must come from out-of-fold scores)."""
    y = np.asarray(labels, float)
    g = np.asarray(groups, dtype=object)
    stats: dict[str, SignalStats] = {}
    for kind, s in scores.items():
        s = np.asarray(s, float)
        a = auc(s, y)
        se = grouped_auc_se(s, y, g, seed=seed)
        thr, how = (0.5, "text verdict") if kind == "text" else _threshold(s, y, rule)
        informative = bool(np.isfinite(a) and a - 0.5 > max(min_gain, 1.645 * (
            se if np.isfinite(se) else 0.0)))
        sel = s >= thr
        stats[kind] = SignalStats(
            kind, a, se, informative, float(thr), how, float(sel.mean()) if len(s) else 0.0,
            float(text_sufficient.mean()) if kind == "text" and text_sufficient is not None
            else None, int(len(s)), int(y.sum()),
            float(y[sel].mean()) if sel.any() else None,
            float(sel[y == 1].mean()) if (y == 1).any() else None)
    good = [k for k, st in stats.items() if st.informative]
    n_q = len(set(g.tolist()))
    if not good:
        return SufficiencySignal("text", None, gates=False, rule=rule, generator=generator,
                                 stats=stats, n_states=len(y), n_questions=n_q)
    best = max(good, key=lambda k: (round(stats[k].auc, 3), -_COST_ORDER.get(k, 9)))
    st = stats[best]
    return SufficiencySignal(best, None if best == "text" else st.threshold, gates=True,
                             rule=st.rule, generator=generator,
                             estimator=estimator if best == "learned" else None,
                             stats=stats, n_states=len(y), n_questions=n_q)


def calibrate_for(questions: Sequence, env, kinds: Sequence[str] = ("text", "margin", "learned"),
                  rule: str = "youden", per_question: int = 4, llm_questions: int | None = None,
                  seed: int = 13, progress: bool = True, min_gain: float = 0.05,
                  workers: int = 1) -> SufficiencySignal:
    """Calibration end to end on TRAINING questions: states (:func:`calibration_states`), the
    learned estimator's out-of-fold AUC on all of them, the LLM signals on the states of the
    first ``llm_questions`` questions (they cost a forward pass or a generation each), then
    :func:`calibrate`. The learned estimator is refitted on all states. ``workers``: states
    whose LLM signals are scored at once (:func:`signal_scores`); the states themselves are
    built sequentially (retrieval only, no LLM call)."""
    states = calibration_states(questions, env, per_question=per_question, seed=seed)
    if not states:
        raise SufficiencyError("no calibration states (no documents retrieved)")
    y = np.array([float(c.sufficient) for c in states])
    groups = np.array([c.qid for c in states], dtype=object)
    llm_ids = {q.id for q in list(questions)[:llm_questions]} if llm_questions else \
        {q.id for q in questions}
    sub = [i for i, c in enumerate(states) if c.qid in llm_ids]
    llm_kinds = [k for k in kinds if k != "learned"]
    scores: dict[str, np.ndarray] = {}
    text_suff = None
    estimator = None
    if "learned" in kinds:
        learned = signal_scores(states, env, ["learned"], seed=seed)["learned"]["score"]
        # fitted on reachable states only: contrast states are not what a policy visits (their
        # swapped-in document is always ranked low, a retrieval-score artefact)
        reach = np.array([c.kind == "reachable" for c in states], bool)
        X = np.stack([learned_features(c.state) for c in states])
        estimator = fit_estimator(X[reach], y[reach], seed=seed)
        scores["learned"] = learned[sub]
    if llm_kinds:
        got = signal_scores([states[i] for i in sub], env, llm_kinds, seed=seed,
                            progress=progress, workers=workers)
        for k in llm_kinds:
            scores[k] = got[k]["score"]
        if "text" in got and "extra" in got["text"]:
            text_suff = got["text"]["extra"]
    gen = getattr(env.generator, "spec", None)
    return calibrate(scores, y[sub], groups[sub], rule=rule, min_gain=min_gain, generator=gen,
                     estimator=estimator, text_sufficient=text_suff, seed=seed)


# ---------------------------------------------------------------------------------------------
# the probe itself (used by actions.sufficiency_check)
# ---------------------------------------------------------------------------------------------

@dataclass
class Judgement:
    sufficient: bool
    score: float | None
    threshold: float | None
    signal: str
    gates: bool
    raw: str
    parsed: bool
    gap: str = ""  # a gap the verdict call wrote itself (text signal)
    generations: list = field(default_factory=list)  # calls to charge to the ledger


def judge(state, env) -> Judgement:
    """The verdict of the configured signal on ``state`` (``env.config.sufficiency_*``)."""
    cfg = env.config
    kind = getattr(cfg, "sufficiency_signal", "text") or "text"
    gates = bool(getattr(cfg, "sufficiency_gates", True))
    thr = getattr(cfg, "sufficiency_threshold", None)
    if kind == "text":
        gen = env.generate(prompts.sufficiency_messages(state.question, state.docs,
                                                        cfg.doc_chars),
                           prompts.SUFFICIENCY_MAX_TOKENS)
        reply = prompts.parse_sufficiency(gen.text)
        score = 1.0 if reply.sufficient else 0.0
        ok = reply.sufficient if thr is None else score >= thr
        return Judgement(ok, score, thr, kind, gates, gen.text, reply.parsed, reply.gap, [gen])
    thr = DEFAULT_THRESHOLDS[kind] if thr is None else float(thr)
    if kind == "margin":
        if env.generator is None:
            raise RuntimeError("this action needs a generator, and the environment has none")
        score, sc = probe_margin_scored(state.question, state.docs, env.generator,
                                        cfg.doc_chars)
        raw = json.dumps({k: round(v, 4) for k, v in sc.logprobs.items()})
        return Judgement(score >= thr, score, thr, kind, gates, raw, True, "", [sc])
    if kind == "learned":
        est = getattr(env, "sufficiency_estimator", None)
        if est is None:
            raise SufficiencyError("sufficiency_signal='learned' needs env.sufficiency_estimator "
                                   "(SufficiencySignal.configure(env))")
        score = est.predict_state(state)
        return Judgement(score >= thr, score, thr, kind, gates, f"p={score:.4f}", True, "", [])
    if kind == "answer_conf":
        if env.generator is None:
            raise RuntimeError("this action needs a generator, and the environment has none")
        score, draft, gens = answer_confidence(state.question, state.docs, env.generator,
                                               cfg.doc_chars)
        return Judgement(score >= thr, score, thr, kind, gates, draft, True, "", gens)
    raise SufficiencyError(f"unknown sufficiency signal {kind!r}")


def write_gap(state, env):
    """(gap text, the generation): the generator names the missing fact as a short query."""
    gen = env.generate(prompts.gap_messages(state.question, state.docs, env.config.doc_chars),
                       prompts.GAP_MAX_TOKENS)
    return prompts.parse_gap(gen.text), gen


def train_signal(questions: Sequence, env, kind: str = "auto", rule: str = "youden",
                 llm_questions: int | None = 100, seed: int = 13, progress: bool = True,
                 min_gain: float = 0.05, workers: int = 1) -> SufficiencySignal | None:
    """The signal for a training run (``train --sufficiency-signal``), on TRAINING questions.

    ``auto``: calibrate text, margin and learned and keep the best informative one (or the
    non-gating text probe when none is). A named signal is kept even when it measures at
    chance (its stats say so), with its calibrated threshold. ``text``: None, the original
    probe, nothing to calibrate. ``workers``: calibration states whose LLM signals (text,
    margin, answer_conf) are scored at once, > 1 with a server generator only
    (:func:`signal_scores`); ``learned`` makes no LLM call."""
    if kind == "text":
        return None
    kinds = ("text", "margin", "learned") if kind == "auto" else (kind,)
    sig = calibrate_for(questions, env, kinds=kinds, rule=rule, llm_questions=llm_questions,
                        seed=seed, progress=progress, min_gain=min_gain, workers=workers)
    if kind != "auto" and sig.kind != kind:
        st = sig.stats[kind]
        est = None
        if kind == "learned":
            states = [c for c in calibration_states(questions, env, seed=seed)
                      if c.kind == "reachable"]
            est = fit_estimator(np.stack([learned_features(c.state) for c in states]),
                                np.array([float(c.sufficient) for c in states]), seed=seed)
        sig = replace(sig, kind=kind, threshold=st.threshold, gates=True, rule=st.rule,
                      estimator=est)
    return sig
