"""Run behaviour: what a run's methods did, read from recorded ``predictions.jsonl`` rows.
Measurements with gold labels, never inputs of the controller; the per-row diagnostics every run
records are :mod:`dynakrag_lite.experiments.diagnostics`.

:func:`action_gold_hits` answers "which action brings the gold paragraphs?": for
every action, how often it ran, how many documents it added and how many of those were gold.
A row (as ``experiments.run.evaluate`` writes it) holds ``"docs"`` (each with ``"id"``,
``"source"`` — the action that brought it — and ``"gold"``) and ``"trace"`` (per step
``"action"`` and ``"added"``, the ids that step brought). The trace decides which step added
which document; ``source`` is the fallback for a document no step claims (rows of methods
without a trace: Fixed-K).

:func:`run_behaviour` counts actions per question, the gold share of each acquisition action's
documents, sufficiency verdicts, IRCoT iterations, Self-Ask follow-ups and the compression's
snippet validity; :func:`summarise_runs` does both for every run of a folder.
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable

from dynakrag_lite.experiments.folder import latest_rows, read_predictions

__all__ = ["ACQUISITION", "action_gold_hits", "run_behaviour", "summarise_runs"]

ACQUISITION = ("retrieve_more", "gap_query", "rewrite_query", "bridge_entity_expand")


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


# Rows written before the compression step recorded its counts have them only in its note,
# compression.Compression.note:
# "<n> snippets (llm; <valid>/<parsed> valid from docs ..."
_COMPRESSION_NOTE = re.compile(r"\(llm; (\d+)/(\d+) valid")


def _compression_from_trace(trace: list[dict]) -> dict | None:
    """Snippet counts of an LLM compression step: the step's structured ``compression``
    record (``n_parsed``, ``n_valid``, ``dropped`` reason counts; Compression.stats) when it
    has one, else parsed from its note (older rows: no drop reasons then). None for the
    extractive compressor (its sentences are chosen, not validated) or no compression."""
    for t in trace:
        if t.get("action") != "compress_answer_evidence":
            continue
        rec = t.get("compression")
        if isinstance(rec, dict):
            if rec.get("method", "llm") != "llm":
                return None
            return {"n_valid": int(rec.get("n_valid", 0) or 0),
                    "n_parsed": int(rec.get("n_parsed", 0) or 0),
                    "dropped": {str(k): int(v) for k, v in (rec.get("dropped") or {}).items()}}
        m = _COMPRESSION_NOTE.search(str(t.get("note", "")))
        if m:
            return {"n_valid": int(m.group(1)), "n_parsed": int(m.group(2))}
    return None


def run_behaviour(rows: list[dict]) -> dict:
    """What a run's methods did, per question (error rows left out): actions per question,
    for each acquisition action the share of its added documents that are gold and the share
    of its calls that added at least one gold document, sufficiency verdicts and gaps written,
    IRCoT iterations (``cot_step``), Self-Ask follow-ups and searches, and the compression's
    snippet validity where recorded (``snippet_drop_reasons`` too when the trace step has its
    structured record)."""
    rows = [r for r in rows if not r.get("error")]
    n = len(rows)
    counts: Counter = Counter()
    added: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # docs, gold docs, hits
    verdicts: Counter = Counter()
    gaps = cot = searches = follow = snip_valid = snip_total = 0
    drops: Counter = Counter()  # drop reasons, from structured compression records only
    for r in rows:
        gold = {d["id"] for d in r.get("docs", []) if d.get("gold")}
        for t in r.get("trace", []):
            a = t.get("action")
            counts[a] += 1
            if a in ACQUISITION:
                ids = t.get("added", [])
                g = sum(1 for i in ids if i in gold)
                added[a][0] += len(ids)
                added[a][1] += g
                added[a][2] += int(g > 0)
            if a == "sufficiency_check":
                s = t.get("sufficient")
                verdicts["sufficient" if s else "insufficient" if s is False else "none"] += 1
                gaps += int(bool(t.get("gap")))
            cot += a == "cot_step"
            follow += a == "follow_up"
            searches += a == "retrieve" and r.get("method") == "self_ask"
        comp = (r.get("extra") or {}).get("compression") or r.get("compression") \
            or _compression_from_trace(r.get("trace", []))
        if isinstance(comp, dict):
            snip_valid += int(comp.get("n_valid", 0) or 0)
            snip_total += int(comp.get("n_snippets", comp.get("n_parsed", 0)) or 0)
            d = comp.get("dropped") or {}
            # a dict of counts (trace record) or a list of reasons (compression.snippet_stats)
            drops.update({str(k): int(v) for k, v in d.items()} if isinstance(d, dict)
                         else Counter(str(x).split(" (")[0] for x in d))
    out = {"questions": n,
           "actions_per_question": {a: round(c / n, 3) for a, c in sorted(counts.items())}
           if n else {},
           "added_gold_share": {a: round(v[1] / v[0], 3) if v[0] else None
                                for a, v in added.items()},
           "actions_with_gold_hit": {a: round(v[2] / counts[a], 3) if counts[a] else None
                                     for a, v in added.items()},
           "sufficiency_verdicts": dict(verdicts),
           "gaps_written_per_question": round(gaps / n, 3) if n else None}
    if cot:
        out["ircot_iterations_per_question"] = round(cot / n, 3)
    if follow:
        out["self_ask_follow_ups_per_question"] = round(follow / n, 3)
        out["self_ask_searches_per_question"] = round(searches / n, 3)
    if snip_total:
        out["snippet_validity"] = round(snip_valid / snip_total, 3)
    if drops:  # absent for runs recorded before the trace kept them (note only)
        out["snippet_drop_reasons"] = dict(sorted(drops.items()))
    return out


def summarise_runs(runs_dir: str | Path) -> dict[str, dict]:
    """:func:`run_behaviour` and :func:`action_gold_hits` of every ``<run>/predictions.jsonl``
    under ``runs_dir`` (the latest row of each question; a damaged file raises)."""
    out = {}
    for pred in sorted(Path(runs_dir).glob("*/predictions.jsonl")):
        rows = latest_rows(read_predictions(pred), errors=False)
        if rows:
            rec = run_behaviour(rows)
            rec["action_gold_hits"] = action_gold_hits(rows)
            out[pred.parent.name] = rec
    return out
