"""What the experiments found, as tables and sentences computed from the committed runs
(the results chapter and the diagnosis appendix read them).

* :func:`headline_table`: per dataset x reader, each controller run (the paper's
  ``dynakrag``, the gain rule's ``dynakrag-gain``, the continuation rule's ``dynakrag-cont``)
  against the baseline with the highest F1 on the questions both answered
  (:func:`~dynakrag_lab.report.results.best_baseline`), with the paired intervals of F1,
  EM and support recall and the token ratio;
* :func:`stop_profiles`: how the controller ended its questions (stopped by its own choice
  after one retrieval, or run to the step cap) and whether its documents are Fixed-K(3)'s;
* :func:`continuation_table`: the continuation controller against uniform-valid and against
  its own always-continue schedule (``dynakrag-cont-stop4``);
* :func:`check_set_pairs` / :func:`check_set_markdown`: the controllers against every other
  run on the check set (training questions no policy, selector, run or diagnosis read before),
  each pair's word computed (:func:`~.verdicts.pair_word`: better, worse or inconclusive at this
  n; "not run yet" when a run is missing, "partial: k of N" while it runs).

Only reads; the verdict rule is :func:`~dynakrag_lab.report.comparison.verdict`.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from dynakrag_lite.experiments.artifacts import EXPERIMENTS_DIR, RESULTS
from dynakrag_lite.experiments.diagnostics import row_diagnostics

from .comparison import paired_rows
from .continuation import (continuation_readers, continuation_sentences, continuation_table,
                           grid_status, pareto_panels, still_to_run)
from .names import (ALWAYS_CONTINUE, BASELINES, CONTINUATION, GRID, SCHEDULES, STEP_CAP,
                    STOP_CHOSEN, join_words, readers, run_names, short_names)
from .results import (NOT_RUN, best_baseline, is_partial, load_summaries, mean_of, paired_table,
                      read_run)
from .verdicts import pair_word

CONTROLLERS = ("dynakrag", "dynakrag-gain", CONTINUATION)
# The check set: ``evaluate --split train --offset`` runs on questions read once, at the end.
CHECK_SET_DIR = RESULTS / "diagnostics" / "check-set"
# with the compressor, then answering from the full documents (a check set the committed
# sentence selector was trained on can only run the latter)
CHECK_CONTROLLERS = ("dynakrag", "dynakrag-no_compression")
HEADLINE_COLUMNS = ("dataset", "reader", "run", "status", "n", "baseline", "baseline_status",
                    "f1_run", "f1_baseline", "f1_diff", "f1_lo", "f1_hi", "f1_p", "em_diff",
                    "em_lo", "em_hi", "sr_diff", "sr_lo", "sr_hi", "token_ratio", "verdict",
                    "outcome")


def _blank(dataset: str, reader: str, run: str, status: str, why: str) -> dict:
    row = dict.fromkeys(HEADLINE_COLUMNS, math.nan)
    row.update(dataset=dataset, reader=reader, run=run, status=status, n=0, baseline="-",
               baseline_status="-", verdict=why, outcome="not compared")
    return row


def headline_table(root: str | Path = EXPERIMENTS_DIR,
                   controllers: Sequence[str] = CONTROLLERS,
                   baselines: Sequence[str] = BASELINES) -> pd.DataFrame:
    """Per dataset x reader (:func:`readers`), every controller run present (``dynakrag``
    always gets a row, "not run yet" when missing) against the best baseline
    (:func:`~dynakrag_lab.report.results.best_baseline`), paired per question: n,
    both F1 means, the differences run - baseline of F1, EM and SR with their 95 % paired
    bootstrap intervals, the F1 p-value, the token ratio run / baseline on the same
    questions, the verdict and ``outcome`` (its :func:`~.verdicts.pair_word`, or "not compared").
    Columns :data:`HEADLINE_COLUMNS`."""
    rows = []
    for dataset, reader in readers(root):
        names = run_names(dataset, reader, root)
        present = [b for b in baselines if b in names]
        for ctl in controllers:
            if ctl not in names:
                if ctl == "dynakrag":
                    rows.append(_blank(dataset, reader, ctl, NOT_RUN, "dynakrag not run yet"))
                continue
            status = read_run(dataset, reader, ctl, root)[1]["status"]
            if not present:
                rows.append(_blank(dataset, reader, ctl, status, "no baseline run yet"))
                continue
            pt = paired_table(dataset, reader, base=ctl, runs=present,
                              metrics=("f1", "em", "support_recall", "tokens"), root=root)
            best = best_baseline(pt)
            if best is None:
                rows.append(_blank(dataset, reader, ctl, status,
                                   "; ".join(sorted(set(pt.verdict)))))
                continue
            by = pt[pt.run == best.run].set_index("metric")
            tok = by.loc["tokens"]
            rows.append({
                "dataset": dataset, "reader": reader, "run": ctl, "status": status,
                "n": int(best.n), "baseline": best.run, "baseline_status": best.status,
                "f1_run": best[ctl], "f1_baseline": best.other, "f1_diff": best["diff"],
                "f1_lo": best.lo, "f1_hi": best.hi, "f1_p": best.p_value,
                **{f"{k}_{c}": by.loc[m, col] for k, m in (("em", "em"),
                                                           ("sr", "support_recall"))
                   for c, col in (("diff", "diff"), ("lo", "lo"), ("hi", "hi"))},
                "token_ratio": tok[ctl] / tok.other if tok.other else math.nan,
                "verdict": best.verdict, "outcome": pair_word(best.verdict)})
    return pd.DataFrame(rows, columns=list(HEADLINE_COLUMNS))


PAIRED_METRICS = {"f1": "F1", "support_recall": "SR", "em": "EM"}


def paired_view(pairs: pd.DataFrame, base: str = "dynakrag") -> pd.DataFrame:
    """The rows of :func:`~.results.paired_table` that could be paired (n > 0), as the book
    prints them: metric names, the interval as ``[lo, hi]``, ``base``'s verdict against each
    run in the four words (:func:`~.verdicts.pair_word`), F1 first, then SR and EM."""
    made = pairs[pairs.n > 0]
    order = list(PAIRED_METRICS.values())
    view = pd.DataFrame({
        "metric": made.metric.map(PAIRED_METRICS), "run": made.run,
        "run status": made.status, "n": made.n, base: made[base].round(3),
        "run mean": made.other.round(3), "diff": made["diff"].round(3),
        "95% interval": [f"[{lo:+.3f}, {hi:+.3f}]" for lo, hi in zip(made.lo, made.hi)],
        # a permutation p is never 0: below its resolution it reads "<.001"
        "p": [f"{p:.3f}" if p >= 1e-3 else "<.001" for p in made.p_value], "wins": made.wins, "losses": made.losses,
        f"{base} against run": [pair_word(v) for v in made.verdict]})
    view = view.sort_values("metric", key=lambda c: c.map(order.index), kind="stable")
    return view.reset_index(drop=True)


# -- how the controller ended its questions ---------------------------------------------------
PROFILE_COLUMNS = ("dataset", "reader", "run", "status", "n", "after_one_retrieval",
                   "by_choice", "at_step_cap", "retrieval_calls", "docs", "tokens",
                   "same_docs_as_fixed_k3", "paired_with_fixed_k3")


def _doc_ids(row: dict) -> frozenset:
    return frozenset(d["id"] for d in row.get("docs") or ())


def stop_profile(dataset: str, reader: str, run: str = "dynakrag",
                 root: str | Path = EXPERIMENTS_DIR) -> dict[str, Any]:
    """How one run ended its questions, counted from its predictions: ``after_one_retrieval``
    (stopped by its own choice with one retrieval call), ``by_choice`` (stopped by its own
    choice), ``at_step_cap``, mean retrieval calls, documents and tokens; and, against
    ``fixed_k3`` of the same reader, ``same_docs_as_fixed_k3`` of ``paired_with_fixed_k3``
    questions read exactly Fixed-K(3)'s documents."""
    rows, state = read_run(dataset, reader, run, root)
    reasons = [row_diagnostics(r)["stop_reason"] for r in rows]
    k3 = read_run(dataset, reader, "fixed_k3", root)[0]
    pairs = paired_rows(rows, k3)
    return {"dataset": dataset, "reader": reader, "run": run, "status": state["status"],
            "n": len(rows),
            "after_one_retrieval": sum(w == STOP_CHOSEN and int(r["retrieval_calls"]) == 1
                                       for r, w in zip(rows, reasons)),
            "by_choice": reasons.count(STOP_CHOSEN), "at_step_cap": reasons.count(STEP_CAP),
            "retrieval_calls": mean_of(rows, "retrieval_calls"), "docs": mean_of(rows, "n_docs"),
            "tokens": mean_of(rows, "tokens"),
            "same_docs_as_fixed_k3": sum(_doc_ids(a) == _doc_ids(b) for a, b in pairs),
            "paired_with_fixed_k3": len(pairs)}


