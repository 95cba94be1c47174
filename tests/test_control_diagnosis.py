"""The offline control diagnosis (dynakrag_lite.training.diagnosis) on hand-built trajectories:
every metric checked against numbers worked out by hand."""
import numpy as np
import pytest

from dynakrag_lite.features import FEATURE_NAMES, STATE_FEATURE_NAMES
from dynakrag_lite.training.diagnosis import (
    ChoiceState, choice_metrics, choice_states, constant_chooser, diagnose_choice,
    feature_constancy, forest_chooser, oracle_chooser, stop_at_k, stop_auc, verdict)
from dynakrag_lite.trajectories import PrefixSample, Sample, TrainingData

SMALL_RF = {"n_estimators": 30, "min_samples_leaf": 1}


def phi(**named) -> np.ndarray:
    x = np.zeros(len(FEATURE_NAMES))
    for k, v in named.items():
        x[FEATURE_NAMES.index(k)] = v
    return x


def state_vec(**named) -> np.ndarray:
    x = np.zeros(len(STATE_FEATURE_NAMES))
    for k, v in named.items():
        x[STATE_FEATURE_NAMES.index(k)] = v
    return x


def decision(qid, step, targets, values=None, costs=None):
    """One replay_decisions-style dict (valid actions in dict order)."""
    return {"qid": qid, "step": step, "valid": tuple(targets), "targets": dict(targets),
            "values": dict(values or {a: 0.0 for a in targets}),
            "costs": dict(costs or {a: 0.0 for a in targets})}


# -- choice states and metrics --------------------------------------------------------------
def test_choice_states_realized_gains_and_filtering():
    ds = [decision("q", 0, {"retrieve_more": 1.0, "stop_answer": 0.0}),  # one option: dropped
          decision("q", 1, {"retrieve_more": 0.5, "sufficiency_check": 1.0,
                            "stop_answer": 0.5}),
          decision("q", 4, {"stop_answer": 1.0})]
    st = choice_states(ds)
    assert len(st) == 1
    s = st[0]
    assert s.actions == ("retrieve_more", "sufficiency_check")  # stop is not an option
    # sufficiency_check's label 1[SR=1] is a level: its realized SR gain is 0
    assert s.gains.tolist() == [0.5, 0.0]


def _two_states():
    # state A: bridge best (.5), retrieve .25, suff 0; state B: all tie at 0
    a = ChoiceState("q1", 1, ("retrieve_more", "bridge_entity_expand", "sufficiency_check"),
                    [0.25, 0.5, 0.0], values=[0.1, 0.2, 0.9], costs=[450, 450, 10])
    b = ChoiceState("q2", 1, ("retrieve_more", "rewrite_query", "sufficiency_check"),
                    [0.0, 0.0, 0.0], values=[0.3, 0.1, 0.2], costs=[450, 450, 10])
    return [a, b]


def test_oracle_and_a_model_that_knows_the_gains_have_no_regret():
    st = _two_states()
    for chooser in (oracle_chooser,
                    lambda s: s.gains * 3 + 1):  # any increasing function of the true gains
        m = choice_metrics(st, chooser)
        assert m["regret"] == 0 and m["agreement"] == 1
        assert m["gain_chosen"] == m["gain_best"] == pytest.approx((0.5 + 0.0) / 2)


def test_uniform_expectation_is_the_mean_gain_over_options():
    m = choice_metrics(_two_states(), oracle_chooser)
    assert m["gain_uniform"] == pytest.approx(((0.25 + 0.5 + 0.0) / 3 + 0.0) / 2)
    assert m["regret_uniform"] == pytest.approx(0.25 - 0.125)


def test_forest_chooser_regret_agreement_and_per_action_shares():
    st = _two_states()
    m = choice_metrics(st, forest_chooser(0.0))
    # A: picks sufficiency_check (0.9) -> gain 0, best .5; B: picks retrieve_more, all tie
    assert m["gain_chosen"] == 0.0
    assert m["regret"] == pytest.approx(0.25)
    assert m["agreement"] == 0.5  # the tie in B counts as agreement
    assert m["share_decisive"] == 0.5
    assert m["regret_decisive"] == pytest.approx(0.5) and m["agreement_decisive"] == 0.0
    acts = m["actions"]
    assert acts["sufficiency_check"] == {"valid": 1.0, "chosen": 0.5, "best": 0.5,
                                         "strictly_best": 0.0, "mean_gain": 0.0}
    assert acts["bridge_entity_expand"]["strictly_best"] == 0.5
    assert acts["retrieve_more"]["chosen"] == 0.5 and acts["retrieve_more"]["best"] == 0.5
    assert acts["retrieve_more"]["mean_gain"] == pytest.approx(0.125)
    # without sufficiency_check: A picks bridge (0.2 > 0.1) -> no regret left
    assert choice_metrics(st, forest_chooser(0.0, acquisitions_only=True))["regret"] == 0


