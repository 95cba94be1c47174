"""Evaluation: run a method over questions, write each question's row into a run folder as it
finishes, resume, summarize (chapters 11-12; the folder's files, their reading and the run's
fingerprint are :mod:`dynakrag_lite.experiments.folder`; the diagnostics recorded in every row
and summary are :mod:`dynakrag_lite.experiments.diagnostics`).

Concurrent questions (``--workers N``, server generators only) follow
:mod:`dynakrag_lite.training.concurrency`; the main thread alone writes, in question order.
"""
from __future__ import annotations

import json
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from ..config import Environment, RunSettings
from ..training.concurrency import check_workers, locked_runner, run_in_order
from ..controller import MethodResult
from ..data.corpus import gold_titles, normalize_title
from ..data.schema import Question
from ..generators.base import ReplayMissError
from ..methods import run_method
from ..metrics import em_f1, support_recall
from ..storage import FolderLock, atomic_write_json
from .diagnostics import diagnostics, trace_diagnostics
from .folder import (PREDICTIONS_FILE, SUMMARY_FILE, append_row, error_row, is_error, latest_rows,
    read_predictions, repair_predictions)
from .fingerprint import build_change, check_run_folder, llama_build, run_fingerprint
from .selection import SELECTION_FIELD


class FailedQuestionsWarning(RuntimeWarning):
    """Some questions of an evaluation failed (they are error rows); a caller that reports
    them itself (the command line) can silence this one."""


# The summary's metric means: summary key -> the row field it averages.
MEANS = {"em": "em", "f1": "f1", "support_recall": "support_recall",
         "all_support_rate": "all_support", "docs_mean": "n_docs", "tokens_mean": "tokens",
         "llm_calls_mean": "llm_calls", "retrieval_calls_mean": "retrieval_calls",
         "seconds_mean": "seconds"}
SUMMARY_KEYS = ("method", "dataset", "generator", "n", *MEANS)


# -- one question's row ------------------------------------------------------------------
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


# -- concurrent questions (the scheme: dynakrag_lite.training.concurrency) ---------------------
def _run_question(q: Question, settings: RunSettings, env: Environment, policy, demos
                  ) -> tuple[dict, bool]:
    """(row, failed): the question's result row, or its error row when the method raised."""
    t0 = time.perf_counter()
    try:
        row = score(q, run_method(settings, q, env, policy, demos))
        json.dumps(row, ensure_ascii=False)  # unserializable extra = an error too
        return row, False
    except ReplayMissError as e:  # replay-only: the run stops here, no error row is written
        raise ReplayMissError(f"question {q.id} ({q.question!r}): {e}") from e
    except Exception as e:  # one question's failure must not end the run
        return error_row(q, settings.method, e, time.perf_counter() - t0), True


# -- summary and the evaluation loop ----------------------------------------------------
def summarize(rows: Sequence[dict], method: str, dataset: str, generator: str) -> dict:
    """Metric means over the real rows (error rows excluded, counted in ``"errors"``).
    ``rows`` should hold one row per question (:func:`latest_rows`)."""
    ok = [r for r in rows if not is_error(r)]

    def mean(k):
        return float(np.mean([r[k] for r in ok])) if ok else 0.0
    return {"method": method, "dataset": dataset, "generator": generator, "n": len(ok),
            **{key: mean(field) for key, field in MEANS.items()}, "errors": len(rows) - len(ok)}


