"""Diagnostics of recorded runs (``predictions.jsonl`` rows): how each question ended, what
the actions did, where a parser fell back. Measurements, gold labels allowed, never inputs of
the controller (chapters 12-14 read them; :mod:`dynakrag_lite.experiments.run` records them).

Diagnostics (per question in each row's ``"diagnostics"``, summed in the summary) make
degenerate behaviour visible. What is counted:

* ``stop_reasons``: how each question ended. Controller runs (dynakrag, uniform, oracle):
  ``stop_answer_chosen`` (the chooser picked stop_answer), ``max_steps`` (step cap),
  ``max_docs`` (document cap), ``only_stop_valid``. Baselines: ``fixed_k``; IRCoT
  ``concluded`` / ``empty_thought`` / ``max_steps`` / ``max_docs`` / ``retrieval_cap``;
  Self-Ask ``concluded`` / ``malformed`` / ``max_followups`` / ``repeated_followup`` /
  ``max_docs`` / ``retrieval_cap`` (from ``MethodResult.extra["stop_reason"]``).
* ``actions_mean``: mean number of trace steps of each action per question (baselines' steps
  are named ``retrieve``, ``cot_step``, ``follow_up``, ``intermediate_answer``).
* ``sufficiency``: verdicts of all sufficiency probes: ``sufficient``, ``insufficient`` (with
  a gap to search for), ``unparsed`` (the parser's fallback: insufficient with no gap).
* ``parse_fallbacks`` per prompt kind: ``sufficiency`` (as above), ``rewrite`` (the rewritten
  query equals the question: ``parse_query``'s fallback, or a model that echoed it),
  ``compress`` (no snippet at all), ``answer`` (empty prediction), ``ircot`` / ``self_ask``
  (a chain reply the parser could not read: trace note ``unparsed: ...``),
  ``intermediate_answer`` (Self-Ask's ``unknown``), plus whatever a method reports itself in
  ``MethodResult.extra["parse_fallbacks"] = {kind: n}`` (the generic mechanism).
  Not yet countable from what methods record: the compression parser's unstructured-reply
  fallback (lines taken as snippets), Self-Ask's bare-question fallback, and the exact
  ``parsed`` flag of a sufficiency probe other than the last one of a question (the trace
  keeps only verdict and gap; an ``INSUFFICIENT`` reply with no missing fact looks like the
  fallback there, so earlier probes' ``unparsed`` is an upper bound; a trace step that carries
  ``"parsed"`` is counted exactly).
* ``vetoes``: steps where the continuation model removed stop_answer (trace scores
  ``"vetoed"``), in total and the number of questions with at least one.
* ``errors`` and ``error_types``: error rows.

Run behaviour: :func:`action_gold_hits` answers "which action brings the gold paragraphs?": for
every action, how often it ran, how many documents it added and how many of those were gold.
A row (as ``experiments.run.evaluate`` writes it) holds ``"docs"`` (each with ``"id"``,
``"source"`` — the action that brought it — and ``"gold"``) and ``"trace"`` (per step
``"action"`` and ``"added"``, the ids that step brought). The trace decides which step added
which document; ``source`` is the fallback for a document no step claims (rows of methods
without a trace: Fixed-K).
"""
from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Iterable, Sequence

from .folder import is_error, latest_rows, read_predictions

__all__ = ["action_gold_hits", "diagnostics", "read_rows", "row_diagnostics", "run_behaviour",
           "summarise_runs", "trace_diagnostics"]

# -- trace diagnostics (recorded in every row and summary) -------------------------------
def _stop_reason(trace: Sequence[dict], method: str | None, extra: dict | None,
                 stop_reason: str | None) -> str:
    if extra and extra.get("stop_reason"):
        return str(extra["stop_reason"])  # IRCoT / Self-Ask say why their chain ended
    if stop_reason is None:  # an older row: find the stop in the trace
        stops = [t for t in trace if t.get("action") == "stop_answer"]
        if stops:
            stop_reason = stops[-1].get("note") or "policy"
        elif method == "fixed_k":
            stop_reason = "fixed_k"
    if not stop_reason:
        return "unknown"
    return "stop_answer_chosen" if stop_reason == "policy" else stop_reason


