"""The labelled records that trajectories produce and the policy learns from.

* :class:`Sample`: one (state, action) pair with its feature vector phi(s, a), its Eq. 1 target
  and the tokens the action really cost.
* :class:`PrefixSample`: one trajectory prefix (a visited state with documents) with its state
  features, what stopping there would give (SR, and the reader's answer F1 from those
  documents) and what the rollout reached at its end; ``gain`` is the continuation model's
  training target, chosen by :data:`CONTINUATION_TARGETS`.
* :class:`TrainingData`: both lists plus the training question ids. :meth:`TrainingData.save`
  writes them as one ``.npz`` of plain arrays (no pickle, so a file from anyone is safe to
  load) and :meth:`TrainingData.load` reads it back: the stop rule, lambda and the forests can
  then be re-tuned without re-collecting (``python -m dynakrag_lite train --save-data``).

Continuation targets (the paper: "a random forest on trajectory prefixes estimating the answer
utility of continuing"; the exact target is not stated):

* ``f1`` (default): F1(answer at the end of the continued rollout) - F1(answer if stopping at
  this prefix). Both answers come from the reader on the documents alone (no compression), so
  the difference is the answer utility of the rest of the rollout.
* ``sr``: SR(end of the rollout) - SR(now): the cheap variant (no answer calls).
* ``onestep``: the best one-step SR gain among the valid acquisition actions (the earlier
  target of this project; kept for comparison).

The rollout that continues is the seeded uniform-valid exploration, so the targets estimate the
utility of continuing *under that exploration*, not under the learned policy.
"""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from .features import FEATURE_NAMES

CONTINUATION_TARGETS = ("f1", "sr", "onestep")


@dataclass
class Sample:
    qid: str
    step: int
    action: str
    features: np.ndarray
    target: float
    cost_tokens: float  # tokens the action actually cost (for the cost model)
    n_docs: int
    chosen: bool = False  # the rollout continued with this action (the path tau)
    # False for a counterfactual branch that was labelled without being executed
    # (sufficiency_check: its target 1[SR(s) = 1] needs no call); cost_tokens is then 0.
    executed: bool = True


@dataclass
class PrefixSample:
    """A visited state with documents, for the continuation model (see the module text)."""
    qid: str
    features: np.ndarray  # state features (STATE_FEATURE_NAMES order)
    gain: float  # the continuation target in use (TrainingData.continuation_target)
    step: int = -1  # len(history) of the prefix (pairs it with the Samples of that state)
    onestep: float = math.nan  # best one-step SR gain among the valid acquisition actions
    sr_now: float = math.nan  # SR of this state
    sr_end: float = math.nan  # SR at the end of the rollout
    f1_now: float = math.nan  # reader's answer F1 from this state's documents
    f1_end: float = math.nan  # ... from the rollout's final documents
    tokens: float = math.nan  # ledger tokens spent to reach this state
    answer_tokens: float = math.nan  # tokens of the answer call from this state

    def target(self, kind: str) -> float:
        if kind == "f1":
            return self.f1_end - self.f1_now
        if kind == "sr":
            return self.sr_end - self.sr_now
        if kind == "onestep":
            return self.onestep
        raise ValueError(f"unknown continuation target {kind!r}; one of {CONTINUATION_TARGETS}")


