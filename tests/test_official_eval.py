"""The committed HotpotQA runs, re-scored with the official ``hotpot_evaluate_v1.py`` rules.

The official evaluator's answer part is re-implemented below from its published rules, on
purpose without importing anything from :mod:`dynakrag_lite.metrics`:

* ``normalize_answer``: lowercase; drop every character of ``string.punctuation``; replace the
  whole words a / an / the (regex ``\\b(a|an|the)\\b``) by a space; collapse whitespace.
  The steps run in that order (so "a.n" loses its dot first and then goes as an article).
* ``exact_match_score``: the two normalized strings are equal.
* ``f1_score``: 0 (and precision = recall = 0) when the normalized prediction or the normalized
  ground truth is one of yes / no / noanswer and the two differ; otherwise token overlap of the
  normalized strings split on whitespace, counted with multiplicity (``Counter`` intersection):
  precision = same / len(prediction tokens), recall = same / len(truth tokens),
  F1 = 2PR / (P + R), and 0 when nothing overlaps.
* ``eval``: per gold question ``update_answer`` adds ``float(em)``, f1, precision and recall;
  the sums are divided by the number of gold questions.

The official script scores one gold answer per question. The project scores a question against
its ``answers`` list, taking the max over the aliases for EM and for F1 separately; on HotpotQA
every question has exactly one answer, so the two coincide (checked below).

Three checks against the committed runs ``results/experiments/hotpotqa/qwen2.5-coder-0.5b/*``
(latest row of each question, error rows left out, read with the project's own reader):
each row's stored ``em`` / ``f1``, each ``summary.json``'s ``em`` / ``f1`` mean, and
:mod:`dynakrag_lite.metrics` itself on every (prediction, answer) string pair, all to 1e-9.
"""
from __future__ import annotations

import json
import random
import re
import string
from collections import Counter
from pathlib import Path

import pytest

from dynakrag_lite.experiments.folder import is_error, latest_rows, read_predictions
from dynakrag_lite.metrics import (em_f1, exact_match, f1_precision_recall, f1_score,
                                   normalize_answer)
from helpers import in_ci

REPO = Path(__file__).resolve().parents[1]
RUNS_ROOT = REPO / "results" / "experiments" / "hotpotqa" / "qwen2.5-coder-0.5b"
REQUIRED_RUNS = ("dynakrag", "fixed_k3", "ircot", "self_ask", "uniform", "oracle")
TOL = 1e-9


# -- the official rules, written out independently ------------------------------------------
_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLE_WORD = re.compile(r"\b(a|an|the)\b")
_SPECIAL_ANSWERS = frozenset({"yes", "no", "noanswer"})


def official_normalize_answer(text: str) -> str:
    lowered = text.lower()
    without_punctuation = lowered.translate(_DROP_PUNCTUATION)
    without_articles = _ARTICLE_WORD.sub(" ", without_punctuation)
    return " ".join(without_articles.split())


def official_exact_match(prediction: str, ground_truth: str) -> bool:
    return official_normalize_answer(prediction) == official_normalize_answer(ground_truth)


def official_f1(prediction: str, ground_truth: str) -> tuple[float, float, float]:
    """(f1, precision, recall) as the official ``f1_score`` returns them."""
    pred = official_normalize_answer(prediction)
    truth = official_normalize_answer(ground_truth)
    if pred in _SPECIAL_ANSWERS and pred != truth:
        return 0.0, 0.0, 0.0
    if truth in _SPECIAL_ANSWERS and pred != truth:
        return 0.0, 0.0, 0.0
    pred_tokens, truth_tokens = pred.split(), truth.split()
    overlap = Counter(pred_tokens) & Counter(truth_tokens)
    n_same = sum(overlap.values())
    if n_same == 0:
        return 0.0, 0.0, 0.0
    precision = 1.0 * n_same / len(pred_tokens)
    recall = 1.0 * n_same / len(truth_tokens)
    return (2 * precision * recall) / (precision + recall), precision, recall


def official_eval_answers(predictions: dict[str, str], gold: list[dict]) -> dict[str, float]:
    """The answer half of the official ``eval``: ``predictions`` is the prediction file's
    ``"answer"`` map, ``gold`` the list of ``{"_id", "answer"}`` records; means over ``gold``."""
    metrics = {"em": 0.0, "f1": 0.0, "prec": 0.0, "recall": 0.0}
    for dp in gold:
        em = official_exact_match(predictions[dp["_id"]], dp["answer"])
        f1, prec, recall = official_f1(predictions[dp["_id"]], dp["answer"])
        metrics["em"] += float(em)
        metrics["f1"] += f1
        metrics["prec"] += prec
        metrics["recall"] += recall
    for k in metrics:
        metrics[k] /= len(gold)
    return metrics


