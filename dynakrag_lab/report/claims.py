"""The result, computed from the committed runs: the three claims that README, the preface and
the results chapter state, each with its n, paired interval and the comparison behind it.

Everything here reads ``results/experiments`` and calls no model. The claims are about the
1.5B reader's evaluation split (the grid with every method, the continuation controller and
its stop-at-k schedules):

1. **Action choice.** The paper's controller (``dynakrag``) against uniform-valid, F1 paired
   per question, on each dataset.
2. **Stop.** The continuation controller (``dynakrag-cont``) stops each question after some
   number of acquisitions d(q). Its stop-at-k schedules (``dynakrag-cont-stop{k}``: the same
   learned choices, the stop forced after k) give each question's F1 at every depth, so the
   stop can be tested against *its own shuffle*: give each question the depth chosen for
   another question (a random permutation of the depths) and recompute the mean F1. If the
   stop carried information about the question, its own depths would beat most shuffles
   (:func:`stop_shuffle`; one-sided p with the +1 correction).
3. **What holds.** The continuation controller against uniform-valid (F1 and tokens) and
   against one-shot top-6 retrieval (``fixed_k6``) pooled over the three datasets, where the
   two spend about the same tokens.

Each reading is stated in the four words of :mod:`.verdicts` (Holm over the three datasets).
These are exploratory: the primary tests are :mod:`.family`'s.
"""
from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from dynakrag_lite.experiments.artifacts import EXPERIMENTS_DIR

from .comparison import N_RESAMPLES, SEED, PairedDifference, paired_difference, paired_rows
from .names import DATASETS, LABELS, READER
from .results import read_run
from .verdicts import INCONCLUSIVE, TOML, Reading, holm, num, read_differences, rules

__all__ = ["READER", "DATASETS", "METHODS", "ACQUISITIONS", "StopGrid", "StopShuffle",
           "acquisitions", "stop_grid", "stop_shuffle", "results_table", "horizon_table",
           "paired_f1", "f1_difference", "f1_differences", "mean_tokens", "pooled_pairs",
           "headline_claims", "claim_sentences", "fmt_diff", "fmt_p"]

# The table's rows, in reading order: the two controllers, chance, the baselines, the bound.
METHODS = ("dynakrag", "dynakrag-cont", "uniform", "fixed_k3", "fixed_k6", "fixed_k12",
           "ircot", "self_ask", "oracle")
ACQUISITIONS = frozenset({"retrieve_more", "gap_query", "bridge_entity_expand",
                          "rewrite_query"})


def _rows(dataset: str, run: str, reader: str, root: str | Path) -> list[dict]:
    rows, status = read_run(dataset, reader, run, root)
    if not rows:
        raise FileNotFoundError(f"no answered questions in {Path(root) / dataset / reader / run}"
                                f" ({status['status']})")
    return rows


def _actions(row: Mapping) -> list:
    """The action sequence of a row's trace (empty when the row has none)."""
    return [t.get("action") for t in row.get("trace") or ()]


def acquisitions(row: Mapping) -> int:
    """How many evidence-acquiring actions a run's trace took (its stop depth)."""
    return sum(a in ACQUISITIONS for a in _actions(row))


def fmt_diff(d: PairedDifference) -> str:
    """'+.052 [+.005, +.102]': a difference with its paired 95 % interval, as the book writes
    it."""
    def f(x: float) -> str:
        s = f"{x:+.3f}"
        return ".000" if s in ("+0.000", "-0.000") else s.replace("0.", ".", 1)
    return f"{f(d.diff)} [{f(d.lo)}, {f(d.hi)}]"


def fmt_p(p: float) -> str:
    """'.30', '.004', '<.001'."""
    if p < .001:
        return "<.001"
    return f"{p:.2f}".lstrip("0") if p >= .01 else f"{p:.3f}".lstrip("0")


@dataclass(frozen=True)
class StopGrid:
    """Each question's F1 and tokens at every stop depth of one run's stop-at-k schedules,
    and the depth the run itself stopped at."""
    dataset: str
    ids: list[str]
    types: list[str]  # the question type ("bridge", "comparison", ...; "" when unknown)
    ks: list[int]  # the schedules' depths, ascending
    f1: np.ndarray  # questions x depths
    tokens: np.ndarray
    depth: np.ndarray  # the run's own stop depth per question (clipped to ks)

    def column(self, depth: np.ndarray) -> np.ndarray:
        """The column of each depth (depths are clipped to the schedules)."""
        return np.searchsorted(self.ks, np.clip(depth, self.ks[0], self.ks[-1]))


