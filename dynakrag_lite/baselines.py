"""The paper's baselines, on the same :class:`~dynakrag_lite.actions.Environment` as DynaKRAG.

Same retriever, corpus, generator and budgets (``per_action`` docs per search, at most
``max_docs`` documents, ``max_steps`` retrieval rounds, the optional ``retrieval_cap``, the
same ``doc_chars`` truncation and the same final-answer prompt), so differences in EM/F1 and
in the ledger come from the control strategy alone. Every method returns a
:class:`~dynakrag_lite.controller.MethodResult`: the final :class:`EvidenceState` (documents
used; ledger with tokens, LLM calls and retrieval calls) and a trace of :class:`StepTrace`
records, one per search or generator call except the final answer call (as in DynaKRAG's
trace).

* :func:`run_fixed_k`: one top-K search for the question, one answer call.
* :func:`run_ircot`: IRCoT (Trivedi et al. 2023), one CoT sentence then one search, repeated.
* :func:`run_self_ask`: Self-Ask + Search (Press et al. 2023), follow-up questions answered
  from their own search results.

No baseline compresses evidence (compression is DynaKRAG's terminal action). Malformed model
replies never raise: the parsers in :mod:`dynakrag_lite.prompts` have fallbacks, and a reply
that gives nothing to act on ends acquisition and the reader answers from the documents.
"""
from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Sequence

from . import prompts
from .actions import Environment, _add_hits, _room, _search_new, stop_answer
from .controller import MethodResult, StepTrace, finish
from .corpus import normalize_title
from .state import EvidenceState, RetrievedDoc, initial_state
from .validity import retrieval_budget_spent

# History/trace names of the baselines' steps (distinct from DynaKRAG's seven actions, so a
# baseline state never counts as having taken one of them).
RETRIEVE = "retrieve"
COT_STEP = "cot_step"
FOLLOW_UP = "follow_up"
INTERMEDIATE = "intermediate_answer"
LLM_STEPS = (COT_STEP, FOLLOW_UP, INTERMEDIATE)


# -- shared helpers ---------------------------------------------------------------------
def _blocked(state: EvidenceState, env: Environment) -> str | None:
    """Why no further search may run (a hard cap), or None."""
    cfg = env.config
    if retrieval_budget_spent(state, cfg):
        return "retrieval_cap"
    if len(state.docs) >= cfg.max_docs:
        return "max_docs"
    return None


def _append_docs(state: EvidenceState, added: tuple[RetrievedDoc, ...], query: str,
                 source: str) -> EvidenceState:
    """Record one search call: the new docs, the query, one retrieval in the ledger."""
    added = tuple(replace(d, source=source) for d in added)
    return replace(state, docs=state.docs + added, query=query,
                   history=state.history + (RETRIEVE,),
                   ledger=state.ledger.plus_retrieval())


def _step(before: EvidenceState, after: EvidenceState, action: str, query: str = "",
          note: str = "") -> StepTrace:
    added = tuple(d.id for d in after.docs[len(before.docs):])
    return StepTrace(step=len(before.history), action=action, valid=(action,), scores={},
                     added=added, query=query, note=note)


def _search_step(state: EvidenceState, env: Environment, query: str, source: str,
                 trace: list[StepTrace]) -> EvidenceState:
    """Top ``per_action`` unseen docs for ``query`` (dedup id + title, within max_docs)."""
    added = _search_new(state, env, query, _room(state, env.config))
    new = _append_docs(state, added, query, source)
    trace.append(_step(state, new, RETRIEVE, query=query))
    return new


def _llm_step(state: EvidenceState, env: Environment, messages, max_tokens: int,
              action: str) -> tuple[EvidenceState, str]:
    """One generator call, charged to the ledger; returns the raw reply."""
    gen = env.generate(messages, max_tokens)
    return replace(state, history=state.history + (action,),
                   ledger=state.ledger.plus_generation(gen)), gen.text


def _conclude(state: EvidenceState, env: Environment, trace: list[StepTrace],
              chain_answer: str | None, reason: str) -> tuple[EvidenceState, str, str]:
    """Stop; the chain's own answer if it gave one, else the reader answers from the docs.
    Returns (state, prediction, answer source)."""
    state = stop_answer(state, env, reason=reason)
    if chain_answer:
        return state, chain_answer, "chain"
    state, prediction, _ = finish(state, env, trace, compress=False)
    return state, prediction, "reader"


# -- Fixed-K ----------------------------------------------------------------------------
def default_k(env: Environment) -> int:
    """Fixed-K's K when none is given: ``2 * per_action`` (6 with the paper's budgets)."""
    return min(2 * env.config.per_action, env.config.max_docs)


