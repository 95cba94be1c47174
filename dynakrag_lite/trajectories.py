"""Training data: trajectories on training questions and support-recall targets (paper Eq. 1).

At every state s visited by a seeded uniform-valid rollout we execute each valid action a once
(the counterfactual branch; states are immutable, so branching is free) and label it:

    acquisition actions:  v(s, a) = SR(s') - SR(s)
    sufficiency_check:    v(s, a) = 1[SR(s) = 1]
    stop_answer:          v(s, a) = SR(s)
    compress_answer_evidence: not labelled (terminal)

SR uses the gold support labels, which exist only here and in the metrics, never in a state.
The rollout then continues with the action the uniform controller picks. LLM actions
(rewrite_query, sufficiency_check) call the generator; the call cache makes re-collection cheap.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from .actions import Environment, apply_action
from .corpus import gold_titles
from .data import Question
from .features import FEATURE_NAMES, heuristic_cost, phi, state_features
from .metrics import support_recall
from .state import EvidenceState, RETRIEVAL_ACTIONS, STEP_ACTIONS, initial_state
from .validity import valid_actions


def sr(state: EvidenceState, gold: Sequence[str]) -> float:
    return support_recall(state.titles, gold)


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


@dataclass
class PrefixSample:
    """For the continuation model: does continuing from this prefix raise SR?"""
    qid: str
    features: np.ndarray
    gain: float  # best one-step SR gain among the valid acquisition actions
    step: int = -1  # len(history) of the prefix (pairs it with the Samples of that state)


@dataclass
class TrainingData:
    samples: list[Sample] = field(default_factory=list)
    prefixes: list[PrefixSample] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)

    def matrix(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        X = np.stack([s.features for s in self.samples]) if self.samples else \
            np.zeros((0, len(FEATURE_NAMES)))
        y = np.array([s.target for s in self.samples])
        return X, y, [s.action for s in self.samples]

    def to_frame(self):
        """The samples as a pandas DataFrame (one row per labelled (s, a); no features)."""
        import pandas as pd
        return pd.DataFrame([{"qid": s.qid, "step": s.step, "action": s.action,
                              "target": s.target, "chosen": s.chosen, "n_docs": s.n_docs,
                              "cost_tokens": s.cost_tokens} for s in self.samples],
                            columns=["qid", "step", "action", "target", "chosen", "n_docs",
                                     "cost_tokens"])


def collect_question(q: Question, env: Environment, seed: int = 13
                     ) -> tuple[list[Sample], list[PrefixSample]]:
    """One seeded uniform-valid rollout with counterfactual labels at every visited state."""
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
        for a in valid:
            nxt = None
            if a in STEP_ACTIONS:
                nxt = apply_action(state, a, env)
                branches[a] = nxt
            y = label(state, a, gold, nxt)
            if a in RETRIEVAL_ACTIONS:
                gains.append(y)
            cost = float(nxt.ledger.tokens - state.ledger.tokens) if nxt is not None else 0.0
            c_est = heuristic_cost(state, a, env.config.doc_chars, env.config.per_action)
            samples.append(Sample(q.id, len(state.history), a, phi(state, a, c_est, base), y,
                                  cost, len(state.docs)))
        if state.docs:
            sv = np.array([base[n] for n in base], dtype=np.float64)
            prefixes.append(PrefixSample(q.id, sv, max(gains, default=0.0),
                                         len(state.history)))
        options = [a for a in valid if a != "stop_answer"]
        if not options:
            break
        choice = rng.choice(options)
        for smp in samples[len(samples) - len(valid):]:
            smp.chosen = smp.action == choice
        state = branches[choice]
    return samples, prefixes


def collect(questions: Iterable[Question], env: Environment, seed: int = 13,
            progress: bool = True) -> TrainingData:
    from tqdm.auto import tqdm
    data = TrainingData()
    qs = list(questions)
    for q in tqdm(qs, desc="trajectories", disable=not progress):
        s, p = collect_question(q, env, seed)
        data.samples.extend(s)
        data.prefixes.extend(p)
        data.questions.append(q.id)
    return data


class OracleChooser:
    """Upper bound, NOT a deployable method: it reads the gold support labels. At each state it
    executes every valid acquisition action and takes the one with the largest true SR gain;
    it stops when support is complete or no single action raises it (greedy, one step).
    Its ledger counts only the path it takes, not the branches it peeked at."""
    name = "oracle"

    def __init__(self, env: Environment, gold: Sequence[str]):
        self.env, self.gold = env, list(gold)

    def choose(self, state: EvidenceState, valid: tuple[str, ...]):
        here = sr(state, self.gold)
        scores: dict[str, dict[str, float]] = {}
        best, best_gain = "stop_answer", 0.0
        for a in valid:
            if a in RETRIEVAL_ACTIONS and here < 1.0:
                gain = sr(apply_action(state, a, self.env), self.gold) - here
                scores[a] = {"true_gain": round(gain, 4)}
                if gain > best_gain:
                    best, best_gain = a, gain
        if best == "stop_answer" and "stop_answer" not in valid:
            best = valid[0]
        if "stop_answer" in valid:
            scores["stop_answer"] = {"true_sr": round(here, 4)}
        return best, scores