def alias_max(prediction: str, answers: list[str]) -> tuple[float, float]:
    """The project's alias rule on top of the official per-answer scores: EM and F1 each take
    their own max over the question's answers."""
    return (max(float(official_exact_match(prediction, a)) for a in answers),
            max(official_f1(prediction, a)[0] for a in answers))


# -- the committed runs -----------------------------------------------------------------------
def _run_dirs() -> list[Path]:
    if not RUNS_ROOT.is_dir():
        return []
    return sorted(p for p in RUNS_ROOT.iterdir() if (p / "predictions.jsonl").is_file())


def _require_runs() -> None:
    if RUNS_ROOT.is_dir():
        return
    reason = f"committed results folder {RUNS_ROOT.relative_to(REPO)} is absent"
    if in_ci():
        pytest.fail(reason + " (it is committed, so under CI it must be present)")
    pytest.skip(reason)


def _rows(run_dir: Path) -> list[dict]:
    """The latest real row of each question, as results.py / diagnostics.py read them."""
    return latest_rows(read_predictions(run_dir / "predictions.jsonl"), errors=False)


RUN_DIRS = _run_dirs()
RUN_PARAMS = [pytest.param(p, id=p.name) for p in RUN_DIRS] or [
    pytest.param(None, id="no-results-folder")]


def test_all_main_runs_are_present_to_be_checked():
    _require_runs()
    names = {p.name for p in RUN_DIRS}
    missing = [r for r in REQUIRED_RUNS if r not in names]
    assert not missing, f"run folders missing under {RUNS_ROOT}: {missing}"


@pytest.mark.parametrize("run_dir", RUN_PARAMS)
def test_stored_per_question_em_f1_equal_official_rules(run_dir):
    _require_runs()
    rows = _rows(run_dir)
    assert rows, f"{run_dir.name}: no real rows"
    for r in rows:
        assert not is_error(r)
        assert isinstance(r["prediction"], str) and r["answers"], r["id"]
        em, f1 = alias_max(r["prediction"], r["answers"])
        assert abs(r["em"] - em) <= TOL, (run_dir.name, r["id"], r["prediction"],
                                          r["answers"], r["em"], em)
        assert abs(r["f1"] - f1) <= TOL, (run_dir.name, r["id"], r["prediction"],
                                          r["answers"], r["f1"], f1)


