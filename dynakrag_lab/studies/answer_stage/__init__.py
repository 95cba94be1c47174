"""The answer stage as a rule on the final state: answer from the full documents when the state
holds at most K of them, from the compressor's snippets above that.

A DynaKRAG run and its ``--no-compression`` twin walk the same trajectory on every question:
the compressor acts only after the controller has stopped, and decoding is greedy. The two runs
differ in the final answer call alone, so the rule's answer to a question *is* one of the two
runs' rows, picked by the row's ``n_docs``, and the rule is measured exactly from the two runs
without a model call. A question whose two rows hold different documents was not walked the
same way (a run resumed elsewhere whose reader replied differently): it is counted
(``differing``) and left out.

K is chosen on training questions (:func:`choose_full_up_to`) and then read once on questions
the choice never saw (``python -m dynakrag_lab.studies.answer_stage``). K = 0 is the paper's
answer stage (always the snippets); K at the document cap is no compression. A run uses a K with
``ControlConfig.answer_docs_up_to`` (``evaluate --answer-docs-up-to K``).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pandas as pd
from matplotlib.figure import Figure

from dynakrag_lab.report.comparison import paired_difference, paired_rows
from dynakrag_lab.report.results import is_partial
from dynakrag_lab.report.verdicts import pair_word

__all__ = ["RULE_KS", "FULL_SUFFIX", "same_walk", "rule_rows", "rule_summary", "rule_curve",
           "choose_full_up_to", "report_markdown", "read_once_pairs", "curve_figure",
           "read_once_markdown"]

RULE_KS = tuple(range(0, 13))  # 0: always the snippets; 12: the document cap, never
FULL_SUFFIX = "-no_compression"  # the twin run's folder name: <run>-no_compression
CURVE_COLUMNS = ("k", "n", "share_full", "f1", "em", "tokens", "vs_snippets", "vs_snippets_lo",
                 "vs_snippets_hi", "vs_full", "vs_full_lo", "vs_full_hi")


def _doc_ids(row: Mapping) -> tuple[str, ...]:
    return tuple(str(d["id"]) for d in row.get("docs") or ())


def same_walk(snippet_rows: Iterable[Mapping], full_rows: Iterable[Mapping]
              ) -> tuple[list[tuple[Mapping, Mapping]], int]:
    """(pairs, differing): the two runs' rows paired per question (snippets first) where both
    hold the same documents in the same order, and how many paired questions did not."""
    pairs = paired_rows(snippet_rows, full_rows)
    same = [(s, f) for s, f in pairs if _doc_ids(s) == _doc_ids(f)]
    return same, len(pairs) - len(same)


def rule_rows(pairs: Sequence[tuple[Mapping, Mapping]], full_up_to: int) -> list[dict]:
    """The rule's row per question: the full-document row when the state ended with at most
    ``full_up_to`` documents, the snippet row otherwise; ``answer_from`` says which."""
    out = []
    for s, f in pairs:
        full = int(s["n_docs"]) <= full_up_to
        out.append({**(f if full else s), "answer_from": "documents" if full else "snippets"})
    return out


def _mean(rows: Sequence[Mapping], key: str) -> float:
    return sum(float(r[key]) for r in rows) / len(rows) if rows else math.nan


def rule_summary(rows: Sequence[Mapping]) -> dict:
    """n, the share answered from the documents, mean F1, EM and tokens of :func:`rule_rows`."""
    return {"n": len(rows),
            "share_full": _mean([{"x": r["answer_from"] == "documents"} for r in rows], "x"),
            "f1": _mean(rows, "f1"), "em": _mean(rows, "em"), "tokens": _mean(rows, "tokens")}


def rule_curve(pairs: Sequence[tuple[Mapping, Mapping]], ks: Sequence[int] = RULE_KS
               ) -> pd.DataFrame:
    """Per K: n, the share of questions answered from the documents, mean F1, EM and tokens,
    and the paired F1 difference (with its 95 % interval) against always the snippets and
    against always the documents."""
    rec = []
    snippets = [s for s, _ in pairs]
    full = [f for _, f in pairs]
    for k in ks:
        rows = rule_rows(pairs, k)
        r = {"k": k, **rule_summary(rows)}
        for name, other in (("vs_snippets", snippets), ("vs_full", full)):
            if rows:
                d = paired_difference([x["f1"] for x in rows], [x["f1"] for x in other], "f1")
                r.update({name: d.diff, f"{name}_lo": d.lo, f"{name}_hi": d.hi})
            else:
                r.update({name: math.nan, f"{name}_lo": math.nan, f"{name}_hi": math.nan})
        rec.append(r)
    return pd.DataFrame(rec, columns=list(CURVE_COLUMNS))


def choose_full_up_to(curve: pd.DataFrame) -> int:
    """The K with the highest mean F1; among equal F1s (to 1e-9) the one with fewer tokens,
    then the smaller K (closer to the paper's answer stage)."""
    if curve.empty or curve.n.max() == 0:
        raise ValueError("no paired questions to choose K on")
    best = curve.f1.max()
    tied = curve[curve.f1 >= best - 1e-9].sort_values(["tokens", "k"])
    return int(tied.k.iloc[0])


def report_markdown(report: Mapping, level: int = 1) -> str:
    """A report of ``python -m dynakrag_lab.studies.answer_stage`` as Markdown: the curve K
    chose on, then one table per read-once root (the rule minus every other run); its title at heading
    ``level``."""
    h = "#" * level
    c = report["choose_on"]
    curve = pd.DataFrame(c["curve"])
    lines = [f"{h} Answer stage: full documents up to K, snippets above ({report['dataset']}, "
             f"`{report['reader']}`)", "", f"Command: `{report['command']}`", "",
             f"{h}# K chosen on `{c['root']}` (`{c['run']}`, n = {c['n']}, "
             f"{c['differing']} questions with other documents left out)", "",
             f"A run answers by the chosen K with `evaluate ... --answer-docs-up-to {c['k']}`.",
             "",
             "| K | answered from documents | F1 | EM | tokens | F1 vs snippets [95 %] "
             "| F1 vs documents [95 %] |", "|---|---|---|---|---|---|---|"]
    for _, r in curve.iterrows():
        mark = " **(chosen)**" if int(r.k) == c["k"] else ""
        lines.append(f"| {int(r.k)}{mark} | {r.share_full:.0%} | {r.f1:.3f} | {r.em:.3f} | "
                     f"{r.tokens:,.0f} | {r.vs_snippets:+.3f} [{r.vs_snippets_lo:+.3f}, "
                     f"{r.vs_snippets_hi:+.3f}] | {r.vs_full:+.3f} [{r.vs_full_lo:+.3f}, "
                     f"{r.vs_full_hi:+.3f}] |")
    for chk in report["checks"]:
        lines += ["", f"{h}# Read once: `{chk['root']}`, `{chk['run']}` with K = {chk['k']} "
                  f"(n = {chk['n']}, {chk['share_full']:.0%} answered from documents, F1 "
                  f"{chk['f1']:.3f}, {chk['tokens']:,.0f} tokens; {chk['differing']} left out)",
                  "", "| rule minus | n | F1 diff [95 %] | verdict | tokens diff [95 %] |",
                  "|---|---|---|---|---|"]
        for a in chk["against"]:
            f, t = a["f1"], a["tokens"]
            part = f" ({a['status']})" if is_partial(a.get("status", "")) else ""
            lines.append(f"| {a['other']}{part} | {f['n']} | {f['diff']:+.3f} [{f['lo']:+.3f}, "
                         f"{f['hi']:+.3f}] | {pair_word(f['verdict'])} | {t['diff']:+,.0f} "
                         f"[{t['lo']:+,.0f}, {t['hi']:+,.0f}] |")
    return "\n".join(lines) + "\n"


# How a read-once root is named in figures: the folder's last part.
ROOT_NAMES = {"experiments": "eval split", "check-set": "check set"}


def _where(root: str) -> str:
    return ROOT_NAMES.get(str(root).rstrip("/").rsplit("/", 1)[-1], str(root))


def read_once_pairs(report: Mapping) -> pd.DataFrame:
    """The read-once comparisons of a report as rows for
    :func:`~.plots.paired_forest_figure`: per root, rule run and other run, one row per metric
    (``f1``, ``tokens``) with ``label`` "<root>: <run> rule - <other>", ``n``, ``diff``, ``lo``,
    ``hi``, ``p_value``, ``verdict`` and the other run's ``status`` (a partial run is drawn
    as one; empty for the rule's own answer modes)."""
    rows = []
    for chk in report["checks"]:
        where = _where(chk["root"])
        for a in chk["against"]:
            for metric in ("f1", "tokens"):
                d = a[metric]
                rows.append({"label": f"{where}: {chk['run']} rule - {a['other']}",
                             "metric": metric, "n": d["n"], "diff": d["diff"], "lo": d["lo"],
                             "hi": d["hi"], "p_value": d["p_value"], "verdict": d["verdict"],
                             "status": a.get("status", "")})
    return pd.DataFrame(rows, columns=["label", "metric", "n", "diff", "lo", "hi", "p_value",
                                       "verdict", "status"])


def curve_figure(report: Mapping, width: float = 5.5) -> Figure:
    """The curve K was chosen on: mean F1 (left axis) and mean tokens (right axis) against K,
    the chosen K marked; K = 0 is always the snippets, the right end always the documents."""
    c = report["choose_on"]
    curve = pd.DataFrame(c["curve"])
    fig = Figure(figsize=(width, 3.4))
    ax = fig.add_subplot()
    ax.plot(curve.k, curve.f1, "o-", color="tab:blue", label="F1", gid="f1")
    ax.set_xlabel("K: answer from the full documents when the state holds at most K")
    ax.set_ylabel("mean F1", color="tab:blue")
    tok = ax.twinx()
    tok.plot(curve.k, curve.tokens, "s--", color="tab:orange", label="tokens", gid="tokens")
    tok.set_ylabel("mean tokens per question", color="tab:orange")
    ax.axvline(c["k"], color="gray", linestyle=":", gid="chosen")
    ax.set_title(f"Chosen on {c['n']} training questions: K = {c['k']}")
    fig.tight_layout()
    return fig


def read_once_markdown(report: Mapping) -> str:
    """One Markdown bullet per read-once root and run: the rule's F1, its share answered from
    the documents, and the F1 and token differences against each other run (interval, n)."""
    if not report.get("checks"):
        return "* Not read anywhere yet."
    out = []
    for chk in report["checks"]:
        where = _where(chk["root"])
        parts = [f"`{a['other']}` {a['f1']['diff']:+.3f} [{a['f1']['lo']:+.3f}, "
                 f"{a['f1']['hi']:+.3f}] at {a['tokens']['diff']:+,.0f} tokens"
                 for a in chk["against"]]
        out.append(f"* {where}, `{chk['run']}` with K = {chk['k']} (n = {chk['n']}, "
                   f"{chk['share_full']:.0%} from the documents): F1 {chk['f1']:.3f}; minus "
                   + "; minus ".join(parts) + ".")
    return "\n".join(out)


def answer_stage_section(root: Path) -> str | None:
    """The answer-stage rule (``python -m dynakrag_lab.studies.answer_stage``): K chosen on training
    questions, then read once; every report under ``diagnostics/answer-stage/``, or None."""
    reports = sorted((root / "diagnostics" / "answer-stage").glob("*.json"))
    if not reports:
        return None
    lines = ["## Answer stage: full documents up to K, snippets above\n",
             "A controller run and its `--no-compression` twin walk the same trajectories, so "
             "the rule \"answer from the full documents when the final state holds at most K "
             "of them\" is measured exactly from the two runs, without a model call. K is chosen "
             "on training questions, then read once on the evaluation split and the check set "
             "(paired bootstrap 95 %; exploratory verdicts, each pair read on its own).\n"]
    for path in reports:
        lines.append(report_markdown(json.loads(path.read_text()), level=3))
    return "\n".join(lines)
