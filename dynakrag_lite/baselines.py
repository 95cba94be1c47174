"""The paper's baselines (chapter 11), on the same :class:`~dynakrag_lite.config.Environment`
as DynaKRAG: same retriever, generator, budgets and final-answer prompt, so differences come
from the control strategy alone. Traces have one step per search or generator call except the
final answer, as DynaKRAG's; diagnostics go to ``MethodResult.extra``. No baseline compresses.
Malformed replies never raise: the reader then answers from the documents."""
from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import replace
from typing import Sequence

from . import prompts
from .actions import stop_answer
from .config import Environment
from .controller import MethodResult, StepTrace, finish
from .data.corpus import normalize_title
from .demonstrations import SELF_ASK_DEMOS, Demonstrations, check_disjoint
from .evidence import add_hits, room, search_new
from .generators.base import Generation
from .state import EvidenceState, RetrievedDoc, initial_state
from .validity import retrieval_budget_spent

# The baselines' step names: distinct from DynaKRAG's seven actions.
RETRIEVE = "retrieve"
COT_STEP = "cot_step"
FOLLOW_UP = "follow_up"
INTERMEDIATE = "intermediate_answer"

SELF_ASK_MAX_ITERATIONS = 5  # proposer calls (FlashRAG's max_iter)


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
    added = search_new(state, env, query, room(state, env.config))
    new = _append_docs(state, added, query, source)
    trace.append(_step(state, new, RETRIEVE, query=query))
    return new


def _llm_step(state: EvidenceState, env: Environment, messages, max_tokens: int,
              action: str, stop: Sequence[str] | None = None
              ) -> tuple[EvidenceState, Generation]:
    """One generator call (with stop sequences), charged to the ledger."""
    if env.generator is None:
        raise RuntimeError("this baseline needs a generator, and the environment has none")
    gen = env.generator.generate(messages, max_tokens=max_tokens, stop=list(stop) if stop else None)
    return replace(state, history=state.history + (action,),
                   ledger=state.ledger.plus_generation(gen)), gen


def _reader(state: EvidenceState, env: Environment, trace: list[StepTrace], reason: str
            ) -> tuple[EvidenceState, str]:
    """Stop, then one answer call (the shared answer prompt) on all collected documents."""
    state = stop_answer(state, env, reason=reason)
    state, prediction, _ = finish(state, env, trace, compress=False)
    return state, prediction


# -- Fixed-K ----------------------------------------------------------------------------
def default_k(env: Environment) -> int:
    """Fixed-K's K when none is given: ``2 * per_action`` (6 with the paper's budgets)."""
    return min(2 * env.config.per_action, env.config.max_docs)


def run_fixed_k(question: str, env: Environment, k: int | None = None,
                qid: str = "") -> MethodResult:
    """Standard RAG: the top-K documents for the question (dedup by id and normalized title),
    then one answer call on them, no compression.

    The paper does not state K. We report the token-matched pair K = 3 (one retrieval
    action's worth: IRCoT's and Self-Ask's first search) and K = 6 (the default,
    ``2 * per_action``: room for one retrieval action per hop of a two-hop question, at half
    of ``max_docs``), the runs ``fixed_k3`` / ``fixed_k6`` (``evaluate --method fixed_k
    --fixed-k 3``).
    Going to 12 is not a stronger baseline for small readers: in our reader test
    (shared/notes/offline-models.md, 1.5B model, 40 HotpotQA questions) top-12 scored F1
    .466 against .469 for top-3 at ~4x the tokens and time. The paper's Fixed-K token count
    (1,892 on HotpotQA) suggests it read ~12 passages; pass ``k=env.config.max_docs`` to
    reproduce that reading. K is clipped to ``max_docs`` (the shared final-context cap);
    ``k=0`` answers closed-book."""
    if k is not None and k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    t0 = time.perf_counter()
    k = default_k(env) if k is None else min(k, env.config.max_docs)
    state = initial_state(question, qid)
    trace: list[StepTrace] = []
    if k > 0 and _blocked(state, env) is None:
        before = state
        added = search_new(state, env, state.question, k)
        state = _append_docs(state, added, state.question, "fixed_k")
        trace.append(_step(before, state, RETRIEVE, query=state.question, note=f"top-{k}"))
    state, prediction = _reader(state, env, trace, "fixed_k")
    return MethodResult("fixed_k", prediction, state, trace, (), time.perf_counter() - t0,
                        extra={"k": k, "answer_source": "reader", "stop_reason": "fixed_k",
                               "parse_fallbacks": {}})


