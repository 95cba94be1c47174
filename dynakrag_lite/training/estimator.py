"""The learned sufficiency signal's estimator (chapter 8): P(sufficient | state) fitted on
training states' :data:`~dynakrag_lite.sufficiency.LEARNED_FEATURE_NAMES` rows against
1[SR = 1], and its out-of-fold scores, folds grouped by question, for an honest training AUC
(:mod:`dynakrag_lite.training.calibration` compares it with the LLM signals)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from ..sufficiency import SufficiencyError, SufficiencyEstimator


def fit_estimator(X: np.ndarray, y: np.ndarray, kind: str = "forest", seed: int = 13,
                  n_estimators: int = 200, min_samples_leaf: int = 5,
                  n_jobs: int = 1) -> SufficiencyEstimator:
    """Fit the estimator on rows of :data:`LEARNED_FEATURE_NAMES` and labels 1[SR = 1]."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y).astype(int)
    if len(y) == 0:
        raise SufficiencyError("no training states for the sufficiency estimator")
    rate = float(y.mean())
    if len(set(y.tolist())) < 2:
        return SufficiencyEstimator(None, kind, constant=rate, n_train=len(y), positive_rate=rate)
    if kind == "forest":
        model = RandomForestClassifier(n_estimators=n_estimators,
                                       min_samples_leaf=min_samples_leaf, random_state=seed,
                                       n_jobs=n_jobs, class_weight="balanced")
    elif kind == "logistic":
        model = make_pipeline(StandardScaler(), LogisticRegression(
            C=1.0, max_iter=2000, random_state=seed, class_weight="balanced"))
    else:
        raise ValueError(f"unknown estimator kind {kind!r}")
    model.fit(X, y)
    return SufficiencyEstimator(model, kind, n_train=len(y), positive_rate=rate)


def oof_estimator_scores(X: np.ndarray, y: np.ndarray, groups: Sequence, folds: int = 5,
                         kind: str = "forest", seed: int = 13,
                         train_mask: np.ndarray | None = None, **kw) -> np.ndarray:
    """Out-of-fold P(sufficient) (folds grouped by question), for an honest training AUC; only
    ``train_mask`` rows train, every row of a held-out fold is predicted."""
    groups = np.asarray(groups, dtype=object)
    mask = np.ones(len(y), bool) if train_mask is None else np.asarray(train_mask, bool)
    k = min(folds, len(set(groups.tolist())))
    out = np.full(len(y), float(np.mean(y[mask])) if mask.any() else 0.0)
    if k < 2:
        return out
    for tr, te in GroupKFold(n_splits=k).split(X, y, groups):
        tr = tr[mask[tr]]
        if len(tr) == 0:
            continue
        est = fit_estimator(X[tr], y[tr], kind=kind, seed=seed, **kw)
        out[te] = est.predict(X[te])
    return out
