"""dynakrag_lite.forest.FlatForest: bit-identical to RandomForestRegressor.predict (n_jobs=1),
and the policy's predict path through it: same decisions, unchanged pickles."""
from __future__ import annotations

import copy
import hashlib
import pickle
import random
from dataclasses import replace

import numpy as np
import pytest
from sklearn.ensemble import (ExtraTreesRegressor, GradientBoostingRegressor,
                              RandomForestRegressor)
from sklearn.exceptions import NotFittedError

from dynakrag_lite import policy as policy_mod
from dynakrag_lite.config import ControlConfig
from dynakrag_lite.experiments.artifacts import POLICIES_DIR
from dynakrag_lite.features import FEATURE_NAMES, STATE_FEATURE_NAMES, phi, state_features
from dynakrag_lite.forest import FlatForest, UnsupportedEstimator, flat_forest_for
from dynakrag_lite.policy import Policy, train_policy
from dynakrag_lite.state import (ACTIONS, EvidenceState, Ledger, RankedEntry, RetrievedDoc,
                                 Sufficiency)
from dynakrag_lite.training.tuning import replay_decisions
from dynakrag_lite.trajectories import PrefixSample, Sample, TrainingData
from dynakrag_lite.validity import valid_actions


def forest(X, y, n_jobs=1, **kw):
    kw = {"n_estimators": 40, "min_samples_leaf": 2, "random_state": 0, **kw}
    return RandomForestRegressor(n_jobs=n_jobs, **kw).fit(X, y)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def assert_identical(flat: FlatForest, rf: RandomForestRegressor, X) -> None:
    assert rf.n_jobs == 1
    ref = rf.predict(X)
    got = flat.predict(X)
    assert got.dtype == ref.dtype == np.float64 and got.shape == ref.shape
    assert np.array_equal(got, ref)
    assert np.array_equal(bits(got), bits(ref))  # also the sign of zeros
    assert np.array_equal(flat.apply(X), rf.apply(X))


def thresholds(rf) -> np.ndarray:
    """(feature, threshold) of every split node of every tree."""
    out = [np.stack([t.tree_.feature[t.tree_.children_left >= 0],
                     t.tree_.threshold[t.tree_.children_left >= 0]], axis=1)
           for t in rf.estimators_]
    return np.concatenate(out)


def rows_at_thresholds(rf, base: np.ndarray, rng) -> np.ndarray:
    """Rows of ``base`` with one feature set to a split threshold of the forest, or to its
    float64 neighbour above/below, or its float32 neighbours (where the float32 cast decides)."""
    splits = thresholds(rf)
    picks = splits[rng.integers(len(splits), size=len(base))]
    out = []
    for move in (lambda t: t, lambda t: np.nextafter(t, np.inf),
                 lambda t: np.nextafter(t, -np.inf),
                 lambda t: np.nextafter(np.float32(t), np.float32(np.inf)).astype(np.float64),
                 lambda t: np.nextafter(np.float32(t), np.float32(-np.inf)).astype(np.float64)):
        X = base.copy()
        X[np.arange(len(X)), picks[:, 0].astype(int)] = move(picks[:, 1])
        out.append(X)
    # and rows made only of thresholds (every feature on a split value of some node)
    full = base.copy()
    for j in range(base.shape[1]):
        cand = splits[splits[:, 0] == j, 1]
        if len(cand):
            full[:, j] = cand[rng.integers(len(cand), size=len(base))]
    out.append(full)
    return np.concatenate(out)


# -- FlatForest against sklearn --------------------------------------------------------------
@pytest.mark.parametrize("kw", [
    {},
    {"min_samples_leaf": 8, "n_estimators": 100},
    {"min_samples_leaf": 1, "max_features": 0.3, "bootstrap": False},
    {"max_depth": 3, "n_estimators": 7},
])
def test_bit_identical_to_sklearn_at_and_around_thresholds(kw):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 8)) * rng.choice([1e-3, 1.0, 1e4], size=8)
    X[:, 0] = rng.integers(0, 5, size=300)  # ties and integer-valued splits (x.5)
    y = X[:, 0] - np.sin(X[:, 1]) + rng.normal(scale=0.3, size=300)
    rf = forest(X, y, **kw)
    flat = FlatForest(rf)
    Xt = rows_at_thresholds(rf, rng.normal(size=(200, 8)) * X.std(0), rng)
    assert_identical(flat, rf, Xt)
    assert_identical(flat, rf, X)


