"""phi(s, a): the features the value model sees, computed from the observable state only
(chapter 8; :func:`state_features` takes an :class:`EvidenceState`, which has no gold).

The paper's families: question length and shape; document and title counts; frontier position;
retrieval-score statistics; question-evidence overlap; bridge-entity count; the action; prior
action counts; estimated cost. We add the sufficiency verdict and gap presence (a verdict of a
signal at chance, ``gates=False``, shows as neither yes nor no). :data:`FEATURE_DESCRIPTIONS`
says what each feature measures."""
from __future__ import annotations

import numpy as np

from .state import ACTIONS, LLM_ACTIONS, RETRIEVAL_ACTIONS, EvidenceState
from .text import ascii_words, feature_content_words

_COMPARE = frozenset("which both same older younger first earlier later longer shorter larger "
                     "smaller more less than or".split())
WH_WORDS = ("what", "who", "which", "when", "where", "how", "yesno", "other")
_YESNO = ("is", "are", "was", "were", "do", "does", "did", "can", "could", "has", "have")


def question_shape(question: str) -> dict[str, float]:
    words = question.split()
    first = words[0].lower() if words else ""
    wh = first if first in WH_WORDS else ("yesno" if first in _YESNO else "other")
    toks = set(ascii_words(question))
    return {
        "q_len": float(len(words)),
        "q_content_words": float(len(feature_content_words(question))),
        "q_capitalized": float(sum(1 for w in words[1:] if w[:1].isupper())),
        "q_compare_words": float(len(toks & _COMPARE)),
        "q_of_count": float(question.lower().split().count("of")),
        "q_possessive": float(question.count("'s")),
        **{f"q_wh_{w}": float(w == wh) for w in WH_WORDS},
    }


def state_features(state: EvidenceState) -> dict[str, float]:
    """Features of s alone (shared by every action's phi(s, a) and by the continuation model)."""
    f = question_shape(state.question)
    scores = [d.score for d in state.docs]
    qw = feature_content_words(state.question)
    ev = frozenset().union(*(feature_content_words(d.title + " " + d.text) for d in state.docs)) \
        if state.docs else frozenset()
    per_doc = [len(qw & feature_content_words(d.title + " " + d.text)) / max(1, len(qw))
               for d in state.docs]
    last = [d.score for d in state.docs if d.step == max((x.step for x in state.docs), default=-1)]
    ranking = state.initial_ranking or ()
    suff = state.sufficiency
    gap_words = feature_content_words(state.gap)
    f.update({
        "n_docs": float(len(state.docs)),
        "n_titles": float(len(state.title_keys)),
        "frontier": float(state.frontier),
        "frontier_left": float(state.frontier_left if state.frontier_left is not None else -1),
        "steps": float(state.steps),
        "score_max": max(scores, default=0.0),
        "score_mean": float(np.mean(scores)) if scores else 0.0,
        "score_min": min(scores, default=0.0),
        "score_last_mean": float(np.mean(last)) if last else 0.0,
        "rank_gap_1_3": (ranking[0].score - ranking[2].score) if len(ranking) >= 3 else 0.0,
        "rank_next_score": ranking[state.frontier].score if state.frontier < len(ranking)
        else 0.0,
        "overlap_all": len(qw & ev) / max(1, len(qw)),
        "overlap_uncovered": float(len(qw - ev)),
        "overlap_best_doc": max(per_doc, default=0.0),
        "overlap_docs_half": float(sum(1 for x in per_doc if x >= 0.5)),
        "n_bridges": float(len(state.unexpanded_bridges)),
        "n_bridges_expanded": float(len(state.expanded_bridges)),
        "suff_none": float(suff is None),
        # A verdict that gates nothing (its signal is at chance) is not shown either.
        "suff_yes": float(suff is not None and suff.gates and suff.sufficient),
        "suff_no": float(suff is not None and suff.gates and not suff.sufficient),
        "suff_stale": float(suff is not None and suff.doc_ids != state.doc_ids),
        "gap_present": float(bool(state.gap.strip())),
        "gap_len": float(len(state.gap.split())),
        "gap_overlap_q": len(gap_words & qw) / max(1, len(gap_words)) if state.gap else 0.0,
        "tokens_so_far": float(state.ledger.tokens),
        "retrieval_calls": float(state.ledger.retrieval_calls),
        **{f"count_{a}": float(state.count(a)) for a in ACTIONS},
        **{f"last_{a}": float(bool(state.history) and state.history[-1] == a) for a in ACTIONS},
    })
    return f


STATE_FEATURE_NAMES: tuple[str, ...] = tuple(state_features(EvidenceState(question="x")).keys())
ACTION_FEATURE_NAMES: tuple[str, ...] = tuple(f"act_{a}" for a in ACTIONS) + ("est_cost",)
FEATURE_NAMES: tuple[str, ...] = STATE_FEATURE_NAMES + ACTION_FEATURE_NAMES

