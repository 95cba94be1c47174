"""Paired comparison: the bootstrap interval and the permutation p-value against cases whose
answer is known in closed form."""
import numpy as np
import pytest

from dynakrag_lab.report.comparison import (A_BETTER, A_WORSE, NO_DIFFERENCE, compare_runs,
                                            paired_difference, paired_rows, verdict)


def test_identical_runs_have_a_zero_interval_and_p_value_one():
    x = [0.0, 0.5, 1.0, 0.25, 0.75]
    r = paired_difference(x, x, "f1")
    assert (r.diff, r.lo, r.hi, r.p_value) == (0.0, 0.0, 0.0, 1.0)
    assert r.verdict == "no measurable difference" and (r.wins, r.losses) == (0, 0)


def test_a_constant_shift_is_the_interval_and_is_significant():
    rng = np.random.default_rng(0)
    b = rng.uniform(0, 0.8, 40)
    r = paired_difference(b + 0.2, b, "f1", n_resamples=2000)
    assert r.lo == pytest.approx(0.2) and r.hi == pytest.approx(0.2)
    assert r.p_value == pytest.approx(1 / 2001)  # only the all-same-sign flips tie
    assert r.verdict == "A better" and r.wins == 40


def test_bootstrap_interval_of_two_questions_spans_the_exact_resampling_distribution():
    # d = (0, 1): resampled means are 0, .5, 1 with probabilities 1/4, 1/2, 1/4, so the
    # 2.5 % and 97.5 % quantiles are 0 and 1.
    r = paired_difference([0.0, 1.0], [0.0, 0.0])
    assert (r.lo, r.hi, r.diff) == (0.0, 1.0, 0.5)


def test_permutation_p_value_matches_exact_enumeration():
    # d = (1, 1, 1): of the 8 sign patterns, 2 reach |mean| = 1, so p = 1/4.
    r = paired_difference([1.0, 1.0, 1.0], [0.0, 0.0, 0.0])
    assert abs(r.p_value - 0.25) < 0.02
    # d = (1, -1, 2, 0): |mean| = .5; patterns with |mean| >= .5: enumerate them.
    d = np.array([1.0, -1.0, 2.0, 0.0])
    signs = np.array(np.meshgrid(*[[-1, 1]] * 4)).T.reshape(-1, 4)
    exact = np.mean(np.abs((signs * d).mean(axis=1)) >= abs(d.mean()) - 1e-12)
    r = paired_difference(d, np.zeros(4))
    assert abs(r.p_value - exact) < 0.02


def test_interval_width_matches_the_normal_approximation_on_a_large_sample():
    rng = np.random.default_rng(1)
    b = rng.uniform(0, 1, 400)
    a = b + 0.1 + rng.normal(0, 0.3, 400)
    r = paired_difference(a, b)
    d = a - b
    half = 1.96 * d.std(ddof=1) / np.sqrt(len(d))
    assert r.lo < 0.1 < r.hi
    assert (r.hi - r.lo) / 2 == pytest.approx(half, rel=0.1)


def test_same_seed_gives_the_same_interval():
    rng = np.random.default_rng(2)
    a, b = rng.uniform(size=30), rng.uniform(size=30)
    assert paired_difference(a, b) == paired_difference(a, b)


def test_verdict_calls_an_interval_containing_zero_no_difference():
    assert verdict(-0.01, 0.3, 0.01) == "no measurable difference"
    assert verdict(0.01, 0.3, 0.01) == "A better" and verdict(-0.3, -0.01, 0.01) == "A worse"


def test_verdict_strings_are_the_committed_ones():
    # result files and notebook outputs store these strings: renaming one orphans them
    assert (A_BETTER, A_WORSE, NO_DIFFERENCE) == ("A better", "A worse",
                                                  "no measurable difference")


def test_few_discordant_questions_are_no_measurable_difference_even_if_the_interval_is():
    # 4 wins of +.5, 96 ties: the bootstrap interval excludes 0 but the exact sign-flip
    # p-value is 2/16 = .125, so no claim is made.
    a = np.array([0.5] * 4 + [0.0] * 96)
    r = paired_difference(a, np.zeros(100))
    assert r.lo > 0 and abs(r.p_value - 0.125) < 0.02
    assert r.verdict == "no measurable difference"


def test_unequal_or_empty_or_missing_samples_are_refused():
    with pytest.raises(ValueError, match="equal-length"):
        paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no paired questions"):
        paired_difference([], [])
    with pytest.raises(ValueError, match="missing values"):
        paired_difference([1.0, float("nan")], [1.0, 1.0], "f1")


def test_pairing_is_by_id_and_leaves_out_errors_and_unmatched_questions():
    a = [{"id": "q1", "f1": 1.0}, {"id": "q2", "f1": 0.0}, {"id": "q3", "error": "x"},
         {"id": "q4", "f1": 0.5}]
    b = [{"id": "q4", "f1": 0.0}, {"id": "q1", "f1": 0.5}, {"id": "q3", "f1": 1.0},
         {"id": "q2", "error": "timeout"}]
    pairs = paired_rows(a, b)
    assert [(x["id"], y["id"]) for x, y in pairs] == [("q1", "q1"), ("q4", "q4")]
    res = compare_runs(a, b, metrics=("f1",), n_resamples=500)
    assert res["f1"].n == 2 and res["f1"].diff == pytest.approx(0.5)


def test_a_cost_metric_calls_the_cheaper_run_better():
    from dynakrag_lab.report.comparison import paired_difference
    more = paired_difference([900.0, 1000.0, 1100.0] * 10, [400.0, 420.0, 380.0] * 10, "tokens")
    assert more.diff > 0 and more.verdict == "A worse"
    less = paired_difference([400.0, 420.0, 380.0] * 10, [900.0, 1000.0, 1100.0] * 10, "tokens")
    assert less.verdict == "A better"
    # quality metrics keep their sense
    assert paired_difference([1.0] * 30, [0.0] * 30, "f1").verdict == "A better"
