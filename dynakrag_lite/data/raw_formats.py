"""Convert the official raw benchmark files to the normalized :class:`~dynakrag_lite.data.Question`.

Shapes, detected from each record's keys: **HotpotQA** (distractor ``.json``; sentences carry
their leading spaces, so a paragraph is ``"".join(sentences).strip()``), **2WikiMultiHopQA**
(same ``context``/``supporting_facts`` shape; sentences joined with ``" "``) and **MuSiQue**
(``.jsonl`` with ``paragraphs`` and ``is_supporting``).

Answers are the gold answer, then any ``answer_aliases``. Unanswerable MuSiQue records have no
gold answer: they are the one thing skipped, counted in :attr:`RawLoadReport.n_unanswerable`.
Every other defect raises :class:`~dynakrag_lite.data.DataError` naming file, record and field."""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .schema import DataError, Paragraph, Question, iter_jsonl, require

__all__ = ["RawLoadReport", "convert_raw_record", "detect_format", "load_raw", "read_raw"]

log = logging.getLogger(__name__)

# Types only 2WikiMultiHopQA uses (HotpotQA has bridge/comparison; "comparison" is shared).
_WIKI2_TYPES = frozenset({"compositional", "bridge_comparison", "inference"})


@dataclass
class RawLoadReport:
    """What :func:`read_raw` found in one raw file."""
    path: str
    dataset: str | None
    questions: list[Question] = field(default_factory=list)
    n_records: int = 0
    n_unanswerable: int = 0                                  # MuSiQue answerable == false
    skipped_ids: list[str] = field(default_factory=list)


def detect_format(obj: dict[str, Any]) -> str | None:
    """``"hotpotqa"``, ``"2wikimultihopqa"``, ``"musique"``, or None if the keys fit none."""
    if "question_decomposition" in obj or "answerable" in obj or (
            isinstance(obj.get("paragraphs"), list) and obj["paragraphs"]
            and isinstance(obj["paragraphs"][0], dict)
            and "paragraph_text" in obj["paragraphs"][0]):
        return "musique"
    if "context" in obj:
        # 2Wiki records carry evidence triples; HotpotQA records carry a difficulty level.
        if "evidences" in obj:
            return "2wikimultihopqa"
        if "level" in obj:
            return "hotpotqa"
        return "2wikimultihopqa" if obj.get("type") in _WIKI2_TYPES else "hotpotqa"
    return None


