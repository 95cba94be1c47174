"""Training data (chapter 7): trajectories on training questions and support-recall targets
(paper Eq. 1).

At every state s of a seeded uniform-valid rollout each valid action a is labelled:

    acquisition actions:  v(s, a) = SR(s') - SR(s)   (the branch is executed)
    sufficiency_check:    v(s, a) = 1[SR(s) = 1]     (no LLM call needed)
    stop_answer:          v(s, a) = SR(s)
    compress_answer_evidence: not labelled (terminal)

States are immutable, so branching is free; a counterfactual sufficiency_check is run (its
tokens logged) only when the rollout takes it. Gold support labels exist only here and in the
metrics, never in a state.

Every visited state with documents is a :class:`PrefixSample` for the continuation model (the
paper does not state its target): ``f1`` (default; F1 of the answer at the end of the rollout
minus F1 if stopping here, one answer call per prefix), ``sr`` (SR gain to the end, no answer
calls) or ``onestep`` (best one-step SR gain). The targets estimate the utility of continuing
under the uniform exploration, not under the learned policy."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .actions import answer, apply_action
from .config import Environment
from .data.corpus import gold_titles
from .data.schema import Question
from .features import FEATURE_NAMES, heuristic_cost, phi, state_features
from .metrics import em_f1
from .state import EvidenceState, RETRIEVAL_ACTIONS, initial_state
from .oracle import sr
from .validity import valid_actions

__all__ = ["CONTINUATION_TARGETS", "Sample", "PrefixSample", "TrainingData", "label",
           "answer_f1", "collect_question", "finish_prefixes", "collect", "sr"]

CONTINUATION_TARGETS = ("f1", "sr", "onestep")


# -- the records ------------------------------------------------------------------------------

@dataclass
class Sample:
    qid: str
    step: int
    action: str
    features: np.ndarray
    target: float
    cost_tokens: float  # tokens the action actually cost (for the cost model)
    n_docs: int
    chosen: bool = False  # the rollout continued with this action (the path tau)
    # False: a counterfactual sufficiency_check labelled without a call (cost_tokens 0)
    executed: bool = True


@dataclass
class PrefixSample:
    """A visited state with documents, for the continuation model (see the module text)."""
    qid: str
    features: np.ndarray  # state features (STATE_FEATURE_NAMES order)
    gain: float  # the continuation target in use (TrainingData.continuation_target)
    step: int = -1  # len(history) of the prefix (pairs it with the Samples of that state)
    onestep: float = math.nan  # best one-step SR gain among the valid acquisition actions
    sr_now: float = math.nan  # SR of this state
    sr_end: float = math.nan  # SR at the end of the rollout
    f1_now: float = math.nan  # reader's answer F1 from this state's documents
    f1_end: float = math.nan  # ... from the rollout's final documents
    tokens: float = math.nan  # ledger tokens spent to reach this state
    answer_tokens: float = math.nan  # tokens of the answer call from this state

    def target(self, kind: str) -> float:
        if kind == "f1":
            return self.f1_end - self.f1_now
        if kind == "sr":
            return self.sr_end - self.sr_now
        if kind == "onestep":
            return self.onestep
        raise ValueError(f"unknown continuation target {kind!r}; one of {CONTINUATION_TARGETS}")


@dataclass
class TrainingData:
    """The samples and prefixes of collected trajectories plus the training question ids
    (written to and read from ``.npz`` files by :mod:`dynakrag_lite.training.files`)."""
    samples: list[Sample] = field(default_factory=list)
    prefixes: list[PrefixSample] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    # Which target (CONTINUATION_TARGETS) the prefixes' ``gain`` holds; None: not stated (hand
    # built records), which saving and train_policy() refuse rather than guess.
    continuation_target: str | None = None
    # What the trajectories were collected under: train --from-data refuses other settings.
    run: dict = field(default_factory=dict)
    # The sufficiency calibration states (a training.files.CalibrationTable), or None.
    calibration: Any = None

    def matrix(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        X = np.stack([s.features for s in self.samples]) if self.samples else \
            np.zeros((0, len(FEATURE_NAMES)))
        y = np.array([s.target for s in self.samples])
        return X, y, [s.action for s in self.samples]

    def action_gains(self, retrieval_actions: tuple[str, ...] = (
            "retrieve_more", "gap_query", "bridge_entity_expand", "rewrite_query")
                     ) -> dict[str, dict[str, float]]:
        """Per acquisition action over every executed branch: ``calls``, ``questions``,
        ``mean_sr_gain``, ``hit_rate`` (share adding a gold document) and ``chosen`` calls."""
        out: dict[str, dict[str, float]] = {}
        for a in retrieval_actions:
            ss = [s for s in self.samples if s.action == a and s.executed]
            if not ss:
                continue
            gains = np.array([s.target for s in ss], dtype=np.float64)
            out[a] = {"calls": len(ss), "questions": len({s.qid for s in ss}),
                      "mean_sr_gain": round(float(gains.mean()), 4),
                      "hit_rate": round(float((gains > 0).mean()), 4),
                      "chosen": sum(s.chosen for s in ss)}
        return out

    def set_continuation_target(self, kind: str) -> "TrainingData":
        """Recompute every prefix's ``gain`` as ``kind`` from the stored components (no model
        call); ValueError when they are missing (``f1`` needs ``continuation="f1"`` data)."""
        if kind not in CONTINUATION_TARGETS:
            raise ValueError(f"unknown continuation target {kind!r}; one of "
                             f"{CONTINUATION_TARGETS}")
        vals = [p.target(kind) for p in self.prefixes]
        if any(not np.isfinite(v) for v in vals):
            raise ValueError(f"these trajectories lack the components of the {kind!r} target; "
                             f"collect them with continuation={kind!r}")
        for p, v in zip(self.prefixes, vals):
            p.gain = float(v)
        self.continuation_target = kind
        return self

    def subset(self, qids) -> "TrainingData":
        """The records of the given questions only (cross-validation folds)."""
        keep = set(qids)
        return TrainingData([s for s in self.samples if s.qid in keep],
                            [p for p in self.prefixes if p.qid in keep],
                            [q for q in self.questions if q in keep], self.continuation_target,
                            dict(self.run),
                            None if self.calibration is None else self.calibration.subset(keep))

    def to_frame(self):
        """The samples as a pandas DataFrame (one row per labelled (s, a); no features)."""
        return pd.DataFrame([{"qid": s.qid, "step": s.step, "action": s.action,
                              "target": s.target, "chosen": s.chosen, "n_docs": s.n_docs,
                              "cost_tokens": s.cost_tokens} for s in self.samples],
                            columns=["qid", "step", "action", "target", "chosen", "n_docs",
                                     "cost_tokens"])

    def prefix_frame(self):
        """The prefixes as a DataFrame (no features): what stopping at each would give."""
        cols = ["qid", "step", "gain", "onestep", "sr_now", "sr_end", "f1_now", "f1_end",
                "tokens", "answer_tokens"]
        return pd.DataFrame([{c: getattr(p, c) for c in cols} for p in self.prefixes], columns=cols)


# -- collection -------------------------------------------------------------------------------


def label(state: EvidenceState, action: str, gold: Sequence[str],
          next_state: EvidenceState | None) -> float:
    """The paper's target for (s, a)."""
    if action in RETRIEVAL_ACTIONS:
        assert next_state is not None
        return sr(next_state, gold) - sr(state, gold)
    if action == "sufficiency_check":
        return float(sr(state, gold) == 1.0)
    if action == "stop_answer":
        return sr(state, gold)
    raise ValueError(f"{action} is not labelled")