@pytest.mark.parametrize("run_dir", RUN_PARAMS)
def test_summary_em_f1_equal_official_eval_of_the_predictions(run_dir):
    _require_runs()
    rows = _rows(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert summary["n"] == len(rows), (summary["n"], len(rows))
    # HotpotQA has one gold answer per question: the official script's single-answer scoring
    # is then exactly the project's max over aliases.
    assert all(len(r["answers"]) == 1 for r in rows)
    predictions = {r["id"]: r["prediction"] for r in rows}
    gold = [{"_id": r["id"], "answer": r["answers"][0]} for r in rows]
    official = official_eval_answers(predictions, gold)
    assert abs(summary["em"] - official["em"]) <= TOL, (summary["em"], official["em"])
    assert abs(summary["f1"] - official["f1"]) <= TOL, (summary["f1"], official["f1"])
    # and the mean of the alias-max scores is the same number
    per_q = [alias_max(r["prediction"], r["answers"]) for r in rows]
    assert abs(sum(e for e, _ in per_q) / len(rows) - official["em"]) <= TOL
    assert abs(sum(f for _, f in per_q) / len(rows) - official["f1"]) <= TOL


def _all_pairs() -> tuple[list[str], list[str], list[tuple[str, list[str]]]]:
    predictions, answers, rows = set(), set(), []
    for d in RUN_DIRS:
        for r in _rows(d):
            predictions.add(r["prediction"])
            answers.update(r["answers"])
            rows.append((r["prediction"], list(r["answers"])))
    return sorted(predictions), sorted(answers), rows


def _assert_library_matches_official(pred: str, gold: str) -> None:
    assert normalize_answer(pred) == official_normalize_answer(pred), pred
    assert exact_match(pred, gold) == float(official_exact_match(pred, gold)), (pred, gold)
    ours = f1_precision_recall(pred, gold)
    theirs = official_f1(pred, gold)
    assert all(abs(a - b) <= TOL for a, b in zip(ours, theirs)), (pred, gold, ours, theirs)
    assert abs(f1_score(pred, gold) - theirs[0]) <= TOL, (pred, gold)


def test_library_metrics_equal_official_rules_on_every_committed_prediction():
    """dynakrag_lite.metrics vs the official rules on the strings themselves, independent of
    the stored numbers: every prediction of every run against every gold answer of the runs
    (its own answer included), and em_f1 on each row's answers list."""
    _require_runs()
    predictions, answers, rows = _all_pairs()
    assert predictions and answers
    for a in answers:
        assert normalize_answer(a) == official_normalize_answer(a), a
    for p in predictions:
        for a in answers:
            _assert_library_matches_official(p, a)
    for pred, alist in rows:
        ours = em_f1(pred, alist)
        theirs = alias_max(pred, alist)
        assert abs(ours[0] - theirs[0]) <= TOL and abs(ours[1] - theirs[1]) <= TOL, (
            pred, alist, ours, theirs)


def test_library_metrics_equal_official_rules_on_adversarial_strings():
    """Seeded random strings built from the pieces the rules treat specially: articles next to
    ASCII and non-ASCII punctuation, yes/no/noanswer, case, repeated tokens, odd whitespace."""
    pieces = ["the", "The", "THE", "a", "A", "an", "An", "theatre", "another", "yes", "Yes.",
              "no", "NO!", "noanswer", "no answer", "Paris", "paris,", "U.S.A.", "a.n", "t-h-e",
              "the–film", "’the", "“an”", "l'an", "1,000", "3.5", "x_the", "the_x", "é", "Ünion",
              "-", "...", "(", ")", "\t", "\n", "  ", "", "cat", "cat", "dog"]
    rng = random.Random(20240)
    for _ in range(5000):
        pred = " ".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        gold = " ".join(rng.choice(pieces) for _ in range(rng.randint(0, 6)))
        _assert_library_matches_official(pred, gold)
        _assert_library_matches_official(gold, pred)


# -- hand cases that pin the rules -------------------------------------------------------------
@pytest.mark.parametrize("pred,gold", [
    ("no", "no way"),          # overlap on "no", but a special answer that differs
    ("yes it is", "yes"),      # overlap on "yes", the reference is special
    ("noanswer", "noanswer given"),
    ("No.", "Yes"),
])
def test_yes_no_mismatch_scores_zero_despite_token_overlap(pred, gold):
    assert official_f1(pred, gold) == (0.0, 0.0, 0.0)
    assert f1_precision_recall(pred, gold) == (0.0, 0.0, 0.0)
    assert exact_match(pred, gold) == 0.0 == float(official_exact_match(pred, gold))


def test_yes_no_match_after_normalization_scores_one():
    assert official_f1("Yes.", "yes") == (1.0, 1.0, 1.0)
    assert em_f1("  NO!", ["no"]) == (1.0, 1.0) == alias_max("  NO!", ["no"])


@pytest.mark.parametrize("pred,gold,norm", [
    ("The Beatles!", "beatles", "beatles"),
    ("An apple, a pear.", "apple pear", "apple pear"),
    ("U.S.A.", "usa", "usa"),
    ("theatre", "theatre", "theatre"),     # "the" only as a whole word
    ("a.n", "", ""),                       # punctuation goes first, then "an" is an article
])
def test_articles_punctuation_and_case_are_ignored(pred, gold, norm):
    assert official_normalize_answer(pred) == norm == normalize_answer(pred)
    assert official_exact_match(pred, gold) and exact_match(pred, gold) == 1.0


def test_punctuation_inside_a_word_joins_it_so_the_article_stays():
    # "an-the" becomes "anthe" before article removal: no whole-word article is left
    assert official_normalize_answer("an-the") == "anthe" == normalize_answer("an-the")
    # a non-ASCII dash is not in string.punctuation: it is kept and is a word boundary
    assert official_normalize_answer("the–film") == "–film" == normalize_answer("the–film")


def test_answers_of_only_articles_match_exactly_but_have_zero_f1():
    # both normalize to "": the official script gives EM 1 and F1 0 (no tokens to overlap)
    assert official_exact_match("The", "an") and official_f1("The", "an") == (0.0, 0.0, 0.0)
    assert (exact_match("The", "an"), f1_score("The", "an")) == (1.0, 0.0)


def test_token_f1_counts_repeats_with_multiplicity():
    f1, p, r = official_f1("cat cat", "cat")
    assert (p, r) == (0.5, 1.0) and f1 == pytest.approx(2 / 3, abs=TOL)
    f1, p, r = official_f1("Barack Obama Jr.", "Barack Obama")
    assert (p, r) == (2 / 3, 1.0) and f1 == pytest.approx(0.8, abs=TOL)
    assert f1_precision_recall("Barack Obama Jr.", "Barack Obama") == (f1, p, r)


def test_aliases_take_the_best_em_and_the_best_f1():
    answers = ["NYC", "New York City"]
    assert alias_max("new york", answers) == (0.0, pytest.approx(0.8, abs=TOL))
    assert em_f1("new york", answers) == alias_max("new york", answers)
    answers = ["New York City", "the New York"]
    assert alias_max("New York", answers) == (1.0, 1.0) == em_f1("New York", answers)
    # a special alias scores 0 F1 against a partial overlap, the other alias still counts
    assert alias_max("yes sir", ["yes", "sir"]) == (0.0, 2 * 0.5 / 1.5)
    assert em_f1("yes sir", ["yes", "sir"]) == alias_max("yes sir", ["yes", "sir"])