def stop_grid(dataset: str, reader: str = READER, root: str | Path = EXPERIMENTS_DIR,
              run: str = "dynakrag-cont") -> StopGrid:
    """:class:`StopGrid` of ``run``: F1 at depth k is read from the ``{run}-stop{k}`` schedule
    (the same learned choices, the stop forced after k acquisitions); a learned depth outside
    the schedules (0, or above the deepest) is clipped to the nearest, as the schedules'
    forced stop also does. Questions missing from any schedule are left out."""
    cont = {str(r["id"]): r for r in _rows(dataset, run, reader, root)}
    ks = [k for k in range(1, 9) if (Path(root) / dataset / reader / f"{run}-stop{k}").exists()]
    if not ks:
        raise FileNotFoundError(f"no {run}-stop<k> schedules for {dataset}/{reader}")
    sched = {k: {str(r["id"]): r for r in _rows(dataset, f"{run}-stop{k}", reader, root)}
             for k in ks}
    ids = [q for q in cont if all(q in sched[k] for k in ks)]
    if not ids:
        raise ValueError(f"{dataset}: no question answered by {run} and every schedule")
    return StopGrid(dataset, ids, [str(cont[q].get("type") or "") for q in ids], ks,
                    np.array([[sched[k][q]["f1"] for k in ks] for q in ids], dtype=float),
                    np.array([[sched[k][q]["tokens"] for k in ks] for q in ids], dtype=float),
                    np.clip([acquisitions(cont[q]) for q in ids], ks[0], ks[-1]))


@dataclass(frozen=True)
class StopShuffle:
    """The learned stop against its own shuffle on one dataset."""
    dataset: str
    n: int
    depths: dict[int, int]  # stop depth -> questions
    f1: float  # mean F1 at the tested depths
    shuffled_f1: float  # mean over shuffles
    p_value: float  # share of shuffles at least as good (one-sided, +1 corrected)
    tokens: float  # mean tokens at the tested depths
    depth_f1: dict[int, float]  # mean F1 of each stop-at-k schedule
    depth_tokens: dict[int, float]

    @property
    def best_fixed_depth(self) -> int:
        return max(self.depth_f1, key=lambda k: (self.depth_f1[k], -k))


def stop_shuffle(grid: StopGrid, depth: np.ndarray | None = None,
                 n_shuffles: int = N_RESAMPLES, seed: int = SEED) -> StopShuffle:
    """The shuffled-stop test (see the module docstring) of the grid's own depths, or of
    ``depth`` (one per question, e.g. a perfect stop's) when given."""
    col = grid.column(grid.depth if depth is None else np.asarray(depth))
    rows = np.arange(len(grid.ids))
    observed = float(grid.f1[rows, col].mean())
    rng = np.random.default_rng(seed)
    shuffled = np.array([grid.f1[rows, rng.permutation(col)].mean()
                         for _ in range(n_shuffles)])
    p = (int(np.sum(shuffled >= observed - 1e-12)) + 1) / (n_shuffles + 1)
    depths = np.asarray(grid.ks)[col]
    return StopShuffle(grid.dataset, len(grid.ids),
                       dict(sorted(Counter(depths.tolist()).items())), observed,
                       float(shuffled.mean()), p, float(grid.tokens[rows, col].mean()),
                       {k: float(grid.f1[:, i].mean()) for i, k in enumerate(grid.ks)},
                       {k: float(grid.tokens[:, i].mean()) for i, k in enumerate(grid.ks)})


def results_table(reader: str = READER, root: str | Path = EXPERIMENTS_DIR,
                  datasets: Sequence[str] = DATASETS,
                  methods: Sequence[str] = METHODS) -> pd.DataFrame:
    """One row per (dataset, method): n, the run's status (``complete`` or ``partial: k of
    N``), EM, F1, support recall, tokens, LLM and retrieval calls (means over the questions
    the run answered), and F1 minus the continuation
    controller's, paired per question (a blank where the run is the controller itself)."""
    out = []
    for ds in datasets:
        base = _rows(ds, "dynakrag-cont", reader, root)
        for m in methods:
            rows, status = read_run(ds, reader, m, root)
            if not rows:
                continue
            rec = {"dataset": LABELS.get(ds, ds), "method": m, "n": len(rows),
                   "status": status["status"]}
            for k in ("em", "f1", "support_recall", "tokens", "llm_calls", "retrieval_calls"):
                rec[k] = float(np.mean([r[k] for r in rows]))
            if m != "dynakrag-cont":
                d = paired_f1(rows, base)
                rec.update(vs_cont=d.diff, vs_cont_lo=d.lo, vs_cont_hi=d.hi)
            out.append(rec)
    return pd.DataFrame(out)


