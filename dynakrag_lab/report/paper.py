"""The paper's reported numbers, and our runs beside them (the results chapter and the
diagnosis appendix).

:func:`paper_table` returns the numbers printed in the paper (Wu et al. 2026,
arXiv:2607.06507): Table 1 (Qwen2.5-7B-Instruct, EM/F1/average tokens on the full dev sets),
the ablation F1s, the retrieval-cap sweep and the GPT-4o-mini transfer F1. They are facts
quoted from the paper, kept here so the book can put them next to ours:
:func:`side_by_side` joins our runs with Table 1, :func:`ablation_table` lays out our ablation
runs in the paper's order with the paper's F1 beside each (a run not made yet stays a row,
:data:`~dynakrag_lab.report.results.NOT_RUN`).
"""
from __future__ import annotations

import math
from typing import Sequence

import pandas as pd

from .names import DATASETS
from .results import NOT_RUN, status_label

PAPER_CITATION = ("Wu et al. 2026, 'A Unified Framework for Learnable Evidence Control in "
                  "Multi-Hop RAG', arXiv:2607.06507")
# -- the paper's numbers ------------------------------------------------------------------
# Table 1, Qwen2.5-7B-Instruct: (EM, F1, average tokens) per dataset.
_TABLE1 = {
    "Fixed-K": ((.3958, .5177, 1892), (.3177, .3757, 3089), (.1518, .2553, 2918)),
    "IRCoT": ((.4339, .5617, 1724), (.3514, .4308, 2442), (.1862, .2889, 2110)),
    "S2G-RAG": ((.4425, .5710, 2807), (.3818, .4621, 3544), (.1936, .2999, 3887)),
    "CoRAG-s3": ((.4282, .5573, 2814), (.3490, .4273, 3676), (.1858, .2848, 3264)),
    "Adaptive-RAG": ((.3862, .5042, 1596), (.2976, .3557, 2180), (.1647, .2579, 2160)),
    "CRAG": ((.4181, .5445, 1720), (.3437, .4099, 2375), (.1676, .2740, 2480)),
    "Self-Ask+Search": ((.4043, .5273, 3302), (.3494, .4345, 4566), (.1974, .2998, 4762)),
    "DynaKRAG": ((.4732, .5998, 2373), (.4587, .5340, 3078), (.1986, .3061, 3082)),
}
# Our run name for the paper's methods we implement.
RUN_OF_METHOD = {"Fixed-K": "fixed_k", "IRCoT": "ircot", "Self-Ask+Search": "self_ask",
                 "DynaKRAG": "dynakrag"}
# Ablations (Qwen, F1).
_ABLATIONS = {
    "full": ("dynakrag", (.5998, .5340, .3061)),
    "no compression": ("dynakrag-no_compression", (.5826, .4963, .2978)),
    "no sufficiency check": ("dynakrag-no_sufficiency", (.5835, .4623, .2800)),
    "uniform-valid controller": ("uniform", (.5519, .4762, .2665)),
    "retrieval cap 1": ("dynakrag-cap1", (.4938, .4111, .1970)),
    "retrieval cap 2": ("dynakrag-cap2", (.5823, .5096, .2796)),
    "retrieval cap 3": ("dynakrag-cap3", (.5996, .5340, .2641)),
}
_TRANSFER_GPT4O_MINI_F1 = (.6218, .6391, .3977)


