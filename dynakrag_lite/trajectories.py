"""Training data: trajectories on training questions and support-recall targets (paper Eq. 1).

At every state s visited by a seeded uniform-valid rollout each valid action a gets its label:

    acquisition actions:  v(s, a) = SR(s') - SR(s)   (the branch is executed: s' is needed)
    sufficiency_check:    v(s, a) = 1[SR(s) = 1]     (no execution needed: no LLM call)
    stop_answer:          v(s, a) = SR(s)
    compress_answer_evidence: not labelled (terminal)

Acquisition branches are executed once each (states are immutable, so branching is free); a
counterfactual sufficiency_check is labelled without being run, and is executed only when the
rollout takes it (its next state is then used), which is also when its real token cost is
logged. SR uses the gold support labels, which exist only here and in the metrics, never in a
state. The rollout continues with the action the uniform controller picks until a cap forces
the stop. LLM actions call the generator; the call cache makes re-collection cheap.

Every visited state with documents is also a prefix for the continuation model
(:class:`PrefixSample`): its SR and, with ``continuation="f1"``, the reader's answer F1 from
its documents (one answer call per prefix; these calls share the documents prefix of the
state's other prompts, so llama.cpp reuses the KV cache, and they go through the call cache).
The target ``gain`` is F1(end of rollout) - F1(now) (``"f1"``), SR(end) - SR(now) (``"sr"``),
or the best one-step SR gain (``"onestep"``); see :mod:`dynakrag_lite.training_data`.
"""
from __future__ import annotations

import math
import random
from typing import Iterable, Sequence

import numpy as np

from .actions import answer, apply_action
from .concurrency import check_workers, locked_runner, run_in_order
from .config import Environment
from .data.corpus import gold_titles
from .data.schema import Question
from .features import heuristic_cost, phi, state_features
from .metrics import em_f1
from .state import EvidenceState, RETRIEVAL_ACTIONS, initial_state
from .training_data import CONTINUATION_TARGETS, PrefixSample, Sample, TrainingData
from .validity import valid_actions
from .oracle import sr

# OracleChooser and the TrainingData records used to live here; re-exported for old imports.
from .oracle import OracleChooser  # noqa: F401

__all__ = ["label", "collect_question", "collect", "sr", "Sample", "PrefixSample",
           "TrainingData", "OracleChooser", "CONTINUATION_TARGETS", "answer_f1"]


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
    if prefixes:  # the last prefix is the rollout's end
        end = prefixes[-1]
        for p in prefixes:
            p.sr_end, p.f1_end = end.sr_now, end.f1_now
            p.gain = float(p.target(continuation))
    return samples, prefixes


def collect(questions: Iterable[Question], env: Environment, seed: int = 13,
            progress: bool = True, continuation: str = "f1",
            answer_questions: int | None = None, workers: int = 1) -> TrainingData:
    """Trajectories of ``questions`` (training questions only) with continuation targets of
    kind ``continuation`` (``"f1"``: one answer call per prefix; ``"sr"``/``"onestep"``: none).

    ``answer_questions``: with ``"f1"``, only the first N questions get answer calls (they
    dominate the cost: one reader call over up to 12 documents per prefix). The value model
    learns from every question; the continuation model and the F1 tuning from those N.

    ``workers``: questions collected at once; > 1 needs a server generator
    (:func:`~dynakrag_lite.concurrency.check_workers`). Only the server calls overlap
    (:mod:`dynakrag_lite.concurrency`) and results are taken in question order, so the data
    is the sequential run's (for a server whose greedy replies do not depend on its load)."""
    from tqdm.auto import tqdm
    check_workers(workers, env.generator)
    data = TrainingData(continuation_target=continuation)
    qs = list(questions)

    def one(item: tuple[int, Question], e: Environment
            ) -> tuple[list[Sample], list[PrefixSample]]:
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
        run_in_order(list(enumerate(qs)), locked_runner(one, env, workers), workers, emit,
                     name="trajectories")
    return data
