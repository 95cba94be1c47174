"""Evaluation: run a method over questions, write predictions as they come, resume, summarize.

A run folder ``DIR`` holds:

* ``DIR/predictions.jsonl``: one line per finished question, appended, flushed and fsynced as
  soon as the question is done, so a killed run loses at most the question in flight. A
  question whose method raised (any ``Exception``: a backend's ``GeneratorError``, a bug) gets
  an *error row* ``{"id", "question", "method", "error": {"type", "message"}, "seconds"}``
  and the run goes on with the next question; ``KeyboardInterrupt`` still stops it. A re-run
  skips the ids whose latest row is a real result and retries the rest: when the retry
  succeeds its row is appended and supersedes the error row (**the last row of an id wins**;
  :func:`latest_rows`). Nothing is ever deleted from the file, except:
* a torn final line (the process died in the middle of writing it: the last line has no
  trailing newline and is not a complete row) is cut off by the *writer*
  (:func:`repair_predictions`) before it appends. Readers (:func:`read_predictions`) never
  write; they ignore a torn final line. A bad line anywhere else (invalid JSON, not an object,
  no ``"id"``) is :class:`ResultsError` naming the file and line, and the run refuses to go on
  rather than lose data. A complete final row that only lacks its newline is kept, and the
  writer adds the newline before appending, so every append starts on a fresh line.
* ``DIR/run.json``: the run's fingerprint (:func:`run_fingerprint`: method, generator spec
  and model id, embedder, corpus, policy, budgets, prompt templates, data file, fixed_k,
  seed), written once, atomically. Resuming into a folder with another fingerprint is
  :class:`FingerprintError`, listing the fields that differ, so results of two setups never
  mix in one file.
* ``DIR/summary.json``: metric means over the latest real row of each requested question
  (error rows excluded, counted in ``"errors"``), ``"diagnostics"`` (:func:`diagnostics`),
  the fingerprint and a ``"run"`` block (command, ``n_expected``, ``complete``). Rewritten
  atomically after every question, so a run stopped at any point leaves a true summary.
* ``DIR/.lock``: held (``storage.FolderLock``) for the whole evaluation: a second process
  evaluating into the same folder fails at once with :class:`~dynakrag_lite.storage.LockedError`.

Concurrent questions (``workers=N``, ``evaluate --workers N``; the scheme is
:mod:`dynakrag_lite.concurrency`'s, shared with ``train --workers N``): with a server generator
(``openai:<model>@<base_url>``: vLLM, a llama.cpp server) N questions run at once in threads,
since the time goes into waiting for the server. The main thread stays the only writer: it
takes finished rows in the order of ``questions`` (a finished row waits for the ones before it,
at most ``WINDOW_PER_WORKER * N`` questions ahead), so the file is the one a sequential run
writes except for the ``seconds`` fields. Everything between server calls (retrieval and its
encoder, spaCy, the policy, scoring) holds one lock, so the library's non-thread-safe parts
never run concurrently and a question's rows do not depend on scheduling; only the server
calls overlap (a row's ``seconds`` then includes time spent waiting for that lock).
In-process backends (bundled models, ``gguf:``, ``hf:``) are CPU-bound and not thread-safe:
``workers > 1`` with them is refused (``ValueError``).

Diagnostics (per question in each row's ``"diagnostics"``, summed in the summary) make
degenerate behaviour visible. What is counted:

* ``stop_reasons``: how each question ended. Controller runs (dynakrag, uniform, oracle):
  ``stop_answer_chosen`` (the chooser picked stop_answer), ``max_steps`` (step cap),
  ``max_docs`` (document cap), ``only_stop_valid``. Baselines: ``fixed_k``; IRCoT
  ``concluded`` / ``empty_thought`` / ``max_steps`` / ``max_docs`` / ``retrieval_cap``;
  Self-Ask ``concluded`` / ``malformed`` / ``max_followups`` / ``repeated_followup`` /
  ``max_docs`` / ``retrieval_cap`` (from ``MethodResult.extra["stop_reason"]``).
* ``actions_mean``: mean number of trace steps of each action per question (baselines' steps
  are named ``retrieve``, ``cot_step``, ``follow_up``, ``intermediate_answer``).
* ``sufficiency``: verdicts of all sufficiency probes: ``sufficient``, ``insufficient`` (with
  a gap to search for), ``unparsed`` (the parser's fallback: insufficient with no gap).
* ``parse_fallbacks`` per prompt kind: ``sufficiency`` (as above), ``rewrite`` (the rewritten
  query equals the question: ``parse_query``'s fallback, or a model that echoed it),
  ``compress`` (no snippet at all), ``answer`` (empty prediction), ``ircot`` / ``self_ask``
  (a chain reply the parser could not read: trace note ``unparsed: ...``),
  ``intermediate_answer`` (Self-Ask's ``unknown``), plus whatever a method reports itself in
  ``MethodResult.extra["parse_fallbacks"] = {kind: n}`` (the generic mechanism).
  Not yet countable from what methods record: the compression parser's unstructured-reply
  fallback (lines taken as snippets), Self-Ask's bare-question fallback, and the exact
  ``parsed`` flag of a sufficiency probe other than the last one of a question (the trace
  keeps only verdict and gap; an ``INSUFFICIENT`` reply with no missing fact looks like the
  fallback there, so earlier probes' ``unparsed`` is an upper bound; a trace step that carries
  ``"parsed"`` is counted exactly).
* ``vetoes``: steps where the continuation model removed stop_answer (trace scores
  ``"vetoed"``), in total and the number of questions with at least one.
* ``errors`` and ``error_types``: error rows.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import time
import warnings
from collections import Counter
from dataclasses import asdict, is_dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..actions import Environment
# check_workers, is_server_generator and WINDOW_PER_WORKER lived here: still importable from here
from ..concurrency import (WINDOW_PER_WORKER, check_workers, is_server_generator, locked_runner,
    run_in_order)
from ..controller import MethodResult, UniformChooser, run_controller
from ..data.corpus import gold_titles, normalize_title
from ..data.schema import Question
from ..generators.base import ReplayMissError
from ..metrics import em_f1, support_recall
from ..storage import FolderLock, atomic_write_json, redact, sha256_file
from ..trajectories import OracleChooser

METHODS = ("dynakrag", "fixed_k", "ircot", "self_ask", "uniform", "oracle")
SUMMARY_KEYS = ("method", "dataset", "generator", "n", "em", "f1", "support_recall",
                "all_support_rate", "docs_mean", "tokens_mean", "llm_calls_mean",
                "retrieval_calls_mean", "seconds_mean")
PREDICTIONS_FILE = "predictions.jsonl"
SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"
FINGERPRINT_VERSION = 1


class ResultsError(ValueError):
    """A predictions file that cannot be read or resumed without losing data."""


class FingerprintError(ValueError):
    """A run folder holds results of another setup than the one asked to resume into it."""


# -- running one question ---------------------------------------------------------------
def run_method(method: str, q: Question, env: Environment, policy=None,
               fixed_k: int | None = None, seed: int = 13, demos=None) -> MethodResult:
    """One question with one method, all on the same environment. ``demos``: IRCoT's
    few-shot demonstrations (``demonstrations.build_ircot_demos`` of the training split);
    None runs IRCoT zero-shot (not the faithful baseline)."""
    if method == "dynakrag":
        if policy is None:
            raise ValueError("method 'dynakrag' needs a policy")
        return run_controller(q.question, env, policy, q.id, method="dynakrag")
    if method == "uniform":
        return run_controller(q.question, env, UniformChooser(seed), q.id, method="uniform")
    if method == "oracle":
        return run_controller(q.question, env, OracleChooser(env, gold_titles(q)), q.id,
                              method="oracle")
    from .. import baselines
    if method == "fixed_k":
        return baselines.run_fixed_k(q.question, env, k=fixed_k, qid=q.id)
    if method == "ircot":
        return baselines.run_ircot(q.question, env, qid=q.id, demos=demos)
    if method == "self_ask":
        return baselines.run_self_ask(q.question, env, qid=q.id)
    raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")


def score(q: Question, result: MethodResult) -> dict:
    """The predictions.jsonl record of one question."""
    em, f1 = em_f1(result.prediction, q.answers)
    st = result.state
    s_r = support_recall(st.titles, gold_titles(q))
    gold = {normalize_title(t) for t in gold_titles(q)}  # the key SR matches titles by
    trace = [t.to_json() for t in result.trace]
    last_probe_parsed = st.sufficiency.parsed if st.sufficiency is not None else None
    return {
        "id": q.id, "question": q.question, "type": q.type, "method": result.method,
        "prediction": result.prediction, "answers": list(q.answers), "em": em, "f1": f1,
        "support_recall": s_r, "all_support": float(s_r == 1.0),
        "n_gold": len(gold),
        "docs": [{"id": d.id, "title": d.title, "score": round(d.score, 4),
                  "source": d.source, "gold": normalize_title(d.title) in gold}
                 for d in st.docs],
        "n_docs": len(st.docs), "tokens": st.ledger.tokens,
        "prompt_tokens": st.ledger.prompt_tokens,
        "completion_tokens": st.ledger.completion_tokens,
        "llm_calls": st.ledger.llm_calls, "retrieval_calls": st.ledger.retrieval_calls,
        "seconds": round(result.seconds, 3), "snippets": list(result.snippets),
        "stop_reason": st.stop_reason,
        "trace": trace, **({"extra": result.extra} if result.extra else {}),
        "diagnostics": trace_diagnostics(
            trace, question=q.question, prediction=result.prediction, extra=result.extra,
            stop_reason=st.stop_reason, last_probe_parsed=last_probe_parsed),
    }


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


def _append(fh, row: dict) -> None:
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
    from ..data.schema import DataError
    from ..data.sources import load_dataset, resolve_data
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


# -- diagnostics ------------------------------------------------------------------------
def _stop_reason(trace: Sequence[dict], method: str | None, extra: dict | None,
                 stop_reason: str | None) -> str:
    if extra and extra.get("stop_reason"):
        return str(extra["stop_reason"])  # IRCoT / Self-Ask say why their chain ended
    if stop_reason is None:  # an older row: find the stop in the trace
        stops = [t for t in trace if t.get("action") == "stop_answer"]
        if stops:
            stop_reason = stops[-1].get("note") or "policy"
        elif method == "fixed_k":
            stop_reason = "fixed_k"
    if not stop_reason:
        return "unknown"
    return "stop_answer_chosen" if stop_reason == "policy" else stop_reason


def trace_diagnostics(trace: Sequence[dict], *, question: str = "", prediction: str = "",
                      extra: dict | None = None, stop_reason: str | None = None,
                      last_probe_parsed: bool | None = None, method: str | None = None
                      ) -> dict:
    """One question's diagnostics from its JSON trace (see the module docstring).
    ``last_probe_parsed``: the final state's exact ``Sufficiency.parsed`` when known."""
    actions = Counter(t.get("action", "?") for t in trace)
    probes = [t for t in trace if t.get("action") == "sufficiency_check"]
    suff = Counter()
    for i, t in enumerate(probes):
        parsed = t.get("parsed")  # exact when the trace records it
        if parsed is None and i == len(probes) - 1:
            parsed = last_probe_parsed
        if parsed is False:
            suff["unparsed"] += 1
        elif t.get("sufficient"):
            suff["sufficient"] += 1
        elif parsed or (t.get("gap") or "").strip():
            suff["insufficient"] += 1  # (parsed: also an INSUFFICIENT naming no missing fact)
        else:
            suff["unparsed"] += 1  # no flag: insufficient without a gap looks like the fallback
    fallbacks = Counter()
    if suff["unparsed"]:
        fallbacks["sufficiency"] = suff["unparsed"]
    q = " ".join(question.split())
    for t in trace:
        a, note = t.get("action"), str(t.get("note") or "")
        if a == "rewrite_query" and ("fallback:" in note or (
                q and " ".join(str(t.get("query", "")).split()) == q)):
            fallbacks["rewrite"] += 1
        elif a == "compress_answer_evidence" and note.startswith("0 snippets"):
            fallbacks["compress"] += 1
        elif a == "cot_step" and note.startswith("unparsed:"):
            fallbacks["ircot"] += 1
        elif a == "follow_up" and note.startswith("unparsed:"):
            fallbacks["self_ask"] += 1
        elif a == "intermediate_answer" and note == "unknown":
            fallbacks["intermediate_answer"] += 1
    if not str(prediction).strip():
        fallbacks["answer"] += 1
    for kind, n in ((extra or {}).get("parse_fallbacks") or {}).items():
        fallbacks[str(kind)] += int(n)
    vetoes = sum(1 for t in trace
                 if ((t.get("scores") or {}).get("stop_answer") or {}).get("vetoed"))
    return {"stop_reason": _stop_reason(trace, method, extra, stop_reason),
            "actions": dict(actions),
            "sufficiency": {k: suff[k] for k in ("sufficient", "insufficient", "unparsed")},
            "parse_fallbacks": dict(fallbacks), "vetoes": vetoes}


