"""The reply parsers of dynakrag_lite.prompts on REAL replies of the bundled small models.

tests/fixtures/real_replies.json holds replies of smollm2-135m and qwen2.5-coder-0.5b (greedy,
llama.cpp) to the prompts the library builds for three library questions, recorded once by
tests/fixtures/record_replies.py. Small models ignore formats in ways hand-written garbage
does not anticipate; every property below must hold for every one of those replies. A case
that fails because of a parser bug is marked xfail(strict=True) in KNOWN_PARSER_BUGS with the
bug named, so fixing the parser turns it into an XPASS failure and the mark must go.
"""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from dynakrag_lite import prompts

FIXTURES = Path(__file__).resolve().parent / "fixtures"
DATA = json.loads((FIXTURES / "real_replies.json").read_text())
RECORDS = DATA["records"]


def _recorder():
    spec = importlib.util.spec_from_file_location("record_replies",
                                                  FIXTURES / "record_replies.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rid(r: dict) -> str:
    return f"{r['model']}-{r['kind']}-{r['question_id']}"


# (property test name, record id) -> the parser bug that makes it fail. Filled from the
# recorded replies; each entry names the parser and what it gets wrong.
KNOWN_PARSER_BUGS: dict[tuple[str, str], str] = {}


def cases(test: str, kinds: tuple[str, ...] | None = None):
    out = []
    for r in RECORDS:
        if kinds is not None and r["kind"] not in kinds:
            continue
        bug = KNOWN_PARSER_BUGS.get((test, rid(r)))
        marks = [pytest.mark.xfail(strict=True, reason=bug)] if bug else []
        out.append(pytest.param(r, id=rid(r), marks=marks))
    return out


# -- the fixture itself ---------------------------------------------------------------------

def test_fixture_covers_every_model_kind_and_question():
    rec = _recorder()
    qids = {q.id for q in rec.chosen_questions()}
    got = {(r["model"], r["kind"], r["question_id"]) for r in RECORDS}
    assert got == {(m, k, q) for m in rec.MODELS for k in rec.KINDS for q in qids}
    assert all(isinstance(r["reply"], str) for r in RECORDS)


def test_recorded_replies_answer_the_prompts_the_library_builds_today():
    """A prompt template changed since the recording: the replies no longer show what the
    models answer to it. Re-run tests/fixtures/record_replies.py (a few minutes)."""
    today = {(p["kind"], p["question_id"]): (p["prompt_sha256"], p["max_tokens"], p["stop"])
             for p in _recorder().all_prompts()}
    stale = sorted({(r["kind"], r["question_id"]) for r in RECORDS
                    if today.get((r["kind"], r["question_id"]))
                    != (r["prompt_sha256"], r["max_tokens"], r["stop"])})
    assert not stale, f"prompts changed for {stale}: re-run record_replies.py"


# -- properties that must hold for every real reply -------------------------------------------

@pytest.mark.parametrize("r", cases("never_raise"))
def test_no_parser_raises_on_any_real_reply(r):
    text = r["reply"]
    prompts.parse_answer(text)
    prompts.parse_sufficiency(text)
    prompts.parse_query(text, fallback=r["question"], titles=r["titles"])
    prompts.parse_gap(text)
    prompts.parse_snippets(text, 8)
    prompts.parse_ircot(text)
    prompts.parse_self_ask(text)


ANSWER_LABEL = re.compile(r"^\W*(final answer|answer|a)\s*[:\-]", re.I)


def assert_clean_answer(ans: str) -> None:
    assert not ANSWER_LABEL.match(ans), f"label left in {ans!r}"
    assert "\n" not in ans, f"newline in {ans!r}"
    assert not ans.endswith("."), f"trailing period in {ans!r}"
    assert ans == ans.strip()


@pytest.mark.parametrize("r", cases("answer_clean"))
def test_parse_answer_gives_a_bare_one_line_answer(r):
    # Every reply, not only answer prompts: the reader's reply can be anything.
    assert_clean_answer(prompts.parse_answer(r["reply"]))


DOC_MARKER = re.compile(r"\[\d+\]")
QUERY_LABEL = re.compile(r"^\W*(question|(new |search )*query|answer)\s*:", re.I)


@pytest.mark.parametrize("r", cases("query_clean", ("rewrite",)))
def test_parse_query_gives_a_search_query_without_document_markers(r):
    # titles: the documents shown in the prompt, as rewrite_query passes them
    q = prompts.parse_query(r["reply"], fallback=r["question"], titles=r["titles"])
    assert q.strip() and "\n" not in q and len(q) <= 300
    assert not DOC_MARKER.search(q), f"document marker in query {q!r}"
    # an echoed prompt label ('Question:', 'Query:') is not part of a search query
    assert not QUERY_LABEL.match(q), f"label left in {q!r}"



def starts_with_form(reply: str) -> str | None:
    """Which of the two requested forms the reply opens with, read independently of the
    parser: 'INSUFFICIENT' / 'SUFFICIENT' after whitespace and markdown emphasis."""
    head = reply.lstrip().lstrip("*#_ ").upper()
    if head.startswith("INSUFFICIENT"):
        return "insufficient"
    if head.startswith("SUFFICIENT"):
        return "sufficient"
    return None


@pytest.mark.parametrize("r", cases("sufficiency_form"))
def test_parse_sufficiency_reads_every_reply_that_opens_with_a_form(r):
    form = starts_with_form(r["reply"])
    rep = prompts.parse_sufficiency(r["reply"])
    if form is not None:
        assert rep.parsed and rep.sufficient == (form == "sufficient")
    if not rep.parsed:  # the fallback: insufficient, no gap to search with
        assert form is None and not rep.sufficient and rep.gap == ""
    assert "\n" not in rep.gap and not rep.gap.upper().startswith("INSUFFICIENT")


@pytest.mark.parametrize("r", cases("snippets_clean", ("compress",)))
def test_parse_snippets_gives_at_most_max_one_line_snippets(r):
    snippets = prompts.parse_snippets(r["reply"], 8)
    assert len(snippets) <= 8 and bool(snippets) == bool(r["reply"].strip())
    for s in snippets:
        assert s.strip() and "\n" not in s
        assert not re.match(r"^\s*([-*\u2022]|\d+[.)])\s", s), f"bullet kept in {s!r}"


@pytest.mark.parametrize("r", cases("ircot_clean"))
def test_parse_ircot_keeps_one_sentence_and_concludes_only_on_answer_is(r):
    t = prompts.parse_ircot(r["reply"])
    assert "\n" not in t.sentence
    assert t.concludes == bool(re.search(r"answer is\b", t.sentence, re.I))
    if t.concludes:
        assert_clean_answer(t.answer)
    else:
        assert t.answer == ""


@pytest.mark.parametrize("r", cases("self_ask_clean"))
def test_parse_self_ask_gives_a_follow_up_or_a_final_answer(r):
    follow_up, final = prompts.parse_self_ask(r["reply"])
    assert follow_up is None or final is None
    if follow_up is not None:
        assert follow_up.strip() and "\n" not in follow_up and len(follow_up) <= 300
        assert not re.match(r"^\W*follow[ -]?up\b", follow_up, re.I)
    if final is not None:
        assert_clean_answer(final)


# -- exact expectations, read off the recorded replies ---------------------------------------

def reply(model: str, kind: str, qid: str, starts: str) -> dict:
    """The recorded reply, checked to still be the one these expectations were read from."""
    (r,) = [r for r in RECORDS
            if (r["model"], r["kind"], r["question_id"]) == (model, kind, qid)]
    assert r["reply"].startswith(starts), "fixture re-recorded: re-read this expectation"
    return r


QWEN, SMOL = "qwen2.5-coder-0.5b", "smollm2-135m"


@pytest.mark.parametrize("model, qid, starts, expected", [
    (QWEN, "library-s0-0000", "Faldaendstead", "Faldaendstead"),
    (QWEN, "library-s0-0004", "Mirnarby", "Mirnarby"),
    (SMOL, "library-s0-0001", "Drelcath Instruments", "Drelcath Instruments"),
    # a sentence-long reply: first line, trailing period dropped, nothing else invented
    (SMOL, "library-s0-0004", "The capital of the country",
     "The capital of the country where the studio that produced Winter in Thenvosk was "
     "founded is Murfinesh"),
])
def test_parse_answer_on_recorded_answers(model, qid, starts, expected):
    assert prompts.parse_answer(reply(model, "answer", qid, starts)["reply"]) == expected


@pytest.mark.parametrize("model, qid, starts, expected", [
    (QWEN, "library-s0-0000", "SUFFICIENT", (True, "", True)),
    # both forms, one per line: the first line is the verdict
    (SMOL, "library-s0-0001", "SUFFICIENT\nINSUFFICIENT:", (True, "", True)),
    # a prose answer instead of a verdict: the fallback, counted as unparsed
    (SMOL, "library-s0-0004", "The capital of the country", (False, "", False)),
])
def test_parse_sufficiency_on_recorded_verdicts(model, qid, starts, expected):
    rep = prompts.parse_sufficiency(reply(model, "sufficiency", qid, starts)["reply"])
    assert (rep.sufficient, rep.gap, rep.parsed) == expected


def test_parse_query_on_recorded_rewrites():
    # qwen copied document [1] instead of writing a query: nothing usable, so the question.
    r = reply(QWEN, "rewrite", "library-s0-0000", "[1] Sturdrael Thouse: ")
    assert prompts.parse_query(r["reply"], fallback=r["question"],
                               titles=r["titles"]) == r["question"]
    r = reply(QWEN, "rewrite", "library-s0-0004", "Tourstoul Films")
    assert prompts.parse_query(r["reply"], fallback=r["question"],
                               titles=r["titles"]) == "Tourstoul Films"


def test_parse_snippets_on_a_recorded_bullet_list():
    r = reply(QWEN, "compress", "library-s0-0001", "- [1] Drelcath")
    assert prompts.parse_snippets(r["reply"], 8) == [
        "[1] Drelcath Instruments - Founded in 1903 in Greidromstead",
        "[2] Zoser Textiles - Founded in 1860 in Zalsonddale"]
    assert prompts.parse_snippets(r["reply"], 1) == [
        "[1] Drelcath Instruments - Founded in 1903 in Greidromstead"]


@pytest.mark.parametrize("model, qid, starts, expected", [
    # the 'Follow up:' label is stripped; nothing after it is taken as a final answer
    (SMOL, "library-s0-0000", "Follow up: ", ("What kind of town is Danser Records?", None)),
    (QWEN, "library-s0-0001", "Follow up: ", ("When was Drelcath Instruments founded?", None)),
    (QWEN, "library-s0-0000", "Follow up: ",
     ("Where was the founder of Danser Records born?", None)),
])
def test_parse_self_ask_on_recorded_proposals(model, qid, starts, expected):
    assert prompts.parse_self_ask(reply(model, "self_ask", qid, starts)["reply"]) == expected


def test_parse_ircot_on_a_recorded_thought():
    r = reply(QWEN, "ircot", "library-s0-0001", "So the answer is: Drelcath")
    t = prompts.parse_ircot(r["reply"])
    assert (t.sentence, t.concludes, t.answer) == (
        "So the answer is: Drelcath Instruments.", True, "Drelcath Instruments")
    r = reply(QWEN, "ircot", "library-s0-0004", "The capital of the country")
    t = prompts.parse_ircot(r["reply"])
    assert not t.concludes and t.sentence.endswith("is Mirnarby.")


def test_parse_ircot_skips_an_echoed_question_before_the_conclusion():
    r = reply(QWEN, "ircot", "library-s0-0000", "In which town was the founder")
    t = prompts.parse_ircot(r["reply"])
    assert t.concludes and t.answer == "Faldaendstead"
