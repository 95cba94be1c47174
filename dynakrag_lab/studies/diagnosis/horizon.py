"""Horizon labels (issue 24, control diagnosis section 8): the value model fitted to the
Monte-Carlo return G = SR(end) - SR(s) of the actions the uniform-valid rollouts took (an
estimate of Q^uniform), and every chooser's value estimated off-policy by importance sampling
against the uniform-valid behaviour (:func:`importance_terms`), with question-level bootstrap
intervals (:func:`question_bootstrap`). Cross-validated by question like :mod:`.diagnosis`,
whose state, chooser and fold pieces it reuses.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np
from sklearn.metrics import r2_score

from dynakrag_lite.training.tuning import replay_decisions
from dynakrag_lite.trajectories import TrainingData

from dynakrag_lab.report.verdicts import interval_word
from dynakrag_lab.studies.diagnosis import (TIE, Chooser, ChoiceState, constant_chooser,
                                            fit_value_policy, forest_chooser, question_folds,
                                            realized_gain)

# The options the uniform-valid rollout draws from (trajectories.collect_question: every valid
# action but stop_answer, which it takes only when forced); importance weights need this set.
ROLLOUT_NOT_OPTIONS = ("stop_answer",)


def horizon_returns(qids: Sequence[str], steps: Sequence[int], gains: Sequence[float],
                    chosen: Sequence[bool]) -> np.ndarray:
    """Monte-Carlo return of each action the rollout took (rows with ``chosen``; NaN elsewhere):
    the sum of the taken actions' ``gains`` from that row's step to the end of its question's
    rollout. With realized support-recall gains (:func:`realized_gains`) it is
    G = SR(end of the rollout) - SR(s), a sample of Q^uniform(s, a)."""
    q = np.asarray(qids, dtype=object)
    st = np.asarray(steps, dtype=np.int64)
    g = np.asarray(gains, dtype=np.float64)
    taken = np.flatnonzero(np.asarray(chosen, dtype=bool))
    out = np.full(len(q), np.nan)
    for qid in dict.fromkeys(q[taken].tolist()):
        rows = taken[q[taken] == qid]
        rows = rows[np.argsort(st[rows], kind="stable")]
        if len(np.unique(st[rows])) < len(rows):
            raise ValueError(f"question {qid!r}: more than one taken action at one state")
        out[rows] = np.cumsum(g[rows][::-1])[::-1]
    return out


def realized_gains(data: TrainingData) -> np.ndarray:
    """Per sample, the support recall its action adds (:func:`realized_gain`)."""
    return np.array([realized_gain(s.action, s.target) for s in data.samples], dtype=np.float64)


def sample_returns(data: TrainingData, gains: np.ndarray | None = None) -> np.ndarray:
    """:func:`horizon_returns` aligned with ``data.samples`` (default: realized gains)."""
    ss = data.samples
    return horizon_returns([s.qid for s in ss], [s.step for s in ss],
                           realized_gains(data) if gains is None else gains,
                           [s.chosen for s in ss])


def horizon_identity(data: TrainingData) -> dict:
    """Checks G = SR(end) - SR(s) against the prefixes' recorded SR (a state without documents
    has SR 0), with the realized gains and with the raw one-step labels (sufficiency_check's
    level label 1[SR=1] counted as if it were a gain)."""
    sr_end: dict[str, float] = {}
    sr_now: dict[tuple[str, int], float] = {}
    for p in data.prefixes:
        sr_now[(p.qid, p.step)] = p.sr_now
        sr_end[p.qid] = p.sr_end
    ret = sample_returns(data)
    raw = sample_returns(data, np.array([s.target for s in data.samples], dtype=np.float64))
    dev, dev_raw = [], []
    for s, g, r in zip(data.samples, ret, raw):
        if not s.chosen or s.qid not in sr_end:
            continue
        now = sr_now.get((s.qid, s.step), 0.0 if s.n_docs == 0 else np.nan)
        if np.isfinite(now):
            dev.append(abs(g - (sr_end[s.qid] - now)))
            dev_raw.append(abs(r - (sr_end[s.qid] - now)))
    d, dr = np.array(dev), np.array(dev_raw)
    return {"n_states": len(d),
            "max_abs_diff": float(d.max()) if len(d) else float("nan"),
            "share_raw_labels_differ": float(np.mean(dr > TIE)) if len(dr) else float("nan"),
            "max_abs_diff_raw_labels": float(dr.max()) if len(dr) else float("nan")}


def horizon_training_data(data: TrainingData) -> TrainingData:
    """The taken actions' samples with their return G as target: what a value model fitted on
    them estimates is Q^uniform(s, a), not the one-step label."""
    ret = sample_returns(data)
    samples = [replace(s, target=float(g)) for s, g in zip(data.samples, ret) if s.chosen]
    return TrainingData(samples, [], list(data.questions), data.continuation_target,
                        dict(data.run))


def taken_returns(data: TrainingData) -> dict[tuple[str, int], tuple[str, float]]:
    """(qid, step) -> (the action the uniform-valid rollout took there, its return G)."""
    return {(s.qid, s.step): (s.action, float(g))
            for s, g in zip(data.samples, sample_returns(data)) if s.chosen}


class HorizonState(ChoiceState):
    """A decision of the uniform-valid rollout: its options are the rollout's own (so
    ``len(actions)`` is |A(s)|, the inverse of the behaviour's probability), ``taken`` indexes
    the action it drew and ``ret`` is that action's return G."""
    __slots__ = ("taken", "ret")

    def __init__(self, qid: str, step: int, actions: Sequence[str], gains, taken: int,
                 ret: float, values=None, costs=None):
        super().__init__(qid, step, actions, gains, values, costs)
        self.taken, self.ret = int(taken), float(ret)