def row_diagnostics(row: dict) -> dict:
    """A row's diagnostics: as recorded, or derived from its trace for rows written before
    diagnostics were recorded (then the last probe's exact parse flag is unknown)."""
    if isinstance(row.get("diagnostics"), dict):
        return row["diagnostics"]
    return trace_diagnostics(row.get("trace") or [], question=row.get("question", ""),
                             prediction=row.get("prediction", ""), extra=row.get("extra"),
                             stop_reason=row.get("stop_reason"), method=row.get("method"))


def diagnostics(rows: Sequence[dict]) -> dict:
    """The summary's ``"diagnostics"`` over the latest row of each question."""
    ok = [r for r in rows if not is_error(r)]
    errs = [r for r in rows if is_error(r)]
    per = [row_diagnostics(r) for r in ok]
    stops, suff, fallbacks, totals = Counter(), Counter(), Counter(), Counter()
    veto_total, veto_questions = 0, 0
    for d in per:
        stops[d["stop_reason"]] += 1
        suff.update(d["sufficiency"])
        fallbacks.update(d["parse_fallbacks"])
        totals.update(d["actions"])
        veto_total += d["vetoes"]
        veto_questions += d["vetoes"] > 0
    n = len(per)
    return {
        "questions": n,
        "errors": len(errs),
        "error_types": dict(Counter(r["error"].get("type", "?") for r in errs)),
        "stop_reasons": dict(stops.most_common()),
        "actions_mean": {a: round(c / n, 4) for a, c in sorted(totals.items())} if n else {},
        "sufficiency": {k: suff[k] for k in ("sufficient", "insufficient", "unparsed")},
        "parse_fallbacks": dict(sorted(fallbacks.items())),
        "vetoes": {"total": veto_total, "questions": veto_questions},
    }


