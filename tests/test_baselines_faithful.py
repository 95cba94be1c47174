"""The baselines reproduce their originals' behaviour (IRCoT, Self-Ask + Search, Fixed-K pair).

Control-flow tests use a recording fake generator (replies by prompt kind or in order; it keeps
every message list, ``max_tokens`` and ``stop``) on the embedded library's real corpus and
dense retriever. One slow test runs the bundled qwen2.5-coder-0.5b on three real HotpotQA
training questions and checks behaviour, not quality.
"""
from __future__ import annotations

from typing import Callable, Sequence

import pytest

from helpers import require_model

from dynakrag_lite import prompts
from dynakrag_lite.baselines import (COT_STEP, FOLLOW_UP, INTERMEDIATE, RETRIEVE,
                                     SELF_ASK_MAX_ITERATIONS, run_ircot, run_self_ask)
from dynakrag_lite.config import ControlConfig, Environment, RunSettings
from dynakrag_lite.data.schema import Paragraph, Question
from dynakrag_lite.demonstrations import (SELF_ASK_DEMOS, DemoLeakError, build_ircot_demos,
                                          template_chain)
from dynakrag_lite.generators.base import Generation
from dynakrag_lite.methods import run_method


# -- a recording fake generator ---------------------------------------------------------
class RecordingGenerator:
    """Replies from ``script(messages, n)`` (n = 0-based call index) or from a list in order
    (the last one repeats); records messages, max_tokens and stop of every call."""
    spec = "recording"
    model_id = "recording"

    def __init__(self, replies: Sequence[str] | Callable[[list, int], str]):
        self.replies = replies
        self.calls: list[dict] = []

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        n = len(self.calls)
        self.calls.append({"messages": messages, "max_tokens": max_tokens, "stop": stop})
        if callable(self.replies):
            text = self.replies(messages, n)
        else:
            text = self.replies[min(n, len(self.replies) - 1)]
        return Generation(text=text, prompt_tokens=sum(len(m["content"]) for m in messages) // 4,
                          completion_tokens=max(1, len(text.split())))

    def user(self, i: int) -> str:
        return self.calls[i]["messages"][-1]["content"]


def is_reader(messages) -> bool:
    """The shared final-answer prompt (prompts.answer_messages)."""
    return "Answer with a short phrase only" in messages[-1]["content"]


def env_of(retriever, gen, **cfg) -> Environment:
    return Environment(retriever, gen, ControlConfig(**cfg))


@pytest.fixture(scope="module")
def question(library_questions):
    return library_questions[0]


def _q(qid: str, question: str, answer: str, qtype, gold: Sequence[tuple[str, str]],
       distractors: Sequence[tuple[str, str]] = ()) -> Question:
    pars = tuple(Paragraph(t, x, True) for t, x in gold) + \
        tuple(Paragraph(t, x, False) for t, x in distractors)
    return Question(qid, "toy", question, (answer,), qtype, pars)


def toy_pool() -> list[Question]:
    return [
        _q("t1", "In which city was the founder of Acme Records born?", "Lyon", "bridge",
           [("Acme Records", "Acme Records is a label. It was founded by Jean Roux in 1970."),
            ("Jean Roux", "Jean Roux was born in Lyon. He played the cello.")],
           [("Other Label", "Other Label is a company in Oslo.")]),
        _q("t2", "Are Mount Foo and Mount Bar both in Chile?", "no", "comparison",
           [("Mount Foo", "Mount Foo is a volcano in Chile."),
            ("Mount Bar", "Mount Bar is a mountain in Peru.")],
           [("Mount Baz", "Mount Baz is a hill.")]),
        _q("t3", "Who directed the film that won Prize X in 1990?", "Ann Lee", "bridge",
           [("Prize X", "Prize X in 1990 went to Blue Sky."),
            ("Blue Sky", "Blue Sky is a 1989 film directed by Ann Lee.")],
           [("Red Sky", "Red Sky is a 1991 film.")]),
    ]


