"""Concept figures for the book, drawn with matplotlib from the library's own definitions.

Each function returns a :class:`matplotlib.figure.Figure` built without pyplot, so nothing is
shown or kept in pyplot's global figure list; in a notebook, make the figure the last
expression of a cell (or ``display`` it) after ``import matplotlib.pyplot``. No function here
calls a generator or a retriever: the drawings read the action names (:mod:`.state`), the
fields of :class:`~.state.EvidenceState`, training samples that were already collected, and
the real :func:`~.validity.valid_actions` evaluated on states passed in (or on the small
hand-built states of :func:`validity_cases`).

* :func:`control_loop_figure`: Algorithm 1 as a diagram (validity layer, value and cost
  models, continuation veto, the seven actions, terminal compression);
* :func:`evidence_state_figure`: the fields of the evidence state, grouped, with an optional
  concrete state and the frontier cursor on its initial ranking;
* :func:`branching_tree_figure`: one question's rollout with its counterfactual branches and
  their Eq. 1 labels (from :func:`~.trajectories.collect_question`);
* :func:`validity_grid_figure`: actions x states, valid or not, from ``valid_actions``;
* :func:`lambda_sweep_figure`: the cost/quality curve of :func:`~.policy.lambda_sweep` (mean
  tokens against F1, and SR), one annotated point per lambda, the Pareto front connected,
  baselines as separate markers (:func:`pareto_front` picks the front);
  :func:`annotate_lambdas` labels the points of any such curve on an axes of one's own, with
  labels of nearby points staggered apart (:func:`place_labels`);
* :func:`stop_rule_sweeps_figure`: the λ sweeps of ``data_scripts/stop_rule.py`` reports, one
  panel per dataset, F1 against tokens, one line per stop rule, the chosen λ ringed and the
  Pareto front of both rules marked (tidy rows from :func:`~.results.stop_rule_table`);
* :func:`paired_forest_figure`: paired per-question differences as a forest plot, one row per
  comparison with its 95 % interval and n, coloured by verdict (rows of
  :func:`~.results.paired_table` or :func:`~.results.transfer_paired_table`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import replace
import math
from typing import Any, Callable, Iterable, Mapping, Sequence

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox

from .config import ControlConfig
from .state import (ACTIONS, RETRIEVAL_ACTIONS, EvidenceState, Ledger, RankedEntry,
                    RetrievedDoc, Sufficiency, initial_state)
from .validity import valid_actions

# One colour per kind of action, used by every figure.
KIND_COLORS = {"acquisition": "#3182bd", "control": "#e6550d", "terminal": "#756bb1"}


def action_kind(action: str) -> str:
    """'acquisition' (the four retrieval actions), 'terminal' (compression) or 'control'."""
    if action in RETRIEVAL_ACTIONS:
        return "acquisition"
    if action == "compress_answer_evidence":
        return "terminal"
    return "control"


# -- drawing helpers ---------------------------------------------------------------------
def _box(ax, x, y, w, h, text, face="#f7f7f7", edge="#444444", fontsize=9, lw=1.2,
         weight="normal", family=None, ha="center"):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                                facecolor=face, edgecolor=edge, linewidth=lw))
    tx = x + w / 2 if ha == "center" else x + 0.12
    ax.text(tx, y + h / 2, text, ha=ha, va="center", fontsize=fontsize, weight=weight,
            family=family, wrap=False)


def _arrow(ax, start, end, text="", rad=0.0, color="#444444", lw=1.3, fontsize=8,
           text_offset=(0.0, 0.0), ls="-"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color=color,
                                 linewidth=lw, linestyle=ls,
                                 connectionstyle=f"arc3,rad={rad}"))
    if text:
        mx = (start[0] + end[0]) / 2 + text_offset[0]
        my = (start[1] + end[1]) / 2 + text_offset[1]
        ax.text(mx, my, text, ha="center", va="center", fontsize=fontsize, color=color,
                bbox=dict(facecolor="white", edgecolor="none", pad=1.0))


def _blank_axes(fig, xlim, ylim, rect=(0, 0, 1, 1)):
    ax = fig.add_axes(rect)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_axis_off()
    return ax


def _short(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


# -- 1. the control loop -----------------------------------------------------------------
def control_loop_figure(lam: str = r"\lambda", tau: str = r"\tau") -> Figure:
    """Algorithm 1: s_t -> A(s_t) -> argmax v - lambda c (with the stop veto) -> execute ->
    s_{t+1}; stop_answer leads to compress_answer_evidence and the answer.

    The action list is read from :data:`~.state.ACTIONS`, so a new action appears here."""
    fig = Figure(figsize=(11, 6.2))
    ax = _blank_axes(fig, (0, 12), (-0.4, 7.0))

    # top row: where the numbers come from
    _box(ax, 0.2, 5.5, 2.6, 1.1, "question $q$\n$s_0$ = initial_state($q$)", face="#ffffff")
    _box(ax, 3.3, 5.5, 2.6, 1.1, "value model $v(s,a)$\nrandom forest on $\\phi(s,a)$",
         face="#e5f5e0")
    _box(ax, 6.4, 5.5, 2.6, 1.1, f"cost model $c(s,a)$\ntokens, weight ${lam}$",
         face="#fee6ce")
    _box(ax, 9.3, 5.5, 2.5, 1.1, f"continuation model\n$g(s) > {tau}$: veto stop_answer",
         face="#fde0dd")

    # middle row: the loop
    _box(ax, 0.2, 3.0, 2.6, 1.6, "\ndocs, frontier, query,\ngap, sufficiency, bridges,\n"
         "history, cost ledger", face="#deebf7", fontsize=8.5)
    ax.text(1.5, 4.33, "evidence state $s_t$", ha="center", va="center", fontsize=9,
            weight="bold")
    _box(ax, 3.3, 3.3, 2.6, 1.0, "validity layer\n$A(s_t)$ = valid_actions($s_t$)",
         face="#f0f0f0")
    _box(ax, 6.4, 3.3, 2.6, 1.0, "select\n$a^* = \\mathrm{argmax}_{a \\in A(s_t)}\\,"
         f"v - {lam}\\, c$", face="#f0f0f0")
    _box(ax, 9.3, 3.3, 2.5, 1.0, "execute $a^*$\n(one atomic action)", face="#f0f0f0")

    _arrow(ax, (1.5, 5.5), (1.5, 4.62))
    _arrow(ax, (2.82, 3.8), (3.28, 3.8))
    _arrow(ax, (5.92, 3.8), (6.38, 3.8))
    _arrow(ax, (9.02, 3.8), (9.28, 3.8))
    _arrow(ax, (4.6, 5.5), (7.2, 4.32), rad=0.0)
    _arrow(ax, (7.7, 5.5), (7.7, 4.32))
    _arrow(ax, (10.5, 5.5), (8.3, 4.32), color="#cb181d", text="removes stop_answer",
           text_offset=(0.35, 0.05), fontsize=7)
    _arrow(ax, (9.5, 3.28), (1.5, 2.98), rad=-0.18,
           text="new immutable state $s_{t+1}$, repeat", text_offset=(0.0, -0.62))

    # the seven actions, grouped by kind
    ax.text(9.3, 2.72, f"the atomic actions ({len(ACTIONS)})", fontsize=8.5, weight="bold",
            va="bottom")
    y = 2.45
    positions = {}
    for a in ACTIONS:
        kind = action_kind(a)
        ax.add_patch(Rectangle((9.3, y - 0.13), 0.18, 0.26, color=KIND_COLORS[kind]))
        ax.text(9.58, y, a, fontsize=8, va="center", family="monospace")
        positions[a] = y
        y -= 0.36
    for i, (kind, color) in enumerate(KIND_COLORS.items()):
        ax.add_patch(Rectangle((0.25 + 1.6 * i, -0.3), 0.18, 0.22, color=color))
        ax.text(0.5 + 1.6 * i, -0.19, kind, fontsize=7.5, va="center")

    # the exit: stop, compress, answer
    _box(ax, 3.6, 0.25, 4.6, 0.8, "stop_answer (chosen, or a cap leaves nothing else)\n"
         "→ compress_answer_evidence → answer", face="#efedf5", fontsize=8)
    _arrow(ax, (9.25, positions["stop_answer"]), (8.22, 0.75), rad=0.15, text="stopped",
           text_offset=(0.15, 0.15), fontsize=7)
    return fig


# -- 2. the evidence state ---------------------------------------------------------------
STATE_GROUPS: dict[str, tuple[str, ...]] = {
    "question and query": ("question", "qid", "query"),
    "evidence": ("docs", "initial_ranking", "frontier"),
    "sufficiency probe": ("gap", "sufficiency"),
    "bridge entities": ("bridge_candidates", "expanded_bridges"),
    "history and cost": ("history", "ledger", "stopped", "stop_reason"),
}
NEVER_IN_STATE = ("gold answers", "supporting-document labels", "support recall SR(s)",
                  "answer scores (EM, F1)")


def _derived_views() -> list[str]:
    return [n for n, v in vars(EvidenceState).items() if isinstance(v, property)]


def summarize_field(name: str, value: Any, width: int = 46) -> str:
    """A one-line description of a state field's value (display only)."""
    if value is None:
        return "None"
    if name == "docs":
        return _short(f"{len(value)}: " + ", ".join(d.title for d in value), width) \
            if value else "()"
    if name == "initial_ranking":
        return f"{len(value)} ranked entries"
    if name == "sufficiency":
        verdict = "sufficient" if value.sufficient else "insufficient"
        return _short(f"{verdict}" + (f", gap {value.gap!r}" if value.gap else ""), width)
    if name == "ledger":
        return (f"{value.tokens} tokens, {value.llm_calls} LLM calls, "
                f"{value.retrieval_calls} retrievals")
    if isinstance(value, tuple):
        return _short(", ".join(map(str, value)), width) if value else "()"
    if isinstance(value, str):
        return _short(repr(value), width)
    return str(value)