def answer_f1(state: EvidenceState, q: Question, env: Environment) -> tuple[float, int]:
    """(F1 of the reader's answer from the state's documents, tokens of that call)."""
    _, pred, gen = answer(state, env)
    if not q.answers:
        return math.nan, gen.prompt_tokens + gen.completion_tokens
    return em_f1(pred, q.answers)[1], gen.prompt_tokens + gen.completion_tokens


def collect_question(q: Question, env: Environment, seed: int = 13, continuation: str = "f1",
                     answer_calls: bool = True) -> tuple[list[Sample], list[PrefixSample]]:
    """One seeded uniform-valid rollout with counterfactual labels at every visited state.
    ``answer_calls=False`` with the ``"f1"`` target skips the answer calls: the value model's
    samples are complete, the prefixes' F1 and continuation target are NaN (not used)."""
    if continuation not in CONTINUATION_TARGETS:
        raise ValueError(f"unknown continuation target {continuation!r}; one of "
                         f"{CONTINUATION_TARGETS}")
    gold = gold_titles(q)
    rng = random.Random(f"{seed}|{q.id}")
    state = initial_state(q.question, q.id)
    samples: list[Sample] = []
    prefixes: list[PrefixSample] = []
    while not state.stopped:
        valid = valid_actions(state, env.config)
        base = state_features(state)
        branches: dict[str, EvidenceState] = {}
        gains = []
        first = len(samples)
        for a in valid:
            nxt = None
            if a in RETRIEVAL_ACTIONS:  # the label needs s'
                nxt = apply_action(state, a, env)
                branches[a] = nxt
            y = label(state, a, gold, nxt)
            if a in RETRIEVAL_ACTIONS:
                gains.append(y)
            cost = float(nxt.ledger.tokens - state.ledger.tokens) if nxt is not None else 0.0
            c_est = heuristic_cost(state, a, env.config.doc_chars, env.config.per_action)
            samples.append(Sample(q.id, len(state.history), a, phi(state, a, c_est, base), y,
                                  cost, len(state.docs),
                                  executed=nxt is not None or a == "stop_answer"))
        if state.docs:
            sv = np.array([base[n] for n in base], dtype=np.float64)
            p = PrefixSample(q.id, sv, 0.0, len(state.history),
                             onestep=max(gains, default=0.0), sr_now=sr(state, gold),
                             tokens=float(state.ledger.tokens))
            if continuation == "f1" and answer_calls:
                p.f1_now, p.answer_tokens = answer_f1(state, q, env)
            prefixes.append(p)
        options = [a for a in valid if a != "stop_answer"]
        if not options:
            break
        choice = rng.choice(options)
        for smp in samples[first:]:
            smp.chosen = smp.action == choice
        if choice not in branches:  # sufficiency_check: executed now that its s' is used
            nxt = apply_action(state, choice, env)
            branches[choice] = nxt
            for smp in samples[first:]:
                if smp.action == choice:
                    smp.cost_tokens = float(nxt.ledger.tokens - state.ledger.tokens)
                    smp.executed = True
        state = branches[choice]
    finish_prefixes(prefixes, continuation)
    return samples, prefixes


