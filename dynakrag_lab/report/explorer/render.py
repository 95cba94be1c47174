"""Static rendering of replayed trajectories: self-contained HTML and the SR-per-step plot.

* :func:`render_html` / :func:`render_comparison_html` -> static, self-contained HTML (inline
  styles only: no external assets, no JavaScript), for one method or two side by side. This is
  the fallback the widget shows where no kernel runs (a static book build, nbval).
* :func:`plot_sr_curve` draws SR after each step for several methods on one question
  (matplotlib is imported only when it is called).

The steps come from :mod:`dynakrag_lab.report.explorer.replay`.
"""
from __future__ import annotations

import html
from typing import Iterable, Mapping, Sequence

from dynakrag_lite.state import RETRIEVAL_ACTIONS

from .replay import (DocView, OptionView, StepView, _num, answer_from_record, n_gold_of, sr_curve,
                     steps_from_record)

__all__ = ["render_html", "render_comparison_html", "plot_sr_curve"]


# -- HTML ----------------------------------------------------------------------------------
_E = html.escape
_FONT = "font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;font-size:13px;"
_TABLE = "border-collapse:collapse;width:100%;margin:6px 0;"
_TH = ("text-align:left;padding:4px 6px;border-bottom:2px solid #999;background:#f3f3f3;"
       "vertical-align:bottom;")
# Cells wrap anywhere (action names are long unbroken words): the view must fit a book's text
# column (about 690 px; data_scripts/page_check.py measures it), not only a wide notebook.
_TD = "padding:4px 6px;border-bottom:1px solid #ddd;vertical-align:top;overflow-wrap:anywhere;"
_GOLD = "color:#1a7f37;font-weight:bold;"


def _fmt(x: float | None, nd: int = 3) -> str:
    if x is None:
        return "–"
    return f"{x:.{nd}f}".rstrip("0").rstrip(".") if abs(x) < 1e6 else f"{x:.3g}"


def _chip_color(frac: float | None) -> str:
    """White-ish to green by the option's rank in its step (0 worst, 1 best)."""
    if frac is None:
        return "#eeeeee"
    lo, hi = (242, 242, 242), (120, 200, 130)
    rgb = tuple(round(a + (b - a) * frac) for a, b in zip(lo, hi))
    return "#%02x%02x%02x" % rgb


def _option_chip(o: OptionView, frac: float | None) -> str:
    nums = []
    if o.value is not None:
        nums.append(f"v={_fmt(o.value)}")
    if o.cost is not None and o.cost:
        nums.append(f"c={_fmt(o.cost, 1)}")
    if o.score is not None and o.value is not None and o.score != o.value:
        nums.append(f"s={_fmt(o.score)}")
    if o.true_gain is not None:
        nums.append(f"gain={_fmt(o.true_gain)}")
    if o.true_sr is not None:
        nums.append(f"SR={_fmt(o.true_sr)}")
    if o.p is not None:
        nums.append(f"p={_fmt(o.p)}")
    # The action's name stays on one line; its numbers may wrap inside the chip.
    style = (f"display:inline-block;max-width:100%;margin:1px 2px;padding:1px 6px;"
             f"border-radius:9px;background:{_chip_color(frac)};")
    if o.chosen:
        style += "border:2px solid #0b5394;font-weight:bold;"
    else:
        style += "border:1px solid #bbb;"
    if o.vetoed:
        style += "text-decoration:line-through;color:#a00;border:1px dashed #a00;"
    tip = ", ".join(f"{k}={v}" for k, v in o.raw.items())
    label = (f'<span style="white-space:nowrap">{_E(o.action)}'
             + (" ✗veto" if o.vetoed else "") + (" ◀" if o.chosen else "") + "</span>")
    num = f' <span style="font-weight:normal;color:#333">{_E(" ".join(nums))}</span>' \
        if nums else ""
    return f'<span style="{style}" title="{_E(tip)}">{label}{num}</span>'


def _options_html(step: StepView) -> str:
    prim = [o.primary for o in step.options if o.primary is not None and not o.vetoed]
    lo, hi = (min(prim), max(prim)) if prim else (None, None)
    chips = []
    for o in step.options:
        if o.primary is None or lo is None:
            frac = None
        elif o.vetoed:
            frac = 0.0
        else:
            frac = 1.0 if hi == lo else (o.primary - lo) / (hi - lo)
        chips.append(_option_chip(o, frac))
    out = "".join(chips)
    if step.continue_gain is not None:
        out += (f'<div style="color:#555;font-size:11px">continuation estimate '
                f'{_fmt(step.continue_gain)}</div>')
    return out