def evidence_state_figure(state: EvidenceState | None = None,
                          gold: Sequence[str] | None = None, max_ranked: int = 15) -> Figure:
    """The fields of :class:`EvidenceState` in five groups (read from the dataclass, so a new
    field shows up under "other"), what is never in a state, and the initial ranking with
    its frontier cursor.

    With ``state`` the value of each field is printed and the ranking strip shows that
    state's ranking (filled: in ``docs``). ``gold`` (titles, from outside the state, for
    display only) marks gold entries with a star."""
    from .data.corpus import normalize_title

    names = [f.name for f in dataclasses.fields(EvidenceState)]
    groups = {g: tuple(n for n in ns if n in names) for g, ns in STATE_GROUPS.items()}
    grouped = {n for ns in groups.values() for n in ns}
    other = tuple(n for n in names if n not in grouped)
    if other:
        groups["other"] = other

    fig = Figure(figsize=(11, 6.4))
    top = _blank_axes(fig, (0, 12), (0, 6.2), rect=(0.0, 0.3, 1.0, 0.7))
    title = "evidence state $s_t$" + (f": {_short(state.question, 70)}" if state else "")
    top.text(0.2, 6.0, title, fontsize=10, weight="bold", va="top")
    cols = [(0.2, 5.45), (6.1, 5.45)]
    col_y = {0: cols[0][1], 1: cols[1][1]}
    line_h = 0.36
    for i, (g, fields) in enumerate(groups.items()):
        c = 0 if col_y[0] >= col_y[1] else 1
        x, y = cols[c][0], col_y[c]
        h = 0.42 + line_h * len(fields)
        top.add_patch(FancyBboxPatch((x, y - h), 5.6, h,
                                     boxstyle="round,pad=0.02,rounding_size=0.1",
                                     facecolor="#deebf7", edgecolor="#3182bd", linewidth=1))
        top.text(x + 0.12, y - 0.2, g, fontsize=8.5, weight="bold", va="center")
        for j, n in enumerate(fields):
            yy = y - 0.42 - line_h * j - 0.12
            top.text(x + 0.25, yy, n, fontsize=8, family="monospace", va="center")
            if state is not None:
                top.text(x + 2.35, yy, summarize_field(n, getattr(state, n)), fontsize=7.5,
                         va="center", color="#08306b")
        col_y[c] = y - h - 0.2
    # derived views and the never-in-state box, under the shorter column
    c = 0 if col_y[0] >= col_y[1] else 1
    x, y = cols[c][0], col_y[c]
    top.text(x + 0.12, y - 0.15, "derived views (properties): " + ", ".join(_derived_views()),
             fontsize=7.5, va="center", style="italic")
    y -= 0.45
    h = 0.42 + 0.3 * len(NEVER_IN_STATE)
    top.add_patch(FancyBboxPatch((x, y - h), 5.6, h,
                                 boxstyle="round,pad=0.02,rounding_size=0.1",
                                 facecolor="#fee0d2", edgecolor="#cb181d", linewidth=1,
                                 linestyle="--"))
    top.text(x + 0.12, y - 0.2, "never in a state (metrics and training targets only)",
             fontsize=8.5, weight="bold", va="center", color="#a50f15")
    for j, n in enumerate(NEVER_IN_STATE):
        top.text(x + 0.25, y - 0.47 - 0.3 * j, "✗ " + n, fontsize=8, va="center",
                 color="#a50f15")

    # bottom: the initial ranking and the frontier cursor
    bot = _blank_axes(fig, (-0.5, max_ranked + 6), (-1.6, 1.6), rect=(0.02, 0.0, 0.96, 0.3))
    if state is not None and state.initial_ranking:
        entries = list(state.initial_ranking[:max_ranked])
        total, frontier = len(state.initial_ranking), state.frontier
        in_docs = set(state.doc_ids)
        others = [d for d in state.docs if d.id not in {e.id for e in state.initial_ranking}]
    else:  # schematic: a ranking of 12 shown, 3 read
        entries = [RankedEntry(f"e{i}", f"entry {i}", "", 1.0 - i / 20) for i in range(12)]
        total, frontier = 50, 3
        in_docs = {f"e{i}" for i in range(3)}
        others = []
    gold_keys = {normalize_title(t) for t in gold} if gold else set()
    bot.text(-0.45, 1.3, f"initial ranking of the question ({total} entries; first "
             f"{len(entries)} shown). Filled: in docs. The frontier marks how far "
             "retrieve_more has read.", fontsize=8, va="center")
    for i, e in enumerate(entries):
        read = e.id in in_docs
        bot.add_patch(Rectangle((i, -0.4), 0.85, 0.8, facecolor="#3182bd" if read else "white",
                                edgecolor="#3182bd"))
        bot.text(i + 0.42, -0.62, str(i + 1), fontsize=6.5, ha="center", va="top")
        if normalize_title(e.title) in gold_keys:
            bot.text(i + 0.42, 0.0, "★", fontsize=10, ha="center", va="center",
                     color="#fdae6b" if read else "#e6550d")
    fx = min(frontier, len(entries)) - 0.075
    bot.add_patch(FancyArrowPatch((fx, 1.0), (fx, 0.45), arrowstyle="-|>", mutation_scale=12,
                                  color="#cb181d", linewidth=1.5))
    bot.text(fx + 0.1, 0.85, f"frontier = {frontier}", fontsize=8, color="#cb181d",
             va="center")
    if others:
        x0 = len(entries) + 1
        bot.text(x0, -1.25, "docs from other actions", fontsize=7.5, va="center")
        for j, d in enumerate(others[:5]):
            bot.add_patch(Rectangle((x0 + j, -0.4), 0.85, 0.8,
                                    facecolor=KIND_COLORS["acquisition"], alpha=0.55,
                                    edgecolor="#3182bd"))
            if normalize_title(d.title) in gold_keys:
                bot.text(x0 + j + 0.42, 0.0, "★", fontsize=10, ha="center", va="center",
                         color="#e6550d")
    if gold_keys:
        bot.text(-0.45, -1.25, "★ gold supporting document (known outside the state, "
                 "shown for the reader only)", fontsize=7.5, va="center", color="#e6550d")
    return fig


