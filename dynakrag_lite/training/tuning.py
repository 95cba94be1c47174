"""Tuning the stop rule offline (chapter 9): :func:`replay_decisions` re-decides along collected
trajectories for any lambda or veto threshold without executing anything, :func:`stop_outcomes`
says where those decisions stop, and :func:`tune_continuation` chooses ``(lam,
veto_threshold)`` by cross-validation grouped by question."""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from sklearn.model_selection import GroupKFold

from ..features import FEATURE_NAMES, STATE_FEATURE_NAMES
from ..policy import Policy, PolicyError, predict_forest, select, train_policy
from ..state import LLM_ACTIONS, RETRIEVAL_ACTIONS
from ..trajectories import TrainingData


# -- offline tuning of the stop rule: veto threshold and lambda -------------------------
VETO_GRID = (-1.0, 0.0, 0.02, 0.05, 0.1, 0.2, 1.0)  # F1/SR targets lie in [-1, 1]
LAMBDA_GRID = (0.0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3)  # per token; retrieval ~450 tokens
# "gain" rule: lambda trades an SR gain (~0.05-0.25 per action) against ~100-500 tokens.
GAIN_LAMBDA_GRID = (0.0, 1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 5e-3)
# "continuation" rule: tau on the estimated SR still to come; -1 never stops early, 1 at once.
CONTINUATION_GRID = (-1.0, 0.0, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 1.0)


def replay_decisions(policy: Policy, data: TrainingData, lam: float | None = None,
                     veto_threshold: float | None = None) -> list[dict]:
    """Re-decide at every state visited while collecting ``data``, without executing anything
    (each (qid, step) holds phi(s, a) for every valid a), for any ``lam`` / ``veto_threshold``.
    Returns one dict per state, gold targets included for analysis only."""
    lam = policy.lam if lam is None else lam
    thr = policy.veto_threshold if veto_threshold is None else veto_threshold
    n_state = len(STATE_FEATURE_NAMES)
    i_cost = FEATURE_NAMES.index("est_cost")
    groups: dict[tuple[str, int], list] = {}
    for s in data.samples:
        groups.setdefault((s.qid, s.step), []).append(s)
    if not groups:
        return []
    X = np.stack([s.features for s in data.samples])
    all_values = predict_forest(policy.value_model, X)
    value_of = {id(s): float(v) for s, v in zip(data.samples, all_values)}
    out = []
    for (qid, step), group in groups.items():
        n_docs = group[0].n_docs
        values = {s.action: value_of[id(s)] for s in group}
        costs = {}
        for s in group:
            a = s.action
            if a in RETRIEVAL_ACTIONS:
                costs[a] = policy.cost_model.retrieval_tokens
            elif a in policy.cost_model.coef:
                a0, b = policy.cost_model.coef[a]
                costs[a] = max(0.0, a0 + b * n_docs)
            else:
                costs[a] = float(s.features[i_cost]) if a in LLM_ACTIONS else 0.0
        gain = None
        if policy.continuation_model is not None and n_docs > 0:
            gain = float(predict_forest(policy.continuation_model,
                                  group[0].features[:n_state].reshape(1, -1))[0])
        chosen, _, veto = select(values, costs, gain, lam, thr, policy.stop_rule)
        free, _, _ = select(values, costs, None, lam, thr, policy.stop_rule)
        out.append({"qid": qid, "step": step, "n_docs": n_docs,
                    "valid": tuple(s.action for s in group), "values": values,
                    "costs": costs, "continue_gain": gain, "vetoed": veto,
                    "stop_rule": policy.stop_rule, "chosen": chosen,
                    "chosen_without_veto": free,
                    "targets": {s.action: s.target for s in group}})
    return out


def _redecide(d: dict, lam: float, thr: float) -> tuple[str, bool]:
    """The selection rule of :meth:`Policy.choose` on one replayed state's values/costs."""
    chosen, _, veto = select(d["values"], d["costs"], d["continue_gain"], lam, thr,
                             d.get("stop_rule", "level"))
    return chosen, veto