# -- concurrent questions (the scheme: dynakrag_lite.concurrency) --------------------------
def _run_question(q: Question, method: str, env: Environment, policy, fixed_k: int | None,
                  seed: int, demos) -> tuple[dict, bool]:
    """(row, failed): the question's result row, or its error row when the method raised."""
    t0 = time.perf_counter()
    try:
        row = score(q, run_method(method, q, env, policy, fixed_k, seed, demos=demos))
        json.dumps(row, ensure_ascii=False)  # unserializable extra = an error too
        return row, False
    except ReplayMissError as e:  # replay-only: the run stops here, no error row is written
        raise ReplayMissError(f"question {q.id} ({q.question!r}): {e}") from e
    except Exception as e:  # one question's failure must not end the run
        return error_row(q, method, e, time.perf_counter() - t0), True


def _question_runner(method: str, env: Environment, policy, fixed_k: int | None, seed: int,
                     demos, workers: int) -> Callable[[Question], tuple[dict, bool]]:
    """The function that runs one question; for workers > 1 it holds the shared lock except
    during server calls (the retriever's encoder, spaCy and the policy are not thread-safe)."""
    def run(q: Question, e: Environment) -> tuple[dict, bool]:
        return _run_question(q, method, e, policy, fixed_k, seed, demos)
    return locked_runner(run, env, workers)


