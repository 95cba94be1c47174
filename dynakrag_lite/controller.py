"""The control loop (paper, Algorithm 1; chapter 9) and the result record every method returns.

    s <- s0
    while not stopped:
        A <- valid_actions(s)                       # rule-based validity layer
        a* <- chooser(s, A)                         # learned: argmax v(s,a) - lambda c(s,a)
        s <- apply(a*, s)
    if compression: snippets <- compress_answer_evidence(s)
    answer <- generator(question, snippets or documents)

A chooser is any object with ``choose(state, valid) -> (action, scores)`` (the learned policy,
the uniform-valid controller, the oracle); ``scores`` holds the numbers shown in the trace."""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Protocol

from .actions import answer, apply_action, compress_answer_evidence, stop_answer
from .config import Environment
from .state import RETRIEVAL_ACTIONS, EvidenceState, initial_state
from .validity import cap_hit, valid_actions


@dataclass
class StepTrace:
    step: int
    action: str
    valid: tuple[str, ...]
    scores: dict[str, dict[str, float]]
    added: tuple[str, ...]  # doc ids the action brought
    query: str = ""
    gap: str = ""
    sufficient: bool | None = None
    note: str = ""
    parsed: bool | None = None  # a sufficiency probe's reply followed the format
    compression: dict | None = None  # the compression step's counts (Compression.stats)

    def to_json(self) -> dict:
        out = {"step": self.step, "action": self.action, "valid": list(self.valid),
               "scores": self.scores, "added": list(self.added), "query": self.query,
               "gap": self.gap, "sufficient": self.sufficient, "note": self.note}
        if self.parsed is not None:
            out["parsed"] = self.parsed
        if self.compression is not None:
            out["compression"] = self.compression
        return out


@dataclass
class MethodResult:
    """What every method (DynaKRAG and the baselines) returns for one question."""
    method: str
    prediction: str
    state: EvidenceState  # final state: docs used and the cost ledger
    trace: list[StepTrace] = field(default_factory=list)
    snippets: tuple[str, ...] = ()
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


class Chooser(Protocol):
    name: str

    def choose(self, state: EvidenceState, valid: tuple[str, ...]
               ) -> tuple[str, dict[str, dict[str, float]]]: ...


class UniformChooser:
    """Uniform-valid controller (paper ablation): a seeded random valid action but stop_answer,
    until a cap; with ``stop_after`` K it stops after K acquisitions (as stop-at-K does)."""
    name = "uniform"

    def __init__(self, seed: int = 13, stop_after: int | None = None):
        self.seed = seed
        self.stop_after = stop_after

    def choose(self, state, valid):
        if self.stop_after is not None and "stop_answer" in valid and \
                sum(a in RETRIEVAL_ACTIONS for a in state.history) >= self.stop_after:
            return "stop_answer", {"stop_answer": {"schedule": float(self.stop_after)}}
        # Seeded per question and step, so a resumed run makes the same choices.
        rng = random.Random(f"{self.seed}|{state.question}|{len(state.history)}")
        options = [a for a in valid if a != "stop_answer"] or list(valid)
        a = rng.choice(options)
        return a, {x: {"p": 1.0 / len(options) if x in options else 0.0} for x in valid}


def record_step(before: EvidenceState, after: EvidenceState, action: str,
                valid: tuple[str, ...], scores: dict, note: str = "") -> StepTrace:
    added = tuple(d.id for d in after.docs[len(before.docs):])
    suff = after.sufficiency if action == "sufficiency_check" else None
    return StepTrace(step=len(before.history), action=action, valid=valid, scores=scores,
                     added=added, query=after.query if added or action != "stop_answer" else "",
                     gap=after.gap, sufficient=None if suff is None else suff.sufficient,
                     note=note or after.note,  # apply_action clears the previous note
                     parsed=None if suff is None else suff.parsed)


def finish(state: EvidenceState, env: Environment, trace: list[StepTrace],
           compress: bool | None = None) -> tuple[EvidenceState, str, tuple[str, ...]]:
    """Terminal compression (if enabled and the state holds more than
    ``config.answer_docs_up_to`` documents) and the final answer."""
    compress = env.config.use_compression if compress is None else compress
    snippets: tuple[str, ...] = ()
    if compress and len(state.docs) > env.config.answer_docs_up_to:
        before = state
        state, comp = compress_answer_evidence(state, env)
        snippets = comp.snippets
        trace.append(StepTrace(step=len(before.history), action="compress_answer_evidence",
                               valid=("compress_answer_evidence",), scores={}, added=(),
                               note=comp.note, compression=comp.stats))
    state, prediction, _ = answer(state, env, snippets)
    return state, prediction, snippets


def run_controller(question: str, env: Environment, chooser: Chooser, qid: str = "",
                   method: str | None = None, start: EvidenceState | None = None
                   ) -> MethodResult:
    """Run Algorithm 1 for one question with the given chooser (from s0, or from ``start``)."""
    t0 = time.perf_counter()
    state = start if start is not None else initial_state(question, qid)
    trace: list[StepTrace] = []
    cfg = env.config
    while not state.stopped:
        valid = valid_actions(state, cfg)
        if valid == ("stop_answer",):
            reason = cap_hit(state, cfg) or "only_stop_valid"
            new = stop_answer(state, env, reason=reason)
            trace.append(record_step(state, new, "stop_answer", valid, {}, note=reason))
            state = new
            break
        action, scores = chooser.choose(state, valid)
        if action not in valid:
            raise RuntimeError(f"{chooser.name} chose {action!r}, not in A(s)={valid}")
        new = apply_action(state, action, env)
        trace.append(record_step(state, new, action, valid, scores))
        state = new
    state, prediction, snippets = finish(state, env, trace)
    return MethodResult(method or chooser.name, prediction, state, trace, snippets,
                        time.perf_counter() - t0)
