"""The four words every stated result uses (dynakrag_lab.report.verdicts): a clear gain is
better, a clear loss worse, a tight interval around 0 equivalent, and a wide one inconclusive
— never "ties"."""
from __future__ import annotations

import numpy as np
import pytest

from dynakrag_lab.report.verdicts import (BETTER, INCONCLUSIVE, WORSE, Rules, equivalent_word,
                                          holm, mde, pair_word, read_differences)

R = Rules(alpha=.05, margin=.03, power=.80)


def _noise(n: int, sd: float, seed: int = 0) -> np.ndarray:
    d = np.random.default_rng(seed).normal(0, sd, n)
    return d - d.mean()  # mean exactly 0, so each case below sets its own mean


@pytest.mark.parametrize("shift, p_holm, word", [(+.10, .001, BETTER), (-.10, .001, WORSE)])
def test_a_difference_told_apart_from_zero_is_better_or_worse_by_its_sign(shift, p_holm, word):
    assert read_differences(_noise(150, .2) + shift, p_holm, R).word == word


def test_a_tight_interval_inside_the_margin_is_equivalent_and_a_wide_one_inconclusive():
    tight = read_differences(_noise(400, .05) + .005, .6, R)
    wide = read_differences(_noise(40, .4) + .005, .6, R)
    assert tight.word == equivalent_word(.03) == "equivalent within ±.03"
    assert wide.word == INCONCLUSIVE and wide.mde > .03


def test_the_detectable_effect_halves_when_n_quadruples():
    d = _noise(100, .3)
    assert mde(np.tile(d, 4), .05, .8) == pytest.approx(mde(d, .05, .8) / 2, rel=.02)


def test_a_paper_margin_above_the_upper_bound_is_excluded_and_one_below_is_not():
    r = read_differences(_noise(150, .2) - .02, .5, R)
    assert r.excludes(.05) and not r.excludes(-.03)


def test_holm_multiplies_the_smallest_p_by_the_family_size_and_keeps_order():
    assert holm([.01, .04, .03]) == pytest.approx([.03, .06, .06])
    assert holm([.5]) == [.5]


def test_a_reading_has_its_numbers_before_its_holm_p_and_its_word_only_after():
    d = _noise(150, .2) + .10
    early = read_differences(d, float("nan"), R)  # as a family's reader takes each test
    with pytest.raises(ValueError, match="Holm p"):
        early.word
    late = read_differences(d, .001, R)
    assert late.word == BETTER and read_differences(d, .2, R).word == INCONCLUSIVE
    numbers = ("n", "diff", "p_tost", "tost_lo", "tost_hi", "mde", "equivalent")
    assert [getattr(late, k) for k in numbers] == [getattr(early, k) for k in numbers]
    assert not late.equivalent and late.tost_lo < .10 < late.tost_hi


def test_a_pair_read_on_its_own_says_better_worse_or_inconclusive_and_keeps_a_reason():
    assert [pair_word(v) for v in ("A better", "A worse", "no measurable difference",
                                   "not run yet")] == [BETTER, WORSE, INCONCLUSIVE,
                                                       "not run yet"]
