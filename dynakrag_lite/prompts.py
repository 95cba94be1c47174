"""Every prompt template of the project, and the parsers of the model's replies (chapter 3).

The paper released no prompts; these are ours. Two layout rules:

* Documents come first, the instruction last. Calls of one question then share a long common
  prefix (system text + the same documents in the same order), which llama.cpp reuses from its
  KV cache instead of reading it again.
* Every parser has a defined fallback for a malformed reply (small models often ignore
  formats); none raises."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .generators.base import Message
from .text import split_sentences

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
# The answer format depends on the question's shape: offering "yes/no" to every question made
# small readers answer Yes/No to entity questions (7 of 30, where 1 gold answer was yes/no).
_AUX_START = re.compile(r"^\s*(is|are|was|were|am|do|does|did|can|could|has|have|had|will|"
                        r"would|should|shall|may|might|must|isn't|aren't|wasn't|weren't|"
                        r"doesn't|don't|didn't)\b", re.I)
_WH_WORD = re.compile(r"\b(what|which|who|whom|whose|when|where|why|how)\b", re.I)
_CHOICE = re.compile(r"\bor\b", re.I)
_EITHER = re.compile(r"\b(either|neither)\b", re.I)
_BOTH_SAME = re.compile(r"\b(both|same)\b", re.I)
_THIS_SLOT = re.compile(r"\b(this|these|that)\s+\w+", re.I)


def is_yes_no_question(question: str) -> bool:
    """True for a question answered yes or no: it starts with an auxiliary verb and offers no
    choice with "or", or it is a "both"/"same" comparison with no wh-word or "this <noun>"
    slot. On the dev files every yes/no gold question passes, and only two others."""
    q = " ".join(question.split())
    if not q:
        return False
    if _AUX_START.match(q):
        return not _CHOICE.search(q) or bool(_EITHER.search(q))
    return bool(_BOTH_SAME.search(q)) and not _WH_WORD.search(q) and not _THIS_SLOT.search(q) \
        and not _CHOICE.search(q)


def answer_instruction(question: str) -> str:
    """The answer-format line, conditioned on the question's shape."""
    if is_yes_no_question(question):
        return "Answer with yes or no only, no explanation."
    return "Answer with a short phrase only (a name, date, number or place), no explanation."


def answer_messages(question: str, docs: Sequence, max_chars: int | None = None) -> list[Message]:
    return _with_docs(docs, f"Question: {question}\n{answer_instruction(question)}\nAnswer:",
                      max_chars)


def answer_from_snippets_messages(question: str, snippets: str) -> list[Message]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Evidence:\n{snippets}\n\nQuestion: {question}\n"
             f"{answer_instruction(question)}\nAnswer:"}]


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


# The gap writer: a second call when a score-based verdict says insufficient or gates nothing.
GAP_MAX_TOKENS = 32


def gap_messages(question: str, docs: Sequence, max_chars: int | None = None) -> list[Message]:
    return _with_docs(docs, f"Question: {question}\nThe documents above do not yet hold every "
                      "fact needed to answer the question. Which fact is missing? Write it as "
                      "a short search query (a few words naming the entity and what to look "
                      "up). Reply with the query only.\nMissing fact:", max_chars)


_GAP_PREFIX = re.compile(r"^\s*(insufficient|missing( fact| information)?|(search )?query|"
                         r"gap)\s*[:\-]\s*", re.I)


def parse_gap(text: str) -> str:
    """First non-empty line without labels, quotes or a trailing period, at most 300 characters;
    '' for a reply naming nothing ('none', 'sufficient'), so gap_query stays invalid."""
    for line in text.strip().splitlines():
        line = line.strip().strip("\"'*` ")
        while _GAP_PREFIX.match(line):
            line = _GAP_PREFIX.sub("", line, count=1).strip().strip("\"'*` ")
        line = line.rstrip(".").strip().strip("\"'*` ").rstrip(".").strip()
        if line:
            return "" if line.lower() in ("none", "nothing", "sufficient", "n/a") else line[:300]
    return ""


