"""Diagnostics of recorded runs (``predictions.jsonl`` rows): how each question ended, what the
actions did, where a parser fell back. Measurements (gold allowed), never controller inputs;
recorded per row under ``"diagnostics"`` and summed in the summary so that degenerate behaviour
is visible: ``stop_reasons``, ``actions_mean`` (trace steps per action per question),
``sufficiency`` verdicts, ``parse_fallbacks`` per prompt kind (plus a method's own
``MethodResult.extra["parse_fallbacks"]``), ``vetoes`` and ``errors``. Where a trace step does
not carry ``"parsed"``, ``unparsed`` probes are an upper bound (an INSUFFICIENT reply naming no
missing fact looks like the fallback)."""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from .folder import is_error

__all__ = ["diagnostics", "row_diagnostics", "trace_diagnostics"]

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