def _run_in_order(todo: Sequence[Question], run: Callable[[Question], tuple[dict, bool]],
                  workers: int, emit: Callable[[Question, dict, bool], None]) -> None:
    """Run every question of ``todo`` and ``emit`` its result in ``todo`` order, from this
    (the calling) thread only; with workers > 1 up to ``workers`` questions run at once."""
    run_in_order(todo, run, workers, lambda q, result: emit(q, *result), name="evaluate")


# -- summary and the evaluation loop ----------------------------------------------------
def summarize(rows: Sequence[dict], method: str, dataset: str, generator: str) -> dict:
    """Metric means over the real rows (error rows excluded, counted in ``"errors"``).
    ``rows`` should hold one row per question (:func:`latest_rows`)."""
    ok = [r for r in rows if not is_error(r)]

    def mean(k):
        return float(np.mean([r[k] for r in ok])) if ok else 0.0
    return {"method": method, "dataset": dataset, "generator": generator, "n": len(ok),
            "em": mean("em"), "f1": mean("f1"), "support_recall": mean("support_recall"),
            "all_support_rate": mean("all_support"), "docs_mean": mean("n_docs"),
            "tokens_mean": mean("tokens"), "llm_calls_mean": mean("llm_calls"),
            "retrieval_calls_mean": mean("retrieval_calls"), "seconds_mean": mean("seconds"),
            "errors": len(rows) - len(ok)}


