"""The normalized schema every benchmark is turned into: :class:`Question` with its candidate
paragraphs and gold support labels, and the validation that reads one record.

Normalized JSONL (one object per line)::

    {"id", "dataset", "question", "answers": [...], "type",
     "paragraphs": [{"title", "text", "is_supporting": bool}]}

Gold fields never reach the controller's state. Bad input raises :class:`DataError` naming the
file, the line and the field; nothing is silently dropped."""
from __future__ import annotations

import codecs
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator


class DataError(ValueError):
    """A record that cannot be read; the message names file, line and field."""

    def __init__(self, path: str | os.PathLike | None, line: int | None, field_name: str | None,
                 problem: str):
        self.path, self.line, self.field, self.problem = (str(path) if path else None, line,
                                                          field_name, problem)
        where = str(path) if path else "<input>"
        if line is not None:
            where += f", line {line}"
        if field_name:
            where += f", field '{field_name}'"
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class Paragraph:
    title: str
    text: str
    is_supporting: bool = False


@dataclass(frozen=True)
class Question:
    id: str
    dataset: str
    question: str
    answers: tuple[str, ...]
    type: str | None
    paragraphs: tuple[Paragraph, ...]

    @property
    def supporting_titles(self) -> list[str]:
        return [p.title for p in self.paragraphs if p.is_supporting]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["answers"] = list(self.answers)
        d["paragraphs"] = [asdict(p) for p in self.paragraphs]
        return d


def require(obj: dict, key: str, kind: type | tuple, path, line, name: str | None = None) -> Any:
    """``obj[key]`` if it is of ``kind`` (a bool is no number), else DataError naming the
    field ``name`` (default ``key``); the normalized and the raw loaders' one field check."""
    name = name or key
    if key not in obj:
        raise DataError(path, line, name, "missing")
    value = obj[key]
    if isinstance(value, bool) and kind in (int, (str, int)):  # bool is an int in Python
        raise DataError(path, line, name, "expected a number or string, got bool")
    if not isinstance(value, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        raise DataError(path, line, name, f"expected {'/'.join(k.__name__ for k in kinds)}, "
                        f"got {type(value).__name__}")
    return value


def question_from_dict(obj: Any, path: str | os.PathLike | None = None,
                       line: int | None = None) -> Question:
    """Validate one normalized record; raise :class:`DataError` on any defect."""
    if not isinstance(obj, dict):
        raise DataError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    qid = require(obj, "id", (str, int), path, line)
    if not str(qid).strip():  # an empty id cannot name a row of a run folder
        raise DataError(path, line, "id", f"expected a non-empty string or an integer, got "
                        f"{json.dumps(qid)}")
    text = require(obj, "question", str, path, line)
    if not text.strip():
        raise DataError(path, line, "question", "empty question")
    answers = require(obj, "answers", list, path, line)
    if not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise DataError(path, line, "answers", "needs a non-empty list of non-empty strings")
    qtype = obj.get("type")
    if qtype is not None and not isinstance(qtype, str):
        raise DataError(path, line, "type", "expected a string or null")
    raw_pars = require(obj, "paragraphs", list, path, line)
    if not raw_pars:
        raise DataError(path, line, "paragraphs", "no paragraphs")
    pars = []
    for i, p in enumerate(raw_pars):
        pre = f"paragraphs[{i}]."
        if not isinstance(p, dict):
            raise DataError(path, line, f"paragraphs[{i}]", "expected an object")
        title = require(p, "title", str, path, line, pre + "title")
        body = require(p, "text", str, path, line, pre + "text")
        if not body.strip():  # as the --corpus loader: an empty document retrieves nothing
            raise DataError(path, line, pre + "text", "empty text")
        sup = p.get("is_supporting", False)
        if not isinstance(sup, bool):
            raise DataError(path, line, pre + "is_supporting", "expected true/false")
        pars.append(Paragraph(title=title, text=body, is_supporting=sup))
    if not any(p.is_supporting for p in pars):
        raise DataError(path, line, "paragraphs", "no supporting paragraph")
    dataset = obj.get("dataset") or "custom"
    if not isinstance(dataset, str):
        raise DataError(path, line, "dataset", "expected a string")
    return Question(id=str(qid), dataset=dataset, question=text.strip(),
                    answers=tuple(answers), type=qtype, paragraphs=tuple(pars))


# A record longer than this is refused before it is parsed: a 30 MB text costs gigabytes of
# memory downstream (tokenized, embedded, prompted), and no benchmark record comes near it.
MAX_LINE_BYTES = 8 << 20


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object); blank lines and a UTF-8 byte order mark are
    skipped; bad JSON or UTF-8 and a line over :data:`MAX_LINE_BYTES` raise DataError."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, None, None, "file not found")
    if path.is_dir():
        raise DataError(path, None, None, "a folder, not a JSONL file")
    with open(path, "rb") as fh:
        # readline's limit: never more than the cap in memory
        for lineno, raw in enumerate(iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw.rstrip(b"\r\n")) > MAX_LINE_BYTES:
                raise DataError(path, lineno, None, f"line longer than "
                                f"{MAX_LINE_BYTES >> 20} MiB, refused before parsing")
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):  # written by some editors
                raw = raw[len(codecs.BOM_UTF8):]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(path, lineno, None, f"not valid UTF-8 ({e.reason} at byte "
                                f"{e.start})") from None
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:  # json's "Invalid control character at" is cryptic
                why = (f"a raw control character {json.dumps(line[e.pos])} in a string "
                       "(escape it)" if e.msg.startswith("Invalid control") else e.msg)
                raise DataError(path, lineno, None, f"malformed JSON ({why}, column "
                                f"{e.colno})") from None