def trace_diagnostics(trace: Sequence[dict], *, question: str = "", prediction: str = "",
                      extra: dict | None = None, stop_reason: str | None = None,
                      last_probe_parsed: bool | None = None, method: str | None = None
                      ) -> dict:
    """One question's diagnostics from its JSON trace (see the module docstring).
    ``last_probe_parsed``: the final state's exact ``Sufficiency.parsed`` when known."""
    actions = Counter(t.get("action", "?") for t in trace)
    probes = [t for t in trace if t.get("action") == "sufficiency_check"]
    suff = Counter()
    for i, t in enumerate(probes):
        parsed = t.get("parsed")  # exact when the trace records it
        if parsed is None and i == len(probes) - 1:
            parsed = last_probe_parsed
        if parsed is False:
            suff["unparsed"] += 1
        elif t.get("sufficient"):
            suff["sufficient"] += 1
        elif parsed or (t.get("gap") or "").strip():
            suff["insufficient"] += 1  # (parsed: also an INSUFFICIENT naming no missing fact)
        else:
            suff["unparsed"] += 1  # no flag: insufficient without a gap looks like the fallback
    fallbacks = Counter()
    if suff["unparsed"]:
        fallbacks["sufficiency"] = suff["unparsed"]
    q = " ".join(question.split())
    for t in trace:
        a, note = t.get("action"), str(t.get("note") or "")
        if a == "rewrite_query" and ("fallback:" in note or (
                q and " ".join(str(t.get("query", "")).split()) == q)):
            fallbacks["rewrite"] += 1
        elif a == "compress_answer_evidence" and note.startswith("0 snippets"):
            fallbacks["compress"] += 1
        elif a == "cot_step" and note.startswith("unparsed:"):
            fallbacks["ircot"] += 1
        elif a == "follow_up" and note.startswith("unparsed:"):
            fallbacks["self_ask"] += 1
        elif a == "intermediate_answer" and note == "unknown":
            fallbacks["intermediate_answer"] += 1
    if not str(prediction).strip():
        fallbacks["answer"] += 1
    for kind, n in ((extra or {}).get("parse_fallbacks") or {}).items():
        fallbacks[str(kind)] += int(n)
    vetoes = sum(1 for t in trace
                 if ((t.get("scores") or {}).get("stop_answer") or {}).get("vetoed"))
    return {"stop_reason": _stop_reason(trace, method, extra, stop_reason),
            "actions": dict(actions),
            "sufficiency": {k: suff[k] for k in ("sufficient", "insufficient", "unparsed")},
            "parse_fallbacks": dict(fallbacks), "vetoes": vetoes}


def row_diagnostics(row: dict) -> dict:
    """A row's diagnostics: as recorded, or derived from its trace for rows written before
    diagnostics were recorded (then the last probe's exact parse flag is unknown)."""
    if isinstance(row.get("diagnostics"), dict):
        return row["diagnostics"]
    return trace_diagnostics(row.get("trace") or [], question=row.get("question", ""),
                             prediction=row.get("prediction", ""), extra=row.get("extra"),
                             stop_reason=row.get("stop_reason"), method=row.get("method"))


def diagnostics(rows: Sequence[dict]) -> dict:
    """The summary's ``"diagnostics"`` over the latest row of each question."""
    ok = [r for r in rows if not is_error(r)]
    errs = [r for r in rows if is_error(r)]
    per = [row_diagnostics(r) for r in ok]
    stops, suff, fallbacks, totals = Counter(), Counter(), Counter(), Counter()
    veto_total, veto_questions = 0, 0
    for d in per:
        stops[d["stop_reason"]] += 1
        suff.update(d["sufficiency"])
        fallbacks.update(d["parse_fallbacks"])
        totals.update(d["actions"])
        veto_total += d["vetoes"]
        veto_questions += d["vetoes"] > 0
    n = len(per)
    return {
        "questions": n,
        "errors": len(errs),
        "error_types": dict(Counter(r["error"].get("type", "?") for r in errs)),
        "stop_reasons": dict(stops.most_common()),
        "actions_mean": {a: round(c / n, 4) for a, c in sorted(totals.items())} if n else {},
        "sufficiency": {k: suff[k] for k in ("sufficient", "insufficient", "unparsed")},
        "parse_fallbacks": dict(sorted(fallbacks.items())),
        "vetoes": {"total": veto_total, "questions": veto_questions},
    }


# -- run behaviour ------------------------------------------------------------------------
ACQUISITION = ("retrieve_more", "gap_query", "rewrite_query", "bridge_entity_expand")


def read_rows(path: str | Path) -> list[dict]:
    """The rows of a predictions.jsonl file (error rows included; callers filter), read by the
    experiments' own reader: a torn final line is ignored, a bad middle line raises."""
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
        rows = latest_rows(read_rows(pred), errors=False)
        if rows:
            rec = run_behaviour(rows)
            rec["action_gold_hits"] = action_gold_hits(rows)
            out[pred.parent.name] = rec
    return out
