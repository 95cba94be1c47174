"""Every prompt template of the project, and the parsers of the model's replies.

The paper released no prompts; these are ours. Two layout rules:

* Documents come first, the instruction last. Calls of one question then share a long common
  prefix (system text + the same documents in the same order), which llama.cpp reuses from its
  KV cache instead of reading it again.
* Every parser has a defined fallback for a malformed reply (small models often ignore
  formats); none raises.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .generators import Message

SYSTEM = ("You answer multi-hop questions using the numbered documents you are given. "
          "Be brief and precise.")

# Token limits (paper: answer 48; snippets 256 for HotpotQA/2Wiki, 384 for MuSiQue).
ANSWER_MAX_TOKENS = 48
SUFFICIENCY_MAX_TOKENS = 48
REWRITE_MAX_TOKENS = 32
COMPRESS_MAX_TOKENS = 256
COMPRESS_MAX_TOKENS_FACT_TABLE = 384
CHAIN_MAX_TOKENS = 64


def format_documents(docs: Sequence, max_chars: int | None = None) -> str:
    """Numbered documents. ``docs`` items have ``render(max_chars)`` (RetrievedDoc/Document)."""
    if not docs:
        return "(no documents)"
    return "\n".join(f"[{i}] {d.render(max_chars)}" for i, d in enumerate(docs, start=1))


def _with_docs(docs: Sequence, instruction: str, max_chars: int | None) -> list[Message]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Documents:\n" + format_documents(docs, max_chars)
             + "\n\n" + instruction}]


# -- final answer -----------------------------------------------------------------------
def answer_messages(question: str, docs: Sequence, max_chars: int | None = None) -> list[Message]:
    return _with_docs(docs, f"Question: {question}\nAnswer with a short phrase only (a name, "
                      "date, number, or yes/no), no explanation.\nAnswer:", max_chars)


def answer_from_snippets_messages(question: str, snippets: str) -> list[Message]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Evidence:\n{snippets}\n\nQuestion: {question}\n"
             "Answer with a short phrase only (a name, date, number, or yes/no), no "
             "explanation.\nAnswer:"}]


_ANSWER_PREFIX = re.compile(r"^\s*(final answer|answer|a)\s*[:\-]\s*", re.I)


def parse_answer(text: str) -> str:
    """First non-empty line, without 'Answer:' prefixes, quotes or a trailing period.
    Fallback for an empty reply: the empty string (scores 0, never crashes)."""
    for line in text.strip().splitlines():
        line = _ANSWER_PREFIX.sub("", line.strip()).strip().strip('"\'*` ')
        if line:
            line = re.sub(r"\s*\(.*?\)\s*$", "", line) or line  # drop trailing asides
            return line.rstrip(".").strip()
    return ""


# -- sufficiency probe ------------------------------------------------------------------
def sufficiency_messages(question: str, docs: Sequence, max_chars: int | None = None
                         ) -> list[Message]:
    return _with_docs(docs, f"Question: {question}\nDo the documents contain every fact needed "
                      "to answer the question? Reply in exactly one of these two forms:\n"
                      "SUFFICIENT\nINSUFFICIENT: <the missing fact, as a short search "
                      "query>", max_chars)


@dataclass(frozen=True)
class SufficiencyReply:
    sufficient: bool
    gap: str
    parsed: bool


def parse_sufficiency(text: str) -> SufficiencyReply:
    """'SUFFICIENT' / 'INSUFFICIENT: gap'. Also accepts yes/no openings. Fallback for anything
    else: insufficient with no gap (so gap_query stays invalid and nothing is searched with
    garbage), parsed=False so the rate can be measured."""
    t = text.strip()
    low = t.lower().lstrip("*# ")
    m = re.match(r"(insufficient|not sufficient|no)\b[\s:.,\-]*(.*)", low, re.S)
    if m:
        start = len(t) - len(t.lstrip("*# ")) + m.start(2)
        gap = t[start:].strip().splitlines()[0].strip() if t[start:].strip() else ""
        gap = re.sub(r"^(missing( fact| information)?|query)\s*[:\-]\s*", "", gap, flags=re.I)
        return SufficiencyReply(False, gap.strip(' "\'.*'), True)
    if re.match(r"(sufficient|yes)\b", low):
        return SufficiencyReply(True, "", True)
    return SufficiencyReply(False, "", False)


# -- query rewriting --------------------------------------------------------------------
def rewrite_messages(question: str, docs: Sequence, max_chars: int | None = None
                     ) -> list[Message]:
    return _with_docs(docs, f"Question: {question}\nWrite one new search query that would find "
                      "the document still needed to answer the question (for example about "
                      "an entity named in the documents). Reply with the query only.\nQuery:",
                      max_chars)


def parse_query(text: str, fallback: str) -> str:
    """First non-empty line without prefixes/quotes; fallback (the question) if empty."""
    for line in text.strip().splitlines():
        line = re.sub(r"^\s*(new )?(search )?query\s*[:\-]\s*", "", line.strip(), flags=re.I)
        line = line.strip().strip('"\'*` ')
        if line:
            return line[:300]
    return fallback


# -- terminal compression ---------------------------------------------------------------
def compress_messages(question: str, docs: Sequence, fact_table: bool = False,
                      max_snippets: int = 8, max_chars: int | None = None) -> list[Message]:
    if fact_table:
        ask = (f"Question: {question}\nBuild a fact table for answering the question: list up "
               f"to {max_snippets} facts from the documents, one per line as "
               "'- entity | relation | value [doc number]', following the chain of facts "
               "from the question to the answer.")
    else:
        ask = (f"Question: {question}\nCopy up to {max_snippets} short snippets from the "
               "documents that together support the answer, one per line as "
               "'- [doc number] snippet'. Only snippets that connect to each other and to "
               "the question.")
    return _with_docs(docs, ask + "\nSnippets:" if not fact_table else ask + "\nFacts:",
                      max_chars)


def parse_snippets(text: str, max_snippets: int) -> list[str]:
    """Bullet or numbered lines; fallback for an unstructured reply: its non-empty lines."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    bullets = [re.sub(r"^([-*\u2022]|\d+[.)])\s*", "", ln) for ln in lines
               if re.match(r"^([-*\u2022]|\d+[.)])\s*", ln)]
    out = bullets or lines
    return [s for s in out if s][:max_snippets]