def horizon_states(decisions: list[dict],
                   taken: dict[tuple[str, int], tuple[str, float]]) -> list[HorizonState]:
    """The decisions (at least two rollout options) of ``tuning.replay_decisions`` output, with
    the replayed model's values and the rollout's taken action and return."""
    out = []
    for d in decisions:
        acts = [a for a in d["valid"] if a not in ROLLOUT_NOT_OPTIONS]
        if len(acts) < 2:
            continue
        a, g = taken[(d["qid"], d["step"])]
        if a not in acts:
            raise ValueError(f"{d['qid']} step {d['step']}: taken action {a!r} is no option")
        out.append(HorizonState(d["qid"], d["step"], acts,
                                [realized_gain(x, d["targets"][x]) for x in acts],
                                acts.index(a), g, [d["values"][x] for x in acts],
                                [d["costs"][x] for x in acts]))
    return out


def importance_terms(states: Sequence[HorizonState], chooser: Chooser) -> np.ndarray:
    """Per decision 1[pi(s) = a_taken] * G * |A(s)|. The rollout drew a_taken with probability
    1/|A(s)|, so the expectation at s is Q^uniform(s, pi(s)) and the mean over the visited
    decisions is the support recall of deviating once to pi there, then continuing uniformly
    (uniform itself: the mean of G)."""
    return np.array([float(int(np.argmax(chooser(s))) == s.taken) * s.ret * len(s.actions)
                     for s in states], dtype=np.float64)