def test_lambda_prices_the_options():
    a = _two_states()[0]
    # lambda 1e-3: retrieve .1-.45, bridge .2-.45, suff .9-.01: still suff
    assert choice_metrics([a], forest_chooser(1e-3))["gain_chosen"] == 0.0
    b = ChoiceState("q", 1, ("retrieve_more", "rewrite_query"), [0.0, 0.5], values=[0.1, 0.3],
                    costs=[100, 1000])
    assert choice_metrics([b], forest_chooser(0.0))["gain_chosen"] == 0.5
    assert choice_metrics([b], forest_chooser(1e-3))["gain_chosen"] == 0.0  # .0 > -.7


def test_constant_rule_picks_retrieve_more():
    m = choice_metrics(_two_states(), constant_chooser("retrieve_more"))
    assert m["gain_chosen"] == pytest.approx(0.125)
    assert m["actions"]["retrieve_more"]["chosen"] == 1.0


# -- cross-validated action choice on synthetic trajectories --------------------------------
def synthetic(n_q=40, seed=0) -> TrainingData:
    """Per question one cue (q_compare_words 0/1) decides which acquisition adds support at
    every state: bridge when 1, retrieve_more when 0. sufficiency_check's label is the level
    1[SR=1] = 1 at every state, so a forest fitted to raw labels ranks it first."""
    rng = np.random.default_rng(seed)
    samples = []
    for i in range(n_q):
        qid = f"q{i}"
        cue = float(rng.integers(0, 2))
        samples.append(Sample(qid, 0, "retrieve_more",
                              phi(q_compare_words=cue, act_retrieve_more=1), 0.5, 0, 0))
        samples.append(Sample(qid, 0, "stop_answer", phi(q_compare_words=cue, act_stop_answer=1),
                              0.0, 0, 0))
        for step in (1, 2):
            base = {"q_compare_words": cue, "steps": step, "n_docs": 3 * step}
            good = "bridge_entity_expand" if cue else "retrieve_more"
            for a in ("retrieve_more", "bridge_entity_expand", "rewrite_query"):
                samples.append(Sample(qid, step, a, phi(**base, **{f"act_{a}": 1}),
                                      0.5 if a == good else 0.0, 0, 3 * step))
            samples.append(Sample(qid, step, "sufficiency_check",
                                  phi(**base, act_sufficiency_check=1, est_cost=200), 1.0, 0,
                                  3 * step, executed=False))
            samples.append(Sample(qid, step, "stop_answer",
                                  phi(**base, act_stop_answer=1), 1.0, 0, 3 * step))
    return TrainingData(samples, [], [f"q{i}" for i in range(n_q)], "f1")


@pytest.fixture(scope="module")
def choice():
    return diagnose_choice(synthetic(), folds=4, lams=(0.0, 1.0), sizes=(5, 10), n_repeats=2,
                           rf=SMALL_RF)


def test_cross_validated_choice_detects_the_level_label(choice):
    f = choice["lambdas"]["0"]
    assert f["n_states"] == 80 and f["n_questions"] == 40  # steps 1 and 2; step 0 no choice
    # raw labels: the forest always picks sufficiency_check, which adds nothing
    assert f["actions"]["sufficiency_check"]["chosen"] == 1.0
    assert f["gain_chosen"] == 0.0 and f["regret"] == pytest.approx(0.5)
    assert f["gain_uniform"] == pytest.approx(0.5 / 4)
    # the acquisition ranking itself is perfect out of fold
    acq = choice["forest_acquisitions_only"]
    assert acq["regret"] == 0 and acq["agreement"] == 1
    assert choice["oracle"]["regret"] == 0
    # retrieve_more is best on the questions whose cue is 0 only
    rm = choice["retrieve_more"]
    assert 0 < rm["agreement"] < 1
    assert rm["gain_chosen"] == pytest.approx(0.5 * rm["agreement"])


def test_importance_data_size_and_constancy(choice):
    assert choice["importance"][0]["feature"] == "q_compare_words"
    assert choice["importance"][0]["constant"] == "question"
    assert "gap_len" in choice["constant_in_dataset"]
    assert list(choice["data_size"]) == ["5", "10", "all"]
    assert choice["data_size"]["all"]["regret"] == choice["lambdas"]["0"]["regret"]