def evaluation_fingerprint(questions: Sequence[Question], method: str, env: Environment, *,
                           policy=None, policy_sha256: str | None = None,
                           data_sha256: str | None = None, fixed_k: int | None = None,
                           seed: int = 13, demos=None) -> dict:
    """The fingerprint :func:`evaluate` records for these arguments (:func:`run_fingerprint`,
    plus IRCoT's demonstrations, refused when one of them is among ``questions``)."""
    fingerprint = run_fingerprint(method, env, policy=policy, policy_sha256=policy_sha256,
                                  data_sha256=data_sha256, fixed_k=fixed_k, seed=seed)
    if demos is not None and method == "ircot":
        # Demonstrations come from training questions: refuse any overlap with these ones, and
        # make them part of the setup a resumed run must share.
        demos.check_disjoint(q.id for q in questions)
        fingerprint["demos"] = {"ids": sorted(demos.ids), "sha256": demos.digest()}
    return fingerprint


def evaluate(questions: Sequence[Question], method: str, env: Environment, out_dir: str | Path,
             policy=None, dataset: str = "", generator: str = "", fixed_k: int | None = None,
             seed: int = 13, progress: bool = True, run_info: dict | None = None, *,
             data_sha256: str | None = None, policy_sha256: str | None = None,
             summary_extra: dict | None = None, demos=None, workers: int = 1) -> dict:
    """Run ``method`` on every question of ``questions`` not yet done in ``out_dir`` (see the
    module docstring for the folder's files); return the summary.

    ``run_info`` goes into the summary's ``"run"`` block (e.g. the command);
    ``summary_extra`` is merged into the summary's top level (e.g. ``"policy"`` provenance);
    ``data_sha256`` / ``policy_sha256`` enter the fingerprint. Raises :class:`ResultsError`,
    :class:`FingerprintError` or :class:`~dynakrag_lite.storage.LockedError` before any
    question is run when the folder cannot be resumed safely.

    ``workers``: questions run at once (module docstring); > 1 needs a server generator
    (:func:`check_workers`, refused before the folder is touched). It is not part of the
    fingerprint: rows do not depend on it, so a run may be resumed with another value."""
    from tqdm.auto import tqdm
    check_workers(workers, env.generator)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pred_path = out / PREDICTIONS_FILE
    fingerprint = evaluation_fingerprint(questions, method, env, policy=policy,
                                         policy_sha256=policy_sha256, data_sha256=data_sha256,
                                         fixed_k=fixed_k, seed=seed, demos=demos)
    wanted = list(dict.fromkeys(q.id for q in questions))
    with FolderLock(out, "evaluation"):
        # Check before touching anything: a corrupt file stops us before run.json could adopt
        # it, and a folder of another setup is refused before its torn line is cut.
        check_run_folder(out, fingerprint, (run_info or {}).get("command"),
                         has_rows=bool(read_predictions(pred_path)))
        rows = repair_predictions(pred_path)
        latest = {r["id"]: r for r in latest_rows(rows)}
        todo = [q for q in questions if q.id not in latest or is_error(latest[q.id])]
        todo = list({q.id: q for q in todo}.values())  # a question listed twice runs once

        def write_summary() -> dict:
            kept = [latest[i] for i in wanted if i in latest]
            summary = summarize(kept, method, dataset, generator)
            summary["diagnostics"] = diagnostics(kept)
            summary["fingerprint"] = fingerprint
            summary.update(summary_extra or {})
            n_ok = summary["n"]
            summary["run"] = {**(run_info or {}), "n_expected": len(wanted),
                              "complete": n_ok == len(wanted), "workers": workers,
                              "finished_at": datetime.now(timezone.utc).isoformat(
                                  timespec="seconds")}
            atomic_write_json(out / SUMMARY_FILE, summary)
            return summary

        n_errors = 0
        run = _question_runner(method, env, policy, fixed_k, seed, demos, workers)
        with open(pred_path, "a", encoding="utf-8") as fh, \
                tqdm(total=len(todo), desc=method, disable=not progress) as bar:
            def emit(q: Question, row: dict, failed: bool) -> None:
                # Main thread only: the single writer of predictions.jsonl and summary.json.
                nonlocal n_errors
                if failed:
                    n_errors += 1
                    bar.set_postfix(errors=n_errors)
                _append(fh, row)
                latest[q.id] = row
                write_summary()
                bar.update(1)
            _run_in_order(todo, run, workers, emit)
        summary = write_summary()
    if n_errors:
        warnings.warn(f"{n_errors} of {len(todo)} questions failed (error rows in "
                      f"{pred_path}); re-run the same command to retry them",
                      RuntimeWarning, stacklevel=2)
    return summary