def _doc_html(d: DocView) -> str:
    mark = f'<span style="{_GOLD}" title="gold supporting doc">✓</span> ' if d.gold else \
        ('<span style="color:#999">?</span> ' if d.gold is None else
         '<span style="color:#bbb">·</span> ')
    style = "font-weight:bold;" if d.gold else ""
    sc = f' <span style="color:#888">({_fmt(d.score)})</span>' if d.score is not None else ""
    return f'<div>{mark}<span style="{style}">{_E(d.title)}</span>{sc}</div>'


def _sr_html(x: float | None, found: int, n_gold: int | None) -> str:
    if x is None:
        return "–"
    w = round(60 * x)
    bar = (f'<div style="width:60px;height:6px;background:#eee;margin-top:2px">'
           f'<div style="width:{w}px;height:6px;background:#1a7f37"></div></div>')
    frac = f" ({found}/{n_gold})" if n_gold else ""
    return f"{_fmt(x, 2)}{frac}{bar}"


def _details_html(s: StepView, prev_gap: str = "") -> str:
    """The query of a retrieval, the gap when a probe named a new one, the verdict, the note.
    (The state carries its gap forward, so an unchanged gap is not repeated.)"""
    parts = []
    if s.query and (s.added or s.action in RETRIEVAL_ACTIONS):
        parts.append(f'<div><span style="color:#666">query:</span> {_E(s.query)}</div>')
    if s.gap and (s.gap != prev_gap or s.action == "sufficiency_check"):
        parts.append(f'<div><span style="color:#666">gap:</span> <i>{_E(s.gap)}</i></div>')
    if s.sufficient is not None:
        verdict = ('<span style="color:#1a7f37">SUFFICIENT</span>' if s.sufficient else
                   '<span style="color:#b45f06">INSUFFICIENT</span>')
        parts.append(f"<div>verdict: {verdict}</div>")
    if s.note:
        parts.append(f'<div style="color:#666">note: {_E(s.note)}</div>')
    return "".join(parts) or '<span style="color:#bbb">–</span>'


def _steps_table(record: Mapping, steps: Sequence[StepView], upto: int | None) -> str:
    n_gold = n_gold_of(record)
    shown = steps if upto is None else steps[:max(0, upto)]
    # No separate "chosen" column: the chosen chip is marked (◀, blue border), and the view
    # must fit a book's text column.
    rows = [f'<tr><th style="{_TH}">#</th>'
            f'<th style="{_TH}">valid set A(s) and the chooser\'s numbers</th>'
            f'<th style="{_TH}">docs added</th><th style="{_TH}">query / gap / verdict</th>'
            f'<th style="{_TH}">SR after</th></tr>',
            f'<tr><td style="{_TD}">0</td><td style="{_TD}" colspan="3">'
            f'<span style="color:#666">s<sub>0</sub>: the question alone, no documents</span>'
            f'</td><td style="{_TD}">{_sr_html(0.0, 0, n_gold)}</td></tr>']
    prev_gap = ""
    for s in shown:
        docs = "".join(_doc_html(d) for d in s.added) or '<span style="color:#bbb">–</span>'
        rows.append(
            f'<tr><td style="{_TD}">{s.index}</td>'
            f'<td style="{_TD}">{_options_html(s)}</td>'
            f'<td style="{_TD}">{docs}</td><td style="{_TD}">{_details_html(s, prev_gap)}</td>'
            f'<td style="{_TD}">{_sr_html(s.sr, s.gold_found, n_gold)}</td></tr>')
        prev_gap = s.gap
    if upto is not None and upto < len(steps):
        rows.append(f'<tr><td style="{_TD};color:#999" colspan="5">… {len(steps) - upto} more '
                    f'step(s) hidden (move the step slider)</td></tr>')
    return f'<table style="{_TABLE}">{"".join(rows)}</table>'


def _answer_html(record: Mapping) -> str:
    a = answer_from_record(record)
    ok = a.em == 1.0
    color = "#1a7f37" if ok else ("#b45f06" if (a.f1 or 0) > 0 else "#a00")
    gold = ", ".join(_E(x) for x in a.answers) or "–"
    return (f'<div style="margin:6px 0;padding:6px 8px;border-left:4px solid {color};'
            f'background:#fafafa">'
            f'<div><b>answer:</b> <span style="color:{color}">{_E(a.prediction) or "(empty)"}'
            f'</span></div><div><b>gold:</b> {gold}</div>'
            f'<div style="color:#444">EM {_fmt(a.em, 2)} · F1 {_fmt(a.f1, 2)} · '
            f'SR {_fmt(a.support_recall, 2)}</div></div>')


def _cost_html(record: Mapping) -> str:
    keys = (("n_docs", "docs"), ("tokens", "tokens"), ("llm_calls", "LLM calls"),
            ("retrieval_calls", "retrieval calls"), ("seconds", "s"))
    parts = [f"{_E(str(record[k]))} {lab}" for k, lab in keys if k in record]
    return f'<div style="color:#666;font-size:12px">{" · ".join(parts)}</div>'


