"""Paired comparison of two methods on the same questions: the difference of a per-question
metric with a paired bootstrap interval and a paired permutation p-value.

Both methods answered the same questions, so the comparison is made per question: with
d_i = m_A(q_i) - m_B(q_i) the estimate is the mean of d, its 95 % interval comes from
resampling *questions* (the d_i) with replacement, and the p-value from the sign-flip
permutation test (under "no difference" the sign of each d_i is exchangeable). Pairing removes
the between-question variance, which dominates in multi-hop QA: an unpaired interval on the
same runs is several times wider.

A difference whose interval contains 0 gets the token NO_DIFFERENCE, never A better or worse
(:func:`verdict`); readers say it as "inconclusive at this n" (:func:`.verdicts.pair_word`). So
does one whose permutation p-value is 0.05 or more: with few discordant questions (say 4 higher
and none lower) the percentile bootstrap interval can exclude 0 while the exact sign-flip test
cannot reject (p = 2/16), and the claim follows the weaker one.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

import numpy as np

__all__ = ["PairedDifference", "paired_difference", "paired_rows", "compare_runs", "verdict",
           "A_BETTER", "A_WORSE", "NO_DIFFERENCE", "COMPARATIVE", "N_RESAMPLES", "SEED"]

N_RESAMPLES = 10_000
# Costs: for these a positive difference A - B means A spent more, so A is the worse.
COST_METRICS = frozenset({"tokens", "prompt_tokens", "completion_tokens", "llm_calls",
                          "retrieval_calls", "seconds", "n_docs"})
SEED = 20260706  # fixed, so that every table regenerates to the same digits

# The verdicts of :func:`verdict`: tokens stored in committed result files, so their values must
# not change; no reader prints them (:func:`.verdicts.pair_word` says them in the four words).
A_BETTER = "A better"
A_WORSE = "A worse"
NO_DIFFERENCE = "no measurable difference"
COMPARATIVE = {A_BETTER: "better", A_WORSE: "worse"}


@dataclass(frozen=True)
class PairedDifference:
    metric: str
    n: int
    mean_a: float
    mean_b: float
    diff: float  # mean of A - B over the paired questions
    lo: float  # paired bootstrap 95 % interval of diff
    hi: float
    p_value: float  # two-sided paired permutation (sign-flip) test
    wins: int  # questions where A > B
    losses: int  # questions where A < B

    @property
    def verdict(self) -> str:
        if self.metric in COST_METRICS:  # fewer is better: read the interval the other way
            return verdict(-self.hi, -self.lo, self.p_value)
        return verdict(self.lo, self.hi, self.p_value)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["verdict"] = self.verdict
        return d


def verdict(lo: float, hi: float, p_value: float = 0.0, alpha: float = 0.05) -> str:
    """'A better' / 'A worse' when the interval excludes 0 *and* the permutation p-value is
    below ``alpha``; otherwise NO_DIFFERENCE."""
    if p_value < alpha and lo > 0:
        return A_BETTER
    if p_value < alpha and hi < 0:
        return A_WORSE
    return NO_DIFFERENCE


def paired_difference(a: Sequence[float], b: Sequence[float], metric: str = "",
                      n_resamples: int = N_RESAMPLES, seed: int = SEED,
                      level: float = 0.95) -> PairedDifference:
    """Mean of ``a - b`` (aligned per question) with a percentile bootstrap interval over
    questions and a two-sided sign-flip permutation p-value (Monte Carlo, ``n_resamples``
    draws, with the +1 correction so that p is never 0)."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired samples must be two equal-length vectors, got {x.shape} and "
                         f"{y.shape}")
    if len(x) == 0:
        raise ValueError("no paired questions to compare")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError(f"{metric or 'metric'} has missing values; drop those questions first")
    d = x - y
    n = len(d)
    rng = np.random.default_rng(seed)
    # Bootstrap: resample question indices; the mean of each resample.
    idx = rng.integers(0, n, size=(n_resamples, n))
    boots = d[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(boots, [alpha, 1.0 - alpha])
    # Permutation: random sign flips of the paired differences.
    observed = abs(d.mean())
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_resamples, n))
    null = np.abs((signs * d).mean(axis=1))
    # A tolerance, so that ties from float rounding count as "at least as extreme".
    extreme = int(np.sum(null >= observed - 1e-12))
    p = (extreme + 1) / (n_resamples + 1)
    return PairedDifference(metric, n, float(x.mean()), float(y.mean()), float(d.mean()),
                            float(lo), float(hi), float(min(1.0, p)), int(np.sum(d > 0)),
                            int(np.sum(d < 0)))


def paired_rows(rows_a: Iterable[Mapping], rows_b: Iterable[Mapping]
                ) -> list[tuple[Mapping, Mapping]]:
    """Rows of two runs paired by question ``id``, in A's order. Error rows (``"error"``)
    are not answers: a question that failed in either run is left out of the pairing."""
    b_by_id = {str(r["id"]): r for r in rows_b if not r.get("error")}
    return [(r, b_by_id[str(r["id"])]) for r in rows_a
            if not r.get("error") and str(r["id"]) in b_by_id]


def compare_runs(rows_a: Iterable[Mapping], rows_b: Iterable[Mapping],
                 metrics: Sequence[str] = ("f1", "em", "support_recall"),
                 n_resamples: int = N_RESAMPLES, seed: int = SEED
                 ) -> dict[str, PairedDifference]:
    """Per metric, the paired difference A - B over the questions both runs answered."""
    pairs = paired_rows(rows_a, rows_b)
    return {m: paired_difference([float(a[m]) for a, _ in pairs],
                                 [float(b[m]) for _, b in pairs], m, n_resamples, seed)
            for m in metrics}


def fmt_ci(diff: float, lo: float, hi: float) -> str:
    """'+0.052 [+0.005, +0.102]': a difference with its interval."""
    return f"{diff:+.3f} [{lo:+.3f}, {hi:+.3f}]"
