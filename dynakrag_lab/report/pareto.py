"""Cost against quality: answer F1 against tokens per question for every run of one dataset and
reader (issue 24's Pareto figure; chapter 12 draws it, and ``python -m dynakrag_lab.report.pareto
[--dataset D] [--generator G]`` writes it to ``results/figures/pareto-<dataset>-<generator>.png``
and ``.json``: the points, their intervals, and the operating point against the
always-continue schedule; no model call).

The points are evaluation runs (means over their questions, with a 95 % bootstrap interval of
the F1 mean): the baselines, uniform-valid, the paper's controller, the stop-at-k schedules of
the continuation controller (the same learned choices, the stop forced after k acquisitions,
joined by a line), and the continuation controller at its chosen tau, the operating point.
The tau curve beside them is the training split's cross-validated one, read from the policy's
metadata: it is how tau was chosen, never the evaluation questions.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from dynakrag_lite.experiments.artifacts import EXPERIMENTS_DIR, RESULTS
from dynakrag_lite.policy import Policy
from dynakrag_lite.storage import atomic_write_json

from .comparison import N_RESAMPLES, SEED
from .names import CONTINUATION, DATASETS, SCHEDULES, run_names
from .annotate import pareto_front
from .records import policy_path
from .results import is_partial, load_predictions, run_status

# uniform-valid stopped after k acquisitions: the same horizons with chance action choice
UNIFORM_SCHEDULES = tuple(f"uniform-stop{k}" for k in (1, 2, 3, 4))
OPERATING_POINT = CONTINUATION
OTHER_RUNS = ("fixed_k3", "fixed_k6", "fixed_k12", "ircot", "self_ask", "uniform", "dynakrag",
              "oracle")
STYLE = {"fixed_k3": ("s", "#636363"), "fixed_k6": ("s", "#969696"),
         "fixed_k12": ("s", "#cccccc"), "ircot": ("^", "#756bb1"),
         "self_ask": ("v", "#9e9ac8"), "uniform": ("D", "#e6550d"),
         "dynakrag": ("P", "#fd8d3c"), "oracle": ("*", "#31a354")}
SCHEDULE_COLOR = "#3182bd"


def _mean_ci(values: np.ndarray) -> tuple[float, float, float]:
    """Mean and a 95 % bootstrap interval (fixed seed, as the paired comparisons)."""
    rng = np.random.default_rng(SEED)
    idx = rng.integers(0, len(values), size=(N_RESAMPLES, len(values)))
    means = values[idx].mean(axis=1)
    return float(values.mean()), float(np.quantile(means, .025)), float(np.quantile(means, .975))


def pareto_points(dataset: str, generator: str, root: str | Path = EXPERIMENTS_DIR,
                  runs: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per run that answered questions: run, kind (baseline, schedule, operating
    point), k (schedules), n, status, f1 with its interval, tokens, support recall."""
    have = set(run_names(dataset, generator, root))
    wanted = [r for r in (runs or OTHER_RUNS + SCHEDULES + UNIFORM_SCHEDULES +
                          (OPERATING_POINT,)) if r in have]
    rows = []
    for run in wanted:
        preds = load_predictions(dataset, generator, run, root).to_dict("records")
        if not preds:
            continue
        f1 = np.array([r["f1"] for r in preds], dtype=float)
        mean, lo, hi = _mean_ci(f1)
        kind = ("schedule" if run in SCHEDULES else
                "uniform schedule" if run in UNIFORM_SCHEDULES else
                "operating point" if run == OPERATING_POINT else "baseline")
        rows.append({"run": run, "kind": kind,
                     "k": int(run[-1]) if "schedule" in kind else None, "n": len(preds),
                     "status": run_status(dataset, generator, run, root), "f1": mean,
                     "f1_lo": lo, "f1_hi": hi,
                     "tokens": float(np.mean([r["tokens"] for r in preds])),
                     "support_recall": float(np.mean([r["support_recall"] for r in preds])),
                     "early_stop": float(np.mean([_stopped_early(r) for r in preds]))})
    return pd.DataFrame(rows)


def _stopped_early(row: dict) -> bool:
    """The controller chose stop_answer before a cap forced it."""
    trace = row.get("trace")
    return isinstance(trace, list) and any(
        t.get("action") == "stop_answer" and t.get("note", "") not in
        ("max_steps", "max_docs", "only_stop_valid") for t in trace)


def tau_curve(policy: Policy) -> pd.DataFrame:
    """The cross-validated tau grid the continuation policy was tuned on (training split):
    tau, f1, sr, tokens, early, objective, best."""
    tuning = policy.meta.get("tuning") or {}
    frame = pd.DataFrame(tuning.get("grid", []))
    if frame.empty:
        return frame
    return frame.rename(columns={"veto_threshold": "tau"}).sort_values("tau")


