"""The trajectory explorer: replay a predictions.jsonl record step by step.

A record (one line of ``results/experiments/<dataset>/<generator>/<run>/predictions.jsonl``,
built by :func:`dynakrag_lite.experiments.score`) holds the whole trajectory of one method on
one question: at every step the valid set A(s), the chooser's numbers for each valid action,
the chosen action, the documents it brought, the gap and the sufficiency verdict; then the
final answer. This module turns it into something to read.

Pure functions (no widgets, no kernel needed):

* :func:`steps_from_record` -> a list of :class:`StepView`, one per trace step, each with the
  support recall (SR) *after* that step, recomputed from the cumulative gold-marked documents
  against the record's ``n_gold`` (the number of gold supporting documents).
* :func:`answer_from_record` -> :class:`AnswerView` (prediction vs gold answers, EM/F1).
* :func:`render_html` / :func:`render_comparison_html` -> static, self-contained HTML (inline
  styles only: no external assets, no JavaScript), for one method or two side by side.
* :func:`load_records` / :func:`load_runs` read predictions files.
* :func:`plot_sr_curve` draws SR after each step for several methods on one question.

The widget, :class:`Explorer`, wraps these in ipywidgets (question and method dropdowns, a step
slider with prev/next buttons). Without a live kernel (a static book build, nbval) it still
shows a static HTML view of the full trajectory.
"""
from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from .corpus import normalize_title
from .state import RETRIEVAL_ACTIONS

# Order in which a step's numbers are read to color an action chip: the learned policy's
# selection score, then its value, the oracle's true gain / true SR, the uniform controller's p.
_PRIMARY_KEYS = ("score", "value", "true_gain", "true_sr", "p")
_KNOWN_KEYS = ("value", "cost", "score", "vetoed", "continue_gain", "p", "true_gain", "true_sr")


# -- views ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class DocView:
    id: str
    title: str
    gold: bool | None  # None: the doc is not in the record's final document list
    score: float | None = None
    source: str = ""


@dataclass(frozen=True)
class OptionView:
    """One action of A(s) with the chooser's numbers for it."""
    action: str
    chosen: bool
    value: float | None = None
    cost: float | None = None
    score: float | None = None
    vetoed: bool = False
    continue_gain: float | None = None
    p: float | None = None
    true_gain: float | None = None
    true_sr: float | None = None
    raw: Mapping[str, float] = field(default_factory=dict)

    @property
    def primary(self) -> float | None:
        """The number the chooser ranked by (what chips are colored by)."""
        for k in _PRIMARY_KEYS:
            v = getattr(self, k)
            if v is not None:
                return v
        return None


@dataclass(frozen=True)
class StepView:
    index: int  # 1-based position in the trace
    step: int  # the record's step field: len(history) before the action
    action: str  # the chosen action
    options: tuple[OptionView, ...]  # A(s), in the validity layer's order
    added: tuple[DocView, ...]
    query: str = ""
    gap: str = ""
    sufficient: bool | None = None
    note: str = ""
    sr: float | None = None  # support recall after this step (None: n_gold unknown)
    gold_found: int = 0  # distinct gold docs in hand after this step
    n_docs: int = 0  # docs in hand after this step

    @property
    def valid(self) -> tuple[str, ...]:
        return tuple(o.action for o in self.options)

    @property
    def chosen(self) -> str:
        return self.action

    @property
    def vetoed(self) -> tuple[str, ...]:
        return tuple(o.action for o in self.options if o.vetoed)

    @property
    def continue_gain(self) -> float | None:
        for o in self.options:
            if o.continue_gain is not None:
                return o.continue_gain
        return None


@dataclass(frozen=True)
class AnswerView:
    prediction: str
    answers: tuple[str, ...]
    em: float | None
    f1: float | None
    support_recall: float | None
    n_gold: int | None


# -- pure replay ---------------------------------------------------------------------------
def _num(x) -> float | None:
    try:
        return None if x is None else float(x)
    except (TypeError, ValueError):
        return None


def n_gold_of(record: Mapping) -> int | None:
    """The number of gold supporting docs: the record's ``n_gold`` (written by
    ``experiments.score``); for older records without it, inferred from the final SR and the
    gold-marked docs when SR > 0 (gold found / SR); None when it cannot be known."""
    if record.get("n_gold") is not None:
        return int(record["n_gold"])
    found = len({normalize_title(d["title"]) for d in record.get("docs", []) if d.get("gold")})
    s_r = _num(record.get("support_recall"))
    if s_r and found:
        return max(found, round(found / s_r))
    return None