def run_fixed_k(question: str, env: Environment, k: int | None = None,
                qid: str = "") -> MethodResult:
    """Standard RAG: the top-K documents for the question (dedup by id and normalized title),
    then one answer call on them, no compression.

    The paper does not state K. Default ``2 * per_action`` (= 6): room for one retrieval
    action's worth of documents per hop of a two-hop question, so Fixed-K is not starved of
    recall, while staying at half of ``max_docs``. Going to 12 is not a stronger baseline
    for small readers: in our reader test (/work/shared/notes/offline-models.md, 1.5B model,
    40 HotpotQA questions) top-12 scored F1 .466 against .469 for top-3 at ~4x the tokens and
    time. The paper's Fixed-K token count (1,892 on HotpotQA) suggests it read ~12 passages;
    pass ``k=env.config.max_docs`` to reproduce that reading. K is clipped to ``max_docs``
    (the shared final-context cap); ``k=0`` answers closed-book.
    """
    if k is not None and k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    t0 = time.perf_counter()
    k = default_k(env) if k is None else min(k, env.config.max_docs)
    state = initial_state(question, qid)
    trace: list[StepTrace] = []
    if k > 0 and _blocked(state, env) is None:
        before = state
        added = _search_new(state, env, state.question, k)
        state = _append_docs(state, added, state.question, "fixed_k")
        trace.append(_step(before, state, RETRIEVE, query=state.question, note=f"top-{k}"))
    state, prediction, _ = _conclude(state, env, trace, None, "fixed_k")
    return MethodResult("fixed_k", prediction, state, trace, (), time.perf_counter() - t0,
                        extra={"k": k, "answer_source": "reader"})


# -- IRCoT ------------------------------------------------------------------------------
def _cot_step(state: EvidenceState, env: Environment, thoughts: Sequence[str],
              trace: list[StepTrace]) -> tuple[EvidenceState, str, str | None]:
    """The generator writes the next CoT sentence from the docs and the thoughts so far."""
    msgs = prompts.ircot_messages(state.question, state.docs, thoughts, env.config.doc_chars)
    new, text = _llm_step(state, env, msgs, prompts.IRCOT_MAX_TOKENS, COT_STEP)
    thought, conclusion = prompts.parse_ircot(text)
    note = f"answer: {conclusion}" if conclusion else (thought or f"unparsed: {text[:120]!r}")
    trace.append(_step(state, new, COT_STEP, note=note))
    return new, thought, conclusion


def run_ircot(question: str, env: Environment, max_steps: int | None = None,
              qid: str = "") -> MethodResult:
    """IRCoT: retrieve ``per_action`` docs for the question, then alternate one CoT sentence
    (generator) and one search with that sentence as the query, adding ``per_action`` unseen
    docs each time.

    Stops when a sentence concludes ('So the answer is: ...'), when a reply yields no sentence
    (malformed: nothing to search with), after ``max_steps`` retrieval rounds including the
    first (default ``config.max_steps``, the same budget as DynaKRAG's steps), or at
    ``max_docs`` / the retrieval cap. The prediction is the chain's conclusion; if the chain
    did not conclude, IRCoT's reader step answers from the collected documents (one more call).
    At most ``max_steps`` CoT calls + 1 answer call.
    """
    t0 = time.perf_counter()
    rounds = env.config.max_steps if max_steps is None else max_steps
    state = initial_state(question, qid)
    trace: list[StepTrace] = []
    thoughts: list[str] = []
    searches = 0
    if rounds > 0 and _blocked(state, env) is None:
        state = _search_step(state, env, state.question, "ircot", trace)
        searches = 1
    while True:
        state, thought, conclusion = _cot_step(state, env, thoughts, trace)
        if conclusion:
            reason = "concluded"
            break
        if not thought:
            reason = "empty_thought"
            break
        thoughts.append(thought)
        reason = "max_steps" if searches >= rounds else (_blocked(state, env) or "")
        if reason:
            break
        state = _search_step(state, env, thought, "ircot", trace)
        searches += 1
    state, prediction, source = _conclude(state, env, trace, conclusion, reason)
    return MethodResult("ircot", prediction, state, trace, (), time.perf_counter() - t0,
                        extra={"thoughts": thoughts, "answer_source": source,
                               "stop_reason": reason})


# -- Self-Ask + Search ------------------------------------------------------------------
def _propose(state: EvidenceState, env: Environment, qa: Sequence[tuple[str, str]],
             trace: list[StepTrace]) -> tuple[EvidenceState, str | None, str | None]:
    """The generator proposes the next follow-up question, or concludes."""
    msgs = prompts.self_ask_messages(state.question, qa)
    new, text = _llm_step(state, env, msgs, prompts.SELF_ASK_MAX_TOKENS, FOLLOW_UP)
    follow_up, final = prompts.parse_self_ask(text)
    note = (f"final: {final}" if final else follow_up) or f"unparsed: {text[:120]!r}"
    trace.append(_step(state, new, FOLLOW_UP, note=note))
    return new, follow_up, final


