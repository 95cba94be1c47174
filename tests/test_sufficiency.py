"""Sufficiency signals (dynakrag_lite.sufficiency): log-prob margin through the call cache, the
learned estimator, threshold calibration, and the probe's gating rules in sufficiency_check."""
import math
from dataclasses import replace

import numpy as np
import pytest

from dynakrag_lite import sufficiency as S
from dynakrag_lite.training import calibration as C
from dynakrag_lite.training import estimator as E
from dynakrag_lite.actions import apply_action
from dynakrag_lite.config import ControlConfig, Environment
from dynakrag_lite.features import state_features
from dynakrag_lite.generators import CachedGenerator, CallCache, Generation
from dynakrag_lite.state import RetrievedDoc, initial_state
from dynakrag_lite.validity import valid_actions

from helpers import require_model


class LogprobGenerator:
    """Scripted backend with log-probs: P(SUFFICIENT) rises with the number of documents in the
    prompt (``lp_by_docs``); its text verdict is always SUFFICIENT (a reader at chance)."""
    spec = model_id = "scripted-logprobs"
    backend = "scripted"

    def __init__(self, sufficient_from: int = 6, gap: str = "Missing fact: founder birthplace"):
        self.sufficient_from = sufficient_from
        self.gap = gap
        self.calls: list[str] = []
        self.scored = 0

    @staticmethod
    def n_docs(messages) -> int:
        return messages[-1]["content"].count("\n[")

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        user = messages[-1]["content"]
        if "contain every fact" in user:
            kind, text = "sufficiency", "SUFFICIENT"
        elif "Missing fact:" in user:
            kind, text = "gap", self.gap
        else:
            kind, text = "answer", "Paris"
        self.calls.append(kind)
        return Generation(text, len(user) // 4, 3, 0.0)

    def option_logprobs(self, messages, options, mode):
        self.scored += 1
        n = self.n_docs(messages)
        good = n >= self.sufficient_from
        lp = {"SUFFICIENT": math.log(0.8 if good else 0.3),
              "INSUFFICIENT": math.log(0.2 if good else 0.7)}
        return {o: lp.get(o, -20.0) for o in options}


def docs(n: int) -> tuple[RetrievedDoc, ...]:
    return tuple(RetrievedDoc(f"d{i}", f"Title {i}", f"text {i}", 0.5, "retrieve_more", 0)
                 for i in range(n))


def state_with(n: int):
    return replace(initial_state("Where was the founder of Velmora Records born?", "q1"),
                   docs=docs(n))


# -- log-probs and the margin -----------------------------------------------------------
def test_margin_from_scripted_backend_is_cached(tmp_path):
    inner = LogprobGenerator()
    gen = CachedGenerator(inner, CallCache(tmp_path / "c.sqlite"))
    m3 = S.probe_margin("q?", docs(3), gen)
    assert m3 == pytest.approx(math.log(0.3) - math.log(0.7))
    assert S.probe_margin("q?", docs(6), gen) == pytest.approx(math.log(0.8) - math.log(0.2))
    assert inner.scored == 2
    again, sc = S.probe_margin_scored("q?", docs(3), gen)
    assert again == pytest.approx(m3) and sc.cached and inner.scored == 2
    lp = S.first_token_logprobs(gen, [{"role": "user", "content": "x"}], S.OPTIONS)
    assert set(lp) == set(S.OPTIONS) and all(np.isfinite(v) for v in lp.values())
    # a generation with the same messages is another cache entry (distinct key kind)
    assert not gen.generate([{"role": "user", "content": "x"}]).cached


def test_unsupported_backend_fails_clearly():
    class Plain:
        spec = model_id = "plain"

        def generate(self, messages, max_tokens=64, stop=None):
            return Generation("x", 1, 1)
    with pytest.raises(S.SufficiencyError, match="cannot score log-probabilities"):
        S.probe_margin("q?", docs(2), Plain())


# -- the learned estimator ----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["forest", "logistic"])
def test_learned_estimator_learns_a_separable_problem(kind):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, len(S.LEARNED_FEATURE_NAMES)))
    y = (X[:, 3] + 0.5 * X[:, 7] > 0).astype(float)
    est = E.fit_estimator(X[:300], y[:300], kind=kind, seed=13)
    assert C.auc(est.predict(X[300:]), y[300:]) > 0.9
    again = E.fit_estimator(X[:300], y[:300], kind=kind, seed=13)
    assert np.allclose(est.predict(X[300:]), again.predict(X[300:]))  # seeded
    oof = E.oof_estimator_scores(X, y, groups=np.arange(400) // 4, folds=4, kind=kind)
    assert C.auc(oof, y) > 0.85
    one_class = E.fit_estimator(X[:10], np.ones(10))
    assert np.all(one_class.predict(X[:3]) == 1.0)


def test_estimator_features_exclude_the_probe_verdict():
    assert not any(n.startswith("suff_") for n in S.LEARNED_FEATURE_NAMES)
    assert len(S.learned_features(state_with(3))) == len(S.LEARNED_FEATURE_NAMES)


# -- thresholds and calibration ------------------------------------------------------------
def test_youden_and_precision_thresholds():
    scores = np.array([0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9])
    y = np.array([0, 0, 0, 1, 1, 0, 1, 1])
    assert C.youden_threshold(scores, y) == pytest.approx(0.4)  # TPR 1, FPR .25: J .75
    assert C.precision_threshold(scores, y, 1.0) == pytest.approx(0.8)
    assert C.precision_threshold(scores, y, 0.8) == pytest.approx(0.4)  # 4 of 5 from 0.4 up
    assert C.precision_threshold(scores, y, 1.01) is None
    assert C.auc(scores, y) == pytest.approx(14 / 16)


def test_calibrate_picks_the_informative_signal_and_sets_its_threshold():
    rng = np.random.default_rng(1)
    groups = np.repeat(np.arange(60), 3)
    y = (rng.random(180) < 0.4).astype(float)
    scores = {"text": np.ones(180),  # always SUFFICIENT: AUC .5 exactly
              "margin": y * 1.5 + rng.normal(0, 1.0, 180),
              "learned": rng.random(180)}  # noise
    sig = C.calibrate(scores, y, groups, text_sufficient=np.ones(180))
    assert sig.kind == "margin" and sig.gates
    st = sig.stats
    assert st["margin"].informative and not st["text"].informative
    assert st["text"].auc == pytest.approx(0.5) and st["text"].text_sufficient_rate == 1.0
    assert sig.threshold == pytest.approx(C.youden_threshold(scores["margin"], y))
    prec = C.calibrate(scores, y, groups, rule="precision:0.9")
    assert prec.threshold >= sig.threshold and prec.stats["margin"].precision >= 0.9
    assert sig.describe()["stats"]["text"]["informative"] is False


def test_no_informative_signal_keeps_a_text_probe_that_does_not_gate():
    y = np.array([0.0, 1.0] * 30)
    sig = C.calibrate({"text": np.ones(60)}, y, np.arange(60) // 2)
    assert sig.kind == "text" and not sig.gates


# -- the probe in sufficiency_check ---------------------------------------------------------
def env_with(signal: S.SufficiencySignal | None, gen=None) -> Environment:
    env = Environment(retriever=None, generator=gen or LogprobGenerator(),
                      config=ControlConfig(use_spacy=False))
    return S.configure(env, signal)


def test_margin_signal_writes_a_gap_only_when_insufficient():
    env = env_with(S.SufficiencySignal("margin", threshold=0.0))
    gen = env.generator
    few = apply_action(state_with(3), "sufficiency_check", env)
    assert not few.sufficiency.sufficient and few.sufficiency.signal == "margin"
    assert few.sufficiency.score == pytest.approx(math.log(0.3 / 0.7))
    assert few.sufficiency.threshold == 0.0
    assert few.gap == "founder birthplace" and gen.calls == ["gap"]
    assert few.ledger.llm_calls == 2  # the forward pass + the gap call
    assert "gap_query" in valid_actions(few, env.config)
    many = apply_action(replace(state_with(6), gap="old gap"), "sufficiency_check", env)
    assert many.sufficiency.sufficient and many.gap == "" and gen.calls == ["gap"]
    assert many.ledger.llm_calls == 1
    assert state_features(many)["suff_yes"] == 1.0


def test_learned_signal_needs_no_call_for_its_verdict():
    X = np.stack([S.learned_features(state_with(n)) for n in (1, 2, 3, 6, 7, 8)])
    est = E.fit_estimator(X, np.array([0, 0, 0, 1, 1, 1]), kind="logistic")
    env = env_with(S.SufficiencySignal("learned", threshold=0.5, estimator=est))
    s = apply_action(state_with(8), "sufficiency_check", env)
    assert s.sufficiency.sufficient and s.ledger.llm_calls == 0 and env.generator.calls == []
    s = apply_action(state_with(1), "sufficiency_check", env)
    assert not s.sufficiency.sufficient and env.generator.calls == ["gap"] and s.gap
    with pytest.raises(S.SufficiencyError):
        S.configure(env, S.SufficiencySignal("learned", threshold=0.5))


def test_text_signal_at_chance_does_not_gate():
    env = env_with(S.SufficiencySignal("text", gates=False))
    s = apply_action(replace(state_with(3), gap=""), "sufficiency_check", env)
    # the reply said SUFFICIENT, yet the gap is written and nothing reads the verdict
    assert s.sufficiency.sufficient and not s.sufficiency.gates
    assert env.generator.calls == ["sufficiency", "gap"] and s.gap == "founder birthplace"
    assert "gap_query" in valid_actions(s, env.config)
    f = state_features(s)
    assert f["suff_yes"] == 0.0 and f["suff_no"] == 0.0 and f["suff_none"] == 0.0


def test_default_text_probe_is_unchanged():
    env = env_with(None)
    assert env.config.sufficiency_signal == "text" and env.config.sufficiency_gates
    s = apply_action(state_with(3), "sufficiency_check", env)
    assert s.sufficiency.sufficient and s.gap == "" and env.generator.calls == ["sufficiency"]
    assert state_features(s)["suff_yes"] == 1.0


# -- a real model ----------------------------------------------------------------------------
@pytest.mark.slow
def test_first_token_logprobs_with_a_real_model_are_finite_and_cached(tmp_path):
    require_model("qwen2.5-coder-0.5b")
    from dynakrag_lite.generators.spec import make_generator
    from dynakrag_lite import prompts
    gen = make_generator("qwen2.5-coder-0.5b", cache=CallCache(tmp_path / "c.sqlite"))
    d = (RetrievedDoc("a", "Paris", "Paris is the capital of France.", 0.5, "x", 0),)
    msgs = prompts.sufficiency_messages("What is the capital of France?", d)
    first = S.score_options(gen, msgs, S.OPTIONS)
    assert first.method == "first_token" and not first.cached  # "S" vs "INS" differ
    assert all(np.isfinite(v) and v < 0 for v in first.logprobs.values())
    assert first.prompt_tokens > 20
    second = S.score_options(gen, msgs, S.OPTIONS)
    assert second.cached and second.logprobs == first.logprobs
    assert S.first_token_logprobs(gen, msgs, S.OPTIONS) == first.logprobs
    # scoring leaves the model usable: the next generation still answers in the format
    assert prompts.parse_sufficiency(gen.inner.generate(msgs, max_tokens=8).text).parsed


def test_policy_keeps_its_signal_through_save_and_load(tmp_path):
    from dynakrag_lite.features import FEATURE_NAMES
    from dynakrag_lite.policy import Policy, train_policy
    from dynakrag_lite.trajectories import Sample, TrainingData
    rng = np.random.default_rng(0)
    data = TrainingData([Sample(f"q{i}", 0, "stop_answer", rng.random(len(FEATURE_NAMES)),
                                float(i % 2), 0.0, 3) for i in range(20)],
                        questions=[f"q{i}" for i in range(20)])
    X = np.stack([S.learned_features(state_with(n)) for n in (1, 2, 3, 6, 7, 8)])
    est = E.fit_estimator(X, np.array([0, 0, 0, 1, 1, 1]), kind="logistic")
    sig = S.SufficiencySignal("learned", threshold=0.4, estimator=est)
    pol = train_policy(data, n_estimators=5, min_samples_leaf=2, n_jobs=1, sufficiency=sig)
    assert pol.meta["sufficiency"]["kind"] == "learned"
    back = Policy.load(pol.save(tmp_path / "p.joblib"))
    env = back.configure(env_with(None))
    assert env.config.sufficiency_signal == "learned"
    assert env.config.sufficiency_threshold == 0.4 and env.sufficiency_estimator is not None
    s = apply_action(state_with(8), "sufficiency_check", env)
    assert s.sufficiency.signal == "learned" and s.sufficiency.sufficient


def test_calibration_states_cover_sr_levels_with_matched_contrasts(library_questions,
                                                                   library_retriever):
    env = Environment(library_retriever, None, ControlConfig(use_spacy=False))
    qs = library_questions[:6]
    states = C.calibration_states(qs, env, per_question=3)
    assert {c.qid for c in states} == {q.id for q in qs}
    reach = [c for c in states if c.kind == "reachable"]
    assert all(sum(c.qid == q.id for c in reach) <= 3 for q in qs)
    for c in states:
        assert c.state.docs and 0.0 <= c.sr <= 1.0
    for i, c in enumerate(states):
        if c.kind == "contrast":  # right after its complete source, same size, incomplete
            src = states[i - 1]
            assert src.sufficient and not c.sufficient and src.qid == c.qid
            assert len(c.state.docs) == len(src.state.docs)
            assert len(set(c.state.doc_ids) ^ set(src.state.doc_ids)) == 2
    assert any(c.kind == "contrast" for c in states)
    assert C.calibration_states(qs, env, per_question=3) == states  # deterministic
