"""Run-minus-other F1 pairs read in the four words (:mod:`.verdicts`), with Holm's adjustment
over the datasets of one reader and pair, as the results chapter reads its claims: the
diagnosis appendix's tables of learned choice against uniform-valid and of the ablations."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np
import pandas as pd

from .names import LABELS
from .claims import f1_difference, f1_differences, fmt_diff, fmt_p
from .comparison import paired_rows
from .headline import short_names
from .results import locate, read_run
from .verdicts import TOML, Rules, holm, num, read_differences, rules

__all__ = ["read_pairs", "pairs_view", "words_sentence"]


def read_pairs(specs: Iterable[tuple[str, str, str, str]], root: str | Path = "results/experiments",
               r: Rules | None = None) -> pd.DataFrame:
    """Each (dataset, reader, run, other) with both runs: run minus other on F1 per question,
    its interval, Holm p (over the datasets of one reader, run and other), the smallest
    difference this n detects, and its reading in the four words."""
    r = r or rules(locate(TOML))
    rows = []
    for d, g, a, b in specs:
        pairs = paired_rows(read_run(d, g, a, root)[0], read_run(d, g, b, root)[0])
        if pairs:
            rows.append({"dataset": d, "reader": g, "run": a, "other": b, "n": len(pairs),
                         "pd": f1_difference(pairs),
                         "d": f1_differences(pairs)})
    t = pd.DataFrame(rows, columns=["dataset", "reader", "run", "other", "n", "pd", "d"])
    t["p_holm"] = np.nan
    for _, fam in t.groupby(["reader", "run", "other"], sort=False):
        t.loc[fam.index, "p_holm"] = holm([p.p_value for p in fam.pd])
    reads = [read_differences(d, p, r) for d, p in zip(t.d, t.p_holm)]
    return t.assign(diff=[p.diff for p in t.pd], mde=[x.mde for x in reads],
                    word=[x.word for x in reads])


def pairs_view(t: pd.DataFrame) -> pd.DataFrame:
    """:func:`read_pairs` as the appendix shows it."""
    return pd.DataFrame({"dataset": t.dataset.map(LABELS), "reader": t.reader.map(
        short_names(t.reader)), "run minus other": t.run + " - " + t.other, "n": t.n,
        "F1 difference [95 % CI]": [fmt_diff(p) for p in t.pd],
        "Holm p": [fmt_p(p) for p in t.p_holm], "detectable": [num(m) for m in t.mde],
        "reading": t.word}).reset_index(drop=True)


def words_sentence(t: pd.DataFrame) -> str:
    """Per reader, how many pairs got each word: 'with 0.5b: inconclusive at this n on 3 of 3'."""
    short = short_names(t.reader)
    return "; ".join(f"with the {short[g]} reader " + ", ".join(
        f"{w} on {k} of {len(f)}" for w, k in f.word.value_counts().items())
        for g, f in t.groupby("reader", sort=False)) + "."