# -- 3. the counterfactual branching tree -------------------------------------------------
def _sample_rows(samples: Any, qid: str | None) -> list[dict]:
    """Rows with qid, step, action, target, chosen from TrainingData, Samples or a frame."""
    if hasattr(samples, "samples"):  # TrainingData
        samples = samples.samples
    if hasattr(samples, "to_dict") and hasattr(samples, "columns"):  # a pandas DataFrame
        rows = samples.to_dict("records")
    else:
        rows = [dict(qid=getattr(s, "qid", ""), step=s.step, action=s.action,
                     target=float(s.target), chosen=bool(s.chosen))
                if not isinstance(s, dict) else s for s in samples]
    if not rows:
        raise ValueError("no samples to draw")
    if "qid" in rows[0]:
        qid = qid if qid is not None else rows[0]["qid"]
        rows = [r for r in rows if r.get("qid") == qid]
    return rows


def branching_tree_figure(samples: Any, qid: str | None = None, title: str | None = None,
                          cmap: str = "viridis") -> Figure:
    """One rollout with its counterfactual branches (chapter 7).

    ``samples``: a :class:`~.trajectories.TrainingData`, a list of
    :class:`~.trajectories.Sample` (e.g. from ``collect_question``) or their
    ``to_frame()``; one question is drawn (``qid``, default the first). Each visited state
    s_t is a node on the left; every valid action tried from it is a box on its row, coloured
    by its Eq. 1 label; the action the rollout continued with has a thick border and leads
    to s_{t+1}. SR(s_t), when shown, is the state's stop_answer label (SR(s))."""
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    rows = _sample_rows(samples, qid)
    steps = sorted({int(r["step"]) for r in rows})
    by_step = {t: [r for r in rows if int(r["step"]) == t] for t in steps}
    width = max(len(v) for v in by_step.values())
    fig = Figure(figsize=(3.0 + 2.05 * width, 0.3 + 1.05 * len(steps) + 0.6))
    ax = _blank_axes(fig, (-0.5, 1.6 + 2.05 * width), (-len(steps) + 0.2, 1.1),
                     rect=(0.0, 0.0, 1 - 1.2 / (3.0 + 2.05 * width), 1.0))
    cm = colormaps[cmap]
    norm = Normalize(vmin=min(0.0, min(float(r["target"]) for r in rows)), vmax=1.0)
    ax.text(-0.45, 0.85, title or "counterfactual branches: every valid action from every "
            "visited state, labelled by Eq. 1", fontsize=9, weight="bold", va="center")
    for i, t in enumerate(steps):
        y = -i
        stop = [r for r in by_step[t] if r["action"] == "stop_answer"]
        ax.add_patch(FancyBboxPatch((-0.35, y - 0.25), 0.9, 0.5,
                                    boxstyle="round,pad=0.02,rounding_size=0.2",
                                    facecolor="#deebf7", edgecolor="#08519c"))
        ax.text(0.1, y + 0.06, f"$s_{{{t}}}$", ha="center", va="center", fontsize=10)
        if stop:
            ax.text(0.1, y - 0.15, f"SR {float(stop[0]['target']):.2f}", ha="center",
                    va="center", fontsize=6.5)
        order = {a: k for k, a in enumerate(ACTIONS)}
        branch = sorted(by_step[t], key=lambda r: order.get(r["action"], 99))
        for j, r in enumerate(branch):
            x = 1.0 + 2.05 * j
            v = float(r["target"])
            face = cm(norm(v))
            dark = norm(v) < 0.55 if cmap == "viridis" else False
            chosen = bool(r["chosen"])
            ax.add_patch(FancyArrowPatch((0.56, y), (x - 0.02, y), arrowstyle="-",
                                         color="#08519c" if chosen else "#aaaaaa",
                                         linewidth=2.0 if chosen else 0.8,
                                         linestyle="-" if chosen else ":",
                                         connectionstyle="arc3,rad=0.0",
                                         zorder=0.5 if not chosen else 0.6))
            ax.add_patch(FancyBboxPatch((x, y - 0.3), 1.85, 0.6,
                                        boxstyle="round,pad=0.02,rounding_size=0.08",
                                        facecolor=face, edgecolor="#08306b" if chosen
                                        else "#888888", linewidth=2.4 if chosen else 0.8,
                                        zorder=2))
            ax.text(x + 0.925, y + 0.1, r["action"], ha="center", va="center", fontsize=7,
                    family="monospace", color="white" if dark else "black", zorder=3)
            ax.text(x + 0.925, y - 0.14, f"v = {v:.2f}" + ("  (taken)" if chosen else ""),
                    ha="center", va="center", fontsize=7, zorder=3,
                    color="white" if dark else "black", weight="bold" if chosen else "normal")
        nxt = [r for r in branch if r["chosen"]]
        if nxt and i + 1 < len(steps):
            ax.add_patch(FancyArrowPatch((0.1, y - 0.27), (0.1, y - 1 + 0.27),
                                         arrowstyle="-|>", mutation_scale=11,
                                         color="#08519c", linewidth=1.6))
    ax.text(-0.45, -len(steps) + 0.35, "thick border: the action the rollout took (the path "
            "$\\tau$); dotted: counterfactual branches, executed only to label them; "
            "colour: the Eq. 1 label $v$", fontsize=7.5, va="center")
    from matplotlib.cm import ScalarMappable
    w, h = fig.get_size_inches()
    cax = fig.add_axes((1 - 1.05 / w, 0.25, 0.12 / w, 0.5))
    fig.colorbar(ScalarMappable(norm=norm, cmap=cm), cax=cax).set_label("label $v$",
                                                                       fontsize=8)
    cax.tick_params(labelsize=7)
    return fig


