"""The offline control diagnosis (dynakrag_lab.studies.diagnosis and .horizon) on hand-built
trajectories: every metric checked against numbers worked out by hand."""
import numpy as np
import pytest

from dynakrag_lite.features import FEATURE_NAMES, STATE_FEATURE_NAMES
from dynakrag_lab.studies.diagnosis import (ChoiceState, choice_metrics, choice_states,
                                            constant_chooser, diagnose_choice, feature_constancy,
                                            forest_chooser, oracle_chooser, realized_gain,
                                            stop_at_k, stop_auc, verdict)
from dynakrag_lab.studies.diagnosis.horizon import (HorizonState, diagnose_horizon,
                                                    horizon_identity, horizon_returns,
                                                    horizon_states, horizon_verdict,
                                                    importance_terms, offline_value,
                                                    question_bootstrap, taken_returns)
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
    assert "against chance" in lines[0] and "(point estimates, no interval)" in lines[0]
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


# -- horizon labels ----------------------------------------------------------------------------
def test_horizon_returns_sum_the_taken_realized_gains_to_the_end():
    # q "a" in step order retrieve_more (+.5), sufficiency_check (level label 1, gain 0),
    # bridge (+.25); q "b" interleaved and out of order; untaken rows stay NaN
    rows = [("a", 0, "retrieve_more", 0.5, True), ("b", 1, "rewrite_query", 0.5, True),
            ("a", 2, "bridge_entity_expand", 0.25, True), ("a", 1, "retrieve_more", 0.5, False),
            ("a", 1, "sufficiency_check", 1.0, True), ("b", 0, "retrieve_more", 0.0, True)]
    q, st, act, y, ch = map(list, zip(*rows))
    gains = [realized_gain(a, t) for a, t in zip(act, y)]
    g = horizon_returns(q, st, gains, ch)
    assert g[[0, 4, 2]].tolist() == [0.75, 0.25, 0.25]
    assert g[[5, 1]].tolist() == [0.5, 0.5]
    assert np.isnan(g[3])
    # the raw labels count sufficiency_check's level as a gain: no longer SR(end) - SR(s)
    assert horizon_returns(q, st, y, ch)[[0, 4, 2]].tolist() == [1.75, 1.25, 0.25]
    with pytest.raises(ValueError, match="more than one taken"):
        horizon_returns(["a", "a"], [0, 0], [0.0, 0.0], [True, True])


def _options_state(qid, actions, taken, good="bridge_entity_expand"):
    return HorizonState(qid, 1, actions, np.zeros(len(actions)), taken,
                        float(actions[taken] == good))


def test_importance_sampling_is_exact_in_expectation():
    """One action always returns G = 1, the others 0: enumerating every action uniform could
    have drawn, 'always pick it' is worth exactly 1 at each state, a wrong pick 0, uniform
    1/|A(s)| (three to five options)."""
    good = constant_chooser("bridge_entity_expand")
    wrong = constant_chooser("rewrite_query")
    for acts in (("retrieve_more", "bridge_entity_expand", "rewrite_query"),
                 ("retrieve_more", "gap_query", "bridge_entity_expand", "rewrite_query",
                  "sufficiency_check")):
        draws = [_options_state("q", acts, t) for t in range(len(acts))]
        assert importance_terms(draws, good).mean() == pytest.approx(1.0)
        assert importance_terms(draws, wrong).mean() == 0.0
        assert np.mean([s.ret for s in draws]) == pytest.approx(1 / len(acts))


def test_importance_sampling_on_sampled_draws():
    rng = np.random.default_rng(0)
    acts = ("retrieve_more", "bridge_entity_expand", "rewrite_query", "sufficiency_check")
    st = [_options_state(f"q{i}", acts, int(rng.integers(4))) for i in range(4000)]
    v = offline_value(st, constant_chooser("bridge_entity_expand"), n_boot=200)
    assert v["value"] == pytest.approx(1.0, abs=0.1)
    assert v["value"] - v["minus_uniform"] == pytest.approx(0.25, abs=0.03)  # uniform's value
    assert v["share_pick_taken"] == pytest.approx(0.25, abs=0.03)
    lo, hi = v["ci_minus_uniform"]
    assert lo < 0.75 < hi and hi - lo < 0.2


def test_horizon_states_use_the_rollouts_options():
    ds = [decision("q", 0, {"retrieve_more": 0.5, "stop_answer": 0.0}),  # one option: no choice
          decision("q", 1, {"retrieve_more": 0.0, "sufficiency_check": 1.0, "stop_answer": .5},
                   values={"retrieve_more": 0.1, "sufficiency_check": 0.9, "stop_answer": 0.})]
    st = horizon_states(ds, {("q", 0): ("retrieve_more", 0.5),
                             ("q", 1): ("sufficiency_check", 0.0)})
    assert len(st) == 1
    s = st[0]
    # stop_answer is not drawn by the rollout; sufficiency_check is
    assert s.actions == ("retrieve_more", "sufficiency_check") and s.taken == 1
    assert s.values.tolist() == [0.1, 0.9] and s.gains.tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="no option"):
        horizon_states(ds, {("q", 1): ("stop_answer", 0.0)})


