"""The baselines (Fixed-K, IRCoT, Self-Ask + Search) end to end on the embedded library.

Real pieces: the library questions, the pooled corpus, the dense retriever with the default
embedder, and a bundled generator (SmolLM2-135M through llama.cpp). Test doubles live here
only: a counting wrapper that delegates to the real generator (to check the ledger against the
calls actually made), and scripted generators that return fixed replies (garbage, or a
well-formed chain) to check the control flow and the fallbacks.
"""
from __future__ import annotations

from typing import Sequence

import pytest

from dynakrag_lite.config import ControlConfig, Environment, RunSettings
from dynakrag_lite.baselines import (COT_STEP, FOLLOW_UP, INTERMEDIATE, RETRIEVE, default_k,
                                     run_fixed_k, run_ircot, run_self_ask)
from dynakrag_lite.controller import MethodResult
from dynakrag_lite.methods import METHODS, run_method
from dynakrag_lite.data.corpus import normalize_title
from dynakrag_lite.generators.base import Generation, Generator
from helpers import require_model

BASELINES = ("fixed_k", "ircot", "self_ask")
N_QUESTIONS = 2  # per baseline with the real generator: a shared 2-core CPU is slow


# -- test doubles -----------------------------------------------------------------------
class CountingGenerator:
    """Delegates to a real generator and counts the calls."""

    def __init__(self, inner: Generator):
        self.inner = inner
        self.spec, self.model_id = inner.spec, inner.model_id
        self.calls = 0

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        self.calls += 1
        return self.inner.generate(messages, max_tokens=max_tokens, stop=stop)


class ScriptedGenerator:
    """Returns the given replies in order (the last one repeats); records the prompts."""

    spec = "scripted"
    model_id = "scripted"

    def __init__(self, replies: Sequence[str]):
        self.replies = list(replies)
        self.prompts: list[str] = []
        self.messages: list[list[dict]] = []

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        self.prompts.append(messages[-1]["content"])
        self.messages.append(messages)
        text = self.replies[min(len(self.prompts) - 1, len(self.replies) - 1)]
        return Generation(text=text, prompt_tokens=10, completion_tokens=len(text.split()))

    @property
    def calls(self) -> int:
        return len(self.prompts)


# -- fixtures ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def questions(library_questions):
    return library_questions


@pytest.fixture(scope="module")
def retriever(library_retriever):
    return library_retriever  # the session's index of the pooled library corpus (conftest)


@pytest.fixture(scope="module")
def real_generator():
    require_model("smollm2-135m")  # skips on a dev machine without it; fails under CI
    from dynakrag_lite.generators.spec import make_generator
    return make_generator("smollm2-135m", cache=False)


def _env(retriever, generator, **cfg) -> Environment:
    return Environment(retriever, generator, ControlConfig(**cfg))


def run_scripted(run, replies: Sequence[str], question: str, retriever, **cfg
                 ) -> tuple[MethodResult, ScriptedGenerator]:
    """``run`` (a baseline function) on ``question`` with scripted replies, invariants checked."""
    gen = ScriptedGenerator(replies)
    env = _env(retriever, gen, **cfg)
    res = run(question, env)
    _check_invariants(res, env, gen.calls)
    return res, gen


def _check_invariants(res: MethodResult, env: Environment, calls: int) -> None:
    """Budgets and bookkeeping every baseline must respect."""
    cfg, st = env.config, res.state
    assert isinstance(res, MethodResult) and isinstance(res.prediction, str)
    assert len(st.docs) <= cfg.max_docs
    assert len(set(st.doc_ids)) == len(st.docs)
    assert len({normalize_title(t) for t in st.titles}) == len(st.docs)
    if cfg.retrieval_cap is not None:
        assert st.ledger.retrieval_calls <= cfg.retrieval_cap
    # The ledger counts exactly the generator calls made, and the trace shows each search
    # and each chain call (the final answer call, if any, is the only one not traced).
    assert st.ledger.llm_calls == calls
    searches = [t for t in res.trace if t.action == RETRIEVE]
    assert st.ledger.retrieval_calls == len(searches)
    chain_calls = sum(1 for t in res.trace if t.action in (COT_STEP, FOLLOW_UP, INTERMEDIATE))
    reader = 1 if res.extra["answer_source"] == "reader" else 0
    assert chain_calls + reader == calls
    assert st.ledger.tokens > 0
    assert sum(len(t.added) for t in res.trace) == len(st.docs)
    assert st.stopped


