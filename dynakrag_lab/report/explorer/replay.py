"""Replay: a predictions.jsonl record turned into steps (no widgets, no HTML, no kernel).

A record (one line of ``results/experiments/<dataset>/<generator>/<run>/predictions.jsonl``,
built by :func:`dynakrag_lite.experiments.run.score`) holds the whole trajectory of one method
on one question: at every step the valid set A(s), the chooser's numbers for each valid action,
the chosen action, the documents it brought, the gap and the sufficiency verdict; then the
final answer.

* :func:`steps_from_record` -> a list of :class:`StepView`, one per trace step, each with the
  support recall (SR) *after* that step, recomputed from the cumulative gold-marked documents
  against the record's ``n_gold`` (the number of gold supporting documents).
* :func:`sr_curve` -> SR before any step and after each step.
* :func:`answer_from_record` -> :class:`AnswerView` (prediction vs gold answers, EM/F1).
* :func:`load_records` / :func:`load_runs` / :func:`find_result_sets` read predictions files
  (with :func:`dynakrag_lite.experiments.folder.read_predictions`: a torn final line of a run
  still writing is ignored, a bad line elsewhere raises
  :class:`~dynakrag_lite.experiments.folder.ResultsError` naming the file and line).

Rendering lives in :mod:`dynakrag_lab.report.explorer.render`, the widget in
:mod:`dynakrag_lab.report.explorer.widget`; :mod:`dynakrag_lab.report.explorer`
gathers the public names of all three.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from dynakrag_lite.data.corpus import normalize_title
from dynakrag_lite.experiments.artifacts import EXPERIMENTS_DIR
from dynakrag_lite.experiments.folder import is_error, read_predictions

__all__ = [
    "DocView", "OptionView", "StepView", "AnswerView", "n_gold_of", "steps_from_record",
    "sr_curve", "answer_from_record", "load_records", "load_runs", "find_result_sets",
]

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
def load_records(path_or_dir: str | Path) -> dict[str, dict]:
    """``{question id: record}`` from a predictions.jsonl file or a run folder holding one."""
    p = Path(path_or_dir)
    if p.is_dir():
        p = p / "predictions.jsonl"
    if not p.exists():
        raise FileNotFoundError(f"{p}: no predictions file (for a results tree use load_runs)")
    # The run's own reader: a torn final line (a run still writing, or killed mid-write) is
    # left out; a bad line elsewhere is a ResultsError naming the file and line, never skipped.
    # Error rows (a question whose method raised, retried on the next run) are not records to
    # replay; the last successful row per id wins.
    return {r["id"]: r for r in read_predictions(p) if not is_error(r)}


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


def find_result_sets(root: str | Path = EXPERIMENTS_DIR,
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