def _answers(obj: dict, path, line) -> tuple[str, ...]:
    answer = require(obj, "answer", str, path, line)
    if not answer.strip():
        raise DataError(path, line, "answer", "empty answer")
    aliases = obj.get("answer_aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise DataError(path, line, "answer_aliases", "expected a list of strings")
    out: list[str] = []
    for a in [answer, *aliases]:
        a = a.strip()
        if a and a not in out:
            out.append(a)
    return tuple(out)


def _question_text(obj: dict, path, line) -> str:
    text = require(obj, "question", str, path, line)
    if not text.strip():
        raise DataError(path, line, "question", "empty question")
    return text.strip()


def _from_context(obj: dict, dataset: str, path, line) -> Question:
    qid = require(obj, "_id", (str, int), path, line)
    text = _question_text(obj, path, line)
    answers = _answers(obj, path, line)
    qtype = obj.get("type")
    if qtype is not None and not isinstance(qtype, str):
        raise DataError(path, line, "type", "expected a string or null")
    context = require(obj, "context", list, path, line)
    if not context:
        raise DataError(path, line, "context", "no paragraphs")
    facts = require(obj, "supporting_facts", list, path, line)
    gold: list[str] = []
    for i, fact in enumerate(facts):
        if (not isinstance(fact, list) or len(fact) < 2 or not isinstance(fact[0], str)
                or isinstance(fact[1], bool) or not isinstance(fact[1], int)):
            raise DataError(path, line, f"supporting_facts[{i}]", "expected [title, sent_id]")
        gold.append(fact[0])
    # HotpotQA's sentences start with their own space; 2Wiki's do not.
    joiner = "" if dataset == "hotpotqa" else " "
    pars: list[Paragraph] = []
    for i, item in enumerate(context):
        name = f"context[{i}]"
        if not isinstance(item, list) or len(item) != 2:
            raise DataError(path, line, name, "expected [title, [sentences]]")
        title, sents = item
        if not isinstance(title, str):
            raise DataError(path, line, name + "[0]", "title must be a string")
        if not isinstance(sents, list) or not all(isinstance(s, str) for s in sents):
            raise DataError(path, line, name + "[1]", "sentences must be a list of strings")
        pars.append(Paragraph(title=title, text=joiner.join(sents).strip(),
                              is_supporting=title in gold))
    titles = [p.title for p in pars]
    missing = [t for t in gold if t not in titles]
    if missing:
        raise DataError(path, line, "supporting_facts",
                        f"supporting title {missing[0]!r} is not among the context titles")
    if not gold:
        raise DataError(path, line, "supporting_facts", "no supporting paragraph")
    return Question(id=str(qid), dataset=dataset, question=text, answers=answers, type=qtype,
                    paragraphs=tuple(pars))


def _musique_type(qid: str) -> str | None:
    # MuSiQue ids encode the hop shape: "2hop__...", "3hop1__...", "4hop3__...".
    head = qid.split("__", 1)[0]
    return head if "__" in qid and "hop" in head else None


def _from_musique(obj: dict, path, line) -> Question | None:
    qid = require(obj, "id", (str, int), path, line)
    answerable = obj.get("answerable", True)
    if not isinstance(answerable, bool):
        raise DataError(path, line, "answerable", "expected true/false")
    if not answerable:
        return None
    text = _question_text(obj, path, line)
    answers = _answers(obj, path, line)
    raw_pars = require(obj, "paragraphs", list, path, line)
    if not raw_pars:
        raise DataError(path, line, "paragraphs", "no paragraphs")
    pars: list[Paragraph] = []
    for i, p in enumerate(raw_pars):
        pre = f"paragraphs[{i}]"
        if not isinstance(p, dict):
            raise DataError(path, line, pre, "expected an object")
        title = require(p, "title", str, path, line, pre + ".title")
        body = require(p, "paragraph_text", str, path, line, pre + ".paragraph_text")
        sup = p.get("is_supporting", False)
        if not isinstance(sup, bool):
            raise DataError(path, line, pre + ".is_supporting", "expected true/false")
        pars.append(Paragraph(title=title, text=body.strip(), is_supporting=sup))
    if not any(p.is_supporting for p in pars):
        raise DataError(path, line, "paragraphs", "no supporting paragraph")
    return Question(id=str(qid), dataset="musique", question=text, answers=answers,
                    type=_musique_type(str(qid)), paragraphs=tuple(pars))


def convert_raw_record(obj: Any, path: str | os.PathLike | None = None,
                       lineno: int | None = None) -> Question | None:
    """Convert one HotpotQA / 2WikiMultiHopQA / MuSiQue record (``None`` only for an
    unanswerable MuSiQue record; :class:`~dynakrag_lite.data.DataError` for any defect)."""
    if not isinstance(obj, dict):
        raise DataError(path, lineno, None, f"expected a JSON object, got {type(obj).__name__}")
    fmt = detect_format(obj)
    if fmt == "musique":
        return _from_musique(obj, path, lineno)
    if fmt in ("hotpotqa", "2wikimultihopqa"):
        return _from_context(obj, fmt, path, lineno)
    raise DataError(path, lineno, None, "unknown record format (expected HotpotQA/2Wiki "
                    "'context' or MuSiQue 'paragraphs' + 'question_decomposition')")


def _records(path: Path) -> list[tuple[int, Any]]:
    """(location, record) pairs: 1-based index for a JSON list, line number for JSONL."""
    if not path.exists():
        raise DataError(path, None, None, "file not found")
    if path.suffix == ".jsonl":
        return list(iter_jsonl(path))
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(path, None, None, f"not valid UTF-8 ({e.reason} at byte {e.start})"
                        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(path, e.lineno, None, f"malformed JSON ({e.msg}, column {e.colno})"
                        ) from None
    if not isinstance(data, list):
        raise DataError(path, None, None, f"expected a JSON list of records, got "
                        f"{type(data).__name__}")
    return list(enumerate(data, start=1))


def read_raw(path: str | os.PathLike) -> RawLoadReport:
    """Read a raw ``.json`` list or ``.jsonl`` file; report questions and skipped records (in
    a ``.json`` list the DataError "line" is the 1-based record index)."""
    path = Path(path)
    report = RawLoadReport(path=str(path), dataset=None)
    seen: dict[str, int] = {}
    for loc, obj in _records(path):
        report.n_records += 1
        q = convert_raw_record(obj, path, loc)
        if q is None:
            report.n_unanswerable += 1
            report.skipped_ids.append(str(obj.get("id")))
            continue
        if q.id in seen:
            raise DataError(path, loc, "id", f"duplicate id {q.id!r} (first at {seen[q.id]})")
        seen[q.id] = loc
        report.dataset = report.dataset or q.dataset
        report.questions.append(q)
    if report.n_unanswerable:
        log.warning("%s: skipped %d unanswerable MuSiQue record(s)", path, report.n_unanswerable)
    if not report.questions:
        raise DataError(path, None, None, "no answerable records")
    return report


def load_raw(path: str | os.PathLike) -> list[Question]:
    """The questions of a raw file (see :func:`read_raw` for the skip count)."""
    return read_raw(path).questions