def draw_points(ax, points: pd.DataFrame, title: str = "evaluation split", legend: bool = True,
                k_labels: bool = False) -> None:
    """The evaluation runs on ``ax``: F1 (95 % interval) against tokens per question (log),
    the stop-at-k schedules joined by a line, the operating point as a star, the points on
    the Pareto front ringed."""
    if not points.empty:
        front = set(pareto_front(list(zip(points["tokens"], points["f1"]))))
        for kind, color, style, label in (
                ("schedule", SCHEDULE_COLOR, "-o", "stop after k acquisitions"),
                ("uniform schedule", STYLE["uniform"][1], "--D", "uniform, stop after k")):
            sched = points[points["kind"] == kind].sort_values("k")
            if not len(sched):
                continue
            ax.plot(sched["tokens"], sched["f1"], style, color=color, ms=5, label=label)
            # k above the learned line, below the uniform one: centred off the marker
            dy = 7 if kind == "schedule" else -12
            for _, r in sched.iterrows():
                text = (str(int(r["k"])) if k_labels else f"k={int(r['k'])}") + (
                    f" ({r['status']})" if is_partial(r["status"]) else "")
                ax.annotate(text, (r["tokens"], r["f1"]), textcoords="offset points",
                            xytext=(0, dy) if k_labels else (4, -10),
                            ha="center" if k_labels else "left", fontsize=7, color=color)
        for i, r in points.reset_index(drop=True).iterrows():
            if "schedule" in r["kind"]:
                continue
            marker, color = STYLE.get(r["run"], ("*", "#08306b"))
            if r["kind"] == "operating point":
                marker, color = "*", "#08306b"
            ax.errorbar(r["tokens"], r["f1"], yerr=[[r["f1"] - r["f1_lo"]],
                                                    [r["f1_hi"] - r["f1"]]],
                        fmt=marker, color=color, ms=11 if marker == "*" else 7, capsize=2,
                        lw=0.8, label=r["run"] + (" (chosen tau)" if r["kind"] ==
                                                  "operating point" else "")
                        + (f" ({r['status']})" if is_partial(r["status"]) else ""))
        for i in front:
            r = points.reset_index(drop=True).iloc[i]
            ax.plot(r["tokens"], r["f1"], "o", ms=15, mfc="none", mec="#bdbdbd", mew=1.5)
        ax.set_xscale("log")
        # plain token counts at 1-2-5 steps: the default 10^k labels collide on a narrow axis
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    else:
        ax.text(0.5, 0.5, "no run answered yet", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("tokens per question (log)")
    ax.set_ylabel("answer F1 (95 % interval)")
    ax.set_title(title, fontsize=9)
    # under the axes: inside, nine entries covered the points they name
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3,
                  frameon=False)


def draw_tau_curve(ax, curve: pd.DataFrame,
                   title: str = "training split: tau of the continuation rule") -> None:
    """The training split's cross-validated tau curve on ``ax`` (F1 against tokens; taus that
    give the same stops share a point, labelled at the curve's ends and the chosen tau, the
    star)."""
    ax.plot(curve["tokens"], curve["f1"], "-o", color=SCHEDULE_COLOR, ms=4)
    # taus that give the same stops share a point and a label ("-1, 0")
    same = list(curve.groupby([curve["tokens"].round(3), curve["f1"].round(6)], sort=False))
    # label the ends and the chosen point only: in a short panel the middle labels collide
    ends = {0, len(same) - 1} | {i for i, (_, g) in enumerate(same)
                                 if "best" in g and g["best"].any()}
    for i, ((tok, f1), g) in enumerate(same):
        if i in ends:
            ax.annotate("τ " + ", ".join(f"{t:g}" for t in g["tau"]), (tok, f1),
                        textcoords="offset points", xytext=(3, 3), fontsize=6)
    best = curve[curve["best"]] if "best" in curve else curve.iloc[:0]
    ax.plot(best["tokens"], best["f1"], "*", color="#08306b", ms=13, label="chosen tau")
    ax.set_xlabel("tokens per question")
    ax.set_ylabel("F1 (cross-validated)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, frameon=False)


def pareto_figure(points: pd.DataFrame, curve: pd.DataFrame | None = None,
                  title: str = "") -> Figure:
    """F1 against tokens per question: the evaluation runs (left) and, when given, the
    training split's tau curve (right). Points on the evaluation Pareto front are ringed."""
    return pareto_grid([(title, points, curve)])


def pareto_grid(panels: Sequence[tuple[str, pd.DataFrame, pd.DataFrame | None]],
                max_height: float = 8.6) -> Figure:
    """One row per ``(title, points, curve)`` (a dataset x reader): its evaluation runs
    (:func:`draw_points`) and, when given, its tau curve (:func:`draw_tau_curve`) beside them;
    one legend for every row under the grid, at most ``max_height`` inches tall (8.6 in:
    900 px in the book), so that rows shrink instead of their legends covering the axes."""
    ncols = 2 if any(c is not None and not c.empty for _, _, c in panels) else 1
    legend_in = 0.8
    row_in = min(3.9, (max_height - legend_in) / len(panels))
    fig, axes = plt.subplots(len(panels), ncols, squeeze=False,
                             figsize=(5.2 * ncols, row_in * len(panels) + legend_in))
    handles: dict[str, Any] = {}
    for (title, points, curve), row in zip(panels, axes):
        draw_points(row[0], points, f"{title}: evaluation split" if title and ncols == 2
                    and len(panels) > 1 else "evaluation split", legend=False)
        for h, label in zip(*row[0].get_legend_handles_labels()):
            handles.setdefault(label, h)
        if ncols == 2:
            if curve is not None and not curve.empty:
                draw_tau_curve(row[1], curve)
            else:
                row[1].text(0.5, 0.5, "no continuation policy", ha="center", va="center",
                            transform=row[1].transAxes)
                row[1].set_axis_off()
        if title and len(panels) == 1:
            fig.suptitle(title, fontsize=10)
        elif title and ncols == 1:
            row[0].set_title(f"{title}: evaluation split", fontsize=9)
    fig.legend(handles.values(), handles.keys(), loc="lower center", frameon=False,
               ncol=min(5, len(handles)), fontsize=7)
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 1))
    return fig