# -- IRCoT ------------------------------------------------------------------------------
def run_ircot(question: str, env: Environment, max_steps: int | None = None,
              qid: str = "", demos: Demonstrations | Sequence | None = None,
              thought_tokens: int = prompts.IRCOT_MAX_TOKENS) -> MethodResult:
    """IRCoT (Trivedi et al. 2023, "Interleaving Retrieval with Chain-of-Thought Reasoning").

    Reproduced: retrieve K = ``per_action`` (3) paragraphs for the question; then repeat
    (1) a few-shot reasoning call on all collected paragraphs, the question and the thoughts
    so far; (2) keep only the FIRST sentence of the generation; (3) if that sentence contains
    'answer is', stop; (4) else retrieve K new paragraphs with that sentence as the query.
    A paragraph cap bounds the collection; a separate reader call (the shared answer prompt,
    :func:`prompts.answer_messages`) answers from the collected paragraphs at the end. The
    chain's own answer is kept in ``extra["chain_answer"]`` but is not the prediction.

    ``demos``: :func:`~dynakrag_lite.demonstrations.build_ircot_demos` of the *training* split (gold
    paragraphs + distractors, template CoT; see that module). A ``qid`` that is a demonstration's id
    raises :class:`~dynakrag_lite.demonstrations.DemoLeakError`. ``demos=None`` runs zero-shot (same
    loop and prompt layout, no demonstrations): NOT the faithful baseline, kept for the embedded
    library and tests; ``extra["n_demos"]`` says which one ran.

    Deviations forced by our budgets and models:

    * paragraph cap: the shared ``max_docs`` (12) instead of the original's 15 for HotpotQA; when it
      (or the retrieval cap) is reached, reasoning goes on without retrieval, as in the original;
    * iterations: at most ``max_steps`` reasoning calls (default ``config.max_steps`` = 4, the
      budget DynaKRAG gets) and as many searches, the question's included; the original runs
      until 'answer is' or its paragraph cap;
    * 2 demonstrations (not up to 15) to fit n_ctx 4096 with 0.5B/1.5B readers;
    * chat format: the original continues one completion prompt; we keep its layout (all
      paragraphs, then 'Q:' and 'A:') in the first user turn and give the thoughts so far as
      the model's own earlier turns, one sentence each, with 'Continue.' between them (the
      demonstrations have the same shape). Leading sentences that restate an earlier
      thought are dropped before the first-sentence rule (``extra["echoed_sentences"]``);
      a reply that only restates stops the chain (``repeated_thought``);
    * generation budget ``thought_tokens`` (64) with a stop at the first newline: a sentence
      fits (FlashRAG's 32-token cap truncated 46 of 52 thoughts); steps that used the whole
      budget are counted in ``extra["thoughts_truncated"]``.

    Stop reasons (``extra["stop_reason"]``): ``concluded`` ('answer is' in the kept sentence),
    ``max_steps`` (iteration cap), ``repeated_thought`` (the reply only restated earlier thoughts),
    ``empty_thought`` (a reply with no sentence at all: nothing to retrieve with; parse fallback
    ``ircot``). ``extra["concluded_by"]`` is ``answer_is``, ``cap`` or that reason. At most
    ``max_steps`` + 1 LLM calls and ``max_steps`` searches."""
    t0 = time.perf_counter()
    rounds = env.config.max_steps if max_steps is None else max_steps
    demo_items = tuple(demos) if demos is not None else ()
    if qid:
        check_disjoint((d.id for d in demo_items), [qid])
    state = initial_state(question, qid)
    trace: list[StepTrace] = []
    thoughts: list[str] = []
    truncated: list[bool] = []
    fallbacks: Counter = Counter()
    echoed = 0
    searches = 0
    iterations = 0
    chain_answer = ""
    if rounds > 0 and _blocked(state, env) is None:
        state = _search_step(state, env, state.question, "ircot", trace)
        searches = 1
    reason = "max_steps"
    while iterations < rounds:
        msgs = prompts.ircot_messages(state.question, state.docs, thoughts,
                                      env.config.doc_chars, demo_items)
        before = state
        state, gen = _llm_step(state, env, msgs, thought_tokens, COT_STEP, prompts.IRCOT_STOP)
        iterations += 1
        parsed = prompts.parse_ircot(gen.text, thoughts)
        echoed += parsed.echoed
        cut = gen.completion_tokens >= thought_tokens
        if parsed.concludes:
            truncated.append(cut)
            thoughts.append(parsed.sentence)
            chain_answer = parsed.answer
            trace.append(_step(before, state, COT_STEP, note=parsed.sentence))
            reason = "concluded"
            break
        if not parsed.sentence:
            if parsed.echoed:
                reason = "repeated_thought"
                note = f"only restated earlier thoughts: {gen.text[:120]!r}"
            else:
                fallbacks["ircot"] += 1
                reason = "empty_thought"
                note = f"no sentence: {gen.text[:120]!r}"
            trace.append(_step(before, state, COT_STEP, note=note))
            break
        truncated.append(cut)
        thoughts.append(parsed.sentence)
        trace.append(_step(before, state, COT_STEP, note=parsed.sentence))
        if searches < rounds and iterations < rounds and _blocked(state, env) is None:
            state = _search_step(state, env, parsed.sentence, "ircot", trace)
            searches += 1
    state, prediction = _reader(state, env, trace, reason)
    return MethodResult("ircot", prediction, state, trace, (), time.perf_counter() - t0,
                        extra={"thoughts": thoughts, "answer_source": "reader",
                               "stop_reason": reason, "iterations": iterations,
                               "concluded_by": {"concluded": "answer_is",
                                                "max_steps": "cap"}.get(reason, reason),
                               "searches": searches, "chain_answer": chain_answer,
                               "thoughts_truncated": sum(truncated),
                               "truncated_flags": truncated, "echoed_sentences": echoed,
                               "n_demos": len(demo_items),
                               "demo_ids": [d.id for d in demo_items],
                               "parse_fallbacks": dict(fallbacks)})