def evaluate(questions: Sequence[Question], settings: RunSettings, env: Environment,
             out_dir: str | Path, policy=None, dataset: str = "", progress: bool = True,
             run_info: dict | None = None, *,
             data_sha256: str | None = None, policy_sha256: str | None = None,
             summary_extra: dict | None = None, demos=None,
             selection: dict | None = None) -> dict:
    """Run ``settings.method`` (:func:`dynakrag_lite.methods.run_method`, with the settings'
    ``generator``, ``fixed_k``, ``seed``, ``workers``, ...) on every question of ``questions``
    not yet done in ``out_dir`` (:mod:`dynakrag_lite.experiments.folder`); return the summary.

    ``run_info`` and ``summary_extra`` go into the summary; ``data_sha256`` / ``policy_sha256``
    into the fingerprint (``settings.workers`` does not: rows do not depend on it).
    ``selection``: which questions these are (None: not checked). A folder that cannot be
    resumed safely is refused before any question runs."""
    s = settings
    check_workers(s.workers, env.generator)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pred_path = out / PREDICTIONS_FILE
    fingerprint = run_fingerprint(s, env, policy=policy, policy_sha256=policy_sha256,
                                  data_sha256=data_sha256, demos=demos, questions=questions)
    wanted = list(dict.fromkeys(q.id for q in questions))
    with FolderLock(out, "evaluation"):
        # Check before touching anything: a corrupt file stops us before run.json is written,
        # and a folder of another setup is refused before its torn line is cut.
        read_predictions(pred_path, complete=True)  # a stub row is not a finished question
        build = llama_build(env.generator)
        changed = build_change(out, build)  # before run.json may be rewritten
        check_run_folder(out, fingerprint, (run_info or {}).get("command"),
                         corpus=env.retriever.corpus, selection=selection, build=build)
        if changed:
            warnings.warn(f"{out / 'run.json'} records another llama.cpp build ({changed}); "
                          f"new rows are decoded by {build}", RuntimeWarning, stacklevel=2)
        rows = repair_predictions(pred_path)
        latest = {r["id"]: r for r in latest_rows(rows)}
        todo = [q for q in questions if q.id not in latest or is_error(latest[q.id])]
        todo = list({q.id: q for q in todo}.values())  # a question listed twice runs once

        def write_summary() -> dict:
            kept = [latest[i] for i in wanted if i in latest]
            summary = summarize(kept, s.method, dataset, s.generator)
            summary["diagnostics"] = diagnostics(kept)
            summary["fingerprint"] = fingerprint
            summary.update(summary_extra or {})
            # the selection too: a folder whose run.json is lost is restored from here
            selected = {SELECTION_FIELD: selection} if selection is not None else {}
            # the build of this session; run.json keeps the first one (build_change)
            built = {"llama_build": build} if build is not None else {}
            if changed:
                built["llama_build_first"] = changed
            summary["run"] = {**(run_info or {}), **selected, **built,
                              "n_expected": len(wanted),
                              "complete": summary["n"] == len(wanted), "workers": s.workers,
                              "finished_at": datetime.now(timezone.utc).isoformat(
                                  timespec="seconds")}
            atomic_write_json(out / SUMMARY_FILE, summary)
            return summary

        n_errors = 0
        # for workers > 1 it holds the shared lock except during server calls (the
        # retriever's encoder, spaCy and the policy are not thread-safe)
        run = locked_runner(lambda q, e: _run_question(q, s, e, policy, demos), env, s.workers)
        with open(pred_path, "a", encoding="utf-8") as fh, \
                tqdm(total=len(todo), desc=s.method, disable=not progress) as bar:
            def emit(q: Question, row: dict, failed: bool) -> None:
                # Main thread only: the single writer of predictions.jsonl and summary.json.
                nonlocal n_errors
                if failed:
                    n_errors += 1
                    bar.set_postfix(errors=n_errors)
                append_row(fh, row)
                latest[q.id] = row
                write_summary()
                bar.update(1)
            # emit in ``todo`` order, from this thread only
            run_in_order(todo, run, s.workers, lambda q, result: emit(q, *result), name="evaluate")
        summary = (write_summary() if todo or not (out / SUMMARY_FILE).exists()  # else complete:
                   else json.loads((out / SUMMARY_FILE).read_text(encoding="utf-8")))  # kept
    if n_errors:
        warnings.warn(f"{n_errors} of {len(todo)} questions failed (error rows in "
                      f"{pred_path}); re-run the same command to retry them",
                      FailedQuestionsWarning, stacklevel=2)
    return summary