def finish_prefixes(prefixes: list[PrefixSample], continuation: str) -> None:
    """Set one rollout's ``sr_end``/``f1_end`` (its last prefix is the rollout's end) and each
    prefix's ``gain`` (target ``continuation``); also after answer F1s are added later."""
    if prefixes:
        end = prefixes[-1]
        for p in prefixes:
            p.sr_end, p.f1_end = end.sr_now, end.f1_now
            p.gain = float(p.target(continuation))


def collect(questions: Iterable[Question], env: Environment, seed: int = 13,
            progress: bool = True, continuation: str = "f1",
            answer_questions: int | None = None,
            runner: Callable[[list, Callable, Callable, Environment], None] | None = None) -> TrainingData:
    """Trajectories of ``questions`` (training only) with ``continuation`` targets (``"f1"``:
    answer calls for the first ``answer_questions``; ``"sr"``/``"onestep"``: none).
    ``runner(items, one, emit, env)`` calls ``one`` per item and ``emit`` in item order."""
    data = TrainingData(continuation_target=continuation)
    qs = list(questions)

    def one(item: tuple[int, Question], e: Environment) -> tuple[list[Sample], list[PrefixSample]]:
        i, q = item  # the position, not the worker, decides the answer calls
        return collect_question(q, e, seed, continuation,
                                answer_calls=answer_questions is None or i < answer_questions)

    with tqdm(total=len(qs), desc="trajectories", disable=not progress) as bar:
        def emit(item: tuple[int, Question],
                 result: tuple[list[Sample], list[PrefixSample]]) -> None:
            data.samples.extend(result[0])
            data.prefixes.extend(result[1])
            data.questions.append(item[1].id)
            bar.update(1)
        (runner or _one_by_one)(list(enumerate(qs)), one, emit, env)
    return data


def _one_by_one(items: list, one: Callable, emit: Callable, env: Environment) -> None:
    for item in items:
        emit(item, one(item, env))