def _body_html(record: Mapping, upto: int | None, title: str | None = None) -> str:
    steps = steps_from_record(record)
    head = (f'<div style="font-size:14px;font-weight:bold;margin-top:4px">'
            f'{_E(title or record.get("method", "?"))}</div>')
    done = upto is None or upto >= len(steps)
    tail = _answer_html(record) if done else \
        '<div style="color:#999;margin:6px 0">answer: revealed after the last step</div>'
    snip = ""
    if done and record.get("snippets"):
        items = "".join(f"<li>{_E(x)}</li>" for x in record["snippets"])
        snip = (f'<details><summary style="color:#666">{len(record["snippets"])} compressed '
                f'snippets</summary><ul style="margin:2px 0">{items}</ul></details>')
    return head + _cost_html(record) + _steps_table(record, steps, upto) + snip + tail


def _question_html(record: Mapping) -> str:
    n_gold = n_gold_of(record)
    gold = f" · {n_gold} gold docs" if n_gold else ""
    return (f'<div style="font-size:15px;margin-bottom:2px"><b>Q:</b> '
            f'{_E(record.get("question", ""))}</div>'
            f'<div style="color:#666;font-size:12px">id {_E(str(record.get("id", "")))} · '
            f'type {_E(str(record.get("type", "")))}{gold}</div>')


_LEGEND = ('<div style="color:#666;font-size:11px;margin-top:4px">Chips: the valid set A(s); '
           'green = higher score within the step; ◀ and a blue border = the chosen action; '
           'struck through = stop_answer vetoed by the continuation model; v = value, '
           'c = cost (tokens), s = score v − λc; p = uniform probability; gain / SR = the '
           'oracle\'s true numbers. ✓ = gold supporting document.</div>')


def render_html(record: Mapping, upto: int | None = None) -> str:
    """A static, self-contained HTML view of one trajectory; ``upto`` reveals only the first
    ``upto`` steps (the answer appears once every step is shown)."""
    return (f'<div style="{_FONT}">{_question_html(record)}{_body_html(record, upto)}'
            f'{_LEGEND}</div>')


def render_comparison_html(rec_a: Mapping | None, rec_b: Mapping | None,
                           upto: int | None = None, names: Sequence[str] | None = None) -> str:
    """Two trajectories side by side (normally two methods on the same question)."""
    recs = [r for r in (rec_a, rec_b) if r is not None]
    if not recs:
        return f'<div style="{_FONT}">no record</div>'
    if len(recs) == 1:
        return render_html(recs[0], upto)
    names = list(names) if names else [r.get("method", "?") for r in recs]
    warn = ""
    if rec_a.get("id") != rec_b.get("id"):
        warn = ('<div style="color:#a00">note: the two records are for different questions'
                '</div>')
    # Side by side where there is room (a notebook), one above the other in a narrow column
    # (the book's page): a flex row that wraps, each view at least 440 px wide.
    cols = "".join(f'<div style="flex:1 1 440px;min-width:0">{_body_html(r, upto, n)}</div>'
                   for r, n in zip(recs, names))
    return (f'<div style="{_FONT}">{_question_html(rec_a)}{warn}'
            f'<div style="display:flex;flex-wrap:wrap;gap:4px 12px">{cols}</div>'
            f'{_LEGEND}</div>')


# -- plot ----------------------------------------------------------------------------------
def plot_sr_curve(records: Mapping[str, Mapping] | Iterable[Mapping], ax=None):
    """SR after each step for several methods on one question (``{method: record}`` or a list
    of records labelled by their ``method``). Step 0 is s0 (SR 0)."""
    import matplotlib.pyplot as plt  # heavy optional dependency: the HTML views need no plot
    items = list(records.items()) if isinstance(records, Mapping) else \
        [(r.get("method", f"run {i}"), r) for i, r in enumerate(records)]
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.2))
    markers = "osD^vP*X"
    for i, (name, rec) in enumerate(items):
        ys = sr_curve(rec)
        xs = list(range(len(ys)))
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if not pts:
            continue
        # A small vertical offset keeps overlapping curves apart.
        off = 0.012 * (i - (len(items) - 1) / 2)
        ax.step([p[0] for p in pts], [p[1] + off for p in pts], where="post",
                marker=markers[i % len(markers)],
                label=f"{name} (F1 {_fmt(_num(rec.get('f1')), 2)})")
    ax.set_xlabel("step")
    ax.set_ylabel("support recall after step")
    ax.set_ylim(-0.05, 1.08)
    ax.grid(alpha=0.3)
    if items:
        q = str(items[0][1].get("question", ""))
        ax.set_title(q if len(q) <= 70 else q[:67] + "...", fontsize=9)
        ax.legend(fontsize=8, loc="lower right")
    return ax
