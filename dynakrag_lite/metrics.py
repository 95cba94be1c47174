"""Answer metrics exactly as the official HotpotQA script computes them, plus support recall.

``normalize_answer`` lowercases, drops punctuation and articles and collapses whitespace, in
``hotpot_evaluate_v1.py``'s order; ``f1_score`` gives a yes/no/noanswer mismatch 0; several
references (2Wiki, MuSiQue aliases) take the max."""
from __future__ import annotations

import re
import string
from collections import Counter
from typing import Iterable, Sequence

from .data.corpus import normalize_title

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
_SPECIAL = ("yes", "no", "noanswer")


def normalize_answer(s: str) -> str:
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match(prediction: str, ground_truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_precision_recall(prediction: str, ground_truth: str) -> tuple[float, float, float]:
    pred, gold = normalize_answer(prediction), normalize_answer(ground_truth)
    if (pred in _SPECIAL or gold in _SPECIAL) and pred != gold:
        return 0.0, 0.0, 0.0
    pred_toks, gold_toks = pred.split(), gold.split()
    common = Counter(pred_toks) & Counter(gold_toks)
    same = sum(common.values())
    if same == 0:
        return 0.0, 0.0, 0.0
    precision = same / len(pred_toks)
    recall = same / len(gold_toks)
    return 2 * precision * recall / (precision + recall), precision, recall


def f1_score(prediction: str, ground_truth: str) -> float:
    return f1_precision_recall(prediction, ground_truth)[0]


def max_over_answers(metric, prediction: str, answers: Sequence[str]) -> float:
    if not answers:
        raise ValueError("no reference answers")
    return max(metric(prediction, a) for a in answers)


def em_f1(prediction: str, answers: Sequence[str]) -> tuple[float, float]:
    """EM and F1 of one prediction, max over the reference answers."""
    return (max_over_answers(exact_match, prediction, answers),
            max_over_answers(f1_score, prediction, answers))


def support_recall(retrieved_titles: Iterable[str], gold_titles: Iterable[str]) -> float:
    """SR: share of gold supporting documents among the retrieved ones, matched by normalized
    title (the retrieval dedup's key)."""
    gold = {normalize_title(t) for t in gold_titles}
    if not gold:
        raise ValueError("no gold supporting documents")
    got = {normalize_title(t) for t in retrieved_titles}
    return len(gold & got) / len(gold)


def support_recall_at_k(rankings: Sequence[Sequence[str]], golds: Sequence[Iterable[str]],
                        ks: Sequence[int]) -> list[list[float]]:
    """Per-question SR@k: row i, column j is the support recall of the first ``ks[j]`` titles of
    ``rankings[i]`` against ``golds[i]`` (one row per question; average the rows for a curve)."""
    if len(rankings) != len(golds):
        raise ValueError("one ranking per gold list is needed")
    if any(k < 0 for k in ks):
        raise ValueError("k must be >= 0")
    return [[support_recall(list(ranking)[:k], gold) for k in ks]
            for ranking, gold in zip(rankings, golds)]