# -- demonstrations ---------------------------------------------------------------------
def test_template_chain_ends_with_the_answer_and_puts_the_answer_paragraph_last():
    q = toy_pool()[0]
    gold = [(p.title, p.text) for p in q.paragraphs if p.is_supporting]
    chain = template_chain(q.question, gold, "Lyon")
    assert chain == ("It was founded by Jean Roux in 1970.", "Jean Roux was born in Lyon.",
                     "So the answer is: Lyon.")


def test_demos_come_from_the_pool_with_gold_and_distractors_and_never_from_eval():
    pool = toy_pool()
    demos = build_ircot_demos(pool, k=2, seed=0)
    assert len(demos) == 2 and demos.ids <= {q.id for q in pool}
    assert {d.type for d in demos} == {"bridge", "comparison"}  # one per type
    for d in demos:
        q = next(x for x in pool if x.id == d.id)
        titles = {t for t, _ in d.paragraphs}
        assert set(q.supporting_titles) <= titles and len(titles) == len(q.supporting_titles) + 1
        assert d.chain[-1] == f"So the answer is: {q.answers[0]}."
    assert build_ircot_demos(pool, k=2, seed=0) is demos  # cached
    with pytest.raises(DemoLeakError):
        build_ircot_demos(pool, k=2, seed=0, eval_ids=["t2", "zzz"])
    with pytest.raises(DemoLeakError):  # and a run on a demonstration question refuses
        run_ircot("q?", Environment(None, None), qid=sorted(demos.ids)[0], demos=demos)


# -- IRCoT ------------------------------------------------------------------------------
def ircot_script(steps: Sequence[str], reader: str = "Reader Answer"):
    it = iter(steps)

    def reply(messages, n):
        if is_reader(messages):
            return reader
        return next(it, steps[-1])
    return reply


def test_ircot_keeps_only_the_first_sentence_and_retrieves_with_it(question,
                                                                  library_retriever):
    gen = RecordingGenerator(ircot_script([
        "Danser Records was founded by Sturdrael Thouse. So the answer is: Wrongtown.",
        "Sturdrael Thouse is a native of Faldaendstead. Another sentence.",
        "So the answer is: Faldaendstead. Trailing text."]))
    env = env_of(library_retriever, gen)
    demos = build_ircot_demos(toy_pool(), k=2)
    res = run_ircot(question.question, env, demos=demos)
    # 'answer is' in a LATER sentence of the first reply does not stop the chain
    assert res.extra["thoughts"] == ["Danser Records was founded by Sturdrael Thouse.",
                                     "Sturdrael Thouse is a native of Faldaendstead.",
                                     "So the answer is: Faldaendstead."]
    assert [t.action for t in res.trace] == [RETRIEVE, COT_STEP, RETRIEVE, COT_STEP, RETRIEVE,
                                             COT_STEP]
    # each search uses the kept sentence alone, adding per_action new paragraphs
    assert res.trace[2].query == "Danser Records was founded by Sturdrael Thouse."
    assert res.trace[4].query == "Sturdrael Thouse is a native of Faldaendstead."
    assert [len(t.added) for t in res.trace if t.action == RETRIEVE] == [3, 3, 3]
    assert res.extra["stop_reason"] == "concluded" and res.extra["concluded_by"] == "answer_is"
    assert res.extra["iterations"] == 3 and res.extra["chain_answer"] == "Faldaendstead"
    # a separate reader call gives the prediction, on all collected paragraphs
    assert len(gen.calls) == 4 and is_reader(gen.calls[-1]["messages"])
    assert res.prediction == "Reader Answer" and res.extra["answer_source"] == "reader"
    assert all(d.title in gen.user(3) for d in res.state.docs)
    # reasoning calls: few-shot, sentence budget, stop at newline; the thoughts so far are
    # the model's own earlier turns, after the paragraphs and the question
    demo_turns = sum(len(d.chain) for d in demos)
    for i, c in enumerate(gen.calls[:3]):
        assert c["stop"] == ["\n"] and c["max_tokens"] == prompts.IRCOT_MAX_TOKENS
        text = str(c["messages"])
        assert all(d.question in text and d.chain[-1] in text for d in demos)
        assistant = [m["content"] for m in c["messages"] if m["role"] == "assistant"]
        assert assistant[demo_turns:] == res.extra["thoughts"][:i]
    assert gen.calls[1]["messages"][-2]["content"] == res.extra["thoughts"][0]
    assert gen.calls[1]["messages"][-3]["content"].endswith(f"Q: {question.question}\nA:")