def pareto_row(panels: Sequence[tuple[str, pd.DataFrame]], width: float = 11.0,
               height: float = 3.6) -> Figure:
    """The results chapter's figure: one panel per ``(title, points)`` side by side, one legend
    for all of them under the panels, and each schedule's k written beside its own marker
    (above the learned line, below the uniform one) so that no label sits on a point."""
    fig, axes = plt.subplots(1, len(panels), figsize=(width, height), squeeze=False)
    handles: dict[str, Any] = {}
    for (title, points), ax in zip(panels, axes[0]):
        draw_points(ax, points, title, legend=False, k_labels=True)
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
        ax.set_ylabel("answer F1 (95 % interval)" if ax is axes[0][0] else "")
    fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=min(6, len(handles)),
               fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    return fig


def pareto_summary(points: pd.DataFrame) -> dict[str, Any]:
    """The numbers the issue's criteria read: the operating point against the always-continue
    schedule (k = 4) and against the best baseline, in F1 and in tokens."""
    out: dict[str, Any] = {}
    by = points.set_index("run") if not points.empty else None
    if by is None or OPERATING_POINT not in by.index:
        return out
    op = by.loc[OPERATING_POINT]
    out["operating_point"] = {"f1": op["f1"], "tokens": op["tokens"],
                              "early_stop": op["early_stop"], "n": int(op["n"])}
    if SCHEDULES[-1] in by.index:
        cont = by.loc[SCHEDULES[-1]]
        out["vs_always_continue"] = {"f1_diff": op["f1"] - cont["f1"],
                                     "token_ratio": op["tokens"] / cont["tokens"]}
    return out


def records_json(frame: pd.DataFrame) -> list[dict]:
    """Rows as dicts rounded to 6 decimals, a missing value as null (NaN is not JSON)."""
    return json.loads(frame.round(6).to_json(orient="records"))


def write_figure(dataset: str, generator: str, out_dir: Path) -> Path | None:
    """The figure of one dataset x reader and its numbers, or None without a continuation run."""
    if OPERATING_POINT not in run_names(dataset, generator, EXPERIMENTS_DIR):
        return None
    points = pareto_points(dataset, generator)
    policy = policy_path(dataset, generator, "-continuation", root=RESULTS)
    curve = tau_curve(Policy.load(policy)) if policy else None
    fig = pareto_figure(points, curve, f"{dataset}, {generator}")
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / f"pareto-{dataset}-{generator}.png"
    fig.savefig(png, dpi=110)
    atomic_write_json(png.with_suffix(".json"), {
        "dataset": dataset, "generator": generator, "points": records_json(points),
        "tau_curve": [] if curve is None else records_json(curve),
        "summary": pareto_summary(points), "command": "python -m dynakrag_lab.report.pareto"})
    return png


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lab.report.pareto",
                                 description="Write the cost/quality figure of every dataset x "
                                             "reader that has continuation runs.")
    ap.add_argument("--dataset", default=None)
    ap.add_argument("--generator", default=None)
    ap.add_argument("--out", default=str(RESULTS / "figures"))
    args = ap.parse_args(argv)
    written = 0
    for d in [args.dataset] if args.dataset else DATASETS:
        folder = EXPERIMENTS_DIR / d
        gens = [args.generator] if args.generator else \
            sorted(p.name for p in folder.iterdir()) if folder.exists() else []
        for g in gens:
            png = write_figure(d, g, Path(args.out))
            if png:
                print(png)
                written += 1
    if not written:
        print("no dataset has a dynakrag-cont run yet", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
