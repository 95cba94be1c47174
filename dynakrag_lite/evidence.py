"""Adding retrieved documents to a state: the one rule every method shares (chapters 5 and 11).

A retrieval step adds at most ``config.per_action`` documents that are new by id *and* by
normalized title, and never grows the context past ``config.max_docs``. DynaKRAG's actions and
the baselines (Fixed-K, IRCoT, Self-Ask) all go through these functions, so they read the same
number of documents under the same dedup rule."""
from __future__ import annotations

from typing import Sequence

from .config import ControlConfig, Environment
from .data.corpus import normalize_title
from .state import EvidenceState, RetrievedDoc

__all__ = ["room", "add_hits", "search_new"]


def room(state: EvidenceState, cfg: ControlConfig) -> int:
    """How many documents the next retrieval step may add."""
    return max(0, min(cfg.per_action, cfg.max_docs - len(state.docs)))


def add_hits(state: EvidenceState, hits: Sequence, source: str, room: int
             ) -> tuple[RetrievedDoc, ...]:
    """New docs from ``hits`` (objects with doc/score, or id/title/text/score), dedup by id and
    normalized title against the state and each other, at most ``room`` of them."""
    ids, titles = set(state.doc_ids), set(state.title_keys)
    step = len(state.history)
    added: list[RetrievedDoc] = []
    for h in hits:
        if len(added) >= room:
            break
        d = getattr(h, "doc", h)
        key = normalize_title(d.title)
        if d.id in ids or key in titles:
            continue
        ids.add(d.id)
        titles.add(key)
        added.append(RetrievedDoc(d.id, d.title, d.text, float(h.score), source, step))
    return tuple(added)


def search_new(state: EvidenceState, env: Environment, query: str, room: int,
               source: str = "") -> tuple[RetrievedDoc, ...]:
    """Top unseen docs for ``query``; asks for extra hits so title dedup can still fill room."""
    if room <= 0:
        return ()
    hits = env.retriever.search(query, k=room + len(state.docs) + 3, exclude=state.doc_ids)
    return add_hits(state, hits, source, room)