def _search_follow_up(state: EvidenceState, env: Environment, follow_up: str,
                      trace: list[StepTrace]) -> tuple[EvidenceState, tuple[RetrievedDoc, ...]]:
    """Top ``per_action`` docs for the follow-up. Unlike IRCoT, seen docs are not excluded:
    the intermediate answer reads the follow-up's own top results, which may include a doc an
    earlier follow-up found. New ones join the state (within max_docs). Returns the state and
    the docs shown to the intermediate answer (only docs that are in the state)."""
    per = env.config.per_action
    hits = env.retriever.search(follow_up, k=per + 3)  # extra hits so title dedup can fill
    top = _add_hits(EvidenceState(question=follow_up), hits, "self_ask", per)
    added = _add_hits(state, top, "self_ask", _room(state, env.config))
    new = _append_docs(state, added, follow_up, "self_ask")
    trace.append(_step(state, new, RETRIEVE, query=follow_up))
    ids = {d.id for d in top}
    keys = {normalize_title(d.title) for d in top}
    shown = tuple(d for d in new.docs if d.id in ids or normalize_title(d.title) in keys)
    return new, shown


def _intermediate_answer(state: EvidenceState, env: Environment, follow_up: str,
                         docs: Sequence[RetrievedDoc], trace: list[StepTrace]
                         ) -> tuple[EvidenceState, str]:
    msgs = prompts.intermediate_answer_messages(follow_up, docs, env.config.doc_chars)
    new, text = _llm_step(state, env, msgs, prompts.ANSWER_MAX_TOKENS, INTERMEDIATE)
    # An empty answer still goes into the chain, as an explicit unknown, so the proposer
    # sees that this follow-up failed.
    ans = prompts.parse_answer(text) or "unknown"
    trace.append(_step(state, new, INTERMEDIATE, query=follow_up, note=ans))
    return new, ans


def _seen(question: str, qa: Sequence[tuple[str, str]]) -> bool:
    key = normalize_title(question)
    return any(normalize_title(q) == key for q, _ in qa)


def run_self_ask(question: str, env: Environment, max_followups: int | None = None,
                 qid: str = "") -> MethodResult:
    """Self-Ask + Search: the generator proposes a follow-up question (seeing the question and
    the chain of follow-ups and intermediate answers, not the documents, as in Self-Ask); the
    retriever finds the top ``per_action`` docs for it; the generator answers the follow-up
    from those docs (intermediate answer); repeat until 'So the final answer is: ...'.

    Caps: ``max_followups`` follow-ups (default ``config.max_steps``: one search each, the
    same retrieval budget as DynaKRAG), ``max_docs`` and the retrieval cap. After the last
    permitted follow-up the proposer gets one more turn to conclude. A repeated follow-up
    stops the chain (its search would return the same documents). A malformed proposal stops
    the chain too, except before the first follow-up, where the question itself is searched
    and answered as the follow-up so the reader has documents. A final answer proposed before
    any follow-up (a closed-book guess; small models also copy the demonstration's answer) is
    treated the same way, unless no search is allowed at all. Without a final answer from
    the chain, one answer call on all collected documents gives the prediction.
    At most 2 * max_followups + 1 chain calls + 1 answer call.
    """
    t0 = time.perf_counter()
    cap = env.config.max_steps if max_followups is None else max_followups
    state = initial_state(question, qid)
    trace: list[StepTrace] = []
    qa: list[tuple[str, str]] = []
    while True:
        state, follow_up, final = _propose(state, env, qa, trace)
        if final and (qa or _blocked(state, env) or cap == 0):
            reason = "concluded"
            break
        if final:  # concluding before any search would be closed-book: search first
            final, follow_up = None, None
        if follow_up is None:
            if state.docs:
                reason = "malformed"
                break
            follow_up = state.question  # fallback: nothing collected yet
        if len(qa) >= cap:
            reason = "max_followups"
            break
        if _seen(follow_up, qa):
            reason = "repeated_followup"
            break
        reason = _blocked(state, env) or ""
        if reason:
            break
        state, shown = _search_follow_up(state, env, follow_up, trace)
        state, ans = _intermediate_answer(state, env, follow_up, shown, trace)
        qa.append((follow_up, ans))
    state, prediction, source = _conclude(state, env, trace, final, reason)
    return MethodResult("self_ask", prediction, state, trace, (), time.perf_counter() - t0,
                        extra={"qa_pairs": qa, "answer_source": source, "stop_reason": reason})


BASELINES: dict[str, Callable[..., MethodResult]] = {
    "fixed_k": run_fixed_k,
    "ircot": run_ircot,
    "self_ask": run_self_ask,
}


def run_baseline(name: str, question: str, env: Environment, qid: str = "",
                 **kw) -> MethodResult:
    """Run a baseline by its registry name."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; choose from {sorted(BASELINES)}")
    return BASELINES[name](question, env, qid=qid, **kw)
