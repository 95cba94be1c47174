"""support_recall_at_k: per-question SR@k rows used by the retrieval chapter's curves."""
import pytest

from dynakrag_lite.metrics import support_recall_at_k


def test_rows_follow_the_ranking_and_match_titles_normalized():
    rows = support_recall_at_k([["A", "x", "the b!", "y"]], [["a", "The B"]], [0, 1, 2, 3, 4])
    assert rows == [[0.0, 0.5, 0.5, 1.0, 1.0]]


def test_one_row_per_question_and_monotone_in_k():
    rankings = [["p", "q", "r"], ["r", "s", "t"]]
    golds = [["q"], ["t", "zz"]]
    rows = support_recall_at_k(rankings, golds, [1, 2, 3, 10])
    assert rows == [[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.5, 0.5]]
    for row in rows:
        assert row == sorted(row)


def test_bad_input_raises():
    with pytest.raises(ValueError):
        support_recall_at_k([["a"]], [], [1])
    with pytest.raises(ValueError):
        support_recall_at_k([["a"]], [["a"]], [-1])
    with pytest.raises(ValueError):  # a question without gold support
        support_recall_at_k([["a"]], [[]], [1])
