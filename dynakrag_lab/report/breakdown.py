"""Scores per question type and hop count: each run's EM, F1 and SR within each group of a
benchmark's questions (HotpotQA's and 2WikiMultiHopQA's question types, MuSiQue's hop counts),
and the paired F1 difference of DynaKRAG against every other run within each group (chapters
12-13 and ``results/README.md``, written by ``python -m dynakrag_lab.readme``). A group too
small to read is printed and flagged (:data:`MIN_GROUP_N`), never dropped.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from .comparison import compare_runs, paired_rows
from .results import DEFAULT_ROOT, read_run, run_names

# The groups of each benchmark in reading order: the datasets' own question types, and
# MuSiQue's hop shapes (2hop, 3hop1, 3hop2, 4hop1 ...) folded into their hop count, since the
# shape variants split 100 questions into groups too small to read.
QUESTION_GROUPS = {
    "hotpotqa": ("bridge", "comparison"),
    "2wikimultihopqa": ("compositional", "comparison", "bridge_comparison", "inference"),
    "musique": ("2-hop", "3-hop", "4-hop"),
}
# Rows without a type: some HotpotQA records came from a source that did not keep it (see
# ../shared/data/README.md); guessing it from the question would be a label we made up.
UNTYPED = "untyped"
MIN_GROUP_N = 10  # below this a group's mean or difference is reported but flagged
BREAKDOWN_COLUMNS = ("run", "group", "n", "em", "f1", "support_recall", "too_few", "n_paired",
                     "diff", "lo", "hi", "p_value", "verdict", "status")
_HOPS = re.compile(r"^(\d+)hop")


def question_group(row: Mapping, dataset: str) -> str:
    """The breakdown group of a predictions row: its ``type`` for HotpotQA and
    2WikiMultiHopQA, ``"<k>-hop"`` for MuSiQue (``"3hop2"`` -> ``"3-hop"``), :data:`UNTYPED`
    when the row has no type."""
    t = row.get("type")
    if t is None or str(t).strip() == "":
        return UNTYPED
    t = str(t).strip()
    m = _HOPS.match(t)
    if m and dataset == "musique":
        return f"{int(m.group(1))}-hop"
    return t


def _group_order(dataset: str, groups) -> list[str]:
    known = QUESTION_GROUPS.get(dataset, ())
    rank = {g: i for i, g in enumerate(known)}
    # known groups first, then others by name, untyped last
    return sorted(groups, key=lambda g: (g == UNTYPED, rank.get(g, len(rank)), g))


def _mean(rows: Sequence[Mapping], key: str) -> float:
    vals = [float(r[key]) for r in rows if r.get(key) is not None]
    return sum(vals) / len(vals) if vals else math.nan


def _folder_run(generator: str, name: str) -> tuple[str, str]:
    """(generator folder, run) of a run name: ``run`` of ``generator``'s folder, or
    ``<other generator>/<run>`` (a run folder's name has no slash, so this is unambiguous)."""
    other, sep, run = name.rpartition("/")
    return (other, run) if sep else (generator, name)


def breakdown_table(dataset: str, generator: str, runs: Sequence[str] | None = None,
                    root: str | Path = DEFAULT_ROOT, base: str = "dynakrag",
                    min_n: int = MIN_GROUP_N) -> pd.DataFrame:
    """Each run's scores per question group (:func:`question_group`), and ``base`` against
    every other run within each group.

    One row per (run, group): ``n`` questions the run answered in the group (error rows left
    out), mean ``em``, ``f1`` and ``support_recall``; for runs other than ``base`` (when
    ``base`` has answered questions) ``n_paired`` (questions of the group both runs answered: a
    partial run is compared on what it has), the F1 difference base - run ``diff``, its paired
    bootstrap 95 % interval ``lo``/``hi``, the sign-flip permutation ``p_value`` and the
    ``verdict`` (:func:`~.comparison.compare_runs`). ``too_few`` flags rows whose ``n`` or
    ``n_paired`` is below ``min_n``: their numbers are printed, not read, and their verdict is
    ``"too few to read"``. ``status``: the run's :func:`~.results.status_label`.

    A run (or ``base``) named ``<other generator>/<run>`` is read from that generator's folder
    of ``dataset`` and paired per question across the two folders, as
    :func:`~.results.transfer_paired_table` pairs a transferred run with the answer
    generator's baselines. Runs default to every run folder, in table order (a folder with
    nothing answered yet has no group, so no row). A run named in ``runs`` that has answered
    nothing is one row, as a missing run in :func:`~.paper.ablation_table`: group None, ``n``
    0, NaN numbers and its status (:data:`~.results.NOT_RUN` without a folder,
    :data:`~.results.STARTED`) as verdict. Only a
    damaged predictions file raises."""
    named = runs is not None
    runs = list(run_names(dataset, generator, root) if runs is None else runs)
    # base is compared against even when not listed; a base with no answers pairs nothing
    states = {r: read_run(dataset, *_folder_run(generator, r), root)
              for r in dict.fromkeys([*runs, base])}
    by_group = {r: {} for r in states}
    for r, (rs, _) in states.items():
        for row in rs:
            by_group[r].setdefault(question_group(row, dataset), []).append(row)
    groups = _group_order(dataset, {g for d in by_group.values() for g in d})
    out = []
    for run in runs:
        status = states[run][1]["status"]
        if not by_group[run] and named:  # asked for by name: said so, not dropped
            out.append({"run": run, "group": None, "n": 0, "em": math.nan, "f1": math.nan,
                        "support_recall": math.nan, "too_few": True, "n_paired": None,
                        "diff": math.nan, "lo": math.nan, "hi": math.nan,
                        "p_value": math.nan, "verdict": status, "status": status})
            continue
        for g in groups:
            mine = by_group[run].get(g, [])
            if not mine:
                continue
            rec = {"run": run, "group": g, "n": len(mine), "em": _mean(mine, "em"),
                   "f1": _mean(mine, "f1"), "support_recall": _mean(mine, "support_recall"),
                   "too_few": len(mine) < min_n, "n_paired": None, "diff": math.nan,
                   "lo": math.nan, "hi": math.nan, "p_value": math.nan, "verdict": "",
                   "status": status}
            if run != base and by_group[base]:
                theirs = by_group[base].get(g, [])
                if paired_rows(theirs, mine):
                    d = compare_runs(theirs, mine, ("f1",))["f1"]
                    rec.update(n_paired=d.n, diff=d.diff, lo=d.lo, hi=d.hi,
                               p_value=d.p_value, verdict=d.verdict)
                else:  # no question of this group in both runs (a run just started)
                    rec["n_paired"] = 0
                if rec["n_paired"] < min_n:
                    rec.update(too_few=True, verdict="too few to read")
            out.append(rec)
    df = pd.DataFrame(out, columns=list(BREAKDOWN_COLUMNS))
    df["n_paired"] = df["n_paired"].astype("Int64")  # None for the base run's own rows
    return df
