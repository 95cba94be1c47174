"""The question-level router (dynakrag_lab.studies.router): feature parity between a training
prefix and an evaluation row, grouped and nested cross-validation, a learnable synthetic
router, and the evaluation reading's pairing by question id."""
import json
import random
from dataclasses import replace

import numpy as np
import pytest

from dynakrag_lab.studies import router as R
from dynakrag_lite.controller import MethodResult
from dynakrag_lite.data.schema import Paragraph, Question
from dynakrag_lite.experiments.run import score
from dynakrag_lite.features import state_features
from dynakrag_lite.state import Ledger, RankedEntry, RetrievedDoc, initial_state
from dynakrag_lite.trajectories import PrefixSample, TrainingData

QUESTIONS = ["Which magazine was started first, Arthur's Magazine or First for Women?",
             "  Who directed the film in which Tom Hanks plays a lawyer ?",
             "Were Scott Derrickson and Ed Wood of the same nationality?",
             "when did the band that released Ummagumma form"]


def first_retrieval(question: str, scores: list[float], order: list[int]) -> tuple:
    """The state right after one retrieve_more (three documents, in ``order``), as the
    training rollout records it and as an evaluation run's row stores it."""
    ranking = tuple(RankedEntry(f"d{i}", f"Title {i}", f"text of document {i}", s)
                    for i, s in enumerate(scores))
    docs = tuple(RetrievedDoc(ranking[i].id, ranking[i].title, ranking[i].text,
                              ranking[i].score, "retrieve_more", 0) for i in order)
    state = replace(initial_state(question, "q1"), docs=docs, initial_ranking=ranking,
                    frontier=3, history=("retrieve_more",), ledger=Ledger().plus_retrieval())
    base = state_features(state)  # the prefix vector exactly as collect_question builds it
    prefix = PrefixSample("q1", np.array([base[n] for n in base], dtype=np.float64), 0.0, 1)
    q = Question("q1", "hotpotqa", question, ("x",), "bridge",
                 (Paragraph("Title 0", "t", True),))
    row = json.loads(json.dumps(score(q, MethodResult("dynakrag", "x", state))))
    return prefix, row


def test_training_prefix_and_evaluation_row_of_the_same_documents_give_the_same_features():
    rng = np.random.default_rng(0)
    for t in range(300):
        # float32 scores, as the retriever returns them; some ties and near-ties
        s = np.sort(rng.uniform(0.2, 0.9, 3).astype(np.float32).astype(float))[::-1]
        if t % 7 == 0:
            s[1] = s[2]
        order = list(rng.permutation(3))  # a row's documents need not be sorted
        prefix, row = first_retrieval(QUESTIONS[t % len(QUESTIONS)], list(s), order)
        a, b = R.training_features(prefix), R.evaluation_features(row)
        assert np.array_equal(a, b), (t, dict(zip(R.ROUTER_FEATURES, a - b)))
    # the question columns are question_shape's, the scores the row's 4-decimal ones
    f = dict(zip(R.ROUTER_FEATURES, b))
    assert f["q_wh_when"] == 1.0 and f["score_1"] == max(d["score"] for d in row["docs"])


def test_evaluation_features_refuse_a_row_that_is_not_one_first_retrieval():
    _, row = first_retrieval(QUESTIONS[0], [0.8, 0.7, 0.6], [0, 1, 2])
    with pytest.raises(ValueError):
        R.evaluation_features({**row, "docs": row["docs"][:2]})
    with pytest.raises(ValueError):
        R.evaluation_features({**row, "docs": [{**row["docs"][0], "source": "gap_query"}]
                               + row["docs"][1:]})


def rq(qid: str, x, f1_one: float, f1_multi: float, t_one: float = 100.0,
       t_multi: float = 500.0) -> R.RouterQuestion:
    return R.RouterQuestion(qid, np.asarray(x, dtype=float), f1_one, f1_multi, t_one, t_multi)


