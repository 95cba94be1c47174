"""Offline replay of the learned selection rule on collected trajectories
(training.tuning.replay_decisions), the rollout path flags (Sample.chosen) and
TrainingData.to_frame."""
import pytest

from dynakrag_lite.actions import apply_action
from dynakrag_lite.config import ControlConfig, Environment
from dynakrag_lite.policy import train_policy
from dynakrag_lite.training.tuning import replay_decisions
from dynakrag_lite.state import initial_state
from dynakrag_lite.trajectories import collect
from dynakrag_lite.validity import valid_actions

from helpers import ScriptedGenerator


@pytest.fixture(scope="module")
def setup(library_questions, library_retriever):
    env = Environment(library_retriever, ScriptedGenerator(), ControlConfig())
    data = collect(library_questions[:8], env, progress=False)
    return env, data, train_policy(data, n_estimators=10, min_samples_leaf=2, n_jobs=1)


def test_each_visited_state_has_one_chosen_action_except_the_last(setup):
    _, data, _ = setup
    df = data.to_frame()
    assert len(df) == len(data.samples)
    per_state = df.groupby(["qid", "step"]).chosen.sum()
    assert set(per_state.unique()) <= {0, 1}
    for qid, g in df.groupby("qid"):
        chosen = g.groupby("step").chosen.sum()
        assert (chosen.iloc[:-1] == 1).all()  # every state but the last continued


def test_prefix_steps_pair_with_sample_states(setup):
    _, data, _ = setup
    states = {(s.qid, s.step) for s in data.samples}
    assert all((p.qid, p.step) in states for p in data.prefixes)


@pytest.mark.parametrize("lam,thr", [(0.0, None), (0.002, None), (0.0, 10.0), (0.0, -1.0)])
def test_replay_matches_policy_choose_along_the_path(setup, library_questions, lam, thr):
    env, data, pol = setup
    pol.lam = lam
    if thr is not None:
        pol.veto_threshold = thr
    decisions = {(d["qid"], d["step"]): d for d in replay_decisions(pol, data)}
    try:
        for q in library_questions[:8]:
            s = initial_state(q.question, q.id)
            path = data.to_frame().query("qid == @q.id and chosen").set_index("step").action
            while True:
                d = decisions[(q.id, len(s.history))]
                valid = valid_actions(s, env.config)
                assert d["valid"] == valid
                best, scores = pol.choose(s, valid)
                assert best == d["chosen"]
                assert d["vetoed"] == ("vetoed" in scores.get("stop_answer", {}))
                if len(s.history) not in path.index:
                    break
                s = apply_action(s, path[len(s.history)], env)
    finally:
        pol.lam, pol.veto_threshold = 0.0, 0.05


def test_replay_overrides_and_veto_semantics(setup):
    _, data, pol = setup
    never = replay_decisions(pol, data, veto_threshold=10.0)
    always = replay_decisions(pol, data, veto_threshold=-1.0)
    assert not any(d["vetoed"] for d in never)
    assert all(d["chosen"] == d["chosen_without_veto"] for d in never)
    for d in always:
        if d["vetoed"]:
            assert d["chosen"] != "stop_answer" and "stop_answer" in d["valid"]
    assert any(d["vetoed"] for d in always)
