"""Multi-hop QA records: the normalized schema and loaders for the official raw formats.

Every benchmark is turned into one shape, :class:`Question`, with its candidate paragraphs and
gold support labels. Gold fields live here and in the metrics only: the controller's state never
sees them (see :mod:`dynakrag_lite.state`).

Normalized JSONL (one object per line)::

    {"id", "dataset", "question", "answers": [...], "type",
     "paragraphs": [{"title", "text", "is_supporting": bool}]}

Bad input raises :class:`DataError` naming the file, the line and the field; nothing is
silently dropped.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

DATA_ENV = "DYNAKRAG_DATA_DIR"
DATASET_FILES = {
    "hotpotqa": "hotpotqa.jsonl",
    "2wikimultihopqa": "2wikimultihopqa.jsonl",
    "musique": "musique.jsonl",
}
DATASET_ALIASES = {"hotpot": "hotpotqa", "2wiki": "2wikimultihopqa", "wiki2": "2wikimultihopqa"}


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


def _require(obj: dict, key: str, kind: type | tuple, path, line, prefix: str = "") -> Any:
    name = prefix + key
    if key not in obj:
        raise DataError(path, line, name, "missing")
    value = obj[key]
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
    qid = _require(obj, "id", (str, int), path, line)
    text = _require(obj, "question", str, path, line)
    if not text.strip():
        raise DataError(path, line, "question", "empty question")
    answers = _require(obj, "answers", list, path, line)
    if not answers or not all(isinstance(a, str) for a in answers):
        raise DataError(path, line, "answers", "needs a non-empty list of strings")
    qtype = obj.get("type")
    if qtype is not None and not isinstance(qtype, str):
        raise DataError(path, line, "type", "expected a string or null")
    raw_pars = _require(obj, "paragraphs", list, path, line)
    if not raw_pars:
        raise DataError(path, line, "paragraphs", "no paragraphs")
    pars = []
    for i, p in enumerate(raw_pars):
        pre = f"paragraphs[{i}]."
        if not isinstance(p, dict):
            raise DataError(path, line, f"paragraphs[{i}]", "expected an object")
        title = _require(p, "title", str, path, line, pre)
        body = _require(p, "text", str, path, line, pre)
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


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, Any]]:
    """Yield (line number, parsed object); blank lines are skipped, bad JSON/UTF-8 raise."""
    path = Path(path)
    if not path.exists():
        raise DataError(path, None, None, "file not found")
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(path, lineno, None, f"not valid UTF-8 ({e.reason} at byte "
                                f"{e.start})") from None
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(path, lineno, None, f"malformed JSON ({e.msg}, column "
                                f"{e.colno})") from None


def load_questions(path: str | os.PathLike, limit: int | None = None) -> list[Question]:
    """Load a normalized JSONL file, or an official raw file (detected by its shape)."""
    path = Path(path)
    if path.suffix == ".json":
        from .raw_formats import load_raw
        qs = load_raw(path)
        return qs[:limit] if limit else qs
    out: list[Question] = []
    seen: dict[str, int] = {}
    skipped = 0
    for lineno, obj in iter_jsonl(path):
        # Raw records have "answer", never "answers"; MuSiQue also has "paragraphs".
        if isinstance(obj, dict) and "answers" not in obj and (
                "question_decomposition" in obj or "context" in obj):
            from .raw_formats import convert_raw_record
            q = convert_raw_record(obj, path, lineno)
            if q is None:  # unanswerable MuSiQue record: counted and reported below
                skipped += 1
                continue
        else:
            q = question_from_dict(obj, path, lineno)
        if q.id in seen:
            raise DataError(path, lineno, "id", f"duplicate id {q.id!r} (first on line "
                            f"{seen[q.id]})")
        seen[q.id] = lineno
        out.append(q)
        if limit and len(out) >= limit:
            break
    if skipped:
        import logging
        logging.getLogger(__name__).warning("%s: skipped %d unanswerable MuSiQue record(s)",
                                            path, skipped)
    if not out:
        raise DataError(path, None, None, "no records")
    return out


def write_questions(questions: Iterable[Question], path: str | os.PathLike) -> Path:
    """Write normalized JSONL atomically (a crash never leaves half a file)."""
    from .storage import atomic_write_text
    # A unique temp name per writer (storage): two writers never rename each other's half file.
    return atomic_write_text(path, "".join(json.dumps(q.to_json(), ensure_ascii=False) + "\n"
                                           for q in questions))


def data_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    """The benchmark folder: the argument, else $DYNAKRAG_DATA_DIR, else ../shared/data if present."""
    if explicit:
        return Path(explicit)
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    for cand in (Path.cwd() / ".." / "shared" / "data",
                 Path(__file__).resolve().parents[2] / "shared" / "data",
                 Path.cwd() / ".." / ".." / "shared" / "data"):
        if (cand / "hotpotqa.jsonl").exists():
            return cand.resolve()
    return None


def resolve_data(spec: str | os.PathLike, data_root: str | os.PathLike | None = None) -> Path:
    """Turn a dataset name (``hotpotqa``, ``musique``...) or a path into a file path."""
    spec_s = str(spec)
    p = Path(spec_s)
    if p.exists():
        return p
    name = DATASET_ALIASES.get(spec_s.lower(), spec_s.lower())
    if name in DATASET_FILES:
        root = data_dir(data_root)
        if root is None:
            raise DataError(spec_s, None, None, f"dataset '{name}' needs a data folder: pass "
                            f"--data-dir or set {DATA_ENV}")
        f = root / DATASET_FILES[name]
        if not f.exists():
            raise DataError(f, None, None, "file not found in the data folder")
        return f
    raise DataError(spec_s, None, None, "file not found (and not a known dataset name: "
                    f"{', '.join(DATASET_FILES)})")


def load_dataset(spec: str | os.PathLike, limit: int | None = None,
                 data_root: str | os.PathLike | None = None) -> list[Question]:
    """Load by name or path; ``library`` gives the embedded synthetic default."""
    if str(spec).lower() in ("library", "embedded"):
        from .library import build_library
        qs = build_library()
        return qs[:limit] if limit else qs
    return load_questions(resolve_data(spec, data_root), limit=limit)


def split_questions(questions: list[Question], n_eval: int, seed: int = 0
                    ) -> tuple[list[Question], list[Question]]:
    """A deterministic, disjoint (train, eval) split: eval = n_eval questions chosen by seed."""
    import random
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    eval_idx = set(order[:n_eval])
    train = [q for i, q in enumerate(questions) if i not in eval_idx]
    evals = [questions[i] for i in sorted(eval_idx)]
    return train, evals