def horizon_table(reader: str = READER, root: str | Path = EXPERIMENTS_DIR,
                  datasets: Sequence[str] = DATASETS, ks: Sequence[int] = (1, 2, 3, 4)
                  ) -> pd.DataFrame:
    """Learned action choice at an equal horizon: for each dataset and k where both runs have
    answers, the continuation controller's stop-at-k schedule (``dynakrag-cont-stop{k}``)
    minus uniform-valid stopped after k acquisitions (``uniform-stop{k}``), F1 paired per
    question, with both runs' mean tokens over the pairs, the uniform run's status and how
    many pairs took the same actions (at k = 1 all of them: what differs there is the reader's
    reply, e.g. across llama.cpp builds, the floor under every other row)."""
    out = []
    for ds in datasets:
        for k in ks:
            learned, _ = read_run(ds, reader, f"dynakrag-cont-stop{k}", root)
            uniform, status = read_run(ds, reader, f"uniform-stop{k}", root)
            pairs = paired_rows(learned, uniform)
            if not pairs:
                continue
            d = f1_difference(pairs)
            tok_l, tok_u = mean_tokens(pairs)
            out.append({"dataset": LABELS.get(ds, ds), "k": k, "n": d.n,
                        "uniform status": status["status"], "F1 learned": d.mean_a,
                        "F1 uniform": d.mean_b, "learned - uniform": d.diff, "lo": d.lo,
                        "hi": d.hi, "p": d.p_value, "tokens learned": tok_l,
                        "tokens uniform": tok_u, "same actions": sum(
                            _actions(a) == _actions(b) for a, b in pairs),
                        "same answer": sum(a.get("prediction") == b.get("prediction")
                                           for a, b in pairs)})
    return pd.DataFrame(out)


def f1_difference(pairs: Sequence[tuple[Mapping, Mapping]]) -> PairedDifference:
    """A - B on F1 over (row of A, row of B) pairs."""
    return paired_difference([a["f1"] for a, _ in pairs], [b["f1"] for _, b in pairs], "f1")


def paired_f1(rows_a: Sequence[Mapping], rows_b: Sequence[Mapping]) -> PairedDifference:
    return f1_difference(paired_rows(rows_a, rows_b))


def mean_tokens(pairs: Sequence[tuple[Mapping, Mapping]]) -> tuple[float, float]:
    """Mean tokens of A and of B over the same pairs."""
    return (float(np.mean([a["tokens"] for a, _ in pairs])),
            float(np.mean([b["tokens"] for _, b in pairs])))


def pooled_pairs(run_a: str, run_b: str, reader: str = READER,
                 root: str | Path = EXPERIMENTS_DIR,
                 datasets: Sequence[str] = DATASETS) -> list[tuple[Mapping, Mapping]]:
    """Rows of two runs paired by question within each dataset (ids are unique within a
    dataset, not across), then pooled; a dataset where either run is missing is left out."""
    out = []
    for ds in datasets:
        a, b = (read_run(ds, reader, r, root)[0] for r in (run_a, run_b))
        out += paired_rows(a, b)
    return out


def f1_differences(pairs: Sequence[tuple[Mapping, Mapping]]) -> np.ndarray:
    """Per-question F1 of A minus B."""
    return np.array([float(a["f1"]) - float(b["f1"]) for a, b in pairs])


def headline_claims(reader: str = READER, root: str | Path = EXPERIMENTS_DIR,
                    datasets: Sequence[str] = DATASETS, tests: str | Path = TOML) -> dict:
    """The numbers behind the three claims (see the module docstring), per dataset and pooled,
    each read in the four words of ``tests`` (:mod:`.verdicts`; Holm over the three datasets).
    """
    with open(tests, "rb") as fh:
        toml = tomllib.load(fh)
    r = rules(data=toml)
    runs = {ds: {m: _rows(ds, m, reader, root)
                 for m in ("dynakrag", "dynakrag-cont", "uniform")}
            for ds in datasets}
    pairs = {ds: {"choice": paired_rows(x["dynakrag"], x["uniform"]),
                  "cont": paired_rows(x["dynakrag-cont"], x["uniform"])}
             for ds, x in runs.items()}
    choice = {ds: f1_difference(p["choice"]) for ds, p in pairs.items()}
    cont_uniform = {ds: f1_difference(p["cont"]) for ds, p in pairs.items()}
    shuffles = {ds: stop_shuffle(stop_grid(ds, reader, root)) for ds in datasets}

    def read(diffs: Mapping[str, PairedDifference], key: str) -> dict:
        adj = dict(zip(datasets, holm([diffs[ds].p_value for ds in datasets])))
        return {ds: read_differences(f1_differences(pairs[ds][key]), adj[ds], r)
                for ds in datasets}

    saving, k6_ratio = {}, {}
    k6_by = {ds: pooled_pairs("dynakrag-cont", "fixed_k6", reader, root, (ds,))
             for ds in datasets}  # read once: per dataset for the ratios, pooled for the test
    for ds in datasets:
        cont, uni = mean_tokens(pairs[ds]["cont"])
        saving[ds] = 1.0 - cont / uni
        cont6, k6_tokens = mean_tokens(k6_by[ds])
        k6_ratio[ds] = cont6 / k6_tokens
    k6 = [pair for ds in datasets for pair in k6_by[ds]]
    k6_diff = f1_difference(k6)
    return {"reader": reader, "datasets": list(datasets), "rules": r, "choice": choice,
            "choice_read": read(choice, "choice"), "shuffles": shuffles,
            "shuffles_holm": dict(zip(datasets, holm([shuffles[ds].p_value
                                                      for ds in datasets]))),
            "cont_uniform": cont_uniform, "cont_uniform_read": read(cont_uniform, "cont"),
            "token_saving": saving, "vs_fixed_k6": k6_diff,
            "vs_fixed_k6_read": read_differences(f1_differences(k6), k6_diff.p_value, r),
            "vs_fixed_k6_tokens": mean_tokens(k6), "vs_fixed_k6_ratio": k6_ratio,
            "paper_margin": {k: dict(v) for k, v in toml["paper_margin"].items()}}


