"""Learned control: the action-value model v(s, a), the cost model c(s, a), the continuation
model, and the learned chooser a* = argmax_{a in A(s)} v(s, a) - lambda * c(s, a).

* Value model: a random forest regressor on phi(s, a) (paper: 300 trees, min leaf 8, seed 13)
  fitted to the support-recall targets of :mod:`dynakrag_lite.trajectories`.
* Cost model: c(s, a) in tokens. An LLM action's cost grows with the evidence it reads, so per
  action we fit tokens = a + b * n_docs by least squares on logged costs. A retrieval action
  costs no tokens now but ``per_action`` more documents in every later prompt; we charge it the
  mean logged tokens of that many documents. lambda = 0 reproduces the paper's main runs.
* Continuation model: a random forest on trajectory prefixes (state features only) estimating
  the best one-step support gain still available by continuing. When its estimate exceeds
  ``veto_threshold`` and anything else is valid, stop_answer is removed from A(s) at that step
  (the paper's "can suppress stop_answer"). It matters because with the paper's targets
  v(s, stop) = SR(s) is a level while acquisition values are deltas: without a veto the value
  model stops as soon as some support is in hand.

Policies are saved with joblib together with metadata (feature names, training data hash,
generator, dataset, library versions); loading checks the feature names.
"""
from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .features import FEATURE_NAMES, STATE_FEATURE_NAMES, heuristic_cost, phi, state_features
from .state import ACTIONS, LLM_ACTIONS, RETRIEVAL_ACTIONS, EvidenceState
from .trajectories import TrainingData

POLICY_FORMAT = 1


class PolicyError(RuntimeError):
    pass


@dataclass
class CostModel:
    coef: dict[str, tuple[float, float]] = field(default_factory=dict)  # action -> (a, b)
    retrieval_tokens: float = 450.0

    def fit(self, data: TrainingData, per_action: int = 3) -> "CostModel":
        by: dict[str, list[tuple[int, float]]] = {}
        for s in data.samples:
            if s.action in LLM_ACTIONS and s.cost_tokens > 0:
                by.setdefault(s.action, []).append((s.n_docs, s.cost_tokens))
        per_doc = []
        for a, rows in by.items():
            x = np.array([r[0] for r in rows], float)
            y = np.array([r[1] for r in rows], float)
            if len(rows) >= 2 and np.ptp(x) > 0:
                b, a0 = np.polyfit(x, y, 1)
            else:
                a0, b = float(y.mean()), 0.0
            self.coef[a] = (float(a0), float(b))
            if b > 0:
                per_doc.append(b)
        if per_doc:
            self.retrieval_tokens = float(np.mean(per_doc) * per_action)
        return self

    def __call__(self, state: EvidenceState, action: str) -> float:
        if action in RETRIEVAL_ACTIONS:
            return self.retrieval_tokens
        if action in self.coef:
            a0, b = self.coef[action]
            return max(0.0, a0 + b * len(state.docs))
        return heuristic_cost(state, action) if action in LLM_ACTIONS else 0.0


def _forest(n_estimators: int, min_samples_leaf: int, seed: int, n_jobs: int):
    from sklearn.ensemble import RandomForestRegressor
    return RandomForestRegressor(n_estimators=n_estimators, min_samples_leaf=min_samples_leaf,
                                 random_state=seed, n_jobs=n_jobs)


def data_hash(data: TrainingData) -> str:
    h = hashlib.sha256()
    for s in data.samples:
        h.update(s.features.tobytes())
        h.update(np.float64(s.target).tobytes())
    return h.hexdigest()[:16]