def test_ircot_answer_is_tested_on_the_first_sentence_only(question, library_retriever):
    gen = RecordingGenerator(lambda m, n: "Reader Answer" if is_reader(m) else
                             f"Fact number {n} is here. So the answer is: X.")
    res = run_ircot(question.question, env_of(library_retriever, gen))
    assert res.extra["stop_reason"] == "max_steps" and res.extra["concluded_by"] == "cap"
    assert res.extra["iterations"] == 4 and res.extra["chain_answer"] == ""


def test_ircot_drops_a_restated_chain_before_taking_the_first_sentence(question,
                                                                       library_retriever):
    gen = RecordingGenerator(ircot_script([
        "Fact one is here.", "Fact one is here. Fact two is here.",
        "A: Fact one is here. Fact two is here. So the answer is: Z."]))
    res = run_ircot(question.question, env_of(library_retriever, gen))
    assert res.extra["thoughts"] == ["Fact one is here.", "Fact two is here.",
                                     "So the answer is: Z."]
    assert res.extra["echoed_sentences"] == 3 and res.extra["stop_reason"] == "concluded"


def test_ircot_stops_when_a_reply_only_restates_the_chain(question, library_retriever):
    gen = RecordingGenerator(ircot_script(["Fact one is here.", "Fact one is here."]))
    res = run_ircot(question.question, env_of(library_retriever, gen))
    assert res.extra["stop_reason"] == "repeated_thought" and res.extra["iterations"] == 2
    assert res.extra["parse_fallbacks"] == {} and res.extra["thoughts"] == ["Fact one is here."]


def test_ircot_respects_the_paragraph_cap_and_keeps_reasoning(question, library_retriever):
    gen = RecordingGenerator(ircot_script([f"Thought number {i} here." for i in range(9)]))
    env = env_of(library_retriever, gen, max_docs=7, max_steps=6)
    res = run_ircot(question.question, env)
    assert len(res.state.docs) == 7  # 3 + 3 + 1, never more
    assert res.extra["iterations"] == 6 and res.extra["stop_reason"] == "max_steps"
    assert res.state.ledger.retrieval_calls == 3  # no search once the cap is reached
    assert res.state.ledger.llm_calls == 7  # 6 reasoning calls + the reader


def test_ircot_counts_thoughts_that_hit_the_token_cap(question, library_retriever):
    long = " ".join(["word"] * 80)
    gen = RecordingGenerator(ircot_script([long, "So the answer is: Q."]))
    res = run_ircot(question.question, env_of(library_retriever, gen))
    assert res.extra["thoughts_truncated"] == 1 and res.extra["iterations"] == 2


def test_ircot_empty_reply_is_a_counted_parse_fallback(question, library_retriever):
    gen = RecordingGenerator(ircot_script(["   "]))
    res = run_ircot(question.question, env_of(library_retriever, gen))
    assert res.extra["stop_reason"] == "empty_thought"
    assert res.extra["parse_fallbacks"] == {"ircot": 1}
    assert res.state.docs and res.prediction == "Reader Answer"


# -- Self-Ask ---------------------------------------------------------------------------
def self_ask_script(question: str, proposals: Sequence[str],
                    answers: Sequence[str] = ("Some Answer",), reader: str = "Reader Answer"):
    """Proposer replies in order; intermediate answers in order; the final reader (the
    answer prompt on the original question) always says ``reader``."""
    p, a = iter(proposals), iter(answers)

    def reply(messages, n):
        if messages[0]["content"] == prompts.SELF_ASK_SYSTEM:
            return next(p, proposals[-1])
        if f"Question: {question}\n" in messages[-1]["content"]:
            return reader
        return next(a, answers[-1])
    return reply