# -- 4. the validity grid ----------------------------------------------------------------
def _doc(i: int, source: str = "retrieve_more", step: int = 0) -> RetrievedDoc:
    return RetrievedDoc(f"d{i}", f"Document {i}", f"text of document {i}", 0.9 - i / 20,
                        source, step)


def validity_cases(question: str = "In which town was the founder of Velmora Records born?"
                   ) -> list[tuple[str, EvidenceState, ControlConfig]]:
    """Small hand-built states, each isolating one condition of the validity rules, with the
    configuration to judge it under. No retriever or generator is involved: the states are
    built with ``dataclasses.replace`` the way the actions would build them."""
    cfg = ControlConfig()
    s0 = initial_state(question, "example")
    ranking = tuple(RankedEntry(f"d{i}", f"Document {i}", "", 0.9 - i / 20) for i in range(50))
    docs3 = tuple(_doc(i) for i in range(3))
    s1 = replace(s0, docs=docs3, initial_ranking=ranking, frontier=3,
                 history=("retrieve_more",), ledger=Ledger(retrieval_calls=1))
    bridge = replace(s1, bridge_candidates=("Orlen Vasko",))
    probed = replace(bridge, history=bridge.history + ("sufficiency_check",),
                     sufficiency=Sufficiency(True, "", "SUFFICIENT", True, bridge.doc_ids),
                     ledger=replace(bridge.ledger, llm_calls=1))
    gap = replace(probed, gap="birthplace of Orlen Vasko",
                  sufficiency=Sufficiency(False, "birthplace of Orlen Vasko",
                                          "INSUFFICIENT: birthplace of Orlen Vasko", True,
                                          bridge.doc_ids))
    docs6 = docs3 + tuple(_doc(i, "gap_query", 2) for i in range(3, 6))
    new_docs = replace(gap, docs=docs6, gap="", history=gap.history + ("gap_query",),
                       expanded_bridges=(), ledger=replace(gap.ledger, retrieval_calls=2))
    exhausted = replace(s1, frontier=len(ranking))
    capped_steps = replace(new_docs, history=new_docs.history + ("retrieve_more",))
    full = replace(s1, docs=tuple(_doc(i) for i in range(9)), frontier=9,
                   history=("retrieve_more",) * 3, ledger=Ledger(retrieval_calls=3))
    stopped = replace(new_docs, stopped=True, history=new_docs.history + ("stop_answer",))
    done = replace(stopped, history=stopped.history + ("compress_answer_evidence",))
    return [
        ("$s_0$: question only", s0, cfg),
        ("3 docs read", s1, cfg),
        ("+ bridge candidate", bridge, cfg),
        ("probed: sufficient", probed, cfg),
        ("probed: gap written", gap, cfg),
        ("new docs since probe", new_docs, cfg),
        ("ranking exhausted", exhausted, cfg),
        ("retrieval cap 1 spent", bridge, replace(cfg, retrieval_cap=1)),
        ("sufficiency disabled", bridge, replace(cfg, use_sufficiency=False)),
        ("4 steps (cap)", capped_steps, cfg),
        ("document cap (max_docs=9)", full, replace(cfg, max_docs=9)),
        ("after stop_answer", stopped, cfg),
        ("after compression", done, cfg),
    ]


