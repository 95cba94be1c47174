"""EM/F1 as the official HotpotQA script computes them, support recall."""
import pytest

from dynakrag_lite.metrics import (em_f1, exact_match, f1_precision_recall, f1_score,
                                   normalize_answer, support_recall)


def test_normalization_drops_case_punctuation_articles_and_extra_space():
    assert normalize_answer("  The  Battle of Guam! ") == "battle of guam"
    assert normalize_answer("An apple, a pear") == "apple pear"
    # articles only as whole words: "theatre" keeps its "the"
    assert normalize_answer("Theatre") == "theatre"


def test_exact_match_after_normalization():
    assert exact_match("the Battle of Guam.", "Battle of Guam") == 1.0
    assert exact_match("Battle of Manila", "Battle of Guam") == 0.0


@pytest.mark.parametrize("pred,gold,expected", [
    # values worked out by hand with hotpot_evaluate_v1.f1_score's formula
    ("Barack Obama", "Obama", 2 * 0.5 * 1.0 / 1.5),
    ("the united states of america", "United States", 2 * 0.5 * 1.0 / 1.5),
    ("Paris France", "Paris, France", 1.0),
    ("London", "Paris", 0.0),
])
def test_token_f1_matches_official_formula(pred, gold, expected):
    assert f1_score(pred, gold) == pytest.approx(expected)


def test_yes_no_rule_zeroes_partial_overlap():
    # "no" vs "no way": tokens overlap, but HotpotQA scores a yes/no mismatch as 0
    assert f1_score("no", "no way") == 0.0
    assert f1_score("yes it is", "yes") == 0.0
    assert f1_score("noanswer", "answer") == 0.0
    assert f1_score("Yes.", "yes") == 1.0
    assert f1_precision_recall("yes", "no") == (0.0, 0.0, 0.0)


def test_max_over_answer_aliases():
    em, f1 = em_f1("JFK", ["John F. Kennedy", "JFK"])
    assert (em, f1) == (1.0, 1.0)
    em, f1 = em_f1("Kennedy", ["John F. Kennedy", "President Kennedy"])
    assert em == 0.0 and f1 == pytest.approx(2 * 1.0 * 0.5 / 1.5)


def test_empty_prediction_scores_zero():
    assert em_f1("", ["Paris"]) == (0.0, 0.0)


def test_support_recall_counts_gold_titles_present():
    assert support_recall(["A", "b.", "C"], ["A", "B"]) == 1.0
    assert support_recall(["A"], ["A", "B"]) == 0.5
    assert support_recall([], ["A", "B"]) == 0.0
    with pytest.raises(ValueError):
        support_recall(["A"], [])