def test_the_threshold_rows_exercise_the_float32_cast():
    """Walking the float64 rows without the cast would land in other leaves: the test data
    really probes sklearn's float32 comparison."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 6))
    rf = forest(X, X[:, 0] + rng.normal(size=300))
    flat = FlatForest(rf)
    Xt = rows_at_thresholds(rf, rng.normal(size=(300, 6)), rng)
    true_leaves = flat.apply(Xt)
    naive = flat._leaves(Xt.astype(np.float64)) - flat.roots[None, :]  # no float32 cast
    assert not np.array_equal(naive, true_leaves)
    assert np.array_equal(true_leaves, rf.apply(Xt))


def test_paper_forest_on_policy_shaped_features_single_and_many_rows():
    """300 trees, min leaf 8 on 62 features shaped like phi(s, a) (counts, 0/1 flags, a one-hot
    action, scores in [0, 1], a token cost), from one row to many (several blocks)."""
    rng = np.random.default_rng(3)
    n, d = 600, len(FEATURE_NAMES)
    X = np.zeros((n, d))
    X[:, :14] = rng.integers(0, 12, size=(n, 14))
    X[:, 14:19] = rng.integers(0, 13, size=(n, 5))
    X[:, 19:29] = rng.uniform(0.2, 0.9, size=(n, 10)).astype(np.float32)  # float32 scores
    X[:, 29:54] = rng.integers(0, 3, size=(n, 25)) * (rng.random((n, 25)) < 0.5)
    X[np.arange(n), 54 + rng.integers(0, 7, size=n)] = 1.0
    X[:, 61] = rng.gamma(2.0, 300.0, size=n)
    y = 0.2 * X[:, 19] - 0.01 * X[:, 14] + 0.3 * X[:, 54] + rng.normal(scale=0.05, size=n)
    rf = forest(X, y, n_estimators=300, min_samples_leaf=8, random_state=13)
    flat = FlatForest(rf)
    assert flat.n_trees == 300 and flat.n_features_in_ == d
    for rows in (X[:1], X[5:6], X[:5], rows_at_thresholds(rf, X[:40], rng)):
        assert_identical(flat, rf, rows)
    many = np.concatenate([X, rows_at_thresholds(rf, X, rng)])
    assert len(many) > 3 * (flat.BLOCK_PAIRS // flat.n_trees)
    assert_identical(flat, rf, many)
    # the order of additions matters: numpy's pairwise sum misses the last bit somewhere
    pairwise = flat._value[flat._leaves(many.astype(np.float32))].sum(axis=1) / flat.n_trees
    assert not np.array_equal(pairwise, rf.predict(many))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_missing_values_follow_the_trees_and_bad_input_is_refused_like_sklearn():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(400, 5))
    X[rng.random(X.shape) < 0.1] = np.nan  # trained with NaNs: missing_go_to_left learned
    y = np.nan_to_num(X[:, 0]) + rng.normal(scale=0.1, size=400)
    rf = forest(X, y)
    flat = FlatForest(rf)
    Xt = rng.normal(size=(300, 5))
    Xt[rng.random(Xt.shape) < 0.3] = np.nan
    assert_identical(flat, rf, Xt)
    assert_identical(flat, rf, np.full((2, 5), np.nan))
    bad = Xt[:3].copy()
    bad[0, 0] = np.inf
    for arr in (bad, Xt[:3, :4], Xt[0], Xt[:0], np.full((1, 5), 1e300)):
        with pytest.raises(ValueError):
            rf.predict(arr)
        with pytest.raises(ValueError):
            flat.predict(arr)


def test_lists_and_integer_input_match():
    rng = np.random.default_rng(5)
    X = rng.integers(0, 10, size=(200, 3))
    rf = forest(X, X[:, 0] * 1.5 + rng.normal(size=200))
    flat = FlatForest(rf)
    assert_identical(flat, rf, X)
    assert np.array_equal(flat.predict(X[:4].tolist()), rf.predict(X[:4].tolist()))


def test_unsupported_estimators_are_refused_clearly():
    rng = np.random.default_rng(6)
    X, y = rng.normal(size=(60, 3)), rng.normal(size=60)
    with pytest.raises(UnsupportedEstimator, match="single-output"):
        FlatForest(forest(X, np.stack([y, -y], axis=1)))
    with pytest.raises(UnsupportedEstimator, match="RandomForestRegressor only"):
        FlatForest(ExtraTreesRegressor(n_estimators=3).fit(X, y))
    with pytest.raises(UnsupportedEstimator, match="RandomForestRegressor only"):
        FlatForest(GradientBoostingRegressor(n_estimators=3).fit(X, y))

    class Shifted(RandomForestRegressor):
        def predict(self, X):
            return super().predict(X) + 1

    with pytest.raises(UnsupportedEstimator, match="overrides predict"):
        FlatForest(Shifted(n_estimators=3).fit(X, y))
    with pytest.raises(NotFittedError):
        FlatForest(RandomForestRegressor())
    assert issubclass(UnsupportedEstimator, TypeError)


def test_cache_reuses_per_forest_rebuilds_after_refit_and_skips_others():
    rng = np.random.default_rng(7)
    X, y = rng.normal(size=(80, 4)), rng.normal(size=80)
    rf = forest(X, y, n_estimators=5)
    first = flat_forest_for(rf)
    assert isinstance(first, FlatForest) and flat_forest_for(rf) is first
    rf.fit(X, -y)  # new trees: the snapshot is stale
    second = flat_forest_for(rf)
    assert second is not first
    assert np.array_equal(second.predict(X), rf.predict(X))
    assert flat_forest_for(ExtraTreesRegressor(n_estimators=2).fit(X, y)) is None
    assert flat_forest_for(object()) is None
    assert flat_forest_for({}) is None  # unhashable: no cache, no error
    assert "FlatForest" not in pickle.dumps(rf).decode("latin-1")


# -- the policy's predict path ---------------------------------------------------------------
WORDS = ("Velmora Records founder Orlen Vasko born city river album label studio band "
         "Kestrel Harbor museum director painter novel published year").split()
QUESTIONS = ("Where was the founder of Velmora Records born?",
             "Which album did the band from Kestrel Harbor release first?",
             "Who directed the museum that bought the painting?",
             "Is the river longer than the canal?")


def random_state(rng: random.Random, i: int) -> EvidenceState:
    q = QUESTIONS[i % len(QUESTIONS)]
    n = rng.randint(1, 12)
    ranking = tuple(RankedEntry(f"r{k}", " ".join(rng.sample(WORDS, 2)),
                                " ".join(rng.sample(WORDS, 6)), rng.uniform(0.2, 0.8))
                    for k in range(20))
    docs = tuple(RetrievedDoc(f"d{i}-{k}", " ".join(rng.sample(WORDS, 2)),
                              " ".join(rng.sample(WORDS, rng.randint(3, 12))),
                              float(np.float32(rng.uniform(0.1, 0.9))),
                              rng.choice(("retrieve_more", "bridge_entity_expand", "gap_query")),
                              k // 3) for k in range(n))
    hist = tuple(rng.choice(ACTIONS[:5]) for _ in range(rng.randint(1, 4)))
    suff = None
    if rng.random() < 0.4:
        suff = Sufficiency(rng.random() < 0.3, "the founder's city", "raw", True,
                           tuple(d.id for d in docs[:rng.randint(1, n)]))
    return EvidenceState(question=q, qid=f"q{i % 7}", docs=docs, initial_ranking=ranking,
                         frontier=rng.randint(0, 19), gap="city of the founder"
                         if rng.random() < 0.5 else "", sufficiency=suff,
                         bridge_candidates=tuple(rng.sample(WORDS, rng.randint(0, 3))),
                         history=hist, ledger=Ledger(prompt_tokens=rng.randint(0, 3000),
                                                     retrieval_calls=rng.randint(1, 5)))


@pytest.fixture(scope="module")
def states():
    rng = random.Random(11)
    return [random_state(rng, i) for i in range(90)]


@pytest.fixture(scope="module")
def trained(states):
    """A policy from train_policy (paper forests, default n_jobs=-1) on synthetic data shaped
    like collected trajectories: phi(s, a) rows per valid action, state-feature prefixes."""
    rng = np.random.default_rng(12)
    cfg = ControlConfig()
    data = TrainingData(continuation_target="sr")
    for i, s in enumerate(states[:60]):
        for a in valid_actions(s, cfg):
            if a == "compress_answer_evidence":
                continue
            data.samples.append(Sample(s.qid, i, a, phi(s, a, 400.0), float(rng.normal()),
                                       float(rng.integers(100, 900)), len(s.docs)))
        base = state_features(s)
        data.prefixes.append(PrefixSample(s.qid, np.array([base[n] for n in STATE_FEATURE_NAMES]),
                                          float(rng.normal(scale=0.2)), step=i))
    data.questions = sorted({s.qid for s in states[:60]})
    return data, train_policy(data, seed=13)


def test_train_policy_fits_in_parallel_and_predicts_in_the_calling_thread(trained):
    pol = trained[1]
    assert pol.value_model.n_jobs == 1 and pol.continuation_model.n_jobs == 1
    assert len(pol.value_model.estimators_) == 300


def test_choose_is_the_same_with_and_without_the_flat_path(trained, states, monkeypatch):
    pol = trained[1]
    cfg = ControlConfig(max_docs=16, max_steps=8)
    chosen = []
    for s in states:
        valid = valid_actions(s, cfg)
        if not valid:
            continue
        monkeypatch.setattr(policy_mod, "USE_FLAT_FOREST", True)
        fast = (pol.values(s, valid), pol.continue_gain(s), pol.choose(s, valid))
        monkeypatch.setattr(policy_mod, "USE_FLAT_FOREST", False)
        slow = (pol.values(s, valid), pol.continue_gain(s), pol.choose(s, valid))
        assert fast == slow  # values and gains exactly; decision and rounded scores
        chosen.append(fast[2][0])
    assert len(chosen) > 50 and len(set(chosen)) > 1
    monkeypatch.setattr(policy_mod, "USE_FLAT_FOREST", True)
    a = replay_decisions(pol, trained[0], lam=1e-4)
    monkeypatch.setattr(policy_mod, "USE_FLAT_FOREST", False)
    b = replay_decisions(pol, trained[0], lam=1e-4)
    assert a == b


def test_flat_path_is_taken_and_the_forests_predict_is_not_called(trained, states,
                                                                  monkeypatch):
    pol = trained[1]

    def boom(*a, **k):
        raise AssertionError("sklearn predict called")
    monkeypatch.setattr(RandomForestRegressor, "predict", boom)
    s = states[0]
    pol.choose(s, valid_actions(s, ControlConfig()))


def test_a_stub_model_still_works_through_its_own_predict(states):
    class Stub:
        def predict(self, X):
            return np.asarray(X)[:, FEATURE_NAMES.index("act_stop_answer")] * 0.5
    pol = Policy(Stub(), None, policy_mod.CostModel())
    s = states[1]
    best, scores = pol.choose(s, ("retrieve_more", "stop_answer"))
    assert best == "stop_answer" and scores["stop_answer"]["value"] == 0.5


def sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_using_a_policy_changes_neither_its_pickle_nor_its_saved_bytes(trained, states,
                                                                       tmp_path):
    pol = replace(trained[1])  # a fresh Policy around the same (already used?) forests
    before = pol.save(tmp_path / "before.joblib").read_bytes()
    pickled = pickle.dumps(pol)
    cfg = ControlConfig()
    for s in states[:20]:
        pol.choose(s, valid_actions(s, cfg))
    assert flat_forest_for(pol.value_model) is not None  # the cache was built
    assert pickle.dumps(pol) == pickled
    assert sha(pol.save(tmp_path / "after.joblib").read_bytes()) == sha(before)

    # A loaded policy: using it changes neither the file nor what it re-saves as. (Compared on
    # one loaded object: two loads of one file can re-save differently, as sklearn pickles its
    # tree node records with their uninitialised padding bytes.)
    path = tmp_path / "before.joblib"
    on_disk = sha(path.read_bytes())
    loaded = Policy.load(path)
    n_jobs = (loaded.value_model.n_jobs, loaded.continuation_model.n_jobs)
    resaved = sha(loaded.save(tmp_path / "unused.joblib").read_bytes())
    pickled = pickle.dumps(loaded)
    for s in states[:20]:
        loaded.choose(s, valid_actions(s, cfg))
    assert flat_forest_for(loaded.value_model) is not None
    assert (loaded.value_model.n_jobs, loaded.continuation_model.n_jobs) == n_jobs
    assert sha(path.read_bytes()) == on_disk
    assert pickle.dumps(loaded) == pickled
    assert sha(loaded.save(tmp_path / "used.joblib").read_bytes()) == resaved


def test_the_project_policy_if_present_is_matched_bit_for_bit():
    """The committed policy (forests fitted on collected HotpotQA trajectories)."""
    path = POLICIES_DIR / "hotpotqa-qwen2.5-coder-0.5b.joblib"
    if not path.exists():
        pytest.skip(f"{path.name} is not in results/policies")
    pol = Policy.load(path)
    rng = np.random.default_rng(8)
    for model in (pol.value_model, pol.continuation_model):
        rf = copy.copy(model)  # the loaded policy is left alone
        rf.n_jobs = 1
        d = rf.n_features_in_
        base = rng.uniform(0, 1, size=(60, d))
        X = rows_at_thresholds(rf, base, rng)
        assert_identical(FlatForest(rf), rf, X)
        assert_identical(FlatForest(rf), rf, X[:1])