def question_bootstrap(qids: Sequence[str], values: np.ndarray, n_boot: int = 2000,
                       seed: int = 13, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean of ``values`` over decisions, resampling questions (the
    decisions of one rollout share its end, so they are not independent)."""
    uq, inv = np.unique(np.asarray(qids, dtype=object), return_inverse=True)
    sums = np.bincount(inv, weights=np.asarray(values, dtype=np.float64))
    counts = np.bincount(inv).astype(np.float64)
    idx = np.random.default_rng(seed).integers(0, len(uq), size=(n_boot, len(uq)))
    means = sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _picks(states: Sequence[HorizonState], chooser: Chooser) -> list[str]:
    return [s.actions[int(np.argmax(chooser(s)))] for s in states]


def offline_value(states: Sequence[HorizonState], chooser: Chooser, n_boot: int = 2000,
                  seed: int = 13) -> dict:
    """A chooser's importance-sampling value, its difference to uniform's with a question-level
    bootstrap interval, the share of decisions carrying the estimate (pick = taken action) and
    the share where it picks sufficiency_check."""
    terms = importance_terms(states, chooser)
    diff = terms - np.array([s.ret for s in states])
    picks = _picks(states, chooser)
    return {"value": float(terms.mean()), "minus_uniform": float(diff.mean()),
            "ci_minus_uniform": question_bootstrap([s.qid for s in states], diff, n_boot, seed),
            "share_pick_taken": float(np.mean([p == s.actions[s.taken]
                                               for p, s in zip(picks, states)])),
            "share_sufficiency_check": float(np.mean([p == "sufficiency_check"
                                                      for p in picks]))}


def diagnose_horizon(data: TrainingData, folds: int = 5, rf: dict | None = None,
                     n_boot: int = 2000, seed: int = 13) -> dict:
    """Horizon labels, out of fold: per fold a value forest on the training questions' taken
    actions and their return G (the horizon forest) and the one-step forest of
    :func:`diagnose_choice`; on the held-out decisions each chooser's importance-sampling value
    against the uniform-valid behaviour and the horizon forest's R² on the held-out returns (the
    readers say them in words: :func:`horizon_verdict`)."""
    held_h: list[HorizonState] = []
    held_1: list[HorizonState] = []
    ys, preds = [], []
    for train_q, test_q in question_folds(data.questions, folds):
        train, held = data.subset(train_q), data.subset(test_q)
        horizon = fit_value_policy(horizon_training_data(train), rf)
        onestep = fit_value_policy(train, rf)
        taken = taken_returns(held)
        for pol, acc in ((horizon, held_h), (onestep, held_1)):
            acc += horizon_states(replay_decisions(pol, held, lam=0.0, veto_threshold=np.inf),
                                  taken)
        X, y, _ = horizon_training_data(held).matrix()
        ys.append(y)
        preds.append(horizon.value_model.predict(X))
    choosers = {"horizon_forest": (held_h, forest_chooser(0.0)),
                "horizon_forest_acquisitions_only": (held_h, forest_chooser(0.0, True)),
                "onestep_forest": (held_1, forest_chooser(0.0)),
                "onestep_forest_acquisitions_only": (held_1, forest_chooser(0.0, True)),
                "retrieve_more": (held_h, constant_chooser("retrieve_more"))}
    out = {"n_decisions": len(held_h), "n_questions": len({s.qid for s in held_h}),
           "identity": horizon_identity(data),
           "r2_returns": float(r2_score(np.concatenate(ys), np.concatenate(preds))),
           "uniform": {"value": float(np.mean([s.ret for s in held_h]))},
           "choosers": {k: offline_value(st, ch, n_boot, seed)
                        for k, (st, ch) in choosers.items()},
           "mean_return_taken": mean_return_by_action(held_h)}
    diff = importance_terms(held_h, forest_chooser(0.0)) - importance_terms(
        held_h, constant_chooser("retrieve_more"))
    out["horizon_minus_retrieve_more"] = {
        "mean": float(diff.mean()),
        "ci": question_bootstrap([s.qid for s in held_h], diff, n_boot, seed)}
    return out


def mean_return_by_action(states: Sequence[HorizonState]) -> dict[str, dict[str, float]]:
    """Per action, the mean return G over the decisions where the rollout took it: a direct
    estimate of Q^uniform averaged over where that action is valid and drawn."""
    by: dict[str, list[float]] = {}
    for s in states:
        by.setdefault(s.actions[s.taken], []).append(s.ret)
    return {a: {"n": len(v), "mean": float(np.mean(v))} for a, v in by.items()}


def horizon_verdict(h: dict) -> str:
    """One sentence read off :func:`diagnose_horizon`'s numbers (stored or fresh), each interval
    in the four words (:func:`~dynakrag_lab.report.verdicts.interval_word`): the horizon forest
    against uniform offline and against always-retrieve_more."""
    hf, rm = h["choosers"]["horizon_forest"], h["choosers"]["retrieve_more"]
    lo, hi = hf["ci_minus_uniform"]
    vs = h["horizon_minus_retrieve_more"]
    rlo, rhi = vs["ci"]
    return (f"Horizon forest (R² {h['r2_returns']:.2f} on held-out returns): estimated value "
            f"{hf['value']:.3f} SR per decision against uniform's {h['uniform']['value']:.3f} "
            f"(difference {hf['minus_uniform']:+.3f}, 95% CI [{lo:+.3f}, {hi:+.3f}]): "
            f"{interval_word(lo, hi)} against uniform offline; against always-retrieve_more "
            f"({rm['value']:.3f}) the difference is {vs['mean']:+.3f} [{rlo:+.3f}, {rhi:+.3f}]: "
            f"{interval_word(rlo, rhi)}; it picks sufficiency_check at "
            f"{hf['share_sufficiency_check']:.0%} of decisions.")