# What each feature of phi(s, a) measures, in FEATURE_NAMES order (tests check both ways).
_WH_DESCRIPTIONS = {
    "yesno": "1 if the question starts with an auxiliary verb (is, was, did, can, has, ...): "
             "a yes/no question",
    "other": "1 if the question's first word is neither a wh-word nor an auxiliary verb",
}
FEATURE_DESCRIPTIONS: dict[str, str] = {
    # question shape
    "q_len": "words in the question (split on whitespace)",
    "q_content_words": "distinct content words of the question (lower-cased, stopwords removed)",
    "q_capitalized": "capitalized words after the first one (a proxy for named entities)",
    "q_compare_words": "distinct comparison cue words in the question (which, both, same, "
                       "older, than, ...)",
    "q_of_count": "occurrences of the word 'of' (nested 'X of Y' phrases hint at a bridge)",
    "q_possessive": "occurrences of \"'s\" (possessives, another bridge cue)",
    **{f"q_wh_{w}": _WH_DESCRIPTIONS.get(w, f"1 if the question's first word is '{w}'")
       for w in WH_WORDS},
    # evidence in hand and the retrieval frontier
    "n_docs": "documents in hand",
    "n_titles": "distinct (normalized) titles among the documents in hand",
    "frontier": "entries of the initial ranking read so far by retrieve_more",
    "frontier_left": "unread entries of the initial ranking (-1 before the first retrieval)",
    "steps": "acquisition/control steps taken (retrieval actions and sufficiency checks)",
    "score_max": "highest retrieval score of the documents in hand (0 without documents)",
    "score_mean": "mean retrieval score of the documents in hand (0 without documents)",
    "score_min": "lowest retrieval score of the documents in hand (0 without documents)",
    "score_last_mean": "mean retrieval score of the documents added by the latest step that "
                       "added any (0 without documents)",
    "rank_gap_1_3": "score of the 1st minus the 3rd entry of the initial ranking (0 with fewer "
                    "than 3 entries)",
    "rank_next_score": "score of the next unread entry of the initial ranking (0 when none is "
                       "left or before the first retrieval)",
    # lexical question-evidence overlap
    "overlap_all": "share of the question's content words found in the documents (titles and "
                   "texts together)",
    "overlap_uncovered": "question content words found in no document",
    "overlap_best_doc": "largest share of the question's content words found in one document",
    "overlap_docs_half": "documents holding at least half of the question's content words",
    # bridge entities
    "n_bridges": "bridge-entity candidates not yet expanded",
    "n_bridges_expanded": "bridge entities already expanded",
    # sufficiency verdict and gap
    "suff_none": "1 if no sufficiency verdict has been made yet",
    "suff_yes": "1 if the latest sufficiency verdict says sufficient (0 when its signal does "
                "not gate decisions)",
    "suff_no": "1 if the latest sufficiency verdict says insufficient (0 when its signal does "
               "not gate decisions)",
    "suff_stale": "1 if the latest sufficiency verdict judged another set of documents than "
                  "the one in hand",
    "gap_present": "1 if the state holds a gap (the missing fact named by a sufficiency probe)",
    "gap_len": "words in the gap",
    "gap_overlap_q": "share of the gap's content words that are question content words (0 "
                     "without a gap)",
    # cost so far and action history
    "tokens_so_far": "LLM tokens spent so far (prompt and completion)",
    "retrieval_calls": "retrieval calls made so far",
    **{f"count_{a}": f"times {a} has been taken so far" for a in ACTIONS},
    **{f"last_{a}": f"1 if the previous action was {a}" for a in ACTIONS},
    # the action being scored
    **{f"act_{a}": f"1 if the action being scored is {a} (one-hot)" for a in ACTIONS},
    "est_cost": "prior token estimate of the action (heuristic_cost: an LLM action ~120 plus "
                "the documents' characters / 4, a retrieval action per_action x doc_chars / 4, "
                "stop 0)",
}


def action_features(action: str, est_cost: float) -> dict[str, float]:
    return {**{f"act_{a}": float(a == action) for a in ACTIONS}, "est_cost": float(est_cost)}


def phi(state: EvidenceState, action: str, est_cost: float = 0.0,
        base: dict[str, float] | None = None) -> np.ndarray:
    """phi(s, a) as a vector in FEATURE_NAMES order (pass ``base`` to reuse state_features)."""
    f = dict(base if base is not None else state_features(state))
    f.update(action_features(action, est_cost))
    return np.array([f[n] for n in FEATURE_NAMES], dtype=np.float64)


def heuristic_cost(state: EvidenceState, action: str, doc_chars: int | None = 600,
                   per_action: int = 3) -> float:
    """Prior token estimate used as a feature (stable, needs no fitting): an LLM action reads
    all documents (~4 characters a token) plus ~120 tokens of instructions."""
    doc_tokens = sum(min(len(d.text), doc_chars or len(d.text)) for d in state.docs) / 4
    if action in LLM_ACTIONS:
        return 120.0 + doc_tokens
    if action in RETRIEVAL_ACTIONS:
        return per_action * (doc_chars or 600) / 4
    return 0.0
