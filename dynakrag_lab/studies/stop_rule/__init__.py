"""Offline replays of the stop rule along saved trajectories, for studies: where one policy
stops on each question (:func:`replay_outcomes`) and the cost/quality curve over lambda
(:func:`lambda_sweep`, what :func:`dynakrag_lab.report.plots.lambda_sweep_figure` draws). Both
reuse the training's own replay (:mod:`dynakrag_lite.training.tuning`), so they score exactly
what tuning scores.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from dynakrag_lite.policy import Policy
from dynakrag_lite.training.tuning import (LAMBDA_GRID, replay_decisions, stop_outcomes,
                                           tune_continuation)
from dynakrag_lite.trajectories import TrainingData

__all__ = ["replay_outcomes", "lambda_sweep"]


def replay_outcomes(policy: Policy, data: TrainingData, lam: float | None = None,
                    veto_threshold: float | None = None) -> pd.DataFrame:
    """Where the policy would stop on each question of ``data``, replayed offline.

    Walks each question's explored path (its visited states in order) with the decisions of
    :func:`~dynakrag_lite.training.tuning.replay_decisions`; the first state where the policy
    chooses stop_answer (else the path's end, where a cap forced the stop) is its stopping
    point. Assumption: while the policy continues it follows the explored path (an acquisition
    action other than the rollout's is not executed), so this scores the *stop rule* (value of stopping, the veto, lambda), not the
    choice among acquisition actions. Outcome columns, read at the stopping point from the
    prefix records: ``sr``, ``f1`` (reader's answer F1 from those documents; NaN unless collected
    with continuation="f1"), ``tokens`` (ledger tokens to reach it + its answer call), plus
    ``stop_step``, ``early`` (stopped before the path's end), ``vetoes``, ``sr_end``/``f1_end``.
    Gold labels enter only through these recorded outcomes, never the decisions.
    """
    lam = policy.lam if lam is None else lam
    thr = policy.veto_threshold if veto_threshold is None else veto_threshold
    decisions = replay_decisions(policy, data, lam=0.0, veto_threshold=np.inf)
    return pd.DataFrame(stop_outcomes(decisions, data, [(lam, thr)]))


def lambda_sweep(data: TrainingData, lams: Sequence[float] = LAMBDA_GRID,
                 veto_threshold: float = 0.05, folds: int = 5, metric: str = "f1",
                 **kw) -> pd.DataFrame:
    """The cost/quality curve: cross-validated mean F1, SR and tokens per lambda at one veto
    threshold (a DataFrame sorted by lambda; the book plots f1/sr against tokens)."""
    _, _, frame = tune_continuation(data, lams, (veto_threshold,), folds, metric, **kw)
    return frame.sort_values("lam").reset_index(drop=True)
