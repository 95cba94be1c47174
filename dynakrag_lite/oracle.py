"""The oracle: a greedy chooser that reads the gold support labels (never deployable; it
maximises support one step at a time, so it is a reference, not an upper bound on F1)."""
from __future__ import annotations

from typing import Sequence

from .actions import apply_action
from .config import Environment
from .metrics import support_recall
from .state import EvidenceState, RETRIEVAL_ACTIONS


def sr(state: EvidenceState, gold: Sequence[str]) -> float:
    """Support recall of a state's documents against the gold titles."""
    return support_recall(state.titles, gold)


class OracleChooser:
    """A reference, NOT deployable (it reads gold support labels), not an upper bound: at each
    state it takes the valid acquisition with the largest true SR gain and stops when support
    is complete or no single action raises it. Its ledger counts only the path it takes."""
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
