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
* ``DIR/run.json``: the run's fingerprint (:func:`run_fingerprint`: method, generator spec
  and model id, embedder, corpus, policy, budgets, prompt templates, data file, fixed_k,
  seed), written once, atomically (:func:`check_run_folder`). Resuming into a folder with
  another fingerprint is :class:`FingerprintError`, listing the fields that differ, so results
  of two setups never mix in one file.
* ``DIR/summary.json``: metric means over the latest real row of each requested question
  (error rows excluded, counted in ``"errors"``), ``"diagnostics"``
  (:func:`dynakrag_lite.experiments.diagnostics.diagnostics`), the fingerprint and a ``"run"``
  block (command, ``n_expected``, ``complete``). Rewritten atomically after every question, so
  a run stopped at any point leaves a true summary.
* ``DIR/.lock``: held (``storage.FolderLock``) for the whole evaluation: a second process
  evaluating into the same folder fails at once with :class:`~dynakrag_lite.storage.LockedError`.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import warnings
from dataclasses import asdict, is_dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from ..actions import Environment
from ..data.schema import DataError, Question
from ..data.sources import load_dataset, resolve_data
from ..storage import atomic_write_json, redact, sha256_file

PREDICTIONS_FILE = "predictions.jsonl"
SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"
FINGERPRINT_VERSION = 1


class ResultsError(ValueError):
    """A predictions file that cannot be read or resumed without losing data."""


class FingerprintError(ValueError):
    """A run folder holds results of another setup than the one asked to resume into it."""


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


# -- fingerprint ------------------------------------------------------------------------
def prompts_fingerprint() -> str:
    """sha256 of the source of ``dynakrag_lite/prompts.py``: the prompt templates' version.
    Any edit of that file (templates, parsers, token limits) gives another fingerprint."""
    spec = importlib.util.find_spec("dynakrag_lite.prompts")
    if spec is None or not spec.origin:
        raise RuntimeError("cannot locate dynakrag_lite/prompts.py")
    return sha256_file(spec.origin)


def data_sha256(spec: str | os.PathLike, data_root: str | os.PathLike | None = None
                ) -> str | None:
    """sha256 of the dataset file named by ``spec`` (a path or a dataset name); for the
    embedded library, of its generated questions as JSON lines. None if it cannot be found."""
    if str(spec).lower() in ("library", "embedded"):
        text = "\n".join(json.dumps(q.to_json(), sort_keys=True) for q in load_dataset("library"))
        return hashlib.sha256(text.encode()).hexdigest()
    try:
        return sha256_file(resolve_data(spec, data_root))
    except (DataError, OSError):
        return None


def policy_digest(policy) -> str:
    """A stable id of an in-memory policy (no file at hand): sha256 of its metadata, which
    holds the training-data hash, the forest parameters and the training date."""
    meta = json.dumps(getattr(policy, "meta", {}), sort_keys=True, default=str)
    return hashlib.sha256(meta.encode()).hexdigest()


def _plain(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    return dict(getattr(obj, "__dict__", {}))


def _index_fingerprint(retriever) -> dict | None:
    """An approximate index changes which documents are retrieved, so it enters the run's
    fingerprint; memory-mapping does not."""
    factory = getattr(retriever, "index_factory", None)
    if factory is None:
        return None
    return {"factory": factory, "nprobe": getattr(retriever, "nprobe", None),
            "ef_search": getattr(retriever, "ef_search", None),
            "train_size": getattr(retriever, "train_size", None),
            "train_seed": getattr(retriever, "seed", None)}


def run_fingerprint(method: str, env: Environment, *, policy=None,
                    policy_sha256: str | None = None, data_sha256: str | None = None,
                    fixed_k: int | None = None, seed: int = 13) -> dict:
    """Everything that decides a run's rows: two runs with equal fingerprints may share a
    folder; a resume with a different one is refused (:func:`check_run_folder`).

    ``policy_sha256``: the policy file's sha256 (else :func:`policy_digest` of ``policy``);
    ``data_sha256``: the dataset file's (see :func:`data_sha256`; None when unknown)."""
    gen = env.generator
    retriever = env.retriever
    corpus = getattr(retriever, "corpus", None)
    corpus_hash = corpus.content_hash() if hasattr(corpus, "content_hash") else None
    pol = None
    if policy is not None and method == "dynakrag":
        pol = {"sha256": policy_sha256 or policy_digest(policy),
               "lam": getattr(policy, "lam", None),
               "veto_threshold": getattr(policy, "veto_threshold", None)}
    return {
        "version": FINGERPRINT_VERSION,
        "method": method,
        "generator": {"spec": redact(str(getattr(gen, "spec", None))),
                      "model_id": redact(str(getattr(gen, "model_id", None)))}
        if gen is not None else None,
        "embedder": getattr(retriever, "embedder_name", None),
        # None for the exact flat index: equal to the key's absence in run.json files written
        # before (fingerprint_diff compares .get), so recorded runs keep their fingerprints.
        "index": _index_fingerprint(retriever),
        "corpus_sha256": corpus_hash,
        "policy": pol,
        "budgets": _plain(env.config),
        "prompts_sha256": prompts_fingerprint(),
        "data_sha256": data_sha256,
        "fixed_k": fixed_k,
        "seed": seed,
    }


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(_flatten(v, key) if isinstance(v, dict) and v else {key: v})
    return out


def fingerprint_diff(old: dict, new: dict) -> list[str]:
    """Human-readable differences ``field: old -> new`` (nested fields dotted)."""
    a, b = _flatten(old), _flatten(new)
    return [f"{k}: {a.get(k, '(absent)')!r} -> {b.get(k, '(absent)')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def check_run_folder(out: str | Path, fingerprint: dict, command: str | None = None,
                     has_rows: bool = False) -> dict:
    """Write ``out/run.json`` if the folder has none; else refuse a different fingerprint.

    A folder with predictions but no run.json (made before fingerprints existed) is adopted:
    run.json is written with ``"adopted": true`` and a warning says it could not be checked."""
    path = Path(out) / RUN_FILE
    if path.exists():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))["fingerprint"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise FingerprintError(f"{path}: unreadable run fingerprint ({e}); refusing to "
                                   "resume into this folder") from None
        diff = fingerprint_diff(old, fingerprint)
        if diff:
            raise FingerprintError(
                f"{Path(out)} holds a run with another setup; differing fields: "
                + "; ".join(diff) + ". Evaluate into another --out folder (or delete this "
                "one to start over): resuming would mix results of two setups")
        return old
    record = {"fingerprint": fingerprint, "command": command,
              "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if has_rows:
        record["adopted"] = True
        warnings.warn(f"{Path(out)}: predictions without {RUN_FILE} (an older run); adopting "
                      "them under the current fingerprint, which could not be checked",
                      RuntimeWarning, stacklevel=2)
    atomic_write_json(path, record)
    return fingerprint