@dataclass
class TrainingData:
    samples: list[Sample] = field(default_factory=list)
    prefixes: list[PrefixSample] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    continuation_target: str = "onestep"

    def matrix(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        X = np.stack([s.features for s in self.samples]) if self.samples else \
            np.zeros((0, len(FEATURE_NAMES)))
        y = np.array([s.target for s in self.samples])
        return X, y, [s.action for s in self.samples]

    def action_gains(self, retrieval_actions: tuple[str, ...] = (
            "retrieve_more", "gap_query", "bridge_entity_expand", "rewrite_query")
                     ) -> dict[str, dict[str, float]]:
        """Per acquisition action, over every executed branch (chosen or counterfactual):
        ``calls``, ``questions`` reached, ``mean_sr_gain`` (its Eq. 1 label, SR(s') - SR(s)),
        ``hit_rate`` (share of calls that added a gold document) and ``chosen`` (calls on the
        exploration path). A measurement of what each action finds, gold labels allowed."""
        out: dict[str, dict[str, float]] = {}
        for a in retrieval_actions:
            ss = [s for s in self.samples if s.action == a and s.executed]
            if not ss:
                continue
            gains = np.array([s.target for s in ss], dtype=np.float64)
            out[a] = {"calls": len(ss), "questions": len({s.qid for s in ss}),
                      "mean_sr_gain": round(float(gains.mean()), 4),
                      "hit_rate": round(float((gains > 0).mean()), 4),
                      "chosen": sum(s.chosen for s in ss)}
        return out

    def set_continuation_target(self, kind: str) -> "TrainingData":
        """Recompute every prefix's ``gain`` as ``kind`` from the stored components (no model
        call). Raises ValueError when the data lacks them (``f1`` needs answer F1s, collected
        with ``continuation="f1"``)."""
        if kind not in CONTINUATION_TARGETS:
            raise ValueError(f"unknown continuation target {kind!r}; one of "
                             f"{CONTINUATION_TARGETS}")
        vals = [p.target(kind) for p in self.prefixes]
        if any(not np.isfinite(v) for v in vals):
            raise ValueError(f"these trajectories lack the components of the {kind!r} target; "
                             f"collect them with continuation={kind!r}")
        for p, v in zip(self.prefixes, vals):
            p.gain = float(v)
        self.continuation_target = kind
        return self

    def subset(self, qids) -> "TrainingData":
        """The records of the given questions only (cross-validation folds)."""
        keep = set(qids)
        return TrainingData([s for s in self.samples if s.qid in keep],
                            [p for p in self.prefixes if p.qid in keep],
                            [q for q in self.questions if q in keep], self.continuation_target)

    # -- persistence (plain arrays, no pickle) ------------------------------------------
    _SAMPLE_SCALARS = ("step", "target", "cost_tokens", "n_docs", "chosen", "executed")

    def save(self, path: str | Path) -> Path:
        """Write the records to ``path`` (``.npz``, written atomically)."""
        from .storage import atomic_write_bytes
        from .features import STATE_FEATURE_NAMES
        n_feat, n_state = len(FEATURE_NAMES), len(STATE_FEATURE_NAMES)
        pf = [f.name for f in fields(PrefixSample) if f.name not in ("qid", "features")]
        arrays = {
            "meta": np.array(json.dumps({
                "format": 1, "continuation_target": self.continuation_target,
                "questions": list(self.questions), "feature_names": list(FEATURE_NAMES),
                "state_feature_names": list(STATE_FEATURE_NAMES), "prefix_fields": pf})),
            "s_qid": np.array([s.qid for s in self.samples], dtype=str),
            "s_action": np.array([s.action for s in self.samples], dtype=str),
            "s_features": np.stack([s.features for s in self.samples]).astype(np.float64)
            if self.samples else np.zeros((0, n_feat)),
            "p_qid": np.array([p.qid for p in self.prefixes], dtype=str),
            "p_features": np.stack([p.features for p in self.prefixes]).astype(np.float64)
            if self.prefixes else np.zeros((0, n_state)),
        }
        for name in self._SAMPLE_SCALARS:
            arrays[f"s_{name}"] = np.array([getattr(s, name) for s in self.samples],
                                           dtype=np.float64)
        for name in pf:
            arrays[f"p_{name}"] = np.array([getattr(p, name) for p in self.prefixes],
                                           dtype=np.float64)
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        return atomic_write_bytes(path, buf.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> "TrainingData":
        """Read a file written by :meth:`save`. Raises ValueError naming the file when it is
        not one, or when its features are not this library's (retrain or re-collect)."""
        from .features import STATE_FEATURE_NAMES
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                a = {k: z[k] for k in z.files}
            meta = json.loads(str(a["meta"]))
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"{path}: not a training-data file written by "
                             f"TrainingData.save ({e})") from None
        if meta.get("feature_names") != list(FEATURE_NAMES) or \
                meta.get("state_feature_names") != list(STATE_FEATURE_NAMES):
            raise ValueError(f"{path}: its feature names differ from this library's; "
                             "collect the trajectories again")
        samples = [Sample(str(q), int(st), str(act), f, float(t), float(c), int(nd),
                          bool(ch), bool(ex))
                   for q, st, act, f, t, c, nd, ch, ex in zip(
                       a["s_qid"], a["s_step"], a["s_action"], a["s_features"], a["s_target"],
                       a["s_cost_tokens"], a["s_n_docs"], a["s_chosen"], a["s_executed"])]
        prefixes = []
        for i, (q, f) in enumerate(zip(a["p_qid"], a["p_features"])):
            kw = {name: float(a[f"p_{name}"][i]) for name in meta["prefix_fields"]}
            kw["step"] = int(kw["step"])
            prefixes.append(PrefixSample(str(q), f, **kw))
        return cls(samples, prefixes, list(meta["questions"]), meta["continuation_target"])

    def to_frame(self):
        """The samples as a pandas DataFrame (one row per labelled (s, a); no features)."""
        import pandas as pd
        return pd.DataFrame([{"qid": s.qid, "step": s.step, "action": s.action,
                              "target": s.target, "chosen": s.chosen, "n_docs": s.n_docs,
                              "cost_tokens": s.cost_tokens} for s in self.samples],
                            columns=["qid", "step", "action", "target", "chosen", "n_docs",
                                     "cost_tokens"])

    def prefix_frame(self):
        """The prefixes as a DataFrame (no features): what stopping at each would give."""
        import pandas as pd
        cols = ["qid", "step", "gain", "onestep", "sr_now", "sr_end", "f1_now", "f1_end",
                "tokens", "answer_tokens"]
        return pd.DataFrame([{c: getattr(p, c) for c in cols} for p in self.prefixes],
                            columns=cols)