# -- baselines: IRCoT and Self-Ask ------------------------------------------------------
# IRCoT (Trivedi et al. 2023) interleaves one chain-of-thought sentence with one retrieval;
# Self-Ask (Press et al. 2023) decomposes into follow-up questions answered by search. Both
# originals are few-shot with stop sequences; our generator interface has no stop sequences on
# the environment path, so the parsers cut the reply where the original would have stopped.
IRCOT_MAX_TOKENS = CHAIN_MAX_TOKENS
SELF_ASK_MAX_TOKENS = CHAIN_MAX_TOKENS

SELF_ASK_SYSTEM = ("You break multi-hop questions into simple follow-up questions, one at a "
                   "time. Be brief and precise.")
# One compact demonstration (fictional, so it cannot leak an answer); the original used four.
_SELF_ASK_DEMO = ("Example:\nQuestion: Who was the father of the director of Red Harbour?\n"
                  "Follow up: Who directed Red Harbour?\nIntermediate answer: Anna Velk.\n"
                  "Follow up: Who was the father of Anna Velk?\nIntermediate answer: Oren Velk.\n"
                  "So the final answer is: Oren Velk\n\n")


def ircot_messages(question: str, docs: Sequence, thoughts: Sequence[str],
                   max_chars: int | None = None) -> list[Message]:
    so_far = " ".join(thoughts) if thoughts else "(none yet)"
    return _with_docs(docs, f"Question: {question}\nReason step by step, one sentence at a "
                      "time. Write the next sentence of reasoning only. When you know the "
                      "answer, write 'So the answer is: <answer>'.\nReasoning so far: "
                      f"{so_far}\nNext sentence:", max_chars)