# -- real generator, end to end ---------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BASELINES))
def test_baselines_end_to_end_with_real_generator(name, questions, retriever, real_generator):
    gen = CountingGenerator(real_generator)
    env = _env(retriever, gen, doc_chars=300)  # paper budgets; shorter passages, faster
    cfg = env.config
    for q in questions[:N_QUESTIONS]:
        before = gen.calls
        res = run_method(RunSettings(method=name), q, env)
        _check_invariants(res, env, gen.calls - before)
        assert res.method == name and res.state.qid == q.id
        assert res.state.docs, "every baseline retrieves for a library question"
        if name == "fixed_k":
            assert len(res.state.docs) == default_k(env) == 6
            assert (res.state.ledger.retrieval_calls, res.state.ledger.llm_calls) == (1, 1)
        elif name == "ircot":
            assert res.state.ledger.retrieval_calls <= cfg.max_steps
            assert res.state.ledger.llm_calls <= cfg.max_steps + 1
        else:
            assert res.state.ledger.retrieval_calls <= cfg.max_steps
            assert res.state.ledger.llm_calls <= 2 * cfg.max_steps + 2


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BASELINES))
def test_tight_budgets_are_respected_with_real_generator(name, questions, retriever,
                                                         real_generator):
    gen = CountingGenerator(real_generator)
    env = _env(retriever, gen, per_action=2, max_docs=3, retrieval_cap=1)
    q = questions[N_QUESTIONS]
    res = run_method(RunSettings(method=name), q, env)
    _check_invariants(res, env, gen.calls)
    assert len(res.state.docs) <= 3 and res.state.ledger.retrieval_calls <= 1


# -- scripted generators: fallbacks and control flow --------------------------------------
GARBAGE = ["", "   \n\n", "%%%@@@ \x00 ###", "So the answer is:", "Follow up:",
           "lorem ipsum dolor sit amet " * 20, "Intermediate answer: So the final answer is: x"]


@pytest.mark.parametrize("name", sorted(BASELINES))
@pytest.mark.parametrize("reply", GARBAGE, ids=[f"garbage{i}" for i in range(len(GARBAGE))])
def test_malformed_replies_never_crash(name, reply, questions, retriever):
    res, _ = run_scripted(lambda q, env: run_method(RunSettings(method=name), questions[0], env),
                          [reply], questions[0].question, retriever)
    assert res.state.docs  # a fallback still gathers evidence for the reader


def test_fixed_k_k_is_clipped_and_zero_is_closed_book(questions, retriever):
    q = questions[0].question
    res = run_fixed_k(q, _env(retriever, ScriptedGenerator(["x"])), k=40)
    assert len(res.state.docs) == 12 and res.extra["k"] == 12
    res = run_fixed_k(q, _env(retriever, ScriptedGenerator(["x"])), k=0)
    assert res.state.docs == () and res.state.ledger.retrieval_calls == 0
    assert res.prediction == "x"
    with pytest.raises(ValueError):
        run_fixed_k(q, _env(retriever, ScriptedGenerator(["x"])), k=-1)


def test_ircot_stops_at_answer_is_and_the_reader_answers(questions, retriever):
    res, gen = run_scripted(run_ircot, ["Dathser Records was founded by someone.",
                                        "So the answer is: Gobreindhaven.", "Kotanbrook"],
                            questions[0].question, retriever)
    # The chain's conclusion ends the loop; the separate reader call gives the prediction.
    assert res.extra["stop_reason"] == "concluded" and res.extra["answer_source"] == "reader"
    assert res.extra["chain_answer"] == "Gobreindhaven" and res.prediction == "Kotanbrook"
    # question search, one CoT sentence, its search, the concluding sentence; then the reader
    assert [t.action for t in res.trace] == [RETRIEVE, COT_STEP, RETRIEVE, COT_STEP]
    assert res.trace[2].query == "Dathser Records was founded by someone."
    assert len(res.state.docs) == 6 and gen.calls == 3
    # the thought so far is the model's own earlier turn in the next reasoning call
    assert {"role": "assistant",
            "content": "Dathser Records was founded by someone."} in gen.messages[1]