def test_question_bootstrap_resamples_questions():
    assert question_bootstrap(["a", "a", "b"], np.full(3, 0.3), n_boot=50) == \
        pytest.approx((0.3, 0.3))
    # a question of 3 decisions worth 1 and one of 1 worth 0: the mean over decisions (3/4)
    lo, hi = question_bootstrap(["a", "a", "a", "b"], np.array([1., 1., 1., 0.]), n_boot=500)
    assert lo < 0.75 < hi and lo >= 0 and hi <= 1
    assert question_bootstrap(["a", "b"], np.array([0., 1.]), seed=5) == \
        question_bootstrap(["a", "b"], np.array([0., 1.]), seed=5)


def rollouts(n_q=60, seed=1) -> TrainingData:
    """Seeded uniform-valid rollouts of 4 states: step 0 has one option (retrieve_more, +.25),
    steps 1 and 2 four (the cue's acquisition adds .25 SR, the others nothing;
    sufficiency_check's label is the level 1 everywhere), step 3 only stop. Prefixes carry
    the SR so the return identity can be checked."""
    rng = np.random.default_rng(seed)
    opts = ("retrieve_more", "bridge_entity_expand", "rewrite_query", "sufficiency_check")
    samples, prefixes = [], []
    for i in range(n_q):
        qid, cue = f"q{i}", float(i % 2)
        good = "bridge_entity_expand" if cue else "retrieve_more"
        sr_now, path = 0.0, []
        for step in range(4):
            base = {"q_compare_words": cue, "steps": step, "n_docs": 3 * step}
            labels = ({"retrieve_more": 0.25} if step == 0 else {} if step == 3 else
                      {a: 1.0 if a == "sufficiency_check" else 0.25 * (a == good)
                       for a in opts})
            taken = list(labels)[int(rng.integers(len(labels)))] if labels else None
            for a, y in labels.items():
                samples.append(Sample(qid, step, a, phi(**base, **{f"act_{a}": 1}), y, 0,
                                      3 * step, chosen=a == taken))
            samples.append(Sample(qid, step, "stop_answer", phi(**base, act_stop_answer=1),
                                  sr_now, 0, 3 * step))
            if step:
                path.append(PrefixSample(qid, state_vec(), 0.0, step, sr_now=sr_now))
            if taken:
                sr_now += realized_gain(taken, labels[taken])
        for p in path:
            p.sr_end = path[-1].sr_now
        prefixes += path
    return TrainingData(samples, prefixes, [f"q{i}" for i in range(n_q)], "sr")


def test_horizon_identity_on_rollouts():
    idn = horizon_identity(rollouts())
    assert idn["n_states"] == 60 * 3  # steps 0 (SR 0, no documents), 1 and 2
    assert idn["max_abs_diff"] == 0
    assert idn["share_raw_labels_differ"] > 0  # wherever a sufficiency_check was taken


@pytest.fixture(scope="module")
def horizon():
    return diagnose_horizon(rollouts(), folds=4, rf=SMALL_RF, n_boot=300)


def test_horizon_forest_learns_what_the_level_label_hides(horizon):
    h = horizon
    assert h["n_decisions"] == 120 and h["n_questions"] == 60
    hf, one = h["choosers"]["horizon_forest"], h["choosers"]["onestep_forest"]
    # the one-step forest follows sufficiency_check's level label; the horizon forest never
    assert one["share_sufficiency_check"] == 1.0 and hf["share_sufficiency_check"] == 0.0
    assert hf["ci_minus_uniform"][0] > 0 and hf["value"] > one["value"]
    assert h["r2_returns"] > 0
    # uniform's value: the mean return over the decisions (steps 1 and 2)
    rets = taken_returns(rollouts())
    assert h["uniform"]["value"] == pytest.approx(
        np.mean([g for (_, step), (_, g) in rets.items() if step in (1, 2)]))
    assert "verdict" not in h  # the numbers only; readers word them
    assert "better against uniform offline" in horizon_verdict(h)


def test_horizon_verdict_wording():
    c = {"value": 0.1, "minus_uniform": -0.01, "ci_minus_uniform": (-0.05, 0.03),
         "share_sufficiency_check": 0.0}
    h = {"r2_returns": 0.5, "uniform": {"value": 0.11},
         "choosers": {"horizon_forest": c, "retrieve_more": {**c, "value": 0.2}},
         "horizon_minus_retrieve_more": {"mean": -0.1, "ci": (-0.15, -0.05)}}
    v = horizon_verdict(h)
    assert "inconclusive at this n against uniform offline" in v
    assert "[-0.150, -0.050]: worse;" in v


def test_trajectory_files_are_read_in_the_papers_dataset_order_whatever_the_argument_order():
    from dynakrag_lab.studies.diagnosis.__main__ import in_paper_order
    keys = [("musique", "b"), ("2wikimultihopqa", "a"), ("hotpotqa", "b"), ("other", "a"),
            ("hotpotqa", "a")]
    order = [("hotpotqa", "a"), ("hotpotqa", "b"), ("2wikimultihopqa", "a"), ("musique", "b"),
             ("other", "a")]
    assert list(in_paper_order({k: None for k in keys})) == order
    assert list(in_paper_order({k: None for k in reversed(keys)})) == order