# -- query rewriting --------------------------------------------------------------------
def rewrite_messages(question: str, docs: Sequence, max_chars: int | None = None) -> list[Message]:
    return _with_docs(docs, f"Question: {question}\nWrite one new search query that would find "
                      "the document still needed to answer the question (for example about "
                      "an entity named in the documents). Reply with the query only.\nQuery:",
                      max_chars)


_DOC_MARKER = re.compile(r"^\s*(?:[-*\u2022]\s*)?(?:(?:\[\s*\d+\s*\]|\(\s*\d+\s*\)|"
                         r"doc(?:ument)?\s*\d+\s*[:.\-]?)\s*)+", re.I)
_QUERY_LABEL = re.compile(r"^\s*(new |rewritten )?(search )?query\s*[:\-]\s*", re.I)
_SEARCH_VERB = re.compile(r"^\s*(search(ing)? for|search|look up|find)\s*[:\-]?\s+", re.I)
_IN_DOCS = re.compile(r"\s+in (the )?(documents?|corpus)\s*[.?!]?\s*$", re.I)
# An echoed prompt line ("Question: ...", "Answer: ...") or a bare label ("Query") is no query.
_ECHO_LINE = re.compile(r"^\W*(?:(?:question|answer)\s*:|(?:(?:new |rewritten )?(?:search )?"
                        r"query|question|answer)\s*:?\s*$)", re.I)