def _options(entry: Mapping) -> tuple[OptionView, ...]:
    scores = entry.get("scores") or {}
    valid = list(entry.get("valid") or [])
    for a in scores:  # numbers for an action missing from "valid" (should not happen)
        if a not in valid:
            valid.append(a)
    if entry.get("action") and entry["action"] not in valid:
        valid.append(entry["action"])
    out = []
    for a in valid:
        s = scores.get(a) or {}
        out.append(OptionView(
            action=a, chosen=(a == entry.get("action")), value=_num(s.get("value")),
            cost=_num(s.get("cost")), score=_num(s.get("score")),
            vetoed=bool(s.get("vetoed")), continue_gain=_num(s.get("continue_gain")),
            p=_num(s.get("p")), true_gain=_num(s.get("true_gain")),
            true_sr=_num(s.get("true_sr")), raw=dict(s)))
    return tuple(out)


def steps_from_record(record: Mapping) -> list[StepView]:
    """Replay a predictions.jsonl record: one :class:`StepView` per trace step, with SR after
    each step computed from the cumulative gold-marked docs over ``n_gold``."""
    docs = {d["id"]: d for d in record.get("docs", [])}
    n_gold = n_gold_of(record)
    have: set[str] = set()
    gold_keys: set[str] = set()
    views = []
    for i, entry in enumerate(record.get("trace", []), start=1):
        added = []
        for doc_id in entry.get("added", []):
            d = docs.get(doc_id)
            if d is None:
                added.append(DocView(doc_id, doc_id, None))
                continue
            added.append(DocView(doc_id, d.get("title", doc_id), bool(d.get("gold")),
                                 _num(d.get("score")), d.get("source", "")))
            if d.get("gold"):
                gold_keys.add(normalize_title(d.get("title", doc_id)))
            have.add(doc_id)
        have.update(x.id for x in added)
        found = len(gold_keys)
        if n_gold:
            s_r = min(1.0, found / n_gold)
        else:
            s_r = 0.0 if (n_gold is None and not _num(record.get("support_recall"))) else None
        views.append(StepView(
            index=i, step=int(entry.get("step", i - 1)), action=entry.get("action", ""),
            options=_options(entry), added=tuple(added), query=entry.get("query") or "",
            gap=entry.get("gap") or "", sufficient=entry.get("sufficient"),
            note=entry.get("note") or "", sr=s_r, gold_found=found, n_docs=len(have)))
    return views


def sr_curve(record: Mapping) -> list[float | None]:
    """SR before any step (0) and after each step."""
    return [0.0] + [s.sr for s in steps_from_record(record)]


def answer_from_record(record: Mapping) -> AnswerView:
    return AnswerView(prediction=record.get("prediction", ""),
                      answers=tuple(record.get("answers", [])), em=_num(record.get("em")),
                      f1=_num(record.get("f1")), support_recall=_num(record.get("support_recall")),
                      n_gold=n_gold_of(record))


# -- loading -------------------------------------------------------------------------------
def _read_jsonl(path: Path) -> list[dict]:
    """Read-only and tolerant: a torn or bad line is skipped (the file is never rewritten)."""
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def load_records(path_or_dir: str | Path) -> dict[str, dict]:
    """``{question id: record}`` from a predictions.jsonl file or a run folder holding one."""
    p = Path(path_or_dir)
    if p.is_dir():
        p = p / "predictions.jsonl"
    if not p.exists():
        raise FileNotFoundError(f"{p}: no predictions file (for a results tree use load_runs)")
    return {r["id"]: r for r in _read_jsonl(p) if "id" in r}


def load_runs(root: str | Path, runs: Sequence[str] | None = None) -> dict[str, dict[str, dict]]:
    """``{run name: {question id: record}}`` for every ``<run>/predictions.jsonl`` under
    ``root`` (e.g. ``results/experiments/hotpotqa/qwen2.5-coder-0.5b``), optionally only the
    named runs, in that order."""
    root = Path(root)
    found = {f.parent.name: f for f in sorted(root.glob("*/predictions.jsonl"))}
    names = list(runs) if runs is not None else sorted(found)
    out = {}
    for name in names:
        if name in found:
            recs = load_records(found[name])
            if recs:
                out[name] = recs
    return out