def _tested(d: PairedDifference, reading: Reading, adjusted: bool = True) -> str:
    """'+.052 [+.005, +.102] (n = 150, Holm p = .12, detectable .070)' (a lone test, not
    ``adjusted``: 'p = ')."""
    p = f"{'Holm p' if adjusted else 'p'} = {fmt_p(reading.p_holm)}"
    return f"{fmt_diff(d)} (n = {d.n}, {p}, detectable {num(reading.mde)})"


def _per_dataset(c: Mapping, diffs: str) -> str:
    """'HotpotQA: inconclusive at this n, +.012 [-.032, +.055] (n = 150, Holm p = .61,
    detectable .063); 2Wiki: ...', with the Holm p :func:`headline_claims` read them at."""
    read = c[f"{diffs}_read"]
    return "; ".join(f"{LABELS[d]}: {read[d].word}, {_tested(c[diffs][d], read[d])}"
                     for d in c["datasets"])


def claim_sentences(c: Mapping) -> list[str]:
    """The result in three sentences, with every number computed and every verdict one of the
    four words (:mod:`.verdicts`). README, the preface and the results chapter state these;
    ``tests/lab/test_claims.py`` checks they still match. Exploratory: these runs were read before
    the primary tests (results/primary_tests.toml) were named."""
    ds, r = c["datasets"], c["rules"]
    margin = c["paper_margin"]["uniform"]
    kept = [LABELS[d] for d in ds if not c["choice_read"][d].excludes(margin[d])]
    excluded = [LABELS[d] for d in ds if c["choice_read"][d].excludes(margin[d])]
    paper = (f"the paper's gains ({' / '.join(f'+{num(margin[d])}' for d in ds)}) lie inside "
             f"the {' and '.join(kept) or 'no'} interval{'s' if len(kept) != 1 else ''}"
             + (f" and are excluded on {' and '.join(excluded)}" if excluded else ""))
    first = (f"Learned action choice against uniform-valid (a random valid action, one draw), "
             f"F1 paired per question, Holm's adjustment over the three datasets, 'detectable' "
             f"the smallest difference this n sees with {r.power:.0%} power: "
             f"{_per_dataset(c, 'choice')}; {paper}.")
    sh, sh_holm = c["shuffles"], c["shuffles_holm"]
    beaten = [d for d in ds if sh_holm[d] < r.alpha]
    second = ("The learned stop against its own shuffle (each question given another "
              "question's stop depth): "
              + (f"better on {', '.join(LABELS[d] for d in beaten)}; " if beaten else "")
              + f"{INCONCLUSIVE} on "
              + " / ".join(LABELS[d] for d in ds if d not in beaten) + " (one-sided Holm p = "
              + " / ".join(fmt_p(sh_holm[d]) for d in ds if d not in beaten) + ").")
    sav = c["token_saving"]
    k6, k6r, ratio = c["vs_fixed_k6"], c["vs_fixed_k6_read"], c["vs_fixed_k6_ratio"]
    third = (f"The continuation controller against uniform-valid, at "
             f"{' / '.join(f'{sav[d]:.0%}' for d in ds)} fewer tokens: "
             f"{_per_dataset(c, 'cont_uniform')}. Against one-shot top-6 retrieval, pooled: "
             f"{k6r.word}, {_tested(k6, k6r, adjusted=False)} at "
             f"{c['vs_fixed_k6_tokens'][0]:,.0f} against {c['vs_fixed_k6_tokens'][1]:,.0f} "
             f"tokens per question, though per dataset it spends "
             f"{' / '.join(f'{ratio[d]:.2f}' for d in ds)} times "
             f"top-6's tokens.")
    return [first, second, third]


