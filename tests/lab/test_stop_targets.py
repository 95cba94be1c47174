"""The stop-target study (dynakrag_lab.studies.diagnosis.stop_targets): targets, the stop rule, the
exact random stop and the out-of-fold study, on hand-built paths."""
import numpy as np
import pytest

from dynakrag_lite.features import STATE_FEATURE_NAMES
from dynakrag_lab.studies.diagnosis import question_paths
from dynakrag_lab.studies.diagnosis.stop_targets import (oof_scores, path_targets,
                                                         random_at_tokens, random_outcomes,
                                                         rule_outcomes, study, target_curve,
                                                         verdict)
from dynakrag_lite.trajectories import PrefixSample, TrainingData

SMALL_RF = {"n_estimators": 30, "min_samples_leaf": 1}


def prefix(qid, step, f1, tokens, answer_tokens=10.0, sr=0.5, cue=0.0):
    f = np.zeros(len(STATE_FEATURE_NAMES))
    f[STATE_FEATURE_NAMES.index("q_compare_words")] = cue
    f[STATE_FEATURE_NAMES.index("steps")] = step
    return PrefixSample(qid, f, 0.0, step, sr_now=sr, f1_now=f1, tokens=tokens,
                        answer_tokens=answer_tokens)


def test_targets_at_every_prefix():
    path = [prefix("q", 1, 0.2, 0, sr=0.5), prefix("q", 2, 0.9, 50, sr=0.5),
            prefix("q", 3, 0.4, 90, sr=1.0)]
    t = path_targets(path)
    assert t["sr"].tolist() == [0.5, 0.5, 0.0]
    assert t["f1"] == pytest.approx([0.2, -0.5, 0.0])
    # the best *later* prefix: F1 0.9 beckons from the first prefix, nothing after the last
    assert t["f1_best"] == pytest.approx([0.7, -0.5, 0.0])
    assert t["f1_now"] == pytest.approx([0.2, 0.9, 0.4])


def test_rule_continues_while_the_score_is_above_tau_and_the_last_prefix_answers():
    paths = {"a": [prefix("a", 1, 0.1, 0), prefix("a", 2, 0.5, 100), prefix("a", 3, 0.7, 200)],
             "b": [prefix("b", 1, 1.0, 0), prefix("b", 2, 0.0, 100)]}
    scores = {"a": np.array([0.3, 0.1, 9.0]), "b": np.array([0.05, 9.0])}
    o = rule_outcomes(paths, scores, tau=0.2)  # a continues once, b stops at once
    assert o["f1"].tolist() == [0.5, 1.0]
    assert o["tokens"].tolist() == [110.0, 10.0]  # ledger + the answer call
    assert o["early"].tolist() == [1.0, 1.0]
    o = rule_outcomes(paths, scores, tau=-np.inf)  # always continue: the last prefix answers
    assert o["f1"].tolist() == [0.7, 0.0] and o["early"].tolist() == [0.0, 0.0]


def test_random_stop_is_the_exact_expectation():
    paths = {"a": [prefix("a", 1, 0.0, 0), prefix("a", 2, 1.0, 100), prefix("a", 3, 0.5, 200)]}
    o = random_outcomes(paths, 0.5)  # stops at 1, 2, 3 with probabilities 1/2, 1/4, 1/4
    assert o["f1"][0] == pytest.approx(0.25 + 0.125)
    assert o["tokens"][0] == pytest.approx(10 + 0.25 * 100 + 0.25 * 200)
    assert o["early"][0] == pytest.approx(0.75)
    assert random_outcomes(paths, 0.0)["f1"][0] == 0.0
    assert random_outcomes(paths, 1.0)["f1"][0] == 0.5
    c, r = random_at_tokens(paths, 85.0)
    assert c == pytest.approx(0.5, abs=1e-6) and r["tokens"].mean() == pytest.approx(85.0)


def cue_data(n_q: int = 60, informative: bool = True, seed: int = 0) -> TrainingData:
    """Three prefixes per question. On cue questions the answer is wrong until the last
    prefix; on the others it is right from the first. With ``informative`` the cue is a
    feature the forest sees; otherwise the feature is noise."""
    rng = np.random.default_rng(seed)
    ps = []
    for i in range(n_q):
        cue = i % 2
        seen = cue if informative else float(rng.integers(0, 2))
        path = [prefix(f"q{i}", s, 0.0 if (cue and s < 3) else 1.0, 100.0 * (s - 1),
                       cue=seen) for s in (1, 2, 3)]
        for x in path:
            x.f1_end, x.sr_end = path[-1].f1_now, path[-1].sr_now
        ps += path
    return TrainingData([], ps, [f"q{i}" for i in range(n_q)], "f1")


def test_a_learnable_target_beats_the_random_stop_and_noise_does_not():
    good = study(cue_data(), folds=4, targets=("f1", "f1_now"), rf=SMALL_RF, n_boot=200)
    assert good["n_questions"] == 60 and good["positive_rate"]["f1"] == pytest.approx(0.5)
    for t in ("f1/own", "f1_now/own"):
        op = good["targets"][t]["operating_point"]
        # continue on exactly the cue questions: F1 1.0 at half the extra tokens
        assert op["f1"] == pytest.approx(1.0) and op["stop_early"] == pytest.approx(0.5)
        assert op["minus_end"] == pytest.approx(0.0)
        assert op["minus_random_ci"][0] > 0
        assert good["targets"][t]["over_random"] > 0.1
    assert "verdict" not in good and "over random: better." in verdict(good)
    assert verdict({"n_questions": 3, "skipped": "too few"}) == "too few"
    noise = study(cue_data(informative=False), folds=4, targets=("f1",), rf=SMALL_RF,
                  n_boot=200)
    assert noise["targets"]["f1/own"]["over_random"] < 0.1


def test_pooled_paths_train_every_fold_but_are_never_scored():
    own = cue_data(20)
    other = cue_data(40, seed=1)
    for p in other.prefixes:
        p.qid = "x" + p.qid
    other.questions = ["x" + q for q in other.questions]
    paths = question_paths(own, need_f1=True)
    extra = list(question_paths(other, need_f1=True).values())
    sc = oof_scores(paths, "f1_now", folds=4, rf=SMALL_RF, extra=extra)
    assert set(sc) == set(paths)
    r = study(own, folds=4, targets=("f1_now",), extra=[other], rf=SMALL_RF, n_boot=100)
    assert r["n_pooled_questions"] == 40 and set(r["targets"]) == {"f1_now/own",
                                                                    "f1_now/pooled"}


def test_curve_runs_from_stopping_first_to_always_continuing():
    d = cue_data(20)
    paths = question_paths(d, need_f1=True)
    curve = target_curve(paths, oof_scores(paths, "sr", folds=4, rf=SMALL_RF))
    assert curve[0]["stop_early"] == 1.0 and curve[-1]["stop_early"] == 0.0
    assert curve[-1]["f1"] == pytest.approx(1.0)  # every path's last prefix is right


def test_unknown_target_and_too_few_questions():
    d = cue_data(4)
    with pytest.raises(ValueError, match="unknown stop target"):
        oof_scores(question_paths(d, need_f1=True), "tokens")
    assert study(d, folds=5)["skipped"] == "too few questions with answer F1"
