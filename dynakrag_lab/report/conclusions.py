"""Chapter 16's reading of the results: what the reproduction found, in sentences whose every
result word is computed from the tables of :mod:`.headline` (the headline against the best
baseline, the stop profiles, the control diagnosis of :mod:`.records`), so the conclusions
stay true as runs land: a claim is made only when the complete runs support it, a partial run
is named as "partial: k of N" and a missing one as "not run yet".

* :func:`support_sentence`: per dataset, whether a reader's controller held more of the gold
  support than the best baseline and whether that became better answers;
* :func:`cap_sentence` and :func:`stop_sentence`: how the controller ended its questions
  (run to the step cap; stopped after one retrieval, reading Fixed-K(3)'s documents);
* :func:`versus_counts` and :func:`uniform_sentence`: the controller against uniform-valid;
* :func:`token_sentence`: tokens against the best baseline on the same questions;
* :func:`headroom_table` and :func:`headroom_sentence`: what the gold-label oracle gains over
  uniform-valid, against how wide the paired interval is at the committed n (the resolution
  a controller's win must clear);
* :func:`summary_markdown`: the chapter's closing paragraph, assembled from the above.

Only reads.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Mapping

import pandas as pd

from dynakrag_lite.experiments.artifacts import EXPERIMENTS_DIR

from .comparison import A_BETTER, COMPARATIVE
from .headline import join_words, pair_rows, readers, short_names, support_phrase
from .results import is_partial, read_run, run_names, run_status

def complete_rows(table: pd.DataFrame, run: str = "dynakrag") -> pd.DataFrame:
    """The rows of a headline table for ``run`` whose run and best baseline are complete."""
    return table[(table.run == run) & (table.n > 0) & (table.status == "complete")
                 & (table.baseline_status == "complete")]


def support_sentence(table: pd.DataFrame, reader: str, run: str = "dynakrag") -> str:
    """Per dataset of ``reader``: against which best baseline, whether ``run`` held more, less
    or no measurably different gold support, and what the answers did
    (:func:`~.headline.support_phrase`); rows with a partial run say so."""
    rows = table[(table.reader == reader) & (table.run == run) & (table.n > 0)]
    parts = []
    for _, r in rows.iterrows():
        note = "; ".join(f"{w} {s}" for w, s in ((run, r["status"]),
                                                    (r["baseline"], r["baseline_status"]))
                         if is_partial(s))
        parts.append(f"on {r['dataset']} against {r['baseline']} (n = {int(r['n'])}"
                     + (f", {note}" if note else "") + f"), {support_phrase(r)}")
    return "; ".join(parts) if parts else f"{run} with {reader} has no comparison yet"


def support_pattern(table: pd.DataFrame, reader: str, run: str = "dynakrag") -> str:
    """One computed sentence on whether more support became better answers for ``reader``,
    over the complete comparisons only."""
    done = complete_rows(table, run)
    done = done[done.reader == reader]
    more = done[done.sr_lo > 0]
    if done.empty:
        return f"With {reader} there is no complete comparison yet."
    if more.empty:
        return (f"With {reader} the controller held measurably more of the gold support than "
                f"the best baseline on none of the {len(done)} complete comparisons.")
    better = more[more.verdict == A_BETTER]
    return (f"With {reader} the controller held measurably more of the gold support than the "
            f"best baseline on {join_words(more.dataset)}, and answered measurably better on "
            + (join_words(better.dataset) if len(better) else "none of them")
            + ": " + ("more support did not become better answers." if better.empty else
                      "more support became better answers there."))


def cap_sentence(profiles: pd.DataFrame, reader: str) -> str:
    """How many questions ``reader``'s controller ran to the step cap, per dataset, with
    "every question" only where it is so."""
    sel = profiles[profiles.reader == reader]
    if sel.empty:
        return f"no run with {reader} yet"
    parts = [(f"every question on {r['dataset']} ({int(r['at_step_cap'])} of {int(r['n'])})"
              if int(r["at_step_cap"]) == int(r["n"]) else
              f"{int(r['at_step_cap'])} of {int(r['n'])} questions on {r['dataset']}")
             + ("" if r["status"] == "complete" else f", {r['status']}")
             for _, r in sel.iterrows()]
    return "it ran to the step cap on " + join_words(parts)


def stop_sentence(profiles: pd.DataFrame, reader: str) -> str:
    """Where ``reader``'s controller stopped by its own choice after one retrieval, and read
    exactly Fixed-K(3)'s documents; a dataset where it did so on every question is called a
    constant stop, any other is given as counts."""
    sel = profiles[profiles.reader == reader]
    if sel.empty:
        return f"no run with {reader} yet"
    parts = []
    for _, r in sel.iterrows():
        n, one = int(r["n"]), int(r["after_one_retrieval"])
        same, k3 = int(r["same_docs_as_fixed_k3"]), int(r["paired_with_fixed_k3"])
        text = (f"on {r['dataset']}, after one retrieval on {one} of {n} questions"
                + (" (a constant stop)" if one == n else "")
                + (f", reading exactly Fixed-K(3)'s documents on {same} of {k3}" if k3 else ""))
        parts.append(text + ("" if r["status"] == "complete" else f" ({r['status']})"))
    return "it stopped by its own choice " + "; ".join(parts)


def versus_counts(root: str | Path = EXPERIMENTS_DIR, run: str = "dynakrag",
                  other: str = "uniform") -> dict[str, object]:
    """``run`` against ``other`` on F1 over every reader having both: how many complete pairs
    are better, worse or tie (``better``, ``worse``, ``ties``, ``complete``), and which pairs
    have a partial run (``partial``: ``dataset/reader (status)`` strings)."""
    out = {"better": 0, "worse": 0, "ties": 0, "complete": 0, "partial": []}
    for d, g in readers(root):
        if run not in run_names(d, g, root):
            continue
        pt = pair_rows(d, g, run, other, root)
        if pt is None:
            continue
        f1 = pt.loc["f1"]
        mine = read_run(d, g, run, root)[1]["status"]
        if is_partial(f1.status) or is_partial(mine):
            out["partial"].append(f"{d}/{g} ({f1.status if is_partial(f1.status) else mine})")
            continue
        out["complete"] += 1
        out[COMPARATIVE.get(f1.verdict, "ties")] += 1
    return out


def uniform_sentence(counts: Mapping) -> str:
    """:func:`versus_counts` against uniform-valid in words."""
    if not counts["complete"]:
        text = "no complete pair with uniform-valid yet"
    else:
        text = (f"of {counts['complete']} complete pairs with uniform-valid, the controller's "
                f"F1 is better on {counts['better']}, worse on {counts['worse']} and not "
                f"measurably different on {counts['ties']}")
    if counts["partial"]:
        text += f" (not counted, partial: {join_words(counts['partial'])})"
    return text


def token_sentence(table: pd.DataFrame, run: str = "dynakrag") -> str:
    """``run``'s tokens per question as a multiple of its best baseline's, on the same
    questions, per complete comparison."""
    done = complete_rows(table, run)
    if done.empty:
        return "no complete comparison yet"
    short = short_names(done.reader)
    return join_words(f"{r.token_ratio:.2f}x {r.baseline}'s on {r.dataset}/{short[r.reader]}"
                      for r in done.itertuples() if not math.isnan(r.token_ratio))


def headroom_table(root: str | Path = EXPERIMENTS_DIR, reader: str = "qwen2.5-coder-1.5b",
                   run: str = "dynakrag", other: str = "uniform", upper: str = "oracle"
                   ) -> pd.DataFrame:
    """Per dataset of ``reader`` with complete ``upper``, ``run`` and ``other`` runs: the F1
    difference ``upper - other`` (the oracle's headroom) with its paired interval, and
    ``run - other`` with its interval and half-width (the resolution of the comparison at
    this n). A partial run leaves its dataset out."""
    rows = []
    for d, g in readers(root):
        if g != reader:
            continue
        pairs = [pair_rows(d, g, name, other, root) for name in (upper, run)]
        if any(pt is None for pt in pairs) or any(
                is_partial(run_status(d, g, name, root)["status"]) for name in (upper, run, other)):
            continue
        u, r = (pt.loc["f1"] for pt in pairs)
        rows.append({"dataset": d, "n": int(r.n), "upper": float(u["diff"]),
                     "upper_lo": float(u.lo), "upper_hi": float(u.hi), "run": float(r["diff"]),
                     "run_lo": float(r.lo), "run_hi": float(r.hi),
                     "half_width": float(r.hi - r.lo) / 2})
    return pd.DataFrame(rows, columns=["dataset", "n", "upper", "upper_lo", "upper_hi", "run",
                                       "run_lo", "run_hi", "half_width"])


def headroom_sentence(table: pd.DataFrame, run: str = "dynakrag", other: str = "uniform",
                      upper: str = "oracle") -> str:
    """:func:`headroom_table` in words: per dataset the oracle's margin over ``other`` and the
    half-width of ``run``'s paired interval, then on how many the oracle itself clears 0."""
    if table.empty:
        return f"no dataset has complete {upper}, {run} and {other} runs yet"
    per = "; ".join(
        f"{r.dataset} (n = {r.n}): {upper} {r.upper:+.3f} [{r.upper_lo:+.3f}, "
        f"{r.upper_hi:+.3f}], {run} {r.run:+.3f} (interval half-width {r.half_width:.3f})"
        for r in table.itertuples())
    clear = int((table.upper_lo > 0).sum())
    return (f"F1 minus {other}'s, paired: {per}. The {upper}, which chooses with the gold "
            f"support labels, clears 0 on {clear} of {len(table)} datasets: at these n a "
            f"controller's margin must come close to the {upper}'s for its interval to "
            f"leave 0")


def summary_markdown(table: pd.DataFrame, profiles: pd.DataFrame, uniform: Mapping,
                     diagnosis: pd.DataFrame | None, continuation_status: str) -> str:
    """The closing paragraph: the counts of the headline, the pairs with uniform-valid, what
    the chooser picks and the continuation controller's state, every number computed."""
    done = complete_rows(table)
    n = {w: int((done.outcome == w).sum()) for w in ("wins", "ties", "loses")}
    readers_ = join_words(sorted(set(table.reader)))
    text = (f"With the readers {readers_}, the paper-rule controller wins {n['wins']}, ties "
            f"{n['ties']} and loses {n['loses']} of its {len(done)} complete comparisons with "
            f"the best baseline; {uniform_sentence(uniform)}.")
    if diagnosis is not None and len(diagnosis):
        below = int((diagnosis["gain forest"] < diagnosis["gain uniform"]).sum())
        text += (f" Offline, its chooser picks the probe, which adds no support, on "
                 f"{diagnosis['probe chosen'].min():.0%} to "
                 f"{diagnosis['probe chosen'].max():.0%} of held-out decisions, and gains less "
                 f"support than a uniform pick in {below} of {len(diagnosis)} dataset x reader "
                 "rows.")
    if n["wins"] == 0 and n["loses"] == 0 and len(done):
        if uniform.get("better"):
            # a win over chance is not a win over the best baseline: say both
            text += (" The learned choice beats chance where a uniform-valid pair says better, "
                     "but it does not separate from the best baseline with readers this small.")
        else:
            text += (" Nothing here shows the learned controller separating from its baselines "
                     "with readers this small.")
    return text + f" The continuation controller: {continuation_status}"


__all__ = ["cap_sentence", "complete_rows", "stop_sentence", "summary_markdown",
           "support_pattern", "support_sentence", "token_sentence", "uniform_sentence",
           "versus_counts"]