@dataclass
class Policy:
    value_model: object
    continuation_model: object | None
    cost_model: CostModel
    lam: float = 0.0
    veto_threshold: float = 0.05
    meta: dict = field(default_factory=dict)
    name: str = "dynakrag"

    # -- selection ---------------------------------------------------------------------
    def values(self, state: EvidenceState, valid: tuple[str, ...]) -> dict[str, float]:
        base = state_features(state)
        acts = [a for a in valid if a != "compress_answer_evidence"]
        dc, pa = self.meta.get("doc_chars", 600), self.meta.get("per_action", 3)
        X = np.stack([phi(state, a, heuristic_cost(state, a, dc, pa), base) for a in acts])
        return dict(zip(acts, self.value_model.predict(X).tolist()))

    def continue_gain(self, state: EvidenceState) -> float | None:
        if self.continuation_model is None or not state.docs:
            return None
        base = state_features(state)
        x = np.array([[base[n] for n in STATE_FEATURE_NAMES]])
        return float(self.continuation_model.predict(x)[0])

    def choose(self, state: EvidenceState, valid: tuple[str, ...]):
        vals = self.values(state, valid)
        gain = self.continue_gain(state)
        veto = (gain is not None and gain > self.veto_threshold and "stop_answer" in vals
                and len(vals) > 1)
        scores = {}
        best, best_score = None, -np.inf
        for a in valid:
            v = vals[a]
            c = self.cost_model(state, a)
            score = v - self.lam * c
            scores[a] = {"value": round(v, 4), "cost": round(c, 1), "score": round(score, 4)}
            if a == "stop_answer" and veto:
                scores[a]["vetoed"] = 1.0
                continue
            if score > best_score:
                best, best_score = a, score
        if gain is not None:
            for a in scores:
                scores[a]["continue_gain"] = round(gain, 4)
        return best, scores

    # -- persistence -------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        import joblib
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        joblib.dump({"format": POLICY_FORMAT, "policy": self}, tmp, compress=3)
        tmp.replace(path)
        return path

    @staticmethod
    def load(path: str | Path) -> "Policy":
        import joblib
        path = Path(path)
        if not path.exists():
            raise PolicyError(f"{path}: policy file not found")
        try:
            blob = joblib.load(path)
        except Exception as e:  # a truncated or foreign file
            raise PolicyError(f"{path}: not a readable policy file ({e})") from None
        if not isinstance(blob, dict) or blob.get("format") != POLICY_FORMAT:
            raise PolicyError(f"{path}: unknown policy format")
        pol: Policy = blob["policy"]
        names = tuple(pol.meta.get("feature_names", ()))
        if names != FEATURE_NAMES:
            missing = sorted(set(FEATURE_NAMES) - set(names))
            extra = sorted(set(names) - set(FEATURE_NAMES))
            raise PolicyError(f"{path}: built for other features (missing {missing[:5]}, "
                              f"unknown {extra[:5]}); retrain it with this version")
        return pol


def train_policy(data: TrainingData, n_estimators: int = 300, min_samples_leaf: int = 8,
                 seed: int = 13, lam: float = 0.0, veto_threshold: float = 0.05,
                 n_jobs: int = -1, meta: dict | None = None) -> Policy:
    """Fit the value, cost and continuation models on collected trajectories."""
    import sklearn
    X, y, acts = data.matrix()
    if len(y) == 0:
        raise PolicyError("no training samples")
    value = _forest(n_estimators, min_samples_leaf, seed, n_jobs).fit(X, y)
    cont = None
    if data.prefixes:
        P = np.stack([p.features for p in data.prefixes])
        g = np.array([p.gain for p in data.prefixes])
        cont = _forest(n_estimators, min_samples_leaf, seed, n_jobs).fit(P, g)
    cost = CostModel().fit(data)
    info = {
        "feature_names": FEATURE_NAMES, "state_feature_names": STATE_FEATURE_NAMES,
        "actions": ACTIONS, "n_samples": int(len(y)), "n_prefixes": len(data.prefixes),
        "n_questions": len(data.questions), "data_hash": data_hash(data),
        "sklearn": sklearn.__version__, "numpy": np.__version__,
        "python": platform.python_version(),
        "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "rf": {"n_estimators": n_estimators, "min_samples_leaf": min_samples_leaf,
               "random_state": seed},
    }
    info.update(meta or {})
    return Policy(value, cont, cost, lam=lam, veto_threshold=veto_threshold, meta=info)


def feature_importances(policy: Policy, top: int = 15) -> list[tuple[str, float]]:
    imp = policy.value_model.feature_importances_
    order = np.argsort(imp)[::-1][:top]
    return [(FEATURE_NAMES[i], float(imp[i])) for i in order]


def replay_decisions(policy: Policy, data: TrainingData, lam: float | None = None,
                     veto_threshold: float | None = None) -> list[dict]:
    """Re-decide at every state visited while collecting ``data``, without executing anything.

    Each visited state is the group of samples with one (qid, step); their feature vectors hold
    phi(s, a) for every valid a, so the value model, the continuation model (on the state part
    of phi) and the selection rule a* = argmax v - lambda c (with the stop veto) can be
    replayed for any ``lam`` / ``veto_threshold`` (default: the policy's own). Costs: the cost
    model's c(s, a) from the state's document count; an LLM action the cost model never saw
    falls back to the heuristic estimate stored in phi. The samples' targets (true one-step
    support gains, computed from gold labels) ride along for analysis only; nothing here feeds
    them to the policy.

    Returns one dict per state: qid, step, n_docs, valid, values, costs, continue_gain,
    vetoed (stop_answer was removed), chosen, chosen_without_veto, targets.
    """
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
    all_values = policy.value_model.predict(X)
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
            gain = float(policy.continuation_model.predict(
                group[0].features[:n_state].reshape(1, -1))[0])
        veto = gain is not None and gain > thr and "stop_answer" in values and len(values) > 1
        score = {a: values[a] - lam * costs[a] for a in values}
        free = max(score, key=lambda a: score[a])
        allowed = {a: v for a, v in score.items() if not (veto and a == "stop_answer")}
        out.append({"qid": qid, "step": step, "n_docs": n_docs,
                    "valid": tuple(s.action for s in group), "values": values,
                    "costs": costs, "continue_gain": gain, "vetoed": veto,
                    "chosen": max(allowed, key=lambda a: allowed[a]),
                    "chosen_without_veto": free,
                    "targets": {s.action: s.target for s in group}})
    return out
