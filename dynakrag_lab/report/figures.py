"""Concept figures for chapters 4-9, drawn with matplotlib from the library's own definitions.

Each function returns a :class:`matplotlib.figure.Figure` built without pyplot, so nothing is
shown or kept in pyplot's global figure list; in a notebook, make the figure the last
expression of a cell (or ``display`` it) after ``import matplotlib.pyplot``. No function here
calls a generator or a retriever: the drawings read the action names (:mod:`.state`), the
fields of :class:`~.state.EvidenceState`, training samples that were already collected, and
the real :func:`~.validity.valid_actions` evaluated on states passed in (or on the small
hand-built states of :func:`validity_cases`).

* :func:`control_loop_figure`: Algorithm 1 as a diagram (validity layer, value and cost
  models, continuation veto, the seven actions, terminal compression; chapters 0 and 9);
* :func:`evidence_state_figure`: the fields of the evidence state, grouped, with an optional
  concrete state and the frontier cursor on its initial ranking (chapter 4);
* :func:`branching_tree_figure`: one question's rollout with its counterfactual branches and
  their Eq. 1 labels (from :func:`~.trajectories.collect_question`; chapter 7);
* :func:`validity_grid_figure`: actions x states, valid or not, from ``valid_actions``
  (chapter 6).

The plots of results (λ sweeps, stop-rule sweeps, paired forest plots, Pareto fronts) are
:mod:`dynakrag_lab.report.plots`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any, Callable, Iterable, Sequence

from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from dynakrag_lite.config import ControlConfig
from dynakrag_lite.data.corpus import normalize_title
from dynakrag_lite.state import (ACTIONS, RETRIEVAL_ACTIONS, EvidenceState, Ledger, RankedEntry,
                                 RetrievedDoc, Sufficiency, initial_state)
from dynakrag_lite.validity import valid_actions

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


__all__ = ["KIND_COLORS", "NEVER_IN_STATE", "STATE_GROUPS", "action_kind", "branching_tree_figure",
           "control_loop_figure", "evidence_state_figure", "summarize_field", "validity_cases",
           "validity_grid_figure", "validity_matrix"]
