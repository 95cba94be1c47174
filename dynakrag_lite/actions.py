"""The seven atomic actions. Each is a function ``(state, env) -> new state``.

``env`` (:class:`Environment`) carries what the actions use but the state must not hold: the
retriever, the generator and the budgets. Gold labels are not in it either.

Retrieval actions add at most ``config.per_action`` (paper: 3) documents that are new by id
and by normalized title, never beyond ``config.max_docs`` (paper: 12).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from . import prompts
from .bridge import bridge_candidates
from .corpus import normalize_title
from .generators import Generation, Generator
from .state import EvidenceState, RankedEntry, RetrievedDoc, Sufficiency


@dataclass(frozen=True)
class ControlConfig:
    """Budgets and switches; defaults are the paper's settings."""
    per_action: int = 3
    max_docs: int = 12
    max_steps: int = 4
    retrieval_cap: int | None = None  # no explicit cap in the paper's main runs
    ranking_depth: int = 50  # length of the initial ranking the frontier walks
    doc_chars: int | None = 600  # per-document text shown to the generator (None: whole text)
    use_sufficiency: bool = True
    use_compression: bool = True
    fact_table: bool = False  # MuSiQue-style compression prompt
    max_snippets: int = 8
    max_bridges: int = 5
    use_spacy: bool = True

    @classmethod
    def for_dataset(cls, dataset: str, **kw) -> "ControlConfig":
        """Paper: MuSiQue compresses into a fact table (<=12 snippets, 384 tokens)."""
        if dataset == "musique":
            kw.setdefault("fact_table", True)
            kw.setdefault("max_snippets", 12)
        return cls(**kw)


@dataclass
class Environment:
    retriever: object  # dynakrag_lite.retriever.Retriever
    generator: Generator | None
    config: ControlConfig = field(default_factory=ControlConfig)

    def generate(self, messages, max_tokens: int) -> Generation:
        if self.generator is None:
            raise RuntimeError("this action needs a generator, and the environment has none")
        return self.generator.generate(messages, max_tokens=max_tokens)


# -- helpers ----------------------------------------------------------------------------
def _room(state: EvidenceState, cfg: ControlConfig) -> int:
    return max(0, min(cfg.per_action, cfg.max_docs - len(state.docs)))


def _add_hits(state: EvidenceState, hits: Sequence, source: str, room: int
              ) -> tuple[RetrievedDoc, ...]:
    """New docs from ``hits`` (objects with doc/score or id/title/text/score), dedup by id and
    normalized title against the state and each other."""
    ids, titles = set(state.doc_ids), set(state.title_keys)
    step = len(state.history)
    added: list[RetrievedDoc] = []
    for h in hits:
        d = getattr(h, "doc", h)
        key = normalize_title(d.title)
        if d.id in ids or key in titles:
            continue
        ids.add(d.id)
        titles.add(key)
        added.append(RetrievedDoc(d.id, d.title, d.text, float(h.score), source, step))
        if len(added) >= room:
            break
    return tuple(added)


def _search_new(state: EvidenceState, env: Environment, query: str, room: int):
    """Top unseen docs for ``query``; asks for extra hits so title dedup can still fill room."""
    hits = env.retriever.search(query, k=room + len(state.docs) + 3, exclude=state.doc_ids)
    return _add_hits(state, hits, "", room)


def _after_retrieval(state: EvidenceState, env: Environment, action: str, query: str,
                     added: tuple[RetrievedDoc, ...], **changes) -> EvidenceState:
    added = tuple(replace(d, source=action) for d in added)
    docs = state.docs + added
    cfg = env.config
    bridges = bridge_candidates(state.question, docs, exclude=state.expanded_bridges,
                                max_candidates=cfg.max_bridges, use_spacy=cfg.use_spacy)
    return replace(state, docs=docs, query=query, bridge_candidates=bridges,
                   history=state.history + (action,),
                   ledger=state.ledger.plus_retrieval(), **changes)


# -- the seven actions ------------------------------------------------------------------
def retrieve_more(state: EvidenceState, env: Environment) -> EvidenceState:
    """Advance the frontier of the question's initial ranking; append unseen docs."""
    cfg = env.config
    ranking = state.initial_ranking
    if ranking is None:  # the first call computes the initial ranking (one retrieval)
        hits = env.retriever.search(state.question, k=cfg.ranking_depth)
        ranking = tuple(RankedEntry(h.doc.id, h.doc.title, h.doc.text, h.score) for h in hits)
    room = _room(state, cfg)
    added: list[RetrievedDoc] = []
    cursor = state.frontier
    ids, titles = set(state.doc_ids), set(state.title_keys)
    while cursor < len(ranking) and len(added) < room:
        e = ranking[cursor]
        cursor += 1
        key = normalize_title(e.title)
        if e.id in ids or key in titles:
            continue
        ids.add(e.id)
        titles.add(key)
        added.append(RetrievedDoc(e.id, e.title, e.text, e.score, "retrieve_more",
                                  len(state.history)))
    return _after_retrieval(state, env, "retrieve_more", state.question, tuple(added),
                            initial_ranking=ranking, frontier=cursor)