_THOUGHT_LABEL = re.compile(r"^\s*(next sentence|sentence|reasoning( so far)?|thought|"
                            r"step \d+)\s*[:\-]\s*", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
_REPEATED_LEAD = re.compile(r"^(\s*so the (final )?answer is\s*:?)+\s*", re.I)
_IRCOT_ANSWER = re.compile(r"so the (?:final )?answer is[ \t]*:?[ \t]*([^:\s].*)", re.I)


def parse_ircot(text: str) -> tuple[str, str | None]:
    """(next thought, answer if the reply concludes).

    The thought is the first sentence of the first non-empty line, without echoed labels
    ('Next sentence:'): IRCoT retrieves with one CoT sentence. The conclusion is searched in the
    whole reply (small models often write it on a later line); 'So the answer is:' followed by
    nothing counts as no conclusion. Fallback for an empty reply: ('', None)."""
    thought = ""
    for line in text.strip().splitlines():
        line = _THOUGHT_LABEL.sub("", line.strip()).strip().strip("*` ")
        if line:
            thought = _SENTENCE_END.split(line, 1)[0].strip()
            break
    m = _IRCOT_ANSWER.search(text)
    # Small models loop ('So the answer is: So the answer is: ...'): drop the repeats.
    conclusion = parse_answer(_REPEATED_LEAD.sub("", m.group(1))) if m else ""
    if not conclusion and re.match(r"so the (final )?answer is\b", thought, re.I):
        thought = ""  # an empty conclusion is no reasoning either: nothing to search with
    return thought, (conclusion or None)


def self_ask_messages(question: str, qa_pairs: Sequence[tuple[str, str]],
                      docs: Sequence = (), max_chars: int | None = None) -> list[Message]:
    """The follow-up proposer. As in Self-Ask, it sees the question and the chain of follow-ups
    with their intermediate answers; evidence enters only through those answers. Documents are
    shown only if given (a variant, not the default)."""
    steps = "".join(f"Follow up: {q}\nIntermediate answer: {a}\n" for q, a in qa_pairs)
    ask = (_SELF_ASK_DEMO + f"Question: {question}\nAre follow up questions needed here? Ask "
           "one simple follow-up question at a time, or, when you can answer, write 'So the "
           "final answer is: <answer>'.\n" + steps + "Next line (either 'Follow up: "
           "<question>' or 'So the final answer is: <answer>'):")
    if docs:
        return _with_docs(docs, ask, max_chars)
    return [{"role": "system", "content": SELF_ASK_SYSTEM}, {"role": "user", "content": ask}]


_FOLLOW_UP = re.compile(r"follow[ -]?up(?: question)?[ \t]*:[ \t]*(\S.*)", re.I)
_FINAL = re.compile(r"(?:final|the) answer is[ \t]*:?[ \t]*([^:\s].*)", re.I)


def parse_self_ask(text: str) -> tuple[str | None, str | None]:
    """(follow-up question, final answer); at most one is set, both None for a malformed reply.

    The reply is cut at its first 'Intermediate answer:' (where the original stops generation
    and lets search answer): a model that invents a whole chain does not get to invent the
    final answer too. Of a follow-up and a conclusion, the earlier one wins. Fallback: a bare
    line ending in '?' is taken as the follow-up."""
    head = re.split(r"intermediate answer\s*:", text, maxsplit=1, flags=re.I)[0]
    fin, fup = _FINAL.search(head), _FOLLOW_UP.search(head)
    if fin and (fup is None or fin.start() < fup.start()):
        final = parse_answer(fin.group(1))
        if final:
            return None, final
    if fup:
        q = fup.group(1).strip().strip("\"'*` ")
        if q:
            return q[:300], None
    for line in head.strip().splitlines():
        line = line.strip().strip("\"'*` ")
        if line.endswith("?") and not line.lower().startswith("are follow up"):
            return line[:300], None
    return None, None


def intermediate_answer_messages(question: str, docs: Sequence, max_chars: int | None = None
                                 ) -> list[Message]:
    """Answer one follow-up from the documents retrieved for it (Self-Ask's search step)."""
    return answer_messages(question, docs, max_chars)