def one_feature_questions(n: int, informative: bool, seed: int = 0) -> list[R.RouterQuestion]:
    """Multi-step helps exactly where score_1 > 0.6 (``informative``) or at random; elsewhere
    it hurts. Every other feature is noise."""
    rng = np.random.default_rng(seed)
    j = R.ROUTER_FEATURES.index("score_1")
    out = []
    for i in range(n):
        x = rng.normal(size=len(R.ROUTER_FEATURES))
        x[j] = rng.uniform(0.3, 0.9)
        helps = x[j] > 0.6 if informative else rng.random() < 0.5
        out.append(rq(f"q{i}", x, 0.0 if helps else 1.0, 1.0 if helps else 0.0))
    return out


def test_cross_validation_never_puts_one_question_in_two_folds(monkeypatch):
    calls = []
    real = R.question_folds

    def spy(qids, folds):
        splits = real(qids, folds)
        calls.append((list(qids), splits))
        return splits
    monkeypatch.setattr(R, "question_folds", spy)
    qs = one_feature_questions(60, informative=True)
    R.cross_validate(qs, folds=5, models=("logreg",))
    outer = [c for c in calls if len(c[0]) == len(qs)]
    assert outer
    for qids, splits in calls:
        held = [q for _, te in splits for q in te]
        assert sorted(held) == sorted(set(qids))  # every question held out exactly once
        for tr, te in splits:
            assert not set(tr) & set(te) and set(tr) | set(te) == set(qids)
    # nested: each inner CV runs on one outer fold's training questions, never its held-out
    _, outer_splits = outer[0]
    inner = [set(c[0]) for c in calls if len(c[0]) < len(qs)]
    assert len(inner) == len(outer_splits)
    assert sorted(map(sorted, inner)) == sorted(sorted(tr) for tr, _ in outer_splits)


def test_a_question_listed_twice_is_refused():
    qs = one_feature_questions(20, informative=True)
    with pytest.raises(ValueError, match="twice"):
        R.oof_probabilities(qs + [qs[0]], "logreg")


@pytest.mark.parametrize("model", R.MODELS)
def test_cross_validation_finds_a_label_that_is_a_function_of_one_feature(model):
    qs = one_feature_questions(160, informative=True)
    cv = R.cross_validate(qs, folds=5, models=(model,))
    assert cv["auc"][model] > 0.9 and cv["nested_auc"] > 0.9
    a = R.against_constants(qs, cv["nested"]["f1"], cv["nested"]["tokens"],
                            cv["nested"]["multi"])
    assert a["f1"] > 0.85 and a["oracle_f1"] == 1.0
    assert a["multi_rate"] == pytest.approx(cv["positive_rate"], abs=0.1)
    assert a["against"]["random_same_rate"]["f1"]["lo"] > 0.2


def test_without_signal_the_router_is_no_better_than_random():
    qs = one_feature_questions(160, informative=False)
    cv = R.cross_validate(qs, folds=5, models=("logreg",))
    assert abs(cv["auc"]["logreg"] - 0.5) < 0.15
    a = R.against_constants(qs, cv["nested"]["f1"], cv["nested"]["tokens"],
                            cv["nested"]["multi"])
    assert a["against"]["random_same_rate"]["f1"]["lo"] < 0


def test_choice_breaks_f1_ties_by_tokens():
    qs = [rq("a", [0], 0.5, 0.5), rq("b", [0], 0.5, 0.5)]  # multi-step never changes F1
    best, grid = R.choose(qs, {"logreg": np.array([0.3, 0.7])}, taus=(0.1, 0.5, 0.9))
    assert {g["f1"] for g in grid} == {0.5}
    assert best["multi_rate"] == 0.0 and best["tokens"] == 100.0


