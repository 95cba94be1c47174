"""Where questions come from: dataset names, the data folder, loading (normalized JSONL or the
official raw formats, detected by shape), writing, and the train/eval split.

``load_dataset("hotpotqa")`` reads ``$DYNAKRAG_DATA_DIR/hotpotqa.jsonl`` (default
``../shared/data``); ``load_dataset("library")`` builds the embedded synthetic set
(:mod:`dynakrag_lite.data.library`), which needs no download."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import random
from pathlib import Path
from typing import Iterable

from ..storage import atomic_write_text, sha256_file
from .library import build_library
from .raw_formats import convert_raw_record, load_raw
from .schema import DataError, Question, iter_jsonl, question_from_dict

DATA_ENV = "DYNAKRAG_DATA_DIR"
DATASET_FILES = {
    "hotpotqa": "hotpotqa.jsonl",
    "2wikimultihopqa": "2wikimultihopqa.jsonl",
    "musique": "musique.jsonl",
}
DATASET_ALIASES = {"hotpot": "hotpotqa", "2wiki": "2wikimultihopqa", "wiki2": "2wikimultihopqa"}


def load_questions(path: str | os.PathLike, limit: int | None = None) -> list[Question]:
    """Load a normalized JSONL file, or an official raw file (detected by its shape)."""
    path = Path(path)
    if path.suffix == ".json":
        qs = load_raw(path)
        return qs[:limit] if limit else qs
    out: list[Question] = []
    seen: dict[str, int] = {}
    skipped = 0
    for lineno, obj in iter_jsonl(path):
        # Raw records have "answer", never "answers"; MuSiQue also has "paragraphs".
        if isinstance(obj, dict) and "answers" not in obj and (
                "question_decomposition" in obj or "context" in obj):
            q = convert_raw_record(obj, path, lineno)
            if q is None:  # unanswerable MuSiQue record: counted and reported below
                skipped += 1
                continue
        else:
            q = question_from_dict(obj, path, lineno)
        if q.id in seen:
            raise DataError(path, lineno, "id", f"duplicate id {q.id!r} (first on line "
                            f"{seen[q.id]})")
        if out and q.dataset != out[0].dataset:
            # the first record's dataset names the run: one file, one dataset
            raise DataError(path, lineno, "dataset", f"{q.dataset!r}, but line "
                            f"{seen[out[0].id]} says {out[0].dataset!r}; a file holds one "
                            "dataset (split it, or give every record the same name)")
        seen[q.id] = lineno
        out.append(q)
        if limit and len(out) >= limit:
            break
    if skipped:
        logging.getLogger(__name__).warning("%s: skipped %d unanswerable MuSiQue record(s)",
                                            path, skipped)
    if not out:
        raise DataError(path, None, None, "no records")
    return out


def write_questions(questions: Iterable[Question], path: str | os.PathLike) -> Path:
    """Write normalized JSONL atomically (a crash never leaves half a file)."""
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
                 Path(__file__).resolve().parents[3] / "shared" / "data",
                 Path.cwd() / ".." / ".." / "shared" / "data"):
        if (cand / "hotpotqa.jsonl").exists():
            return cand.resolve()
    return None


def resolve_data(spec: str | os.PathLike, data_root: str | os.PathLike | None = None) -> Path:
    """Turn a dataset name (``hotpotqa``, ``musique``...) or a path into a file path."""
    spec_s = str(spec)
    p = Path(spec_s)
    if p.is_dir():
        raise DataError(p, None, None, "a folder, not a data file: give a .jsonl/.json file "
                        f"or a dataset name ({', '.join(DATASET_FILES)}, library)")
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
        qs = build_library()
        return qs[:limit] if limit else qs
    return load_questions(resolve_data(spec, data_root), limit=limit)


def split_questions(questions: list[Question], n_eval: int, seed: int = 0
                    ) -> tuple[list[Question], list[Question]]:
    """A deterministic, disjoint (train, eval) split: eval = n_eval questions chosen by seed."""
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    eval_idx = set(order[:n_eval])
    train = [q for i, q in enumerate(questions) if i not in eval_idx]
    evals = [questions[i] for i in sorted(eval_idx)]
    return train, evals


def data_sha256(spec: str | os.PathLike, data_root: str | os.PathLike | None = None) -> str | None:
    """sha256 of the dataset file named by ``spec`` (a path or a dataset name); for the
    embedded library, of its generated questions as JSON lines. None if it cannot be found.
    Runs and trajectory files record it, so a result names the exact questions it used."""
    if str(spec).lower() in ("library", "embedded"):
        text = "\n".join(json.dumps(q.to_json(), sort_keys=True) for q in load_dataset("library"))
        return hashlib.sha256(text.encode()).hexdigest()
    try:
        return sha256_file(resolve_data(spec, data_root))
    except (DataError, OSError):
        return None
