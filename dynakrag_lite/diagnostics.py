"""Analyses of recorded runs (``predictions.jsonl`` rows), gold labels allowed: these are
measurements of what the actions did, never inputs of the controller.

:func:`action_gold_hits` answers "which action brings the gold paragraphs?": for every
action, how often it ran, how many documents it added and how many of those were gold.
A row (as ``experiments.evaluate`` writes it) holds ``"docs"`` (each with ``"id"``,
``"source"`` — the action that brought it — and ``"gold"``) and ``"trace"`` (per step
``"action"`` and ``"added"``, the ids that step brought). The trace decides which step added
which document; ``source`` is the fallback for a document no step claims (rows of methods
without a trace: Fixed-K).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterable

__all__ = ["action_gold_hits", "read_rows"]


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a predictions.jsonl file (error rows included; callers filter), read by the
    experiments' own reader: a torn final line is ignored, a bad middle line raises."""
    from .experiments import read_predictions
    return read_predictions(path)


def action_gold_hits(rows: Iterable[dict]) -> dict[str, dict[str, float]]:
    """Per action: ``calls`` (trace steps of it), ``docs_added``, ``gold_added`` and
    ``gold_per_call`` / ``gold_per_doc``. Rows with an ``"error"`` are skipped. A document's
    gold flag comes from the row's ``"docs"`` (a trace id missing there counts as not gold)."""
    calls: dict[str, int] = defaultdict(int)
    added: dict[str, int] = defaultdict(int)
    gold: dict[str, int] = defaultdict(int)
    for row in rows:
        if row.get("error"):
            continue
        docs = {str(d.get("id")): d for d in row.get("docs") or []}
        claimed: set[str] = set()
        for step in row.get("trace") or []:
            a = str(step.get("action", "?"))
            calls[a] += 1
            for did in step.get("added") or []:
                did = str(did)
                if did in claimed:
                    continue
                claimed.add(did)
                added[a] += 1
                gold[a] += int(bool((docs.get(did) or {}).get("gold")))
        for did, d in docs.items():
            if did in claimed:
                continue
            a = str(d.get("source") or "?")
            added[a] += 1
            gold[a] += int(bool(d.get("gold")))
    out: dict[str, dict[str, float]] = {}
    for a in sorted(set(calls) | set(added)):
        c, n, g = calls.get(a, 0), added.get(a, 0), gold.get(a, 0)
        out[a] = {"calls": c, "docs_added": n, "gold_added": g,
                  "gold_per_call": round(g / c, 4) if c else None,
                  "gold_per_doc": round(g / n, 4) if n else None}
    return out