def stop_profiles(root: str | Path = EXPERIMENTS_DIR, run: str = "dynakrag") -> pd.DataFrame:
    """:func:`stop_profile` of ``run`` for every reader that has it."""
    rows = [stop_profile(d, g, run, root) for d, g in readers(root)
            if run in run_names(d, g, root)]
    return pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))


def profile_sentence(p: Mapping) -> str:
    """One reader's stop profile in words, every count read from the row."""
    n = int(p["n"])
    text = (f"{p['dataset']}, {p['reader']}: `{p['run']}` stopped by its own choice after one "
            f"retrieval on {int(p['after_one_retrieval'])} of {n} questions and ran to the "
            f"step cap on {int(p['at_step_cap'])} ({p['retrieval_calls']:.2f} retrieval calls, "
            f"{p['docs']:.1f} documents per question)")
    k3 = int(p["paired_with_fixed_k3"])
    if k3:
        same = int(p["same_docs_as_fixed_k3"])
        text += (f"; it read exactly Fixed-K(3)'s documents on {same} of those {k3} questions"
                 + (", so there it *is* Fixed-K(3) with compressed evidence" if same == k3
                    else ""))
    return text + (f" ({p['status']})" if p["status"] != "complete" else "")


def check_set_pairs(root: str | Path = CHECK_SET_DIR,
                    metrics: Sequence[str] = ("f1", "support_recall")) -> pd.DataFrame:
    """Per dataset x reader of the check set, each controller run of
    :data:`CHECK_CONTROLLERS` present minus every other run (a controller already paired as a
    base is not paired again), per question: :func:`~.results.paired_table`'s rows with
    ``dataset``, ``reader``, ``base``, the base's mean as ``base_mean`` and ``label``
    ("<base> - <run>"). Empty (with these columns) when the check set has no controller."""
    cols = ["dataset", "reader", "base", "label", "run", "metric", "n", "base_mean", "other",
            "diff", "lo", "hi", "p_value", "wins", "losses", "verdict", "status"]
    frames = []
    summaries = load_summaries(root)
    for (dataset, reader), mine in summaries.groupby(["dataset", "generator"], sort=False):
        names = list(mine.run)
        done: list[str] = []
        for base in (c for c in CHECK_CONTROLLERS if c in names):
            runs = [r for r in names if r != base and r not in done]
            done.append(base)
            if not runs:
                continue
            pt = paired_table(dataset, reader, base=base, runs=runs, metrics=metrics, root=root)
            frames.append(pt.rename(columns={base: "base_mean"}).assign(
                dataset=dataset, reader=reader, base=base,
                label=[f"{base} - {r}" for r in pt.run]))
    if not frames:
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True)[cols]