def gap_query(state: EvidenceState, env: Environment) -> EvidenceState:
    """Search with the missing-information text of the last sufficiency probe."""
    query = state.gap
    added = _search_new(state, env, query, _room(state, env.config))
    return _after_retrieval(state, env, "gap_query", query, added)


def bridge_entity_expand(state: EvidenceState, env: Environment) -> EvidenceState:
    """Search around the best unexpanded bridge entity."""
    entity = state.unexpanded_bridges[0]
    added = _search_new(state, env, entity, _room(state, env.config))
    expanded = state.expanded_bridges + (entity,)
    new = _after_retrieval(state, env, "bridge_entity_expand", entity, added,
                           expanded_bridges=expanded)
    return new


def rewrite_query(state: EvidenceState, env: Environment) -> EvidenceState:
    """The generator reformulates the query from the evidence; then search with it."""
    cfg = env.config
    gen = env.generate(prompts.rewrite_messages(state.question, state.docs, cfg.doc_chars),
                       prompts.REWRITE_MAX_TOKENS)
    query = prompts.parse_query(gen.text, fallback=state.question)
    ledger = state.ledger.plus_generation(gen)
    state = replace(state, ledger=ledger)
    added = _search_new(state, env, query, _room(state, cfg))
    return _after_retrieval(state, env, "rewrite_query", query, added)


def sufficiency_check(state: EvidenceState, env: Environment) -> EvidenceState:
    """The generator judges answerability; if insufficient it writes the gap."""
    cfg = env.config
    gen = env.generate(prompts.sufficiency_messages(state.question, state.docs, cfg.doc_chars),
                       prompts.SUFFICIENCY_MAX_TOKENS)
    reply = prompts.parse_sufficiency(gen.text)
    verdict = Sufficiency(reply.sufficient, reply.gap, gen.text, reply.parsed, state.doc_ids)
    # A new gap replaces the old one; a 'sufficient' verdict clears it.
    gap = reply.gap if not reply.sufficient else ""
    return replace(state, sufficiency=verdict, gap=gap,
                   history=state.history + ("sufficiency_check",),
                   ledger=state.ledger.plus_generation(gen))


def stop_answer(state: EvidenceState, env: Environment | None = None,
                reason: str = "policy") -> EvidenceState:
    """End acquisition."""
    return replace(state, stopped=True, stop_reason=reason,
                   history=state.history + ("stop_answer",))


@dataclass(frozen=True)
class Compression:
    snippets: tuple[str, ...]
    raw: str
    generation: Generation


def compress_answer_evidence(state: EvidenceState, env: Environment
                             ) -> tuple[EvidenceState, Compression]:
    """After termination: extract mutually supporting snippets (answer-focused, or a fact
    table for MuSiQue). Returns the state (history and ledger updated) and the snippets."""
    cfg = env.config
    limit = prompts.COMPRESS_MAX_TOKENS_FACT_TABLE if cfg.fact_table else \
        prompts.COMPRESS_MAX_TOKENS
    gen = env.generate(prompts.compress_messages(state.question, state.docs, cfg.fact_table,
                                                 cfg.max_snippets, cfg.doc_chars), limit)
    snippets = tuple(prompts.parse_snippets(gen.text, cfg.max_snippets))
    new = replace(state, history=state.history + ("compress_answer_evidence",),
                  ledger=state.ledger.plus_generation(gen))
    return new, Compression(snippets, gen.text, gen)


ACQUISITION: dict[str, Callable[[EvidenceState, Environment], EvidenceState]] = {
    "retrieve_more": retrieve_more,
    "gap_query": gap_query,
    "bridge_entity_expand": bridge_entity_expand,
    "rewrite_query": rewrite_query,
    "sufficiency_check": sufficiency_check,
    "stop_answer": stop_answer,
}


def apply_action(state: EvidenceState, action: str, env: Environment) -> EvidenceState:
    """Execute one acquisition/control action (compression is terminal, see above)."""
    if action not in ACQUISITION:
        raise ValueError(f"unknown action {action!r}")
    return ACQUISITION[action](state, env)


def answer(state: EvidenceState, env: Environment, snippets: Sequence[str] | None = None
           ) -> tuple[EvidenceState, str, Generation]:
    """The generator's final answer, from the snippets if compression ran, else the docs."""
    cfg = env.config
    if snippets:
        msgs = prompts.answer_from_snippets_messages(state.question, "\n".join(snippets))
    else:
        msgs = prompts.answer_messages(state.question, state.docs, cfg.doc_chars)
    gen = env.generate(msgs, prompts.ANSWER_MAX_TOKENS)
    return replace(state, ledger=state.ledger.plus_generation(gen)), \
        prompts.parse_answer(gen.text), gen