def test_self_ask_uses_stop_sequences_demos_and_shows_context(question, library_retriever):
    proposals = ["Are follow up questions needed here: Yes.\n"
                 "Follow up: Who founded Danser Records?",
                 "Follow up: Where was Sturdrael Thouse born?",
                 "So the final answer is: Faldaendstead"]
    gen = RecordingGenerator(self_ask_script(question.question, proposals,
                                             ["Sturdrael Thouse", "Faldaendstead"]))
    res = run_self_ask(question.question, env_of(library_retriever, gen))
    assert res.prediction == "Faldaendstead" and res.extra["answer_source"] == "chain"
    assert res.extra["qa_pairs"] == [("Who founded Danser Records?", "Sturdrael Thouse"),
                                     ("Where was Sturdrael Thouse born?", "Faldaendstead")]
    assert [t.action for t in res.trace] == [RETRIEVE, FOLLOW_UP, RETRIEVE, INTERMEDIATE,
                                             FOLLOW_UP, RETRIEVE, INTERMEDIATE, FOLLOW_UP]
    proposer = [c for c in gen.calls if c["messages"][0]["content"] == prompts.SELF_ASK_SYSTEM]
    assert len(proposer) == 3
    for c in proposer:
        assert c["stop"] and "Intermediate answer:" in c["stop"]
        text = str(c["messages"])
        assert all(d.question in text for d in SELF_ASK_DEMOS)  # 4 demonstrations
    # the proposer sees the question's documents from the first call on ...
    first_docs = [d for d in res.state.docs if d.step == 0]
    assert first_docs and all(d.title in str(proposer[0]["messages"][-1]) for d in first_docs)
    # ... and, later, every document a follow-up added, with the intermediate answers
    last = str(proposer[2]["messages"])
    assert all(d.title in last for d in res.state.docs)
    assert "Intermediate answer: Sturdrael Thouse" in last
    # intermediate answers come from the reader on the follow-up's own search
    inter = [c for c in gen.calls if c not in proposer]
    assert "Question: Who founded Danser Records?" in inter[0]["messages"][-1]["content"]


def test_self_ask_model_cannot_write_its_own_intermediate_answer(question, library_retriever):
    proposals = ["Follow up: Who founded Danser Records?\nIntermediate answer: Invented "
                 "Person\nSo the final answer is: Invented Town",
                 "So the final answer is: Real Town"]
    gen = RecordingGenerator(self_ask_script(question.question, proposals,
                                             ["Sturdrael Thouse"]))
    res = run_self_ask(question.question, env_of(library_retriever, gen))
    assert res.extra["qa_pairs"] == [("Who founded Danser Records?", "Sturdrael Thouse")]
    assert res.prediction == "Real Town"


def test_self_ask_caps_at_five_iterations(question, library_retriever):
    proposals = [f"Follow up: Question number {i}?" for i in range(20)]
    gen = RecordingGenerator(self_ask_script(question.question, proposals))
    env = env_of(library_retriever, gen, max_steps=20, max_docs=60)
    res = run_self_ask(question.question, env)
    proposer = [c for c in gen.calls if c["messages"][0]["content"] == prompts.SELF_ASK_SYSTEM]
    assert SELF_ASK_MAX_ITERATIONS == 5
    assert len(proposer) == 5 and res.extra["iterations"] == 5
    assert res.extra["stop_reason"] == "max_iterations" and res.extra["n_follow_ups"] == 5
    assert res.extra["answer_source"] == "reader" and is_reader(gen.calls[-1]["messages"])


def test_self_ask_repeated_follow_up_forces_the_final_answer(question, library_retriever):
    proposals = ["Follow up: Who founded Danser Records?",
                 "Follow up: who founded Danser Records", "So the final answer is: Forced Town"]
    gen = RecordingGenerator(self_ask_script(question.question, proposals,
                                             ["Sturdrael Thouse"]))
    res = run_self_ask(question.question, env_of(library_retriever, gen))
    assert res.extra["stop_reason"] == "repeated_followup"
    assert res.extra["repeated_followups"] == 1 and res.extra["forced_final"]
    assert res.prediction == "Forced Town" and res.extra["answer_source"] == "forced"
    assert res.state.ledger.retrieval_calls == 2  # the question, then one follow-up: no re-search
    forced = [c for c in gen.calls if "No more follow up questions" in str(c["messages"])]
    assert len(forced) == 1
    # if the forced call gives no final answer, the reader answers from the documents
    proposals = ["Follow up: Who founded Danser Records?"] * 2
    gen = RecordingGenerator(self_ask_script(question.question, proposals,
                                             ["Sturdrael Thouse"]))
    res = run_self_ask(question.question, env_of(library_retriever, gen))
    assert res.extra["answer_source"] == "reader" and is_reader(gen.calls[-1]["messages"])