def find_result_sets(root: str | Path = "results/experiments",
                     need: Sequence[str] = ("dynakrag",)) -> list[Path]:
    """``<dataset>/<generator>`` folders under ``root`` that have every run in ``need``."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for d in sorted(p for p in root.glob("*/*") if p.is_dir()):
        if all((d / r / "predictions.jsonl").is_file() for r in need):
            out.append(d)
    return out


# -- HTML ----------------------------------------------------------------------------------
_E = html.escape
_FONT = "font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;font-size:13px;"
_TABLE = "border-collapse:collapse;width:100%;margin:6px 0;"
_TH = ("text-align:left;padding:4px 6px;border-bottom:2px solid #999;background:#f3f3f3;"
       "vertical-align:bottom;")
_TD = "padding:4px 6px;border-bottom:1px solid #ddd;vertical-align:top;"
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
    style = (f"display:inline-block;margin:1px 2px;padding:1px 6px;border-radius:9px;"
             f"background:{_chip_color(frac)};white-space:nowrap;")
    if o.chosen:
        style += "border:2px solid #0b5394;font-weight:bold;"
    else:
        style += "border:1px solid #bbb;"
    if o.vetoed:
        style += "text-decoration:line-through;color:#a00;border:1px dashed #a00;"
    tip = ", ".join(f"{k}={v}" for k, v in o.raw.items())
    label = _E(o.action) + (" ✗veto" if o.vetoed else "") + (" ◀" if o.chosen else "")
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
    rows = [f'<tr><th style="{_TH}">#</th><th style="{_TH}">chosen</th>'
            f'<th style="{_TH}">valid set A(s) and the chooser\'s numbers</th>'
            f'<th style="{_TH}">docs added</th><th style="{_TH}">query / gap / verdict</th>'
            f'<th style="{_TH}">SR after</th></tr>',
            f'<tr><td style="{_TD}">0</td><td style="{_TD}" colspan="4">'
            f'<span style="color:#666">s<sub>0</sub>: the question alone, no documents</span>'
            f'</td><td style="{_TD}">{_sr_html(0.0, 0, n_gold)}</td></tr>']
    prev_gap = ""
    for s in shown:
        docs = "".join(_doc_html(d) for d in s.added) or '<span style="color:#bbb">–</span>'
        rows.append(
            f'<tr><td style="{_TD}">{s.index}</td>'
            f'<td style="{_TD}"><b>{_E(s.action)}</b></td>'
            f'<td style="{_TD}">{_options_html(s)}</td>'
            f'<td style="{_TD}">{docs}</td><td style="{_TD}">{_details_html(s, prev_gap)}</td>'
            f'<td style="{_TD}">{_sr_html(s.sr, s.gold_found, n_gold)}</td></tr>')
        prev_gap = s.gap
    if upto is not None and upto < len(steps):
        rows.append(f'<tr><td style="{_TD};color:#999" colspan="6">… {len(steps) - upto} more '
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
    cols = "".join(
        f'<td style="vertical-align:top;width:50%;padding:0 6px">{_body_html(r, upto, n)}</td>'
        for r, n in zip(recs, names))
    return (f'<div style="{_FONT}">{_question_html(rec_a)}{warn}'
            f'<table style="width:100%;border-collapse:collapse"><tr>{cols}</tr></table>'
            f'{_LEGEND}</div>')


# -- plot ----------------------------------------------------------------------------------
def plot_sr_curve(records: Mapping[str, Mapping] | Iterable[Mapping], ax=None):
    """SR after each step for several methods on one question (``{method: record}`` or a list
    of records labelled by their ``method``). Step 0 is s0 (SR 0)."""
    import matplotlib.pyplot as plt
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


# -- widget --------------------------------------------------------------------------------
class Explorer:
    """Interactive explorer over ``{method: {question id: record}}``.

    A question dropdown (question text and type), a method dropdown and a second method for the
    side-by-side view, a step slider with prev/next buttons that reveals the trajectory step by
    step, and an HTML pane. Without a live kernel, :meth:`static_html` (shown by
    ``_ipython_display_`` / ``_repr_html_`` under the widget) has the full trajectory.
    """

    def __init__(self, records_by_method: Mapping[str, Mapping[str, Mapping]],
                 method: str | None = None, compare: str | None = None):
        self.records = {m: dict(r) for m, r in records_by_method.items() if r}
        if not self.records:
            raise ValueError("no records")
        self.methods = list(self.records)
        self.method = method if method in self.records else self.methods[0]
        others = [m for m in self.methods if m != self.method]
        self.compare = compare if (compare in self.records and compare != self.method) else \
            (others[0] if others else None)
        # Questions in the first method's order; those every method has come first.
        order: list[str] = []
        for m in self.methods:
            for qid in self.records[m]:
                if qid not in order:
                    order.append(qid)
        common = [q for q in order if all(q in self.records[m] for m in self.methods)]
        self.question_ids = common + [q for q in order if q not in common]
        self._widget = None

    # -- data access
    def record(self, method: str | None, question_id: str) -> dict | None:
        if method is None:
            return None
        return self.records.get(method, {}).get(question_id)

    def any_record(self, question_id: str) -> dict:
        for m in self.methods:
            if question_id in self.records[m]:
                return self.records[m][question_id]
        raise KeyError(question_id)

    def default_question(self) -> str:
        """The first question both shown methods have, preferring one where their support
        recall differs (the interesting case)."""
        both = [q for q in self.question_ids
                if self.record(self.method, q) and (self.compare is None
                                                    or self.record(self.compare, q))]
        for q in both:
            a, b = self.record(self.method, q), self.record(self.compare, q)
            if b is not None and a.get("support_recall") != b.get("support_recall"):
                return q
        return (both or self.question_ids)[0]

    def question_label(self, qid: str) -> str:
        r = self.any_record(qid)
        q = str(r.get("question", ""))
        q = q if len(q) <= 90 else q[:87] + "..."
        return f"[{r.get('type', '?')}] {q}"

    def n_steps(self, question_id: str, methods: Sequence[str | None] = ()) -> int:
        ms = methods or (self.method, self.compare)
        return max((len(r.get("trace", [])) for m in ms
                    if (r := self.record(m, question_id)) is not None), default=0)

    def html(self, question_id: str | None = None, method: str | None = None,
             compare: str | None = None, upto: int | None = None) -> str:
        qid = question_id or self.default_question()
        m = method or self.method
        c = compare if compare is not None else self.compare
        c = None if c in ("", m) else c
        a, b = self.record(m, qid), self.record(c, qid)
        if a is None and b is None:
            return f'<div style="{_FONT}">no record for {_E(qid)}</div>'
        if a is None or (c is not None and b is None):
            missing = m if a is None else c
            note = (f'<div style="{_FONT};color:#a00">{_E(missing)} has no record for this '
                    f'question</div>')
            return note + render_html(a or b, upto)
        return render_comparison_html(a, b, upto, names=[m, c]) if b is not None else \
            render_html(a, upto)

    def static_html(self, question_id: str | None = None) -> str:
        """The full trajectory (both methods side by side) of one question, no kernel needed."""
        return self.html(question_id)

    # -- widget
    def _build(self):
        import ipywidgets as w
        opts = [(self.question_label(q), q) for q in self.question_ids]
        self.w_question = w.Dropdown(options=opts, value=self.default_question(),
                                     description="question", layout=w.Layout(width="95%"))
        self.w_method = w.Dropdown(options=self.methods, value=self.method,
                                   description="method")
        self.w_compare = w.Dropdown(options=[("(none)", "")] + [(m, m) for m in self.methods],
                                    value=self.compare or "", description="vs")
        n = self.n_steps(self.w_question.value)
        self.w_step = w.IntSlider(value=n, min=0, max=max(n, 1), description="step",
                                  continuous_update=False)
        self.w_prev = w.Button(description="◀ prev", layout=w.Layout(width="80px"))
        self.w_next = w.Button(description="next ▶", layout=w.Layout(width="80px"))
        self.w_html = w.HTML()
        self.w_question.observe(self._on_change, names="value")
        self.w_method.observe(self._on_change, names="value")
        self.w_compare.observe(self._on_change, names="value")
        self.w_step.observe(self._on_step, names="value")
        self.w_prev.on_click(lambda _: self._move(-1))
        self.w_next.on_click(lambda _: self._move(+1))
        self._render()
        return w.VBox([self.w_question, w.HBox([self.w_method, self.w_compare]),
                       w.HBox([self.w_step, self.w_prev, self.w_next]), self.w_html])

    def _move(self, delta: int) -> None:
        self.w_step.value = min(self.w_step.max, max(0, self.w_step.value + delta))

    def _on_change(self, _change=None) -> None:
        methods = (self.w_method.value, self.w_compare.value or None)
        n = self.n_steps(self.w_question.value, methods)
        self.w_step.max = max(n, 1)
        self.w_step.value = n  # a new question or method starts fully revealed
        self._render()

    def _on_step(self, _change=None) -> None:
        self._render()

    def _render(self) -> None:
        self.w_html.value = self.html(self.w_question.value, self.w_method.value,
                                      self.w_compare.value or "", self.w_step.value)

    @property
    def widget(self):
        if self._widget is None:
            self._widget = self._build()
        return self._widget

    def display(self) -> None:
        from IPython.display import display
        display(self)

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display
        display(self.widget)
        display(HTML('<details open><summary style="color:#666;font-size:12px">static view '
                     '(full trajectory; shown without a live kernel too)</summary>'
                     + self.static_html() + "</details>"))

    def _repr_html_(self) -> str:
        return self.static_html()