# -- Self-Ask + Search ------------------------------------------------------------------
def _key(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def _search_follow_up(state: EvidenceState, env: Environment, follow_up: str,
                      trace: list[StepTrace]
                      ) -> tuple[EvidenceState, tuple[RetrievedDoc, ...], tuple[RetrievedDoc, ...]]:
    """Top ``per_action`` docs for the follow-up, seen ones included (the intermediate answer
    reads the follow-up's own top results); new ones join the state (within max_docs).
    Returns the state, the docs shown to the intermediate answer and the added ones."""
    per = env.config.per_action
    hits = env.retriever.search(follow_up, k=per + 3)  # extra hits so title dedup can fill
    top = add_hits(EvidenceState(question=follow_up), hits, "self_ask", per)
    added = add_hits(state, top, "self_ask", room(state, env.config))
    new = _append_docs(state, added, follow_up, "self_ask")
    trace.append(_step(state, new, RETRIEVE, query=follow_up))
    ids = {d.id for d in top}
    keys = {normalize_title(d.title) for d in top}
    shown = tuple(d for d in new.docs if d.id in ids or normalize_title(d.title) in keys)
    return new, shown, new.docs[len(state.docs):]


def run_self_ask(question: str, env: Environment, max_followups: int | None = None,
                 qid: str = "", demos: Sequence = SELF_ASK_DEMOS,
                 max_iterations: int = SELF_ASK_MAX_ITERATIONS) -> MethodResult:
    """Self-Ask + Search (Press et al. 2023, "Measuring and Narrowing the Compositionality
    Gap"), with the retrieved context shown to the proposer as in FlashRAG's version.

    Reproduced: few-shot demonstrations in Self-Ask's format; generation stops at
    'Intermediate answer:', which the reader gives from the follow-up's top ``per_action``
    documents; 'So the final answer is' is the prediction; at most ``max_iterations`` = 5
    proposer calls (FlashRAG's max_iter). Our choices: four demonstrations of our own
    (copies counted in ``extra["demo_copies"]``); the question's documents and each follow-up's
    new ones are shown to the proposer (as FlashRAG; Press et al.'s sees none), so a final
    answer before any follow-up is accepted; at most ``config.max_steps`` searches, the
    question's included, within ``max_docs`` and the retrieval cap; a repeated follow-up or an
    exhausted budget asks once for the final answer (``force_final``), else the reader answers.

    ``extra["stop_reason"]``: ``concluded``, ``repeated_followup``, ``search_budget``,
    ``max_docs``, ``retrieval_cap``, ``max_iterations`` or ``malformed``;
    ``extra["answer_source"]``: ``chain``, ``forced`` or ``reader``."""
    t0 = time.perf_counter()
    cfg = env.config
    budget = max(0, cfg.max_steps - 1) if max_followups is None else max_followups
    state = initial_state(question, qid)
    trace: list[StepTrace] = []
    qa: list[tuple[str, str]] = []
    step_docs: list[tuple[RetrievedDoc, ...]] = []
    proposed: list[str] = []
    fallbacks: Counter = Counter()
    demo_follow = {_key(f) for d in demos for f in d.follow_ups}
    demo_answers = {_key(d.answer) for d in demos} - {"yes", "no"}
    demo_copies = 0
    repeated = 0
    iterations = 0
    first_docs: tuple[RetrievedDoc, ...] = ()
    if cfg.max_steps > 0 and _blocked(state, env) is None:
        state = _search_step(state, env, state.question, "self_ask", trace)
        first_docs = state.docs
    asked = {_key(state.question)}
    final: str | None = None
    source = "reader"
    force = ""
    forced_call = False

    def propose(force_final: bool) -> tuple[str | None, str | None, str]:
        nonlocal state, iterations
        msgs = prompts.self_ask_messages(state.question, qa, first_docs, cfg.doc_chars,
                                         step_docs=step_docs, demos=demos,
                                         force_final=force_final)
        before = state
        state, gen = _llm_step(state, env, msgs, prompts.SELF_ASK_MAX_TOKENS, FOLLOW_UP,
                               prompts.SELF_ASK_STOP)
        iterations += 1
        f, fin = prompts.parse_self_ask(gen.text)
        note = (("forced " if force_final else "") + (f"final: {fin}" if fin else
                f"follow up: {f}" if f else f"malformed: {gen.text[:120]!r}"))
        trace.append(_step(before, state, FOLLOW_UP, note=note))
        return f, fin, gen.text

    reason = "max_iterations"
    while iterations < max_iterations:
        follow_up, fin, _ = propose(False)
        if fin:
            final, source, reason = fin, "chain", "concluded"
            break
        if follow_up is None:
            fallbacks["self_ask"] += 1
            reason = "malformed"
            break
        proposed.append(follow_up)
        if _key(follow_up) in demo_follow:
            demo_copies += 1
        if _key(follow_up) in asked:
            repeated += 1
            force = "repeated_followup"
        elif len(qa) >= budget:
            force = "search_budget"
        else:
            force = _blocked(state, env) or ""
        if force:
            reason = force
            if iterations < max_iterations:
                forced_call = True
                _, fin, _ = propose(True)
                if fin:
                    final, source = fin, "forced"
            break
        asked.add(_key(follow_up))
        state, shown, added = _search_follow_up(state, env, follow_up, trace)
        before = state
        msgs = prompts.intermediate_answer_messages(follow_up, shown, cfg.doc_chars)
        state, gen = _llm_step(state, env, msgs, prompts.ANSWER_MAX_TOKENS, INTERMEDIATE)
        ans = prompts.parse_answer(gen.text)
        note = ans
        if not ans:
            # an explicit unknown: the proposer sees that this follow-up failed
            fallbacks["intermediate_answer"] += 1
            ans, note = "unknown", "unknown (empty reply)"
        trace.append(_step(before, state, INTERMEDIATE, query=follow_up, note=note))
        qa.append((follow_up, ans))
        step_docs.append(added)
    if final is not None:
        if _key(final) in demo_answers:
            demo_copies += 1
        state = stop_answer(state, env, reason=reason)
        prediction = final
    else:
        state, prediction = _reader(state, env, trace, reason)
    return MethodResult("self_ask", prediction, state, trace, (), time.perf_counter() - t0,
                        extra={"qa_pairs": qa, "answer_source": source, "stop_reason": reason,
                               "iterations": iterations,
                               "searches": state.ledger.retrieval_calls,
                               "follow_ups": proposed, "n_follow_ups": len(qa),
                               "repeated_followups": repeated, "forced_final": forced_call,
                               "demo_copies": demo_copies, "n_demos": len(demos),
                               "parse_fallbacks": dict(fallbacks)})
