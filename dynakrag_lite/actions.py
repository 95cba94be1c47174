"""The seven atomic actions (chapter 5), each a function ``(state, env) -> new state``.

``env`` carries what the actions use but the state must not hold (retriever, generator,
budgets, estimator, compressor); no gold labels. Retrieval actions add at most
``config.per_action`` (3) documents new by id and title, never beyond ``config.max_docs`` (12)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

from . import prompts
from .bridge import bridge_candidates, corpus_title_keys
from .compression import Compression, build_compression
from .config import Environment
from .data.corpus import normalize_title
from .evidence import room as _room, search_new as _search_new
from .generators.base import Generation
from .state import EvidenceState, RankedEntry, RetrievedDoc, Sufficiency
from .sufficiency import judge, write_gap
from .text import content_words, longest_common_run, word_tokens


def _after_retrieval(state: EvidenceState, env: Environment, action: str, query: str,
                     added: tuple[RetrievedDoc, ...], **changes) -> EvidenceState:
    added = tuple(replace(d, source=action) for d in added)
    docs = state.docs + added
    cfg = env.config
    bridges = bridge_candidates(state.question, docs, exclude=state.expanded_bridges,
                                max_candidates=cfg.max_bridges, use_spacy=cfg.use_spacy,
                                titles=corpus_title_keys(env.retriever.corpus))
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


# A rewritten query is rejected when it repeats the question or copies a document (small
# models do both: 4 of 7 qwen2.5-coder-0.5b rewrites on 30 HotpotQA questions were copied
# document text, and the 21 documents they added held no gold paragraph).
REWRITE_MAX_JACCARD = 0.7  # content-word Jaccard with the question above this: a repeat
REWRITE_COPY_RUN = 8  # a run of this many tokens copied from one retrieved document: a copy
REWRITE_COPY_SHARE = 0.9  # ... or this share of a query of >= 5 tokens in one copied run


@dataclass(frozen=True)
class RewriteInfo:
    """What rewrite_query did: the parsed reply, why it was rejected ('' if accepted) and the
    fallback used (``bridge:<entity>``, ``title:<title>``, ``question``; '' if none)."""
    query: str
    parsed: str
    rejected: str = ""
    fallback: str = ""

    @property
    def note(self) -> str:
        if not self.rejected:
            return ""
        return f"rewrite rejected ({self.rejected}); fallback:{self.fallback}"


def check_rewrite(query: str, question: str, docs: Sequence) -> str:
    """Why ``query`` is not a usable rewrite ('' when it is): ``empty``, ``repeats_question``
    (content-word Jaccard >= REWRITE_MAX_JACCARD, or no new content word while covering at
    least half of the question's) or ``copies_doc`` (a long verbatim run of a document)."""
    if not query.strip():
        return "empty"
    q, w = content_words(question), content_words(query)
    if q and w:
        jac = len(q & w) / len(q | w)
        if jac >= REWRITE_MAX_JACCARD or (w <= q and len(w) / len(q) >= 0.5):
            return "repeats_question"
    elif not w:
        return "repeats_question"  # only stopwords
    toks = word_tokens(query)
    for d in docs:
        run = longest_common_run(toks, word_tokens(d.text))
        if run >= REWRITE_COPY_RUN or (len(toks) >= 5 and run >= REWRITE_COPY_SHARE * len(toks)):
            return "copies_doc"
    return ""


def rewrite_fallback(state: EvidenceState) -> tuple[str, str]:
    """(query, how) when the model's rewrite is rejected: the question plus the best
    unexpanded bridge entity; else plus the title of the best document of the latest retrieval
    step that the question does not already name; else the question alone."""
    q = state.question
    if state.unexpanded_bridges:
        b = state.unexpanded_bridges[0]
        return f"{q} {b}", f"bridge:{b}"
    if state.docs:
        last = max(d.step for d in state.docs)
        qw = content_words(q)
        for d in sorted((d for d in state.docs if d.step == last), key=lambda d: -d.score):
            tw = content_words(d.title)
            if tw and not tw <= qw:
                return f"{q} {d.title}", f"title:{d.title}"
    return q, "question"


def _with_note(state: EvidenceState, note: str) -> EvidenceState:
    """Record the action's note on the state (the trace's StepTrace.note reads it)."""
    return replace(state, note=note)


def rewrite_query_detailed(state: EvidenceState, env: Environment
                           ) -> tuple[EvidenceState, RewriteInfo]:
    """rewrite_query, also returning what happened to the model's query (RewriteInfo)."""
    cfg = env.config
    gen = env.generate(prompts.rewrite_messages(state.question, state.docs, cfg.doc_chars),
                       prompts.REWRITE_MAX_TOKENS)
    parsed = prompts.parse_query(gen.text, fallback="", titles=state.titles)
    why = check_rewrite(parsed, state.question, state.docs)
    if why:
        query, how = rewrite_fallback(state)
        info = RewriteInfo(query, parsed, why, how)
    else:
        info = RewriteInfo(parsed, parsed)
    state = replace(state, ledger=state.ledger.plus_generation(gen))
    added = _search_new(state, env, info.query, _room(state, cfg))
    new = _after_retrieval(state, env, "rewrite_query", info.query, added)
    return _with_note(new, info.note), info


def rewrite_query(state: EvidenceState, env: Environment) -> EvidenceState:
    """The generator reformulates the query from the evidence; then search with it. A reply
    that is empty, repeats the question or copies a document (check_rewrite) is replaced by
    rewrite_fallback's query, and the note says so (RewriteInfo.note)."""
    return rewrite_query_detailed(state, env)[0]


def sufficiency_check(state: EvidenceState, env: Environment) -> EvidenceState:
    """Judge answerability with ``config.sufficiency_signal`` (:mod:`dynakrag_lite.sufficiency`);
    if insufficient, the gap comes from the ``text`` reply or a second call
    (``prompts.gap_messages``). With ``sufficiency_gates=False`` the gap is always written. A
    new gap replaces the old one; a gating 'sufficient' verdict clears it."""
    j = judge(state, env)
    ledger = state.ledger
    for g in j.generations:
        ledger = ledger.plus_generation(g)
    if j.signal == "text" and j.gates:
        gap = j.gap if not j.sufficient else ""
    elif j.sufficient and j.gates:
        gap = ""
    else:
        gap = j.gap
        if not gap:
            gap, gen = write_gap(state, env)
            ledger = ledger.plus_generation(gen)
    verdict = Sufficiency(j.sufficient, gap or j.gap, j.raw, j.parsed,
                          state.doc_ids, score=j.score, threshold=j.threshold, signal=j.signal,
                          gates=j.gates)
    return replace(state, sufficiency=verdict, gap=gap,
                   history=state.history + ("sufficiency_check",), ledger=ledger)


def stop_answer(state: EvidenceState, env: Environment | None = None,
                reason: str = "policy") -> EvidenceState:
    """End acquisition."""
    return replace(state, stopped=True, stop_reason=reason,
                   history=state.history + ("stop_answer",))


def compress_answer_evidence(state: EvidenceState, env: Environment
                             ) -> tuple[EvidenceState, Compression]:
    """After termination: compress the documents with ``config.compressor`` (``"llm"`` or
    ``"extractive"``); returns the state and the :class:`~dynakrag_lite.compression.Compression`."""
    cfg = env.config
    history = state.history + ("compress_answer_evidence",)
    if cfg.compressor == "extractive":
        if env.compressor is None:
            raise ValueError("ControlConfig(compressor='extractive') needs "
                             "Environment.compressor (build_setup(..., selector=FILE) loads a "
                             "sentence selector saved by train_sentence_selector)")
        comp = env.compressor.compress(
            state.question, state.docs, cfg.max_snippets, cfg.min_valid_snippets,
            cfg.min_snippet_docs)
        return _with_note(replace(state, history=history), comp.note), comp
    if cfg.compressor != "llm":
        raise ValueError(f"unknown compressor {cfg.compressor!r} (llm | extractive)")
    limit = prompts.COMPRESS_MAX_TOKENS_FACT_TABLE if cfg.fact_table else \
        prompts.COMPRESS_MAX_TOKENS
    gen = env.generate(prompts.compress_messages(state.question, state.docs, cfg.fact_table,
                                                 cfg.max_snippets, cfg.doc_chars), limit)
    parsed = prompts.parse_snippets(gen.text, cfg.max_snippets)
    comp = build_compression(parsed, gen.text, gen, state.docs, cfg.min_valid_snippets,
                             cfg.min_snippet_docs, fact_table=cfg.fact_table)
    new = replace(state, history=history, ledger=state.ledger.plus_generation(gen))
    return _with_note(new, comp.note), comp


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
    return ACQUISITION[action](_with_note(state, ""), env)


def final_answer_prompt(question: str, docs: Sequence, snippets: Sequence[str] | None,
                        doc_chars: int | None) -> list[dict]:
    """The final answer's messages: from the snippets if compression kept any, else the docs."""
    if snippets:
        return prompts.answer_from_snippets_messages(question, "\n".join(snippets))
    return prompts.answer_messages(question, docs, doc_chars)


def answer(state: EvidenceState, env: Environment, snippets: Sequence[str] | None = None
           ) -> tuple[EvidenceState, str, Generation]:
    """The generator's final answer, from the snippets if compression ran, else the docs."""
    msgs = final_answer_prompt(state.question, state.docs, snippets, env.config.doc_chars)
    gen = env.generate(msgs, prompts.ANSWER_MAX_TOKENS)
    return replace(state, ledger=state.ledger.plus_generation(gen)), \
        prompts.parse_answer(gen.text), gen
