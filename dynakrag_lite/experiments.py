"""Evaluation: run a method over questions, write predictions as they come, resume, summarize.

``DIR/predictions.jsonl`` gets one line per question (appended and flushed as soon as the
question is done, so a killed run loses at most the question in flight); a re-run skips the ids
already there. ``DIR/summary.json`` is rewritten atomically at the end from all lines.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .actions import ControlConfig, Environment
from .controller import MethodResult, UniformChooser, run_controller
from .corpus import gold_titles, normalize_title
from .data import Question
from .metrics import em_f1, support_recall
from .trajectories import OracleChooser

METHODS = ("dynakrag", "fixed_k", "ircot", "self_ask", "uniform", "oracle")
SUMMARY_KEYS = ("method", "dataset", "generator", "n", "em", "f1", "support_recall",
                "all_support_rate", "docs_mean", "tokens_mean", "llm_calls_mean",
                "retrieval_calls_mean", "seconds_mean")


def run_method(method: str, q: Question, env: Environment, policy=None,
               fixed_k: int | None = None, seed: int = 13) -> MethodResult:
    """One question with one method, all on the same environment."""
    if method == "dynakrag":
        if policy is None:
            raise ValueError("method 'dynakrag' needs a policy")
        return run_controller(q.question, env, policy, q.id, method="dynakrag")
    if method == "uniform":
        return run_controller(q.question, env, UniformChooser(seed), q.id, method="uniform")
    if method == "oracle":
        return run_controller(q.question, env, OracleChooser(env, gold_titles(q)), q.id,
                              method="oracle")
    from . import baselines
    if method == "fixed_k":
        return baselines.run_fixed_k(q.question, env, k=fixed_k, qid=q.id)
    if method == "ircot":
        return baselines.run_ircot(q.question, env, qid=q.id)
    if method == "self_ask":
        return baselines.run_self_ask(q.question, env, qid=q.id)
    raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")


def score(q: Question, result: MethodResult) -> dict:
    """The predictions.jsonl record of one question."""
    em, f1 = em_f1(result.prediction, q.answers)
    st = result.state
    s_r = support_recall(st.titles, gold_titles(q))
    gold = {normalize_title(t) for t in gold_titles(q)}  # the key SR matches titles by
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
        "trace": [t.to_json() for t in result.trace], **({"extra": result.extra}
                                                           if result.extra else {}),
    }


def read_predictions(path: Path) -> list[dict]:
    """Existing lines; a torn last line (killed mid-write) is dropped and rewritten."""
    if not path.exists():
        return []
    rows, good_bytes = [], 0
    with open(path, "rb") as fh:
        for raw in fh:
            try:
                rows.append(json.loads(raw))
                good_bytes += len(raw)
            except json.JSONDecodeError:
                break
    if good_bytes != path.stat().st_size:
        with open(path, "r+b") as fh:
            fh.truncate(good_bytes)
    return rows


def summarize(rows: Sequence[dict], method: str, dataset: str, generator: str) -> dict:
    def mean(k):
        return float(np.mean([r[k] for r in rows])) if rows else 0.0
    return {"method": method, "dataset": dataset, "generator": generator, "n": len(rows),
            "em": mean("em"), "f1": mean("f1"), "support_recall": mean("support_recall"),
            "all_support_rate": mean("all_support"), "docs_mean": mean("n_docs"),
            "tokens_mean": mean("tokens"), "llm_calls_mean": mean("llm_calls"),
            "retrieval_calls_mean": mean("retrieval_calls"), "seconds_mean": mean("seconds")}


def write_json_atomic(obj, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def evaluate(questions: Sequence[Question], method: str, env: Environment, out_dir: str | Path,
             policy=None, dataset: str = "", generator: str = "", fixed_k: int | None = None,
             seed: int = 13, progress: bool = True, run_info: dict | None = None) -> dict:
    """Run ``method`` on every question not yet in DIR/predictions.jsonl; write summary.json."""
    from tqdm.auto import tqdm
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pred_path = out / "predictions.jsonl"
    rows = read_predictions(pred_path)
    done = {r["id"] for r in rows}
    todo = [q for q in questions if q.id not in done]
    wanted = {q.id for q in questions}

    def write_summary() -> dict:
        # After every question, so a run stopped at any point leaves a true summary of the
        # questions it finished (n says how many).
        kept = [r for r in rows if r["id"] in wanted]
        summary = summarize(kept, method, dataset, generator)
        summary["run"] = {**(run_info or {}), "complete": len(kept) == len(wanted),
                          "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        write_json_atomic(summary, out / "summary.json")
        return summary

    with open(pred_path, "a", encoding="utf-8") as fh:
        for q in tqdm(todo, desc=method, disable=not progress):
            row = score(q, run_method(method, q, env, policy, fixed_k, seed))
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()
            rows.append(row)
            write_summary()
    summary = write_summary()
    return summary
