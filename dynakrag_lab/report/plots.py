"""Plots of results (chapters 9 and 12-14): the cost/quality curve of a λ sweep with its Pareto
front, the stop-rule sweeps per dataset, and paired per-question differences as a forest plot.
The concept figures of chapters 4-9 are :mod:`dynakrag_lab.report.figures`.

Each function returns a :class:`matplotlib.figure.Figure` built without pyplot, so nothing is
shown or kept in pyplot's global figure list; in a notebook, make the figure the last
expression of a cell (or ``display`` it) after ``import matplotlib.pyplot``.

* :func:`lambda_sweep_figure`: the cost/quality curve of
  :func:`~dynakrag_lab.studies.stop_rule.lambda_sweep` (mean tokens against F1, and SR), one
  annotated point per lambda, the Pareto front connected, baselines as separate markers
  (:func:`pareto_front` picks the front); :func:`annotate_lambdas` labels the points of any
  such curve on an axes of one's own, with labels of nearby points staggered apart
  (:func:`place_labels`);
* :func:`stop_rule_sweeps_figure`: the λ sweeps of ``python -m dynakrag_lab.studies.stop_rule``
  reports, one panel per dataset, F1 against tokens, one line per stop rule, the chosen λ
  ringed and the Pareto front of both rules marked (tidy rows from
  :func:`~dynakrag_lab.report.records.stop_rule_table`);
* :func:`stop_targets_figure`: section 9 of the control diagnosis, one panel per dataset, F1
  against tokens of each stop target's threshold sweep along the uniform paths, beside the
  random stop's curve;
* :func:`paired_forest_figure`: paired per-question differences as a forest plot, one row per
  comparison with its 95 % interval and n, coloured by verdict (rows of
  :func:`~dynakrag_lab.report.results.paired_table` or
  :func:`~dynakrag_lab.report.results.transfer_paired_table`).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Annotation

from .annotate import (LABEL_GAP, finite, annotate_lambdas, lambda_label, overlapping_labels,
                       pareto_front, place_labels)
from .comparison import A_BETTER, A_WORSE, NO_DIFFERENCE
from .records import stop_rule_table
from .results import is_partial
from .verdicts import pair_word

# -- the lambda sweep: cost against quality ----------------------------------------------
SWEEP_COLOR = "#3182bd"
BASELINE_MARKERS = ("s", "^", "D", "v", "P", "X", "h", "*")


def _sweep_rows(frame: Any, veto_threshold: float | None) -> list[dict]:
    """The rows of a lambda_sweep (or tune_continuation) frame, at one veto threshold."""
    rows = frame.to_dict("records") if hasattr(frame, "to_dict") else [dict(r) for r in frame]
    if not rows:
        raise ValueError("no sweep rows to draw")
    missing = {"lam", "tokens", "f1"} - set(rows[0])
    if missing:
        raise ValueError(f"sweep frame lacks column(s) {sorted(missing)}")
    if veto_threshold is not None:
        rows = [r for r in rows if math.isclose(float(r["veto_threshold"]), veto_threshold)]
        if not rows:
            raise ValueError(f"no row at veto_threshold={veto_threshold}")
    # a tune_continuation grid holds several thresholds: one lambda would be drawn twice
    thresholds = {float(r["veto_threshold"]) for r in rows if "veto_threshold" in r}
    if len(thresholds) > 1:
        raise ValueError(f"rows at {len(thresholds)} veto thresholds; pass veto_threshold=")
    return sorted(rows, key=lambda r: float(r["lam"]))


def lambda_sweep_figure(frame: Any,
                        baselines: Mapping[str, Sequence[float]] | None = None,
                        veto_threshold: float | None = None, show_sr: bool | None = None,
                        title: str | None = None) -> Figure:
    """The cost/quality (Pareto) curve of a lambda sweep.

    ``frame``: :func:`~dynakrag_lab.studies.stop_rule.lambda_sweep`'s DataFrame (or records)
    with ``lam``, ``tokens`` (mean total tokens per question), ``f1`` and optionally ``sr``,
    ``veto_threshold`` and ``best`` (the cross-validated choice, ringed). One panel plots F1
    against tokens, a second SR against tokens when ``sr`` is present (``show_sr`` forces it
    on or off). Every lambda is a point annotated with :func:`lambda_label` (lambdas on the
    same point share the label, and labels of nearby points are staggered so that none
    overlap: :func:`annotate_lambdas`); the points of :func:`pareto_front` are connected,
    cheapest first. ``baselines``: name -> (tokens, f1) or (tokens, f1, sr), drawn as
    distinct unconnected markers (on the SR panel only when they give an SR).
    ``veto_threshold`` selects one threshold of a
    :func:`~dynakrag_lite.training.tuning.tune_continuation` grid (required when the frame
    holds several).

    Artists carry gids for tests and callers: ``sweep:<metric>`` (all points),
    ``pareto:<metric>`` (the front line), ``baseline:<name>``, ``lambda:<metric>`` (the
    labels)."""
    rows = _sweep_rows(frame, veto_threshold)
    has_sr = all("sr" in r for r in rows)
    if show_sr and not has_sr:
        raise ValueError("show_sr=True but the frame has no 'sr' column")
    metrics = [("f1", "F1")] + ([("sr", "support recall (SR)")]
                                if (has_sr if show_sr is None else show_sr) else [])
    fig = Figure(figsize=(5.6 * len(metrics), 4.4))
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    baselines = dict(baselines or {})
    labelled = []  # (axes, points, lambdas, metric): labelled once the layout is known
    for ax, (metric, label) in zip(axes, metrics):
        # NaN rows (e.g. no answer F1 collected) cannot be placed; dropping them keeps the rest
        pts = [r for r in rows if finite(r["tokens"], r[metric])]
        xs = [float(r["tokens"]) for r in pts]
        ys = [float(r[metric]) for r in pts]
        ax.scatter(xs, ys, s=36, color=SWEEP_COLOR, zorder=3, gid=f"sweep:{metric}",
                   label="policy, one point per λ")
        front = pareto_front(list(zip(xs, ys)))
        ax.plot([xs[i] for i in front], [ys[i] for i in front], "-", color=SWEEP_COLOR,
                lw=1.6, zorder=2, gid=f"pareto:{metric}", label="Pareto front")
        labelled.append((ax, list(zip(xs, ys)), [float(r["lam"]) for r in pts], metric))
        for r, x, y in zip(pts, xs, ys):
            if r.get("best"):
                ax.scatter([x], [y], s=150, facecolors="none", edgecolors="#e6550d",
                           linewidths=1.6, zorder=4, gid=f"best:{metric}",
                           label="chosen by cross-validation")
        for k, (name, value) in enumerate(baselines.items()):
            col = 1 if metric == "f1" else 2
            if len(value) <= col or not finite(value[0], value[col]):
                continue  # this baseline gives no value for this panel's metric
            ax.scatter([float(value[0])], [float(value[col])], s=60, color="#636363",
                       marker=BASELINE_MARKERS[k % len(BASELINE_MARKERS)], zorder=3,
                       gid=f"baseline:{name}", label=name)
        ax.set_xlabel("mean tokens per question (cost)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7.5, loc="best")
    thr = {float(r["veto_threshold"]) for r in rows if "veto_threshold" in r}
    fig.suptitle(title or "cost/quality of the λ sweep"
                 + (f" (veto threshold τ={thr.pop():g})" if thr else ""), fontsize=10)
    # Labels are placed in display space, so the axes must have their final size first; the
    # labels then take room of their own, and a second layout can move the points closer
    # together, so placement is redone until a layout leaves them apart.
    fig.tight_layout()
    anns = [annotate_lambdas(ax, points, lams, gid=f"lambda:{metric}")
            for ax, points, lams, metric in labelled]
    for _ in range(3):
        fig.tight_layout()
        if not any(overlapping_labels(a) for a in anns):
            break
        for a in anns:
            place_labels(a)
    return fig


# One style per stop rule (policy.STOP_RULES): the paper's level rule as hollow squares, the
# gain rule as dots; another rule gets the fallback.
RULE_STYLES = {"level": {"color": "#e6550d", "marker": "s", "ms": 8.0, "mfc": "none",
                         "mew": 1.5},
               "gain": {"color": "#3182bd", "marker": "o", "ms": 5.0, "mew": 0.5}}
_RULE_FALLBACK = {"color": "#636363", "marker": "^", "ms": 6.0, "mew": 0.5}
RING_GROW, RING_WIDTH = 5.0, 1.8  # the ring around a chosen point: marker size + this, in pt
# a grey band with a halo on each front point (a front of one point still shows)
PARETO_STYLE = {"color": "#bdbdbd", "lw": 6.0, "alpha": 0.6, "solid_capstyle": "round",
                "marker": "o", "ms": 19.0, "mec": "none"}


def _stop_rule_rows(report: Any, dataset: str | None) -> tuple[list[dict], int | None]:
    """Tidy rows (results.stop_rule_table's columns) of a report or of a table given as is,
    and the number of training questions (the report's ``questions``; None if unknown)."""
    n_train = (report.get("questions") if isinstance(report, Mapping)
               else getattr(report, "attrs", {}).get("questions"))
    if isinstance(report, Mapping) and "rules" in report:
        rows = stop_rule_table(report, dataset=dataset).to_dict("records")
    else:
        rows = report.to_dict("records") if hasattr(report, "to_dict") else \
            [dict(r) for r in report]
        if dataset is not None:
            rows = [{**r, "dataset": dataset} for r in rows]
    if not rows:
        raise ValueError("a stop-rule table without rows")
    if len({r.get("dataset") for r in rows}) > 1:
        raise ValueError("a stop-rule table of several datasets: pass one per panel")
    missing = {"rule", "lam", "tokens", "f1", "chosen"} - set(rows[0])
    if missing:
        raise ValueError(f"stop-rule table lacks column(s) {sorted(missing)}")
    for rule in dict.fromkeys(r["rule"] for r in rows):
        taus = {float(r["veto_threshold"]) for r in rows
                if r["rule"] == rule and "veto_threshold" in r}
        if len(taus) > 1:  # one lambda would be drawn once per threshold
            raise ValueError(f"rule {rule!r} has rows at {len(taus)} veto thresholds; pass "
                             "the chosen threshold's rows (stop_rule_table's default)")
    return rows, (int(n_train) if n_train is not None else None)


def _leader_lines(anns: Sequence[Annotation], color: str, gid: str | None,
                  shrink: float) -> list[Annotation]:
    """A thin line from each label placed beyond the nearest spot (``place_labels`` moved it
    at least one label height away) to its point: an empty annotation, offset in points like
    the label, so it follows the label through any later resize. Its end is the label's
    anchored corner, the corner facing the point."""
    out = []
    for a in anns:
        dx, dy = a.xyann
        if abs(dy) <= LABEL_GAP + 0.5:  # the nearest spot: the label touches its point
            continue
        out.append(a.axes.annotate(
            "", a.xy, xytext=(dx, dy), textcoords="offset points", gid=gid,
            zorder=6, arrowprops={"arrowstyle": "-", "color": color, "lw": 0.7,
                                  "alpha": 0.9, "shrinkA": 0.5, "shrinkB": shrink}))
    return out


def stop_rule_sweeps_figure(reports: Sequence[Any], datasets: Sequence[str] | None = None,
                            title: str | None = None, ncols: int | None = None,
                            panel_size: tuple[float, float] = (4.8, 3.9)) -> Figure:
    """The λ sweeps of several datasets' stop-rule reports, one panel per dataset.

    ``reports``: per dataset, a ``python -m dynakrag_lab.studies.stop_rule`` report (the JSON,
    read) or its :func:`~.records.stop_rule_table`. Each panel plots the cross-validated F1 against mean
    tokens per question: one line per stop rule through its λ values in increasing order (at
    the veto threshold τ the rule chose, given in the panel title), every λ labelled by
    :func:`annotate_lambdas` (λ values on one point share the label; labels of both rules
    kept apart, inside the panel, off every marker and nearer to their own point than to
    any other, with a leader line when set apart), the chosen (λ, τ) of each rule ringed in
    its colour, and the :func:`pareto_front` of all of the panel's points, both rules
    together, drawn as a grey band with a halo on each front point. ``datasets`` overrides
    the panel names (default: each report's dataset). Panels fill ``ncols`` columns
    (default: two, one for a single report), row by row; the one legend of the figure takes a
    free panel slot if there is one (three datasets in a 2 x 2 grid), else a line under the
    panels; ``panel_size``: (width, height) of one panel in inches.

    Artists carry gids: ``sweep:<dataset>:<rule>`` (a rule's line and points),
    ``chosen:<dataset>:<rule>``, ``pareto:<dataset>``, ``lambda:<dataset>:<rule>`` (the
    labels), ``leader:<dataset>:<rule>`` (the lines to labels set apart from their points)."""
    if not reports:
        raise ValueError("no stop-rule reports to draw")
    if datasets is not None and len(datasets) != len(reports):
        raise ValueError(f"{len(datasets)} dataset names for {len(reports)} reports")
    tables = [_stop_rule_rows(rep, None if datasets is None else datasets[i])
              for i, rep in enumerate(reports)]
    ncols = max(1, min(ncols or 2, len(tables)))
    nrows = math.ceil(len(tables) / ncols)
    fig = Figure(figsize=(panel_size[0] * ncols, panel_size[1] * nrows + 0.5))
    grid = fig.subplots(nrows, ncols, squeeze=False)
    slots = [ax for row in grid for ax in row]
    axes, spare = slots[:len(tables)], slots[len(tables):]
    for ax in spare:
        ax.set_axis_off()
    labelled = []  # per axes: [(points, lambdas, options)], labelled once the layout is known
    for ax, (rows, n_train) in zip(axes, tables):
        name = str(rows[0].get("dataset") or "?")
        curves = {}
        for r in rows:
            if finite(r["tokens"], r["f1"]):
                curves.setdefault(r["rule"], []).append(r)
        every = [(float(r["tokens"]), float(r["f1"])) for c in curves.values() for r in c]
        front = pareto_front(every)
        ax.plot([every[i][0] for i in front], [every[i][1] for i in front], "-", zorder=1,
                gid=f"pareto:{name}", label="Pareto front (both rules)", **PARETO_STYLE)
        mine, taus, rings = [], [], []
        for k, (rule, c) in enumerate(curves.items()):
            c = sorted(c, key=lambda r: float(r["lam"]))
            st = RULE_STYLES.get(rule, _RULE_FALLBACK)
            xs, ys = [float(r["tokens"]) for r in c], [float(r["f1"]) for r in c]
            ax.plot(xs, ys, "-", lw=1.2, zorder=3 + k, gid=f"sweep:{name}:{rule}",
                    label=f"{rule} rule, one point per λ", **st)
            for r, x, y in zip(c, xs, ys):
                if r["chosen"]:
                    ax.plot([x], [y], linestyle="none", marker=st["marker"],
                            ms=st["ms"] + RING_GROW, mfc="none", mec=st["color"],
                            mew=RING_WIDTH, zorder=5, gid=f"chosen:{name}:{rule}",
                            label=f"{rule} rule: λ chosen by cross-validation")
                    rings.append((x, y, (st["ms"] + RING_GROW + RING_WIDTH) / 2))
            if "veto_threshold" in c[0]:
                taus.append(f"{rule} τ={float(c[0]['veto_threshold']):g}")
            half = (st["ms"] + st["mew"]) / 2  # the marker's half-width in points
            mine.append((list(zip(xs, ys)), [float(r["lam"]) for r in c], rule, st["color"],
                         half))
        scored = max((int(r.get("n_questions") or 0) for r in rows), default=0)
        ax.set_title(name + (f": F1 on {scored}" + (f" of {n_train}" if n_train else "")
                             + " training questions" if scored else "")
                     + ("\n" + ", ".join(taus) if taus else ""), fontsize=9)
        ax.set_xlabel("mean tokens per question (cost)")
        ax.set_ylabel("F1 (cross-validated)")
        ax.margins(x=0.12, y=0.28)
        ax.grid(alpha=0.3)
        jobs = []
        for j, (points, lams, rule, color, half) in enumerate(mine):
            # labels keep off every marker and ring of the panel, each by its own size
            others = [(x, y, m[4] + 0.2) for i, m in enumerate(mine) if i != j
                      for x, y in m[0]] + rings
            jobs.append((points, lams, {"color": color, "fontsize": 7.0, "below": j % 2 == 1,
                                        "clearance": half + 0.2, "avoid": others,
                                        "inside": True, "nearest": True,
                                        "gid": f"lambda:{name}:{rule}"}))
        labelled.append((ax, jobs))
    seen: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    order = sorted(seen, key=lambda lab: (not lab.startswith("Pareto"), lab))  # rule by rule
    # the front's halo is drawn big to show behind the rings; its legend entry needs less
    handles = [Line2D([], [], **{**PARETO_STYLE, "ms": 10.0}) if k.startswith("Pareto")
               else seen[k] for k in order]
    if spare:
        spare[0].legend(handles, order, loc="center", fontsize=8, frameon=False,
                        borderaxespad=0)
        rect = (0, 0, 1, 0.97)
    else:
        fig.legend(handles, order, loc="lower center", ncol=min(len(order), 3), fontsize=7.5,
                   frameon=False)
        rect = (0, 0.3 / fig.get_figheight() * (1 + (len(order) > 3)), 1, 0.97)
    fig.suptitle(title or "λ sweep per dataset: F1 against tokens (cross-validated replays)",
                 fontsize=10)
    # As in lambda_sweep_figure: place the labels once the axes have their final size, then
    # redo the placement until a layout leaves every panel's labels apart.
    fig.tight_layout(rect=rect)
    anns = [[annotate_lambdas(ax, points, lams, **opts) for points, lams, opts in jobs]
            for ax, jobs in labelled]
    for a in (a for panel in anns for per in panel for a in per):
        # over the lines, on a faint white ground: a line through a label leaves it readable
        a.set_zorder(7)
        a.set_bbox({"boxstyle": "square,pad=0.05", "fc": "white", "ec": "none", "alpha": 0.75})
    for _ in range(3):
        fig.tight_layout(rect=rect)
        if not any(overlapping_labels([a for per in panel for a in per]) for panel in anns):
            break
        for (ax, jobs), panel in zip(labelled, anns):
            for (_, _, opts), per in zip(jobs, panel):
                place_labels(per, below=opts["below"], clearance=opts["clearance"],
                             avoid=opts["avoid"], inside=True, nearest=True)
    for (ax, jobs), panel in zip(labelled, anns):
        for (_, _, opts), per in zip(jobs, panel):
            _leader_lines(per, opts["color"], opts["gid"].replace("lambda:", "leader:", 1),
                          shrink=opts["clearance"])
    return fig


# -- paired differences ------------------------------------------------------------------
# One colour per verdict of comparison.verdict ("A" is the run the differences start from).
VERDICT_COLORS = {A_BETTER: "tab:green", A_WORSE: "tab:red", NO_DIFFERENCE: "tab:gray"}


def paired_forest_figure(pairs: Any, label: str = "run",
                         metrics: Mapping[str, str] | None = None,
                         difference: str = "A minus B",
                         verdict_text: Mapping[str, str] | None = None,
                         status_columns: Sequence[str] = ("status",),
                         title: str | None = None, width: float = 5.5) -> Figure:
    """Paired per-question differences as a forest plot: one panel per metric, one row per
    comparison, its mean difference a dot and its 95 % paired bootstrap interval a line,
    coloured by verdict (:data:`VERDICT_COLORS`), with a dashed vertical line at 0.

    ``pairs``: rows of :func:`~.results.paired_table` or
    :func:`~.results.transfer_paired_table` (a DataFrame or records) with ``metric``, ``n``,
    ``diff``, ``lo``, ``hi``, ``verdict`` and the ``label`` column naming the comparison.
    Rows with ``n`` 0 (a pair not made yet, so without numbers) are left out. Rows keep the
    order of their labels' first appearance, the first on top; each tick reads
    ``<label> (n=<n>)``, plus ", partial" when a column of ``status_columns`` holds a
    partial :func:`~.results.status_label`. ``metrics``: metric -> axis name (default F1
    only); ``difference`` names the subtraction on the x axis; ``verdict_text``: the words
    per verdict of the legend under the panels; ``width``: inches per panel.

    Artists carry gids: ``interval:<metric>:<label>``, ``diff:<metric>:<label>`` and
    ``zero:<metric>``."""
    metrics = dict(metrics or {"f1": "F1"})
    records = pairs.to_dict("records") if hasattr(pairs, "to_dict") else [dict(r) for r in pairs]
    rows = [r for r in records if r["metric"] in metrics and finite(r["n"]) and int(r["n"]) > 0]
    if not rows:
        raise ValueError("no paired rows (n > 0) of the metrics to draw")
    by_key: dict[tuple[str, str], dict] = {}
    for r in rows:
        key = (r["metric"], str(r[label]))
        if key in by_key:  # two rows on one tick would hide each other
            raise ValueError(f"label {key[1]!r} names two {key[0]} rows")
        by_key[key] = r
    names = list(dict.fromkeys(str(r[label]) for r in rows))
    ticks = {}
    for r in rows:  # n and partiality of a comparison do not depend on the metric
        partial = any(is_partial(r.get(c, "")) for c in status_columns)
        ticks.setdefault(str(r[label]), f"{r[label]} (n={int(r['n'])}"
                                        f"{', partial' if partial else ''})")
    ys = list(range(len(names)))[::-1]  # the first row on top
    fig = Figure(figsize=(width * len(metrics), 1.6 + 0.45 * len(names)))
    axes = fig.subplots(1, len(metrics), sharey=True, squeeze=False)[0]
    for ax, (metric, axis_name) in zip(axes, metrics.items()):
        for y, name in zip(ys, names):
            r = by_key.get((metric, name))
            if r is None or not finite(r["diff"], r["lo"], r["hi"]):
                continue  # this comparison has no number for this metric
            color = VERDICT_COLORS.get(r["verdict"], "tab:gray")
            ax.plot([float(r["lo"]), float(r["hi"])], [y, y], "-", color=color, lw=2.4,
                    gid=f"interval:{metric}:{name}")
            ax.plot([float(r["diff"])], [y], "o", color=color, ms=6,
                    gid=f"diff:{metric}:{name}")
        ax.axvline(0, color="black", lw=1, ls="--", gid=f"zero:{metric}")
        ax.set_yticks(ys, [ticks[name] for name in names])
        ax.set_ylim(-0.6, len(names) - 0.4)
        ax.set_xlabel(f"{axis_name}: {difference}")
        ax.set_title(f"{axis_name}, 95% paired bootstrap interval", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    words = dict(verdict_text or {})
    # under the panels, so that it never covers a row
    fig.legend([Line2D([], [], color=c, marker="o", lw=2.4) for c in VERDICT_COLORS.values()],
               [words.get(v, pair_word(v)) for v in VERDICT_COLORS], fontsize=8,
               loc="lower center", ncol=len(VERDICT_COLORS), frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1))
    return fig


__all__ = ["VERDICT_COLORS", "annotate_lambdas", "lambda_label", "lambda_sweep_figure",
           "overlapping_labels", "paired_forest_figure", "pareto_front", "place_labels",
           "stop_rule_sweeps_figure"]


# -- stop targets (control diagnosis, section 9) ------------------------------------------
STOP_TARGET_STYLE = {"sr": ("#636363", "o"), "f1": ("#3182bd", "s"),
                     "f1_best": ("#31a354", "^"), "f1_now": ("#e6550d", "D")}


def stop_targets_figure(report: Mapping[str, Any], reader: str, pooled: bool = False,
                        width: float = 4.2) -> Figure:
    """One panel per dataset of ``reader`` in a ``control-diagnosis-stop.json`` report: F1
    against mean tokens as each target's threshold sweeps from "stop at the first prefix" to
    "always continue" (``pooled``: the forests trained with the other datasets too), with the
    random stop (continue with probability c) as a dashed line; the operating point of each
    target ringed."""
    keys = [k for k, r in report["results"].items() if k.endswith("/" + reader)
            and "targets" in r["stop_targets"]]
    if not keys:
        raise ValueError(f"no stop-target results for reader {reader!r}")
    fig = Figure(figsize=(width * len(keys), 3.6), layout="constrained")
    axes = fig.subplots(1, len(keys), squeeze=False)[0]
    label = "pooled" if pooled else "own"
    for ax, key in zip(axes, keys):
        st = report["results"][key]["stop_targets"]
        rnd = st["random_curve"]
        ax.plot([p["tokens"] for p in rnd], [p["f1"] for p in rnd], "--", color="black",
                lw=1, label="random stop")
        for name, t in st["targets"].items():
            target, kind = name.split("/")
            if kind != label:
                continue
            color, marker = STOP_TARGET_STYLE.get(target, ("#756bb1", "x"))
            c = t["curve"]
            ax.plot([p["tokens"] for p in c], [p["f1"] for p in c], marker=marker, ms=3,
                    lw=1, color=color, label=target)
            op = t["operating_point"]
            if op:
                ax.plot([op["tokens"]], [op["f1"]], "o", ms=10, mfc="none", color=color)
        ax.set_title(f"{key.split('/')[0]} ({st['n_questions']} questions)")
        ax.set_xlabel("mean tokens (ledger + answer call)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("answer F1")
    axes[-1].legend(fontsize=8, loc="best")
    return fig