def validity_grid_figure(cases: Iterable[tuple], cfg: ControlConfig | None = None,
                         actions: Sequence[str] = ACTIONS, title: str | None = None,
                         rule: Callable[[EvidenceState, ControlConfig], Sequence[str]]
                         = valid_actions) -> Figure:
    """Actions x states: a filled cell where the validity rule allows the action.

    ``cases``: (label, state) or (label, state, config) tuples; a case without a config is
    judged under ``cfg`` (default :class:`ControlConfig`). The cells are computed here by
    ``rule`` (default: the library's :func:`~.validity.valid_actions`; pass your own A(s) to
    draw a modified layer), never typed in."""
    cfg = cfg or ControlConfig()
    cases = [(c[0], c[1], c[2] if len(c) > 2 and c[2] is not None else cfg) for c in cases]
    if not cases:
        raise ValueError("no cases to draw")
    width = 2.3 + 0.72 * len(cases)
    height = 2.3 + 0.4 * len(actions)
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((2.1 / width, 1.75 / height, 1 - 2.2 / width, 1 - 2.2 / height))
    n_rows, n_cols = len(actions), len(cases)
    for j, (label, state, c) in enumerate(cases):
        valid = set(rule(state, c))
        for i, a in enumerate(actions):
            ok = a in valid
            color = KIND_COLORS[action_kind(a)] if ok else "#f4f4f4"
            ax.add_patch(Rectangle((j, i), 1, 1, facecolor=color, edgecolor="white",
                                   linewidth=1.5, alpha=0.85 if ok else 1.0))
            ax.text(j + 0.5, i + 0.5, "✓" if ok else "·", ha="center", va="center",
                    fontsize=10 if ok else 8, color="white" if ok else "#bbbbbb")
    ax.set_xlim(0, n_cols)
    ax.set_ylim(n_rows, 0)
    ax.set_yticks([i + 0.5 for i in range(n_rows)], list(actions), fontsize=8,
                  family="monospace")
    ax.set_xticks([j + 0.5 for j in range(n_cols)], [c[0] for c in cases], fontsize=7.5,
                  rotation=40, ha="right")
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title(title or "$A(s)$: which actions the validity layer allows in each state",
                 fontsize=9.5)
    return fig


