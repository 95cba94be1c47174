"""The continuation controller's runs as the book reads them: its table and sentences per
dataset and reader (F1, tokens, early stops against the always-continue schedule), the
cost/quality panels of the readers that have it, and which runs of the grid each reader still
lacks."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import math

import numpy as np
import pandas as pd

from dynakrag_lite.experiments.artifacts import EXPERIMENTS_DIR
from dynakrag_lite.experiments.diagnostics import row_diagnostics
from dynakrag_lite.policy import Policy

from .names import (ALWAYS_CONTINUE, CONTINUATION, DATASETS, GRID, SCHEDULES, STOP_CHOSEN,
                    readers, run_names)
from .pareto import pareto_points, tau_curve
from .records import policy_path
from .results import mean_of, paired_table, read_run
from .verdicts import pair_word


# -- the continuation controller --------------------------------------------------------------
CONTINUATION_COLUMNS = ("dataset", "reader", "status", "n", "f1", "tokens", "early_stop",
                        "schedules", "vs", "vs_status", "vs_n", "f1_diff", "f1_lo", "f1_hi",
                        "verdict", "token_ratio")


def continuation_table(root: str | Path = EXPERIMENTS_DIR,
                       against: Sequence[str] = ("uniform", ALWAYS_CONTINUE)) -> pd.DataFrame:
    """For every reader with a continuation run or schedule: ``dynakrag-cont``'s status,
    n, F1, tokens and ``early_stop`` (share of its questions stopped by its own choice before
    the cap), which schedules exist (with their status), and one row per run in ``against``
    paired per question: F1 diff cont - other with interval and verdict, and the token ratio
    cont / other on the same questions. A run not there yet is a row saying so."""
    out = []
    for dataset, reader in readers(root):
        names = run_names(dataset, reader, root)
        if not any(r == CONTINUATION or r in SCHEDULES for r in names):
            continue
        rows, state = read_run(dataset, reader, CONTINUATION, root)
        sched = "; ".join(f"k={r[-1]}: {read_run(dataset, reader, r, root)[1]['status']}"
                          for r in SCHEDULES)
        head = {"dataset": dataset, "reader": reader, "status": state["status"],
                "n": len(rows), "f1": mean_of(rows, "f1"), "tokens": mean_of(rows, "tokens"),
                "early_stop": (float(np.mean([row_diagnostics(r)["stop_reason"] == STOP_CHOSEN
                                              for r in rows])) if rows else math.nan),
                "schedules": sched}
        pt = paired_table(dataset, reader, base=CONTINUATION, runs=list(against),
                          metrics=("f1", "tokens"), root=root) if rows else None
        for other in against:
            other_state = read_run(dataset, reader, other, root)[1]["status"]
            rec = {**head, "vs": other, "vs_status": other_state, "vs_n": 0,
                   **dict.fromkeys(("f1_diff", "f1_lo", "f1_hi", "token_ratio"), math.nan),
                   "verdict": (f"{CONTINUATION} {state['status']}" if not rows else
                               other_state)}
            if pt is not None:
                sel = pt[pt.run == other].set_index("metric")
                f1, tok = sel.loc["f1"], sel.loc["tokens"]
                if f1.n > 0:
                    rec.update(vs_n=int(f1.n), f1_diff=f1["diff"], f1_lo=f1.lo, f1_hi=f1.hi,
                               verdict=f1.verdict,
                               token_ratio=tok[CONTINUATION] / tok.other if tok.other
                               else math.nan)
                else:
                    rec["verdict"] = f1.verdict
            out.append(rec)
    return pd.DataFrame(out, columns=list(CONTINUATION_COLUMNS))


def continuation_sentences(table: pd.DataFrame) -> list[str]:
    """The continuation controller per reader in words (status first, then each pair)."""
    out = []
    for (dataset, reader), g in table.groupby(["dataset", "reader"], sort=False):
        h = g.iloc[0]
        if h.n == 0:
            out.append(f"{dataset}, {reader}: `{CONTINUATION}` is {h.status} "
                       f"(its stop-at-k schedules: {h.schedules}), so there is no "
                       "continuation result to read yet.")
            continue
        adapts = ("it never stopped before the cap" if h.early_stop == 0 else
                  "it stopped before the cap on every question" if h.early_stop == 1 else
                  "so the stop differs from question to question")
        parts = [f"{dataset}, {reader}: `{CONTINUATION}` ({h.status}) answered {int(h.n)} "
                 f"questions, F1 {h.f1:.3f} at {h.tokens:,.0f} tokens, stopping before the "
                 f"cap on {h.early_stop:.0%} of them: {adapts}"]
        for r in g.itertuples():
            if r.vs_n == 0:
                parts.append(f"against `{r.vs}`: not compared ({r.verdict})")
            else:
                parts.append(f"against `{r.vs}` ({r.vs_status}, n = {r.vs_n}): "
                             f"{pair_word(r.verdict)}, F1 {r.f1_diff:+.3f} "
                             f"[{r.f1_lo:+.3f}, {r.f1_hi:+.3f}], at {r.token_ratio:.2f}x its "
                             "tokens")
        out.append("; ".join(parts) + ".")
    return out


def continuation_readers(root: str | Path = EXPERIMENTS_DIR) -> list[tuple[str, str]]:
    """Readers with a continuation run or one of its stop-at-k schedules."""
    return [(d, g) for d, g in readers(root)
            if any(r == CONTINUATION or r in SCHEDULES for r in run_names(d, g, root))]


def pareto_panels(root: str | Path = EXPERIMENTS_DIR, results_root: str | Path = "results",
                  fallback: str | None = None
                  ) -> list[tuple[str, pd.DataFrame, pd.DataFrame | None]]:
    """The panels of :func:`~.pareto.pareto_grid`, one per reader with continuation runs:
    ``(title, pareto_points, tau_curve of its continuation policy or None)``. Until such a
    reader exists, the readers of generator ``fallback`` that have a ``dynakrag`` run, so
    the figure shows the cost and quality of what was run."""
    chosen = continuation_readers(root) or [
        (d, g) for d, g in readers(root)
        if g == fallback and "dynakrag" in run_names(d, g, root)]
    panels = []
    for d, g in chosen:
        path = policy_path(d, g, "-continuation", root=results_root)
        curve = tau_curve(Policy.load(path)) if path else None
        panels.append((f"{d} / {g}", pareto_points(d, g, root), curve))
    return panels


def grid_status(reader: str, root: str | Path = EXPERIMENTS_DIR,
                datasets: Sequence[str] = DATASETS, runs: Sequence[str] = GRID
                ) -> pd.DataFrame:
    """The status of every run of ``runs`` with ``reader`` on every dataset (rows: datasets,
    columns: runs; "complete", "partial: k of N", "not run yet" ...)."""
    return pd.DataFrame({run: [read_run(d, reader, run, root)[1]["status"] for d in datasets]
                         for run in runs}, index=pd.Index(list(datasets), name="dataset"))


def still_to_run(grid: pd.DataFrame) -> dict[str, list[str]]:
    """Per dataset of a :func:`grid_status` frame, the runs that are not complete yet."""
    return {d: [r for r in grid.columns if grid.loc[d, r] != "complete"] for d in grid.index}