def _norm_key(s: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", s.lower()).split())


def parse_query(text: str, fallback: str, titles: Sequence[str] = ()) -> str:
    """First usable line of a rewrite reply, without labels, quotes or copied document text
    (small models often copy a document): markers, labels and "Search for ..." are stripped,
    a "Title: text" copy and echoed prompt lines skipped. Fallback: ``fallback``."""
    title_keys = {_norm_key(t) for t in titles if t}
    for raw_line in text.strip().splitlines():
        line = raw_line.strip()
        if _ECHO_LINE.match(line):
            continue
        had_marker = bool(_DOC_MARKER.match(line))
        line = _DOC_MARKER.sub("", line)
        line = _QUERY_LABEL.sub("", line).strip().strip('"\'*` ')
        line = _DOC_MARKER.sub("", line)  # "Query: [2] ..."
        head, sep, rest = line.partition(":")
        if sep and rest.strip() and (_norm_key(head) in title_keys
                                     or (had_marker and not title_keys)):
            continue  # "Title: copied text"
        line = _IN_DOCS.sub("", _SEARCH_VERB.sub("", line)).strip().strip('"\'*` .')
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
    return _with_docs(docs, ask + "\nSnippets:" if not fact_table else ask + "\nFacts:", max_chars)


def parse_snippets(text: str, max_snippets: int) -> list[str]:
    """Bullet or numbered lines; fallback for an unstructured reply: its non-empty lines."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    bullets = [re.sub(r"^([-*\u2022]|\d+[.)])\s*", "", ln) for ln in lines
               if re.match(r"^([-*\u2022]|\d+[.)])\s*", ln)]
    out = bullets or lines
    return [s for s in out if s][:max_snippets]


# -- baselines: IRCoT and Self-Ask ------------------------------------------------------
# Both originals are few-shot completion prompts with stop sequences; for chat models the
# same text is laid out as chat turns, and the parsers still cut a reply where the original
# would have stopped (a backend may ignore ``stop``).
IRCOT_MAX_TOKENS = CHAIN_MAX_TOKENS  # one sentence fits: FlashRAG's 32 cut 46 of 52 thoughts
SELF_ASK_MAX_TOKENS = CHAIN_MAX_TOKENS
IRCOT_STOP = ["\n"]  # IRCoT keeps one sentence of the first line
SELF_ASK_STOP = ["Intermediate answer:", "\n\n", "Question:"]  # search answers, not the model

IRCOT_SYSTEM = ("You answer questions by reasoning over Wikipedia paragraphs, one sentence "
                "per turn. Each sentence states one fact taken from the paragraphs. When the "
                "facts give the answer, write 'So the answer is: <answer>.'")
IRCOT_CONTINUE = "Continue."
SELF_ASK_SYSTEM = ("You answer multi-hop questions by asking simple follow-up questions, one "
                   "at a time. A search engine answers each follow-up. Documents it found "
                   "are shown to you. When you know the answer, write 'So the final answer "
                   "is: <answer>'.")
SELF_ASK_OPENING = "Are follow up questions needed here: Yes."  # stated, as FlashRAG does


def _clip(text: str, max_chars: int | None) -> str:
    if max_chars is None or len(text) <= max_chars:
        return text
    return text[:max_chars].rsplit(" ", 1)[0] + " ..."


def wiki_paragraphs(paragraphs: Sequence, max_chars: int | None = None) -> str:
    """IRCoT's paragraph layout: 'Wikipedia Title: <title>' then the text, blank-line separated.
    Items are RetrievedDoc/Document-like (``title``, ``text``) or (title, text) pairs."""
    parts = []
    for p in paragraphs:
        title, text = (p if isinstance(p, tuple) else (p.title, p.text))
        parts.append(f"Wikipedia Title: {title}\n{_clip(text, max_chars)}")
    return "\n\n".join(parts) if parts else "(no paragraphs)"


def _chain_turns(chain: Sequence[str]) -> list[Message]:
    """Chain sentences as assistant turns, with a 'Continue.' user turn between them."""
    msgs: list[Message] = []
    for i, sentence in enumerate(chain):
        if i:
            msgs.append({"role": "user", "content": IRCOT_CONTINUE})
        msgs.append({"role": "assistant", "content": sentence})
    return msgs


def ircot_messages(question: str, docs: Sequence, thoughts: Sequence[str],
                   max_chars: int | None = None, demos: Sequence = ()) -> list[Message]:
    """IRCoT's reasoning step in chat form. Each demonstration is a user turn with its
    paragraphs ('Wikipedia Title: ...'), 'Q:' and 'A:', then its chain one sentence per
    assistant turn ('Continue.' between); the test dialogue has the same shape, the thoughts
    so far as the model's own turns, so the reply is the next sentence (a chain pasted into a
    user turn gets restated instead). Demonstrations come first so their KV cache is reused."""
    msgs: list[Message] = [{"role": "system", "content": IRCOT_SYSTEM}]
    for demo in demos:
        msgs.append({"role": "user", "content": wiki_paragraphs(demo.paragraphs)
                     + f"\n\nQ: {demo.question}\nA:"})
        msgs += _chain_turns(demo.chain)
    msgs.append({"role": "user", "content": wiki_paragraphs(docs, max_chars)
                 + f"\n\nQ: {question}\nA:"})
    thoughts = [t.strip() for t in thoughts if t.strip()]
    if thoughts:
        msgs += _chain_turns(thoughts)
        msgs.append({"role": "user", "content": IRCOT_CONTINUE})
    return msgs


@dataclass(frozen=True)
class IrcotThought:
    """One parsed IRCoT step. ``sentence``: the kept (first new) sentence, '' if none;
    ``concludes``: 'answer is' occurs in that sentence; ``answer``: what follows it there;
    ``echoed``: leading sentences dropped because they restate earlier thoughts."""
    sentence: str
    concludes: bool
    answer: str
    echoed: int = 0


_THOUGHT_LABEL = re.compile(r"^\s*(a\s*:|(answer|thought|next sentence|sentence|reasoning|"
                            r"step \d+)\s*[:\-])\s*", re.I)
_ANSWER_IS = re.compile(r"answer is\b[\s:]*", re.I)


def _norm_sentence(s: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", s.lower()).split())


def parse_ircot(text: str, previous: Sequence[str] = ()) -> IrcotThought:
    """IRCoT's rule: keep the FIRST sentence of the generation, and stop iff that sentence
    contains 'answer is'. Only the first non-empty line is read; echoed labels ('A:', 'Thought:')
    are removed, and leading sentences that restate an earlier thought or ask a question are
    skipped. Fallback for an empty or all-echo reply: ``IrcotThought('', False, '')``."""
    line = ""
    for raw in text.strip().splitlines():
        raw = raw.strip().strip("*`# ")
        while _THOUGHT_LABEL.match(raw):
            raw = _THOUGHT_LABEL.sub("", raw, count=1).strip()
        if raw:
            line = raw
            break
    seen = {_norm_sentence(p) for t in previous for p in split_sentences(t)}
    sentences = split_sentences(line)
    echoed = 0
    while sentences and (_norm_sentence(sentences[0]) in seen
                         or sentences[0].rstrip().endswith("?")):
        sentences.pop(0)
        echoed += 1
    if not sentences:
        return IrcotThought("", False, "", echoed)
    first = sentences[0]
    m = _ANSWER_IS.search(first)
    if not m:
        return IrcotThought(first, False, "", echoed)
    return IrcotThought(first, True, parse_answer(first[m.end():]), echoed)


def _numbered(docs: Sequence, start: int, max_chars: int | None) -> str:
    """'[n] title: text' lines numbered from ``start``; items are docs or (title, text)."""
    lines = []
    for i, d in enumerate(docs, start=start):
        title, text = (d if isinstance(d, tuple) else (d.title, d.text))
        lines.append(f"[{i}] {title}: {_clip(text, max_chars)}")
    return "\n".join(lines)


def _self_ask_dialogue(question: str, docs: Sequence, steps: Sequence,
                       max_chars: int | None) -> list[Message]:
    """One Self-Ask dialogue: (follow-up, intermediate answer, new docs) steps."""
    n = 1
    head = (f"Documents:\n{_numbered(docs, n, max_chars)}\n\n" if docs else "")
    n += len(docs)
    msgs: list[Message] = [{"role": "user", "content":
                            f"{head}Question: {question}\n{SELF_ASK_OPENING}"}]
    for follow_up, answer, new in steps:
        new = tuple(new or ())
        msgs += [{"role": "assistant", "content": f"Follow up: {follow_up}"},
                 {"role": "user", "content": (f"New documents:\n{_numbered(new, n, max_chars)}"
                                              "\n\n" if new else "")
                  + f"Intermediate answer: {answer}"}]
        n += len(new)
    return msgs


def self_ask_messages(question: str, qa_pairs: Sequence[tuple[str, str]],
                      docs: Sequence = (), max_chars: int | None = None, *,
                      step_docs: Sequence[Sequence] | None = None, demos: Sequence = (),
                      force_final: bool = False) -> list[Message]:
    """Self-Ask's proposer as a dialogue with the search engine as the other speaker: the model
    writes 'Follow up:' and 'So the final answer is:' lines, user turns bring the question and
    each 'Intermediate answer:' with the documents its follow-up added (FlashRAG's variant;
    ``docs`` open the dialogue). ``demos`` come first; ``force_final`` asks for the answer now."""
    msgs: list[Message] = [{"role": "system", "content": SELF_ASK_SYSTEM}]
    for demo in demos:
        msgs += _self_ask_dialogue(demo.question, demo.docs, demo.steps, None)
        msgs.append({"role": "assistant", "content": f"So the final answer is: {demo.answer}"})
    steps = [(f, a, (step_docs[i] if step_docs is not None and i < len(step_docs) else ()))
             for i, (f, a) in enumerate(qa_pairs)]
    msgs += _self_ask_dialogue(question, docs, steps, max_chars)
    if force_final:
        msgs[-1] = dict(msgs[-1], content=msgs[-1]["content"] + "\nNo more follow up "
                        "questions are possible. Reply with 'So the final answer is: "
                        "<answer>'.")
    return msgs


_FOLLOW_UP = re.compile(r"follow[ -]?up(?: question)?[ \t]*:[ \t]*(\S.*)", re.I)
_FINAL = re.compile(r"(?:final|the) answer is[ \t]*:?[ \t]*([^:\s].*)", re.I)


def parse_self_ask(text: str) -> tuple[str | None, str | None]:
    """(follow-up question, final answer), at most one set (both None: malformed), read before
    'Intermediate answer:'; the earlier wins. Fallback: a bare line ending in '?' follows up."""
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