def test_training_questions_route_between_the_first_prefix_and_the_paths_end():
    def p(qid, step, f1, tokens, calls):
        f = np.zeros(len(R.STATE_FEATURE_NAMES))
        for k, v in {"n_docs": 3, "score_max": 0.8, "score_mean": 0.7, "score_min": 0.6,
                     "retrieval_calls": calls, "q_len": 9}.items():
            f[R.STATE_FEATURE_NAMES.index(k)] = v
        return PrefixSample(qid, f, 0.0, step, f1_now=f1, tokens=tokens, answer_tokens=10.0)
    data = TrainingData(prefixes=[p("a", 2, 0.5, 40, 2), p("a", 1, 0.0, 0, 1),
                                  p("a", 3, 0.2, 90, 3), p("b", 1, 1.0, 0, 1),
                                  p("c", 1, float("nan"), 0, 1)], questions=["a", "b", "c"])
    qs = {q.qid: q for q in R.training_questions(data)}
    assert set(qs) == {"a", "b"}  # c has no answer F1
    a = qs["a"]
    assert (a.f1_one, a.f1_multi, a.tokens_one, a.tokens_multi) == (0.0, 0.2, 10.0, 100.0)
    assert a.helps and not qs["b"].helps  # a one-prefix path: a tie, one-shot
    x = dict(zip(R.ROUTER_FEATURES, a.x))
    assert (x["score_1"], x["score_2"], x["score_3"]) == (0.8, 0.7, 0.6) and x["q_len"] == 9


class ScoreOneModel:
    """P(helps) = the first document's score: routes by a feature of the row it is given."""

    def predict_proba(self, X):
        s = X[:, R.ROUTER_FEATURES.index("score_1")]
        return np.column_stack([1 - s, s])


def eval_row(qid: str, top: float, f1: float, tokens: int, n_docs: int = 3) -> dict:
    docs = [{"id": f"{qid}-{i}", "title": f"T{i}", "score": round(top - 0.1 * i, 4),
             "source": "retrieve_more"} for i in range(n_docs)]
    return {"id": qid, "question": "Who wrote it?", "docs": docs, "f1": f1, "em": float(f1 == 1),
            "tokens": tokens}


def test_evaluation_reading_pairs_by_question_id():
    one = [eval_row("a", 0.9, 0.1, 300), eval_row("b", 0.3, 0.2, 310),
           eval_row("c", 0.8, 0.3, 320), eval_row("d", 0.8, 0.9, 330)]
    multi = [eval_row("c", 0.8, 1.0, 920, 9), eval_row("z", 0.9, 1.0, 999, 9),
             eval_row("b", 0.3, 0.7, 910, 6), eval_row("a", 0.9, 0.6, 900, 6),
             {**eval_row("d", 0.8, 0.0, 930, 9), "error": "boom"}]
    random.Random(0).shuffle(multi)
    routed = R.route_evaluation(ScoreOneModel(), 0.5, one, multi)
    assert [r["id"] for r in routed] == ["a", "b", "c"]  # one-shot's order; z, d unpaired
    by = {r["id"]: r for r in routed}
    assert by["a"]["route"] == "multi" and by["a"]["f1"] == 0.6 and by["a"]["tokens"] == 900
    assert by["b"]["route"] == "one" and by["b"]["f1"] == 0.2 and by["b"]["tokens"] == 310
    assert by["c"]["route"] == "multi" and by["c"]["f1"] == 1.0 and by["c"]["f1_one"] == 0.3
    assert all(r["same_first_docs"] for r in routed)
    rnd = {r["id"]: r for r in R.random_rows(routed, 0.25)}
    assert rnd["b"]["f1"] == pytest.approx(0.75 * 0.2 + 0.25 * 0.7)
    # the paired comparison against a run lines up the same ids whatever the row order
    summary = R._eval_summary(routed, {"multi": multi, "one": list(reversed(one))})
    assert summary["against"]["one"]["f1"]["n"] == 3
    assert summary["against"]["one"]["f1"]["diff"] == pytest.approx((0.5 + 0 + 0.7) / 3)
    assert summary["against"]["multi"]["f1"]["diff"] == pytest.approx((0 - 0.5 + 0) / 3)