def check_set_markdown(pairs: pd.DataFrame, metric: str = "f1") -> str:
    """:func:`check_set_pairs` on ``metric`` as Markdown bullets, one per pair made: the
    verdict in words, the difference with its interval and n, and "partial" while the other
    run is still running."""
    rows = pairs[(pairs.metric == metric) & (pairs.n > 0)]
    if rows.empty:
        return "* No controller run on the check set yet."
    name = {"f1": "F1", "em": "EM", "support_recall": "support recall"}.get(metric, metric)
    return "\n".join(
        f"* {r.dataset} / `{r.reader}`: `{r.base}` minus `{r.run}`: "
        f"{name} {pair_word(r.verdict)}, {pair_phrase(r['diff'], r.lo, r.hi, int(r.n))}"
        + (f" (`{r.run}` {r.status})" if is_partial(r.status) else "")
        for _, r in rows.iterrows())


# -- the reading ------------------------------------------------------------------------------
def pair_phrase(diff: float, lo: float, hi: float, n: int | None = None) -> str:
    """``+0.055 [-0.003, +0.114]`` (with ``, n = 150`` when n is given)."""
    return f"{diff:+.3f} [{lo:+.3f}, {hi:+.3f}]" + (f", n = {n}" if n is not None else "")


def pair_rows(dataset: str, reader: str, run: str, other: str, root: str | Path
              ) -> pd.DataFrame | None:
    """F1 and SR rows of ``run`` minus ``other``, or None when they cannot be paired."""
    names = run_names(dataset, reader, root)
    if run not in names or other not in names:
        return None
    pt = paired_table(dataset, reader, base=run, runs=[other],
                      metrics=("f1", "support_recall"), root=root).set_index("metric")
    return None if pt.loc["f1", "n"] == 0 else pt


__all__ = ["ALWAYS_CONTINUE", "BASELINES", "CONTINUATION", "CONTROLLERS", "GRID",
           "HEADLINE_COLUMNS", "SCHEDULES", "continuation_readers",
           "continuation_sentences", "continuation_table", "grid_status", "headline_table",
           "join_words", "pair_phrase", "pair_rows", "paired_view", "pareto_panels",
           "profile_sentence", "readers", "short_names", "still_to_run", "stop_profile",
           "stop_profiles"]