def test_self_ask_counts_copied_demonstration_follow_ups(question, library_retriever):
    proposals = [f"Follow up: {SELF_ASK_DEMOS[0].follow_ups[0]}", "So the final answer is: France"]
    gen = RecordingGenerator(self_ask_script(question.question, proposals))
    res = run_self_ask(question.question, env_of(library_retriever, gen))
    assert res.extra["demo_copies"] == 2  # the follow-up and the final answer


# -- Fixed-K pair -----------------------------------------------------------------------
@pytest.mark.parametrize("k", [3, 6])
def test_fixed_k_pair_reads_exactly_k_docs(k, question, library_retriever):
    gen = RecordingGenerator(["Some Answer"])
    res = run_method(RunSettings(method="fixed_k", fixed_k=k), question,
                     env_of(library_retriever, gen))
    assert res.method == "fixed_k" and len(res.state.docs) == k and res.extra["k"] == k
    assert len(gen.calls) == 1 and is_reader(gen.calls[0]["messages"])
    reader_prompt = gen.user(0)
    assert reader_prompt.count("\n[") + reader_prompt.startswith("[") == k
    assert f"[{k}] " in reader_prompt and f"[{k + 1}] " not in reader_prompt


# -- real model: behaviour, not quality -------------------------------------------------
@pytest.mark.slow
def test_real_model_ircot_iterates_and_self_ask_does_not_copy_demos(shared_data_dir, tmp_path):
    """Three real HotpotQA training questions with qwen2.5-coder-0.5b. The corpus is pooled
    from 30 training questions (not all 824: indexing those takes minutes on a shared CPU),
    so this checks behaviour, not quality."""
    require_model("qwen2.5-coder-0.5b")
    from dynakrag_lite.data.corpus import Corpus
    from dynakrag_lite.data.sources import load_dataset, split_questions
    from dynakrag_lite.generators.spec import make_generator
    from dynakrag_lite.retriever import DenseRetriever
    train, evals = split_questions(load_dataset(shared_data_dir / "hotpotqa.jsonl"), 100, 0)
    qs = train[:3]
    retriever = DenseRetriever(Corpus.from_questions(train[:30], name="hotpotqa"),
                               index_dir=tmp_path / "index", show_progress=False)
    env = Environment(retriever, make_generator("qwen2.5-coder-0.5b", cache=False),
                      ControlConfig.for_dataset("hotpotqa", doc_chars=400))
    # demonstrations from the other training questions, never from evaluation ones
    demos = build_ircot_demos(train[3:], eval_ids=[q.id for q in evals] + [q.id for q in qs])
    ircot = [run_ircot(q.question, env, qid=q.id, demos=demos) for q in qs]
    assert max(r.extra["iterations"] for r in ircot) > 1
    demo_text = {d.question for d in demos} | {s for d in demos for s in d.chain}
    for r in ircot:
        assert r.extra["n_demos"] == 2 and r.extra["answer_source"] == "reader"
        assert r.state.ledger.llm_calls == r.extra["iterations"] + 1
        assert r.state.ledger.retrieval_calls == r.extra["searches"] <= env.config.max_steps
        assert len(r.state.docs) <= env.config.max_docs
        assert not any(t in demo_text for t in r.extra["thoughts"])
    asks = [run_self_ask(q.question, env, qid=q.id) for q in qs]
    demo_follow_ups = {f.lower() for d in SELF_ASK_DEMOS for f in d.follow_ups}
    for r in asks:
        assert not any(f.lower() in demo_follow_ups for f in r.extra["follow_ups"])
        assert r.extra["demo_copies"] == 0
        assert r.extra["iterations"] <= SELF_ASK_MAX_ITERATIONS
        assert r.state.ledger.retrieval_calls <= env.config.max_steps