def stop_outcomes(decisions: list[dict], data: TrainingData,
                  grid: Iterable[tuple[float, float]]) -> list[dict]:
    """Per (lam, thr) and question: where the replayed policy stops along the explored path."""
    by_q: dict[str, dict[int, dict]] = {}
    for d in decisions:
        by_q.setdefault(d["qid"], {})[d["step"]] = d
    pref = {(p.qid, p.step): p for p in data.prefixes}
    rows = []
    for lam, thr in grid:
        for qid, states in by_q.items():
            steps = sorted(states)
            stop, vetoes = steps[-1], 0
            for st in steps:
                chosen, veto = _redecide(states[st], lam, thr)
                vetoes += int(veto)
                if chosen == "stop_answer":
                    stop = st
                    break
            p = pref.get((qid, stop))
            last = pref.get((qid, steps[-1]))
            ans = p.answer_tokens if p is not None and np.isfinite(p.answer_tokens) else 0.0
            rows.append({
                "lam": lam, "veto_threshold": thr, "qid": qid, "stop_step": stop,
                "early": stop != steps[-1], "vetoes": vetoes,
                "sr": p.sr_now if p is not None else 0.0,
                "f1": p.f1_now if p is not None else 0.0,
                "tokens": (p.tokens + ans) if p is not None else 0.0,
                "sr_end": last.sr_now if last is not None else 0.0,
                "f1_end": last.f1_now if last is not None else 0.0})
    return rows


def tune_continuation(data: TrainingData, lams: Sequence[float] = LAMBDA_GRID,
                      thresholds: Sequence[float] = VETO_GRID, folds: int = 5,
                      metric: str = "f1", seed: int = 13, n_estimators: int = 300,
                      min_samples_leaf: int = 8, n_jobs: int = -1, progress: bool = False,
                      stop_rule: str = "level", token_price: float = 0.0
                      ) -> tuple[float, float, pd.DataFrame]:
    """Choose ``(lam, veto_threshold)`` by cross-validation grouped by question: the highest
    mean ``metric`` minus ``token_price`` times mean tokens on held-out folds wins (ties: fewer
    tokens, larger threshold, smaller lambda). Returns (lam, threshold, the per-pair frame)."""
    if metric not in ("f1", "sr"):
        raise ValueError("metric must be 'f1' or 'sr'")
    all_qids = list(dict.fromkeys(data.questions))
    if metric == "f1":
        # Held out and scored: only questions whose prefixes carry answer F1s; every other
        # question still trains the fold's policy.
        missing = {p.qid for p in data.prefixes if not np.isfinite(p.f1_now)}
        qids = np.array([q for q in all_qids if q not in missing], dtype=object)
        if not len(qids):
            raise PolicyError("metric 'f1' needs answer F1s: collect with continuation='f1'")
    else:
        qids = np.array(all_qids, dtype=object)
    k = min(folds, len(qids))
    if k < 2:
        raise PolicyError("cross-validation needs at least 2 training questions")
    grid = [(float(lam), float(t)) for lam in lams for t in thresholds]
    rows = []
    splits = list(GroupKFold(n_splits=k).split(qids, groups=qids))
    for i, (tr, te) in enumerate(splits):
        held_out = set(qids[te])
        pol = train_policy(data.subset([q for q in all_qids if q not in held_out]),
                           n_estimators=n_estimators, min_samples_leaf=min_samples_leaf,
                           seed=seed, n_jobs=n_jobs, stop_rule=stop_rule)
        held = data.subset(qids[te])
        decisions = replay_decisions(pol, held, lam=0.0, veto_threshold=np.inf)
        for r in stop_outcomes(decisions, held, grid):
            r["fold"] = i
            rows.append(r)
        if progress:
            print(f"fold {i + 1}/{k} done", flush=True)
    per_q = pd.DataFrame(rows)
    frame = (per_q.groupby(["lam", "veto_threshold"], as_index=False)
             .agg(f1=("f1", "mean"), sr=("sr", "mean"), tokens=("tokens", "mean"),
                  early=("early", "mean"), vetoes=("vetoes", "mean"),
                  n_questions=("qid", "nunique")))
    frame["objective"] = frame[metric] - token_price * frame["tokens"]
    order = frame.sort_values(["objective", "tokens", "veto_threshold", "lam"],
                              ascending=[False, True, False, True])
    best = order.index[0]
    frame["best"] = frame.index == best
    frame["metric"] = metric
    frame["stop_rule"] = stop_rule
    frame["token_price"] = token_price
    return float(frame.loc[best, "lam"]), float(frame.loc[best, "veto_threshold"]), frame