def validity_matrix(cases: Iterable[tuple], cfg: ControlConfig | None = None,
                    actions: Sequence[str] = ACTIONS,
                    rule: Callable[[EvidenceState, ControlConfig], Sequence[str]]
                    = valid_actions) -> list[list[bool]]:
    """The booleans :func:`validity_grid_figure` draws (rows: actions, columns: cases)."""
    cfg = cfg or ControlConfig()
    cols = [set(rule(c[1], c[2] if len(c) > 2 and c[2] is not None else cfg)) for c in cases]
    return [[a in col for col in cols] for a in actions]


# -- 5. the lambda sweep: cost against quality -------------------------------------------
SWEEP_COLOR = "#3182bd"
BASELINE_MARKERS = ("s", "^", "D", "v", "P", "X", "h", "*")


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (cost, quality): none is at most as
    costly and at least as good while strictly better in one of the two. Sorted by cost,
    then by quality descending, then by index (ties: equal points are all kept)."""
    def dominated(i: int) -> bool:
        ci, qi = points[i]
        return any(cj <= ci and qj >= qi and (cj < ci or qj > qi)
                   for j, (cj, qj) in enumerate(points) if j != i)
    keep = [i for i in range(len(points)) if not dominated(i)]
    return sorted(keep, key=lambda i: (points[i][0], -points[i][1], i))


def lambda_label(*lams: float) -> str:
    """The annotation of one sweep point, e.g. ``λ=0``, ``λ=3e-05``, ``λ=0.001``; lambdas
    that land on the same point share one label (``λ=0, 1e-05``)."""
    return "λ=" + ", ".join(f"{float(lam):g}" for lam in lams)


LABEL_COLOR = "#08306b"


def annotate_lambdas(ax: Axes, points: Iterable[tuple[float, float]], lams: Iterable[float],
                     *, color: str = LABEL_COLOR, fontsize: float = 7.5, below: bool = False,
                     clearance: float = 3.0, gid: str | None = None,
                     avoid: Iterable[tuple[float, ...]] = (),
                     inside: bool = False, nearest: bool = False) -> list[Annotation]:
    """Label each sweep point with its lambda, without labels overlapping.

    Lambdas on the same point share one :func:`lambda_label`; points that are close on screen
    get their labels staggered by :func:`place_labels`, which also keeps clear of labels
    already on ``ax`` (so two curves on one axes can be labelled by two calls, ``below=True``
    for the second to put its labels under its points first). Placement is measured in
    display space: call it once the axes limits and the layout are final (after
    ``fig.tight_layout()``). ``clearance``: the half-width in points, around every labelled
    point, that labels keep free (the marker's radius; raise it for big markers; below
    ``LABEL_GAP - LABEL_PAD`` a label can sit at the nearest spot); ``avoid``: further points
    in data coordinates kept free too (another curve's points, a ring around a point), as
    ``(x, y)`` with the same half-width or ``(x, y, half-width in points)``; ``inside``:
    keep the labels within the axes (at the price of moving them further out); ``nearest``:
    keep each label no nearer to another point than to its own (see :func:`place_labels`).
    Non-finite points are skipped. Returns the annotations."""
    at: dict[tuple[float, float], list[float]] = {}
    for (x, y), lam in zip(points, lams):
        if _finite(x, y):
            at.setdefault((float(x), float(y)), []).append(float(lam))
    anns = [ax.annotate(lambda_label(*ls), (x, y), xytext=(4, 4), textcoords="offset points",
                        fontsize=fontsize, color=color, gid=gid)
            for (x, y), ls in at.items()]
    place_labels(anns, below=below, clearance=clearance, avoid=avoid, inside=inside,
                 nearest=nearest)
    return anns


# Candidate spots around a point, in points: the label's corner sits LABEL_GAP from the point,
# and each further level moves it one label height (plus LABEL_PAD) away.
LABEL_GAP, LABEL_PAD, LABEL_LEVELS = 4.0, 1.0, 10


def place_labels(annotations: Sequence[Annotation], below: bool = False,
                 clearance: float = 3.0, avoid: Iterable[tuple[float, ...]] = (),
                 inside: bool = False, nearest: bool = False) -> None:
    """Move each annotation (text offset in points from its point) to the first free spot.

    Spots are tried nearest first: right of the point above (``below``: under) it, then on
    the other vertical side, then left of the point, then one label height further out, and
    so on. A spot is free when its box, padded by ``LABEL_PAD`` points, overlaps no label
    placed before it, no other text on the same axes and no annotated point, nor any point of
    ``avoid`` (a square of half-width ``clearance`` points around each; an ``avoid`` point
    given as ``(x, y, half-width)`` in data coordinates and points brings its own),
    and (``inside``) lies within the axes, and (``nearest``) lies no nearer to another point,
    annotated or avoided, than to its own (so that a label under a neighbour is not read as
    the neighbour's). Annotations are placed left to right; one with no free spot keeps the
    spot of least overlap (a spot outside the axes or nearer to another point counted as
    overlapping by the label's area outside, or by its whole area).
    Call again after the axes are resized (the offsets are in points, the distances between
    points are not)."""
    anns = [a for a in annotations if a.get_text()]
    if not anns:
        return
    ax = anns[0].axes
    ax.get_xlim()  # the view limits are computed lazily; transData needs them now
    fig = ax.figure
    to_px = fig.dpi / 72.0
    mine = set(map(id, anns))
    obstacles = [t.get_window_extent() for t in ax.texts
                 if id(t) not in mine and t.get_visible() and t.get_text()]
    dots = [ax.transData.transform(a.xy) for a in anns]
    r = clearance * to_px
    squares = [(x, y, r) for x, y in dots]
    for p in avoid:
        if _finite(*p):
            x, y = ax.transData.transform(p[:2])
            squares.append((x, y, float(p[2]) * to_px if len(p) > 2 else r))
    obstacles += [Bbox.from_extents(x - h, y - h, x + h, y + h) for x, y, h in squares]
    frame = ax.get_window_extent() if inside else None
    vertical = (-1, 1) if below else (1, -1)
    order = sorted(range(len(anns)), key=lambda i: (dots[i][0], dots[i][1]))
    for i in order:
        ann = anns[i]
        ann.set_ha("left")
        ann.set_va("bottom")
        ann.xyann = (LABEL_GAP, LABEL_GAP)
        step = ann.get_window_extent().height / to_px + LABEL_PAD
        best, best_cost = None, math.inf
        for spot in _spots(step, vertical):
            drawn = _set_spot(ann, spot)
            box = drawn.padded(to_px * LABEL_PAD)
            cost = sum(_overlap_area(box, o) for o in obstacles)
            if frame is not None:  # the part of the label outside the axes
                cost += drawn.width * drawn.height - _overlap_area(drawn, frame)
            if nearest:
                own = _box_distance(drawn, *dots[i])
                if any(_box_distance(drawn, x, y) < own - 0.5 for x, y, _ in squares):
                    cost += drawn.width * drawn.height
            if cost < best_cost:
                best, best_cost = spot, cost
                if cost == 0:
                    break
        obstacles.append(_set_spot(ann, best))


def _box_distance(box: Bbox, x: float, y: float) -> float:
    """Distance from the point (x, y) to the box, 0 inside it (display units)."""
    return math.hypot(max(box.x0 - x, 0.0, x - box.x1), max(box.y0 - y, 0.0, y - box.y1))


def _spots(step: float, vertical: tuple[int, int]):
    """(offset in points, ha, va) nearest first: per level, right then left of the point."""
    for level in range(LABEL_LEVELS):
        dy = LABEL_GAP + level * step
        for side in (1, -1):
            for up in vertical:
                yield ((LABEL_GAP * side, dy * up), "left" if side > 0 else "right",
                       "bottom" if up > 0 else "top")


def _set_spot(ann: Annotation, spot: tuple) -> Bbox:
    (dx, dy), ha, va = spot
    ann.xyann = (dx, dy)
    ann.set_ha(ha)
    ann.set_va(va)
    return ann.get_window_extent()


def _overlap_area(a: Bbox, b: Bbox) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def overlapping_labels(annotations: Sequence[Annotation]) -> list[tuple[int, int]]:
    """Index pairs of the annotations whose drawn boxes overlap (empty when all are apart)."""
    boxes = [a.get_window_extent() for a in annotations]
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes))
            if _overlap_area(boxes[i], boxes[j]) > 0]


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


def _finite(*values: Any) -> bool:
    try:
        return all(math.isfinite(float(v)) for v in values)
    except (TypeError, ValueError):
        return False


def lambda_sweep_figure(frame: Any,
                        baselines: Mapping[str, Sequence[float]] | None = None,
                        veto_threshold: float | None = None, show_sr: bool | None = None,
                        title: str | None = None) -> Figure:
    """The cost/quality (Pareto) curve of a lambda sweep.

    ``frame``: :func:`~.policy.lambda_sweep`'s DataFrame (or records) with ``lam``, ``tokens``
    (mean total tokens per question), ``f1`` and optionally ``sr``, ``veto_threshold`` and
    ``best`` (the cross-validated choice, ringed). One panel plots F1 against tokens, a second
    SR against tokens when ``sr`` is present (``show_sr`` forces it on or off). Every lambda is
    a point annotated with :func:`lambda_label` (lambdas on the same point share the label,
    and labels of nearby points are staggered so that none overlap: :func:`annotate_lambdas`);
    the points of :func:`pareto_front` are connected, cheapest first. ``baselines``: name ->
    (tokens, f1) or (tokens, f1, sr), drawn as distinct unconnected markers (on the SR panel
    only when they give an SR). ``veto_threshold`` selects one threshold of a
    :func:`~.policy.tune_continuation` grid (required when the frame holds several).

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
        pts = [r for r in rows if _finite(r["tokens"], r[metric])]
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
            if len(value) <= col or not _finite(value[0], value[col]):
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
        from .experiments.results import stop_rule_table  # pandas and the results reader: only here
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

    ``reports``: per dataset, a ``data_scripts/stop_rule.py`` report (the JSON, read) or its
    :func:`~.results.stop_rule_table`. Each panel plots the cross-validated F1 against mean
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
            if _finite(r["tokens"], r["f1"]):
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
VERDICT_COLORS = {"A better": "tab:green", "A worse": "tab:red",
                  "no measurable difference": "tab:gray"}


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
    from .experiments.results import is_partial  # pandas and the results reader: only here
    metrics = dict(metrics or {"f1": "F1"})
    records = pairs.to_dict("records") if hasattr(pairs, "to_dict") else [dict(r) for r in pairs]
    rows = [r for r in records if r["metric"] in metrics and _finite(r["n"]) and int(r["n"]) > 0]
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
            if r is None or not _finite(r["diff"], r["lo"], r["hi"]):
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
               [words.get(v, v) for v in VERDICT_COLORS], fontsize=8, loc="lower center",
               ncol=len(VERDICT_COLORS), frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1))
    return fig


__all__ = ["KIND_COLORS", "NEVER_IN_STATE", "STATE_GROUPS", "VERDICT_COLORS", "action_kind",
           "annotate_lambdas", "branching_tree_figure", "control_loop_figure",
           "evidence_state_figure", "lambda_label", "lambda_sweep_figure", "overlapping_labels",
           "paired_forest_figure", "pareto_front", "place_labels", "stop_rule_sweeps_figure",
           "summarize_field", "validity_cases", "validity_grid_figure", "validity_matrix"]
