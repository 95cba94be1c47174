"""A run folder: the files an evaluation writes, how they are read and repaired, and the
fingerprint that keeps two setups from mixing in one folder (chapter 12 runs into them;
:func:`dynakrag_lite.experiments.run.evaluate` is the only writer).

A run folder ``DIR`` holds:

* ``DIR/predictions.jsonl``: one line per finished question, appended, flushed and fsynced as
  soon as the question is done, so a killed run loses at most the question in flight. A
  question whose method raised (any ``Exception``: a backend's ``GeneratorError``, a bug) gets
  an *error row* ``{"id", "question", "method", "error": {"type", "message"}, "seconds"}``
  (:func:`error_row`) and the run goes on with the next question; ``KeyboardInterrupt`` still
  stops it. A re-run skips the ids whose latest row is a real result and retries the rest:
  when the retry succeeds its row is appended and supersedes the error row (**the last row of
  an id wins**; :func:`latest_rows`). Nothing is ever deleted from the file, except:
* a torn final line (the process died in the middle of writing it: the last line has no
  trailing newline and is not a complete row) is cut off by the *writer*
  (:func:`repair_predictions`) before it appends. Readers (:func:`read_predictions`) never
  write; they ignore a torn final line. A bad line anywhere else (invalid JSON, not an object,
  no ``"id"``) is :class:`ResultsError` naming the file and line, and the run refuses to go on
  rather than lose data. A complete final row that only lacks its newline is kept, and the
  writer adds the newline before appending, so every append starts on a fresh line.
* ``DIR/run.json``: the run's fingerprint (:mod:`dynakrag_lite.experiments.fingerprint`:
  method, generator, embedder, corpus, policy, budgets, selector, prompts, data file,
  fixed_k, seed), written atomically. Resuming into a folder with another fingerprint is
  refused, listing the fields that differ, so results of two setups never mix in one file.
* ``DIR/summary.json``: metric means over the latest real row of each requested question
  (error rows excluded, counted in ``"errors"``), ``"diagnostics"``
  (:func:`dynakrag_lite.experiments.diagnostics.diagnostics`), the fingerprint and a ``"run"``
  block (command, ``n_expected``, ``complete``). Rewritten atomically after every question, so
  a run stopped at any point leaves a true summary.
* ``DIR/.lock``: held (``storage.FolderLock``) for the whole evaluation: a second process
  evaluating into the same folder fails at once with :class:`~dynakrag_lite.storage.LockedError`.
"""
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



# -- rows ---------------------------------------------------------------------------------
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
def _scan(path: Path) -> tuple[list[dict], int, bool]:
    """Parse ``path`` without writing: (rows, byte length of the good part, whether the good
    part lacks its final newline). A torn final line is left out of both."""
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
        row, problem = None, None
        if raw.strip():
            try:
                row = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                problem = f"invalid JSON ({e})"
            else:
                if not isinstance(row, dict):
                    problem = f"a JSON {type(row).__name__}, not an object"
                elif not isinstance(row.get("id"), str) or not row["id"]:
                    problem = "a row without an \"id\""
        if last:
            # No trailing newline: the writer was killed mid-line unless the line is a
            # complete row (then only the newline is missing).
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


def read_predictions(path: str | Path) -> list[dict]:
    """Every row of a predictions file in file order (all rows of an id, error rows
    included; see :func:`latest_rows`). Pure: never writes. A torn final line is ignored; a
    bad line elsewhere raises :class:`ResultsError`. A missing file gives ``[]``."""
    path = Path(path)
    if not path.exists():
        return []
    return _scan(path)[0]


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
    rows, good_end, needs_newline = _scan(path)
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