def test_feature_constancy():
    c = feature_constancy(synthetic(6))
    assert c["q_compare_words"] == "question"
    assert c["steps"] is None and c["act_retrieve_more"] is None
    assert c["suff_yes"] == "dataset"


# -- stop ------------------------------------------------------------------------------------
def _prefix(qid, step, n_acq, f1, tokens, answer_tokens, sr=0.5, extra=None):
    f = state_vec(count_retrieve_more=n_acq - (n_acq > 1), count_gap_query=int(n_acq > 1),
                  **(extra or {}))
    return PrefixSample(qid, f, 0.0, step, sr_now=sr, f1_now=f1, tokens=tokens,
                        answer_tokens=answer_tokens)


def _paths_data():
    # q1: retrieve (k=1), sufficiency_check (still 1), gap_query (k=2), end; never reaches 3
    p = [_prefix("q1", 1, 1, 0.2, 0, 100), _prefix("q1", 2, 1, 0.4, 50, 110),
         _prefix("q1", 3, 2, 0.9, 50, 200), _prefix("q1", 4, 2, 0.6, 50, 210)]
    # q2: four acquisitions; q3 has no answer F1 and is not read
    p += [_prefix("q2", s, s, f1, 0, 100 * s) for s, f1 in ((1, 1.0), (2, 0.5), (3, 0.0),
                                                            (4, 0.0))]
    p += [_prefix("q3", 1, 1, float("nan"), 0, float("nan"))]
    end = {}
    for x in p:
        end[x.qid] = x
    for x in p:
        x.f1_end, x.sr_end = end[x.qid].f1_now, end[x.qid].sr_now
    return TrainingData([], p, ["q1", "q2", "q3"], "f1")


def test_stop_at_k_reads_the_right_prefixes():
    r = stop_at_k(_paths_data())
    assert r["1"]["n_questions"] == 2
    assert r["1"]["f1"] == pytest.approx((0.2 + 1.0) / 2)  # q1's first prefix, not its 2nd
    assert r["1"]["tokens"] == pytest.approx((100 + 100) / 2)
    assert r["2"]["f1"] == pytest.approx((0.9 + 0.5) / 2)
    assert r["2"]["tokens"] == pytest.approx((250 + 200) / 2)
    assert r["3"]["f1"] == pytest.approx((0.6 + 0.0) / 2)  # q1 stops at its end
    assert r["3"]["reached"] == 0.5
    assert r["end"]["f1"] == pytest.approx((0.6 + 0.0) / 2)
    assert r["best"]["f1"] == pytest.approx((0.9 + 1.0) / 2)
    assert r["best"]["tokens"] == pytest.approx((250 + 100) / 2)


def test_stop_auc_separates_and_skips_the_last_prefix():
    """F1 rises by the end exactly on questions whose cue is 1; SR never rises."""
    ps = []
    for i in range(40):
        cue = i % 2
        path = [_prefix(f"q{i}", s, s, 0.0 if (cue and s < 3) else 0.5, 0, 100,
                        extra={"q_compare_words": cue}) for s in (1, 2, 3)]
        for x in path:
            x.f1_end, x.sr_end = path[-1].f1_now, path[-1].sr_now
        ps += path
    data = TrainingData([], ps, [f"q{i}" for i in range(40)], "f1")
    r = stop_auc(data, folds=4, rf=SMALL_RF)
    assert r["f1"]["n_prefixes"] == 80  # 2 per question: the last prefix is not scored
    assert r["f1"]["positive_rate"] == 0.5
    assert r["f1"]["auc"] == 1.0
    assert np.isnan(r["sr"]["auc"])  # one class only: no AUC


def test_verdict_names_where_the_signal_is_lost(choice):
    r = {"choice": choice,
         "stop": {"auc": {"f1": {"auc": 0.52, "positive_rate": 0.1}},
                  "at_k": stop_at_k(_paths_data())}}
    lines = verdict(r)
    assert "does not beat chance" in lines[0]
    last = lines[-1]
    # the synthetic forest ranks acquisitions perfectly; only the level label misleads it
    assert last.startswith("Signal lost in:")
    assert "labels" in last and "stop features" in last
    assert "model/features" not in last and "action set" not in last


def test_pick_score_negative_counts_picks_stop_would_beat():
    a, b = _two_states()
    # lambda 0: the picks score .9 (A: sufficiency_check) and .3 (B: retrieve_more)
    assert choice_metrics([a, b], forest_chooser(0.0))["pick_score_negative"] == 0.0
    # lambda 1e-2 without suff: A .2-4.5 < 0, B .3-4.5 < 0
    m = choice_metrics([a, b], forest_chooser(1e-2, acquisitions_only=True))
    assert m["pick_score_negative"] == 1.0
