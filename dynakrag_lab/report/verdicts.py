"""The four words a stated result may use: *better*, *worse*, *equivalent within ±m*, or
*inconclusive at this n* (results/primary_tests.toml, ``[rules]``). "Ties" and "matches" are
not among them: an interval that still holds an effect worth having is inconclusive, and only
a TOST that excludes ±m on both sides earns "equivalent".

One reading of per-question differences d = A - B (:func:`read_differences`):

* ``p_holm`` < alpha decides better / worse by the sign of the mean (the caller adjusts p over
  its family; :func:`holm`);
* else TOST at ±m, **t-based** (p_lower tests H0 mean <= -m, p_upper H0 mean >= m, one-sided
  Student t on n - 1 degrees of freedom; p_tost is the larger, the same event as the t-based
  1 - 2 alpha interval lying inside ±m) gives "equivalent within ±m";
* else "inconclusive at this n", with the minimal detectable effect at the toml's power,
  ``(z_{1-alpha/2} + z_power) * sd(d) / sqrt(n)``, to say how large an effect this n could see.

Both the primary family (:mod:`.family`) and the exploratory sentences of README and the
preface (:mod:`.claims`) read their words here, so one rule speaks everywhere. Where a pair is
read on its own (exploratory: no Holm, no equivalence test), :func:`pair_word` says the token
of :func:`.comparison.verdict` in the same words, and :func:`interval_word` a bare interval's.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from scipy import stats

from .comparison import COMPARATIVE, NO_DIFFERENCE, verdict

__all__ = ["BETTER", "WORSE", "INCONCLUSIVE", "TOML", "Rules", "Reading", "rules", "num",
           "within_words", "equivalent_word", "holm", "tost", "mde", "four_words",
           "read_differences", "pair_word", "interval_word"]

TOML = "results/primary_tests.toml"
BETTER, WORSE, INCONCLUSIVE = "better", "worse", "inconclusive at this n"


@dataclass(frozen=True)
class Rules:
    alpha: float
    margin: float  # the equivalence margin m in F1
    power: float


def rules(path: str | Path = TOML, data: Mapping | None = None) -> Rules:
    """alpha, equivalence margin and power as the toml names them (``data``: already parsed)."""
    if data is None:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    return Rules(float(data["alpha"]), float(data["equivalence_margin"]), float(data["power"]))


def num(x: float, fmt: str = ".3f") -> str:
    """'.070', '-.011' (``fmt`` "g": '.03'): the book's way of writing a number below 1."""
    s = format(x, fmt)
    return s.replace("0.", ".", 1) if s.lstrip("-").startswith("0.") else s


def within_words(margin: float) -> str:
    return f"within ±{num(margin, 'g')}"


def equivalent_word(margin: float) -> str:
    return f"equivalent {within_words(margin)}"


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the input order."""
    p = np.asarray(p_values, dtype=float)
    order = np.argsort(p, kind="stable")
    adjusted = np.empty(len(p))
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def tost(d: np.ndarray, margin: float, alpha: float) -> tuple[float, float, float]:
    """(p_tost, lower, upper bound of the t-based 1 - 2 alpha interval) of mean(d) against
    ±margin (see the module docstring)."""
    n, diff = len(d), float(np.mean(d))
    se = float(np.std(d, ddof=1)) / math.sqrt(n) if n > 1 else math.nan
    if not se > 0:  # every difference equal (or n = 1): the mean is known exactly or not at all
        inside = n > 1 and -margin < diff < margin
        return (0.0 if inside else 1.0), diff, diff
    p_lower = float(stats.t.sf((diff + margin) / se, n - 1))
    p_upper = float(stats.t.cdf((diff - margin) / se, n - 1))
    half = float(stats.t.ppf(1 - alpha, n - 1)) * se
    return max(p_lower, p_upper), diff - half, diff + half


def mde(d: np.ndarray, alpha: float, power: float) -> float:
    """The smallest mean difference a two-sided paired test at ``alpha`` detects with
    ``power`` at this n and this spread of differences (normal approximation)."""
    if len(d) < 2:
        return math.nan
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return float(z * np.std(d, ddof=1) / math.sqrt(len(d)))


def four_words(diff: float, p_holm: float, p_tost: float, r: Rules) -> str:
    """The verdict of one test from its mean difference, Holm-adjusted p and TOST p."""
    if p_holm < r.alpha and diff != 0:
        return BETTER if diff > 0 else WORSE
    if p_tost < r.alpha:
        return equivalent_word(r.margin)
    return INCONCLUSIVE


@dataclass(frozen=True)
class Reading:
    """What :func:`read_differences` reads from one test's per-question differences. Only the
    word needs the Holm p of the test's family: a family's reader (:func:`.family.read_test`)
    reads each test's numbers with ``p_holm`` NaN and words it once the family is adjusted
    (:func:`.family.verdict_word`). A test read alone is a family of one: its p is its Holm p."""
    n: int
    diff: float
    p_tost: float
    tost_lo: float  # the t-based 1 - 2 alpha interval: each end a one-sided 1 - alpha bound
    tost_hi: float
    mde: float
    rules: Rules
    p_holm: float = math.nan

    @property
    def equivalent(self) -> bool:
        return self.p_tost < self.rules.alpha

    @property
    def word(self) -> str:
        if math.isnan(self.p_holm):  # a NaN p would read as "not better" without a word said
            raise ValueError("a reading has no word before its Holm p")
        return four_words(self.diff, self.p_holm, self.p_tost, self.rules)

    def excludes(self, margin: float) -> bool:
        """Is an effect of ``margin`` (A ahead by it) excluded, one-sided?"""
        return self.tost_hi < margin


def read_differences(d: Sequence[float], p_holm: float, r: Rules) -> Reading:
    """The :class:`Reading` of differences ``d`` (A - B per question) at the toml's rules
    ``r``, with the test's Holm-adjusted ``p_holm`` (NaN: not adjusted yet, no word)."""
    arr = np.asarray(d, dtype=float)
    p_t, lo, hi = tost(arr, r.margin, r.alpha)
    return Reading(len(arr), float(arr.mean()), p_t, lo, hi, mde(arr, r.alpha, r.power), r,
                   p_holm)


def pair_word(token: str) -> str:
    """A pair's :func:`.comparison.verdict` token in the four words, read on its own
    (exploratory: no Holm, no equivalence test): better / worse, else inconclusive at this n;
    a reason why the pair was not made ("not run yet") stays as it is."""
    return COMPARATIVE.get(token, INCONCLUSIVE if token == NO_DIFFERENCE else token)


def interval_word(lo: float, hi: float) -> str:
    """A 95 % interval read on its own where no p-value is kept (a bootstrap of a study):
    better above 0, worse below, else inconclusive at this n."""
    return pair_word(verdict(lo, hi))
