"""A run folder: the files an evaluation writes (:func:`dynakrag_lite.experiments.run.evaluate`
is the only writer) and how they are read and repaired. ``DIR`` holds:

* ``predictions.jsonl``: one fsynced line per finished question, so a killed run loses at most
  the question in flight. A failed question gets an *error row* (:func:`error_row`); a re-run
  retries it and **the last row of an id wins** (:func:`latest_rows`). Only a torn final line is
  ever removed, by the writer (:func:`repair_predictions`); any other bad line is a
  :class:`ResultsError`, so a run never loses data or counts a stub as finished.
* ``run.json``: the fingerprint (:mod:`~dynakrag_lite.experiments.fingerprint`) and the
  ``"selection"`` (:mod:`~dynakrag_lite.experiments.selection`); resuming with another is refused.
* ``summary.json``: metric means over the latest real rows, rewritten atomically per question.
* ``.lock``: held for the whole evaluation, so a second process fails at once."""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Iterable

from ..data.schema import Question

PREDICTIONS_FILE = "predictions.jsonl"
SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"


class ResultsError(ValueError):
    """A predictions file that cannot be read or resumed without losing data."""


# -- where outputs go -----------------------------------------------------------------
def output_problem(path: str | Path, *, folder: bool) -> str | None:
    """Why nothing can be written at ``path`` (a folder to write into when ``folder``, else a
    file to write), or None: checked before a long run computes what it would write there."""
    path = Path(path)
    if path.exists() and path.is_dir() != folder:
        return ("is a file, not a folder" if folder else
                "is a folder; give the path of the file to write")
    start = path if folder else path.parent
    for anc in (start, *start.parents):
        if not anc.exists():
            continue
        if not anc.is_dir():
            return f"{anc} is a file, so nothing can be written below it"
        if not os.access(anc, os.W_OK | os.X_OK):
            return f"{'the folder' if anc == start else anc} is not writable"
        return None
    return None


# -- rows ---------------------------------------------------------------------------------
METRIC_FIELDS = ("em", "f1", "support_recall")
# The other numbers score() writes into every row and summarize() averages: a row without one
# cannot count as a finished question.
RUN_NUMBER_FIELDS = ("all_support", "n_docs", "tokens", "llm_calls", "retrieval_calls", "seconds")


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def row_problem(row: dict, complete: bool = False) -> str | None:
    """What is wrong with one predictions row (None: nothing); ``complete`` (a resuming writer)
    also requires every field :func:`~dynakrag_lite.experiments.run.score` writes."""
    if "error" in row:
        return "field 'error' of an error row is not an object" \
            if complete and not isinstance(row["error"], dict) else None
    for name in METRIC_FIELDS + RUN_NUMBER_FIELDS:
        if name not in row:
            if complete:
                return f"a result row without field '{name}' (and no 'error')"
        elif not _is_number(row[name]):
            return f"field '{name}' is {json.dumps(row[name])}, not a number"
    if complete and "prediction" not in row:
        return "a result row without field 'prediction' (and no 'error')"
    if "prediction" in row and not isinstance(row["prediction"], str):
        return f"field 'prediction' is {json.dumps(row['prediction'])}, not a string"
    return None


def error_row(q: Question, method: str, exc: BaseException, seconds: float) -> dict:
    """The predictions.jsonl record of a question whose method raised ``exc``."""
    return {"id": q.id, "question": q.question, "type": q.type, "method": method,
            "answers": list(q.answers),
            "error": {"type": type(exc).__name__, "message": str(exc)[:2000]},
            "seconds": round(seconds, 3)}


def is_error(row: dict) -> bool:
    """True for an error row (the question is not done; a re-run retries it)."""
    return "error" in row


# -- the predictions file ---------------------------------------------------------------
def _scan(path: Path, complete: bool = False) -> tuple[list[dict], int, bool]:
    """Parse ``path`` without writing: (rows, byte length of the good part, whether it lacks its
    final newline), a torn final line left out; ``complete`` as :func:`row_problem`."""
    if path.is_dir():
        raise ResultsError(f"{path} is a folder, not a predictions file; move it away or "
                           "evaluate into another --out folder")
    data = path.read_bytes()
    rows: list[dict] = []
    lines = data.split(b"\n")
    # split() leaves the text after the last newline as the final element ("" if none).
    pos = 0
    good_end, needs_newline = 0, False
    for i, raw in enumerate(lines, start=1):
        last = i == len(lines)
        if last and raw == b"":
            break
        end = pos + len(raw) + (0 if last else 1)
        row, problem, parsed = None, None, False
        if raw.strip():
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                problem = f"invalid JSON ({e})"
            else:
                parsed = True
                if not isinstance(row, dict):
                    problem = f"a JSON {type(row).__name__}, not an object"
                elif not isinstance(row.get("id"), str) or not row["id"]:
                    problem = "a row without an \"id\""
                else:
                    problem = row_problem(row, complete)
        if last and not (parsed and problem):
            # No trailing newline: torn unless it is a complete row (a cut row never parses;
            # a parsed bad one is refused below like any other).
            if problem or row is None:
                break
            rows.append(row)
            good_end, needs_newline = end, True
            break
        if problem:
            raise ResultsError(f"{path}, line {i}: {problem}; the file is left as it is. "
                               "Fix or remove that line by hand (or start a new --out "
                               "folder) before resuming: resuming past it would lose it")
        if row is not None:
            rows.append(row)
        good_end = pos = end
    return rows, good_end, needs_newline


def read_predictions(path: str | Path, complete: bool = False) -> list[dict]:
    """Every row of a predictions file in file order, error rows included ([] when missing);
    never writes. A torn final line is ignored, a bad one elsewhere is a :class:`ResultsError`."""
    path = Path(path)
    if not path.exists():
        return []
    return _scan(path, complete)[0]


def latest_rows(rows: Iterable[dict], errors: bool = True) -> list[dict]:
    """The last row of each id (a retry supersedes an error row), in the order ids first
    appear. ``errors=False`` leaves out ids whose latest row is an error row."""
    latest: dict[str, dict] = {}
    for r in rows:
        latest[r["id"]] = r  # re-assigning keeps the key's first position
    return [r for r in latest.values() if errors or not is_error(r)]


def repair_predictions(path: str | Path) -> list[dict]:
    """The writer's step before appending: cut a torn final line off ``path`` and end the
    file with a newline, then return its rows. Raises :class:`ResultsError` (file untouched)
    on a bad line that is not the last one. Nothing but a torn final line is ever cut."""
    path = Path(path)
    if not path.exists():
        return []
    rows, good_end, needs_newline = _scan(path, complete=True)
    size = path.stat().st_size
    if good_end != size or needs_newline:
        with open(path, "r+b") as fh:
            if good_end != size:
                torn = size - good_end
                fh.truncate(good_end)
                warnings.warn(f"{path}: dropped a torn final line ({torn} bytes) left by a "
                              "run killed mid-write; that question is redone", RuntimeWarning,
                              stacklevel=2)
            if needs_newline:
                fh.seek(0, os.SEEK_END)
                fh.write(b"\n")
            fh.flush()
            os.fsync(fh.fileno())
    return rows


def append_row(fh, row: dict) -> None:
    """One complete line, on disk before the next question starts."""
    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    fh.flush()
    os.fsync(fh.fileno())
