"""The validity layer: A(s), the actions executable in state s, by explicit rules.

Rules (paper Table 5, with our readings of what it leaves open):

* retrieve_more: the initial ranking is not exhausted and the retrieval budget is not spent.
* gap_query: the last sufficiency probe recorded a non-empty gap.
* rewrite_query: evidence has been retrieved. bridge_entity_expand: a candidate is unexpanded.
* sufficiency_check: evidence exists, the probe is enabled, and the evidence changed since the
  last probe (a second probe of the same documents would return the same verdict).
* stop_answer: evidence exists, or nothing else is valid; always valid when a cap is hit.
* Caps: at ``max_steps`` or ``max_docs`` only stop_answer remains; a spent retrieval cap removes
  the four retrieval actions.
* compress_answer_evidence is terminal: once, after stop_answer, if enabled and the state holds
  more than ``answer_docs_up_to`` documents."""
from __future__ import annotations

from .config import ControlConfig
from .state import ACTIONS, EvidenceState


def cap_hit(state: EvidenceState, cfg: ControlConfig) -> str | None:
    """The name of the hard cap the state has reached, or None."""
    if state.steps >= cfg.max_steps:
        return "max_steps"
    if len(state.docs) >= cfg.max_docs:
        return "max_docs"
    return None


def retrieval_budget_spent(state: EvidenceState, cfg: ControlConfig) -> bool:
    return cfg.retrieval_cap is not None and state.ledger.retrieval_calls >= cfg.retrieval_cap


def valid_actions(state: EvidenceState, cfg: ControlConfig) -> tuple[str, ...]:
    """A(s), in the canonical action order."""
    if state.stopped:
        done = "compress_answer_evidence" in state.history
        compress = cfg.use_compression and len(state.docs) > cfg.answer_docs_up_to
        return ("compress_answer_evidence",) if compress and not done else ()
    if cap_hit(state, cfg):
        return ("stop_answer",)
    has_docs = bool(state.docs)
    ok: set[str] = set()
    if not retrieval_budget_spent(state, cfg):
        if state.frontier_left is None or state.frontier_left > 0:
            ok.add("retrieve_more")
        if state.gap.strip():
            ok.add("gap_query")
        if has_docs:
            ok.add("rewrite_query")
        if state.unexpanded_bridges:
            ok.add("bridge_entity_expand")
    if cfg.use_sufficiency and has_docs and (
            state.sufficiency is None or state.sufficiency.doc_ids != state.doc_ids):
        ok.add("sufficiency_check")
    if has_docs or not ok:
        ok.add("stop_answer")
    return tuple(a for a in ACTIONS if a in ok)