def paper_table(which: str = "main") -> pd.DataFrame:
    """The paper's reported numbers (source: :data:`PAPER_CITATION`), in long form.

    * ``"main"``: Table 1 with Qwen2.5-7B-Instruct; columns method, run (our run name or
      None for methods we do not implement), dataset, em, f1, tokens_mean, generator.
    * ``"ablations"``: F1 of the ablations and the retrieval-cap sweep; columns variant, run,
      dataset, f1, generator.
    * ``"transfer"``: DynaKRAG F1 with the Qwen-trained policy run unchanged on GPT-4o-mini,
      next to the Qwen F1; columns method, run, dataset, generator, f1, policy_generator.
    """
    gen = "Qwen2.5-7B-Instruct"
    if which == "main":
        rows = [{"method": m, "run": RUN_OF_METHOD.get(m), "dataset": d, "em": v[0], "f1": v[1],
                 "tokens_mean": float(v[2]), "generator": gen}
                for m, vals in _TABLE1.items() for d, v in zip(DATASETS, vals)]
    elif which == "ablations":
        rows = [{"variant": name, "run": run, "dataset": d, "f1": f, "generator": gen}
                for name, (run, vals) in _ABLATIONS.items() for d, f in zip(DATASETS, vals)]
    elif which == "transfer":
        rows = []
        for d, f_q, f_g in zip(DATASETS, _ABLATIONS["full"][1], _TRANSFER_GPT4O_MINI_F1):
            rows.append({"method": "DynaKRAG", "run": "dynakrag", "dataset": d,
                         "generator": gen, "f1": f_q, "policy_generator": gen})
            rows.append({"method": "DynaKRAG", "run": "dynakrag", "dataset": d,
                         "generator": "GPT-4o-mini", "f1": f_g, "policy_generator": gen})
    else:
        raise ValueError(f"unknown table {which!r}; choose main, ablations or transfer")
    df = pd.DataFrame(rows)
    df.attrs["source"] = PAPER_CITATION
    return df


def side_by_side(ours: pd.DataFrame, dataset: str, metrics=("em", "f1", "tokens_mean")
                 ) -> pd.DataFrame:
    """Our rows of ``dataset`` (one per generator and run) joined with the paper's Table 1 row
    of the same method (columns ``paper_<metric>``); runs the paper lacks get NaN there.
    ``status`` (when ``ours`` has it, as :func:`~.results.load_summaries` gives it) follows
    ``n``, so a partial run is read as one."""
    paper = paper_table("main")
    paper = paper[(paper.dataset == dataset) & paper.run.notna()]
    paper = paper.rename(columns={m: f"paper_{m}" for m in metrics})[
        ["run"] + [f"paper_{m}" for m in metrics]]
    ids = ["generator", "run", "n"] + (["status"] if "status" in ours.columns else [])
    mine = ours[ours.dataset == dataset][ids + list(metrics)]
    return mine.merge(paper, on="run", how="left").sort_values(["generator", "run"]) \
        .reset_index(drop=True)


# The paper's ablation table, in its order: the full method, the component ablations, the
# uniform-valid controller and the retrieval-cap sweep.
ABLATION_RUNS = tuple(run for run, _ in _ABLATIONS.values())
ABLATION_COLUMNS = ("variant", "run", "status", "n", "f1", "paper_f1", "em", "support_recall",
                    "tokens_mean", "llm_calls_mean", "retrieval_calls_mean")


def ablation_table(summaries: pd.DataFrame, dataset: str, generator: str,
                   runs: Sequence[str] = ABLATION_RUNS) -> pd.DataFrame:
    """One row per ablation run of ``dataset``/``generator`` in ``runs`` order, whether it
    was run or not (columns :data:`ABLATION_COLUMNS`): ``variant`` is the paper's name of the
    ablation, ``paper_f1`` its F1 in the paper (NaN for runs the paper lacks), ``status`` and
    the metrics come from ``summaries`` (:func:`~.results.load_summaries`). A run without a
    summary gets ``status`` :data:`NOT_RUN`, ``n`` 0 and NaN metrics: a missing ablation
    stays visible instead of dropping out of the table."""
    paper = paper_table("ablations")
    paper = paper[paper.dataset == dataset].set_index("run")
    mine = summaries[(summaries.dataset == dataset) & (summaries.generator == generator)]
    mine = mine.set_index("run")
    out = []
    for run in runs:
        rec = {"variant": paper.variant.get(run, run), "run": run,
               "paper_f1": float(paper.f1.get(run, math.nan))}
        if run in mine.index:
            r = mine.loc[run]
            status = r["status"] if "status" in mine.columns else status_label(
                r["n"], r.get("n_expected"), r.get("complete"))
            rec.update({k: r[k] for k in ABLATION_COLUMNS if k in r.index and k not in rec},
                       status=status)
        else:
            rec.update(status=NOT_RUN, n=0)
        out.append(rec)
    df = pd.DataFrame(out, columns=list(ABLATION_COLUMNS))
    df["n"] = df["n"].fillna(0).astype(int)
    return df


__all__ = ["ABLATION_COLUMNS", "ABLATION_RUNS", "DATASETS", "PAPER_CITATION", "RUN_OF_METHOD",
           "ablation_table", "paper_table", "side_by_side"]
