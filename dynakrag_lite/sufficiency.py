"""Sufficiency signals (chapter 5; calibrated in appendix 97): how the probe decides "the
evidence is enough".

Small readers are poor judges *in text*: on HotpotQA qwen2.5-coder-0.5b and -1.5b greedily
answer SUFFICIENT to every context, yet the 1.5B model's log-probabilities separate complete
from incomplete evidence (AUC .75). So the verdict is a *signal* with a threshold calibrated
per generator (:mod:`dynakrag_lite.training.calibration`); higher means "more likely sufficient":

* ``text``: the greedy reply parsed (1 = SUFFICIENT); an INSUFFICIENT reply carries its gap.
* ``margin``: log P(SUFFICIENT) - log P(INSUFFICIENT) after the same prompt.
* ``learned``: :class:`SufficiencyEstimator` on state features; no LLM call.
* ``answer_conf``: mean token log-probability of the reader's greedy draft answer.

Score-based signals write the gap (``prompts.gap_messages``) only when insufficient. With no
informative signal the text probe runs with ``gates=False``: its verdict reaches neither the gap
nor the value model's features."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from . import prompts
from .features import STATE_FEATURE_NAMES, state_features
from .generators.base import SCORING_MODES, OptionScores, check_messages, option_scores

__all__ = [
    "OPTIONS", "SIGNALS", "SIGNAL_CHOICES", "DEFAULT_THRESHOLDS", "SufficiencyError",
    "score_options", "first_token_logprobs", "probe_margin",
    "probe_margin_scored", "answer_confidence", "reply_confidence", "LEARNED_FEATURE_NAMES", "learned_features",
    "SufficiencyEstimator", "SignalStats", "SufficiencySignal", "configure", "Judgement",
    "judge", "write_gap",
]

SUFFICIENT, INSUFFICIENT = "SUFFICIENT", "INSUFFICIENT"
OPTIONS = (SUFFICIENT, INSUFFICIENT)
SIGNALS = ("text", "margin", "learned", "answer_conf")
# what `train --sufficiency-signal` takes: a signal, or "auto" (calibrate and keep the best)
SIGNAL_CHOICES = ("auto",) + SIGNALS
DEFAULT_THRESHOLDS = {"text": 0.5, "margin": 0.0, "learned": 0.5, "answer_conf": -1.0}


class SufficiencyError(RuntimeError):
    """A signal cannot be computed (backend without log-probs, missing estimator, ...)."""


# -- log-probabilities of reply options -------------------------------------------------------

def score_options(generator: Any, messages: Sequence[dict], options: Sequence[str],
                  mode: str = "auto") -> OptionScores:
    """Log-probabilities of each reply option right after the chat-templated prompt; ``mode``:
    "first_token", "sequence" (summed over the option's tokens) or "auto" (first tokens when
    they differ between options)."""
    if mode not in SCORING_MODES:
        raise ValueError(f"unknown scoring mode {mode!r}")
    options = list(dict.fromkeys(options))
    if not options:
        raise ValueError("no options to score")
    msgs = check_messages(list(messages))
    scorer = getattr(generator, "option_logprobs", None)  # optional in the Generator protocol
    if not callable(scorer):
        raise SufficiencyError(f"{type(generator).__name__}: this backend cannot score "
                               "log-probabilities (supported: llama.cpp, transformers, "
                               "OpenAI-compatible servers, or a backend with option_logprobs)")
    t0 = time.perf_counter()
    return option_scores(scorer(msgs, options, mode), msgs, options, time.perf_counter() - t0)


def first_token_logprobs(generator: Any, messages: Sequence[dict], options: Sequence[str]
                         ) -> dict[str, float]:
    """log P(first token of each option) at the next position after the chat-templated prompt
    (options sharing a first token get the same number; see :func:`score_options`)."""
    return dict(score_options(generator, messages, options, mode="first_token").logprobs)


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
    """(mean token log-prob of the reader's greedy draft answer, the draft, the calls made); the
    draft is the cached ordinary answer call, an empty one scores -10."""
    return reply_confidence(prompts.answer_messages(question, docs, doc_chars), generator)


def reply_confidence(msgs: Sequence[dict], generator: Any) -> tuple[float, str, list]:
    """:func:`answer_confidence` of any answer prompt ``msgs`` (e.g. the final answer's, from
    snippets: ``actions.final_answer_prompt``)."""
    gen = generator.generate(msgs, max_tokens=prompts.ANSWER_MAX_TOKENS)
    reply = gen.text.strip()
    if not reply:
        return -10.0, "", [gen]
    sc = score_options(generator, msgs, [reply], mode="sequence")
    n = max(1, sc.n_tokens.get(reply, 1))
    # The scoring pass re-reads only the reply's tokens (the prompt is in the KV cache).
    charged = replace(sc, prompt_tokens=0, completion_tokens=0)
    return sc.logprobs[reply] / n, prompts.parse_answer(gen.text), [gen, charged]


# -- the learned estimator (no LLM call) ------------------------------------------------------

# The probe's own verdict is not an input of the estimator that produces it.
LEARNED_FEATURE_NAMES: tuple[str, ...] = tuple(n for n in STATE_FEATURE_NAMES
                                               if not n.startswith("suff_"))


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
    """Which signal decides the probe's verdict, with its calibrated threshold. ``gates=False``
    (a signal at chance): the verdict gates nothing; ``estimator`` for ``kind="learned"``;
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


# -- the probe itself (used by actions.sufficiency_check) -------------------------------------

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
    kind, gates, thr = cfg.sufficiency_signal, bool(cfg.sufficiency_gates), \
        cfg.sufficiency_threshold
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
        score, sc = probe_margin_scored(state.question, state.docs, env.generator, cfg.doc_chars)
        raw = json.dumps({k: round(v, 4) for k, v in sc.logprobs.items()})
        return Judgement(score >= thr, score, thr, kind, gates, raw, True, "", [sc])
    if kind == "learned":
        est = env.sufficiency_estimator
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