def test_ircot_runs_max_steps_rounds_then_the_reader_answers(questions, retriever):
    res, gen = run_scripted(run_ircot, [f"Thought number {i} about the question."
                                        for i in range(4)] + ["Kotanbrook"],
                            questions[0].question, retriever)
    assert res.extra["stop_reason"] == "max_steps" and res.extra["answer_source"] == "reader"
    assert res.state.ledger.retrieval_calls == 4 and gen.calls == 5
    assert res.prediction == "Kotanbrook" and len(res.state.docs) == 12


@pytest.mark.parametrize("replies, prediction, qa_pairs, actions, in_prompt", [
    # A follow-up, its search and intermediate answer (read from the follow-up's own
    # documents), then the conclusion, which sees the chain.
    (["Follow up: Who founded Dathser Records?", "Nobody Known",
      "So the final answer is: Gobreindhaven"],
     "Gobreindhaven", [("Who founded Dathser Records?", "Nobody Known")],
     [RETRIEVE, FOLLOW_UP, RETRIEVE, INTERMEDIATE, FOLLOW_UP],
     {1: "Question: Who founded Dathser Records?", 2: "Intermediate answer: Nobody Known"}),
    # A conclusion before any follow-up is read from the question's documents, shown to the
    # proposer, and accepted.
    (["So the final answer is: Oren Velk"], "Oren Velk", [], [RETRIEVE, FOLLOW_UP],
     {0: "Documents:\n[1] "}),
], ids=["after_a_follow_up", "from_the_question_documents"])
def test_self_ask_chain_ends_with_final_answer(questions, retriever, replies, prediction,
                                               qa_pairs, actions, in_prompt):
    res, gen = run_scripted(run_self_ask, replies, questions[0].question, retriever)
    assert res.prediction == prediction and res.extra["answer_source"] == "chain"
    assert res.extra["stop_reason"] == "concluded"
    assert res.extra["qa_pairs"] == qa_pairs
    assert [t.action for t in res.trace] == actions
    assert res.state.ledger.retrieval_calls == actions.count(RETRIEVE)
    for call, text in in_prompt.items():
        assert text in gen.prompts[call]


def test_self_ask_repeated_follow_up_is_not_searched_again(questions, retriever):
    # search(question), propose, search, answer, propose (a repeat), forced propose, reader
    res, gen = run_scripted(run_self_ask, ["Follow up: Who founded Dathser Records?", "Someone",
                                           "Follow up: who founded Dathser Records",
                                           "no idea", "Reader answer"],
                            questions[0].question, retriever)
    assert res.extra["stop_reason"] == "repeated_followup" and res.extra["forced_final"]
    assert res.state.ledger.retrieval_calls == 2 and gen.calls == 5
    assert res.prediction == "Reader answer" and res.extra["answer_source"] == "reader"


def test_self_ask_search_budget_forces_a_final_answer(questions, retriever):
    # max_steps=2 allows the question's search and one follow-up search.
    res, gen = run_scripted(run_self_ask, ["Follow up: Question 0?", "Answer 0",
                                           "Follow up: Question 1?",
                                           "So the final answer is: Forced"],
                            questions[0].question, retriever, max_steps=2)
    assert res.extra["stop_reason"] == "search_budget"
    assert res.extra["qa_pairs"] == [("Question 0?", "Answer 0")]
    assert res.state.ledger.retrieval_calls == 2 and gen.calls == 4
    assert res.prediction == "Forced" and res.extra["answer_source"] == "forced"


def test_one_registry_holds_every_method_and_refuses_others():
    assert set(BASELINES) <= set(METHODS)
    assert list(METHODS) == ["dynakrag", "fixed_k", "ircot", "self_ask", "uniform", "oracle"]
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        run_method(RunSettings(method="nope"), None, Environment(None, None))


def test_self_ask_keeps_a_closed_book_answer_when_no_search_is_allowed(questions, retriever):
    gen = ScriptedGenerator(["So the final answer is: Oren Velk"])
    env = _env(retriever, gen, retrieval_cap=0)
    res = run_self_ask(questions[0].question, env)
    assert res.prediction == "Oren Velk" and res.state.docs == ()
