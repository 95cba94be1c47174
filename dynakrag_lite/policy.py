"""Learned control (chapters 8-9): the value model v(s, a), the cost model c(s, a), the
continuation model, and the chooser a* = argmax_{a in A(s)} v(s, a) - lambda * c(s, a).

* Value model: a random forest on phi(s, a) (paper: 300 trees, min leaf 8, seed 13) fitted to
  the support-recall targets of :mod:`dynakrag_lite.trajectories`.
* Cost model: tokens = a + b * n_docs per LLM action, least squares on logged costs (an LLM
  action's cost grows with the evidence it reads). A retrieval action is charged the mean logged
  tokens of the ``per_action`` documents it adds to every later prompt. lambda = 0 is the paper.
* Continuation model: a random forest on prefix state features estimating the utility of
  continuing over stopping. Above ``veto_threshold`` it removes stop_answer from A(s) (the
  paper's "can suppress stop_answer"): v(s, stop) = SR(s) is a level while acquisition values
  are deltas, so without a veto the value model stops as soon as some support is in hand.
* ``veto_threshold`` and ``lam`` are tuned on the training questions only
  (:mod:`dynakrag_lite.training.tuning`); :meth:`Policy.configure` applies the calibrated
  ``sufficiency`` signal to an environment.

Policies are saved with joblib and metadata checked by :func:`check_policy`. A joblib file is
code: in a folder with a ``MANIFEST.sha256`` (``results/policies``) it is unpickled only when
listed there (``python -m dynakrag_lite policy-manifest --update FILE`` registers one)."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import platform
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import joblib
import numpy as np
import sklearn
from sklearn.ensemble import RandomForestRegressor

from .config import RunSettings
from .features import FEATURE_NAMES, STATE_FEATURE_NAMES, heuristic_cost, phi, state_features
from .forest import flat_forest_for
from .retriever import _OFFLINE_ALIASES
from .state import ACTIONS, LLM_ACTIONS, RETRIEVAL_ACTIONS, EvidenceState
from .storage import ManifestError, atomic_write_bytes, verified_sha256
from .trajectories import TrainingData

POLICY_FORMAT = 1
# How to vouch for a policy file that a folder's manifest does not list (in refusals).
MANIFEST_FIX = ("if you trained it yourself, run: python -m dynakrag_lite policy-manifest "
                "--update {path}; otherwise do not load it")


class PolicyError(RuntimeError):
    pass


def _container_problem(raw: bytes) -> str | None:
    """How ``raw`` differs from what :meth:`Policy.save` writes (one complete zlib stream
    holding one whole pickle), or None; found without unpickling."""
    z = zlib.decompressobj()
    try:
        body = z.decompress(raw)
    except zlib.error as e:
        return f"not zlib-compressed: {e}"
    return ("truncated: the compressed stream does not end" if not z.eof else
            "bytes follow the compressed stream" if z.unused_data else
            "its content is not a whole pickle" if body[:1] != b"\x80" or body[-1:] != b"."
            else None)


def check_policy_file(path: Path) -> str:
    """PolicyError naming ``path`` unless it holds what :meth:`Policy.save` writes, checked
    without unpickling (a manifest vouches for a file, it does not run it). Returns its sha256."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PolicyError(f"{path}: policy file not found") from None
    except OSError as e:
        raise PolicyError(f"{path}: cannot read the policy file ({e})") from None
    why = _container_problem(raw)
    if why:
        raise PolicyError(f"{path}: not a policy file written by Policy.save ({why}); "
                          "nothing was recorded")
    return hashlib.sha256(raw).hexdigest()


def _display_path(path: Path) -> str:
    """``path`` relative to the working directory: never a machine's absolute path."""
    try:
        return Path(os.path.relpath(path.resolve(), Path.cwd().resolve())).as_posix()
    except ValueError:  # another drive (Windows)
        return path.name


@dataclass
class CostModel:
    coef: dict[str, tuple[float, float]] = field(default_factory=dict)  # action -> (a, b)
    retrieval_tokens: float = 450.0

    def fit(self, data: TrainingData, per_action: int = 3) -> "CostModel":
        by: dict[str, list[tuple[int, float]]] = {}
        for s in data.samples:
            # executed calls only (a counterfactual probe is labelled without running); a
            # learned-signal probe can really cost 0 tokens
            if s.action in LLM_ACTIONS and s.executed and (
                    s.cost_tokens > 0 or s.action == "sufficiency_check"):
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


def make_forest(n_estimators: int, min_samples_leaf: int, seed: int, n_jobs: int
                ) -> RandomForestRegressor:
    """The unfitted random forest of the value and continuation models (paper: 300 trees,
    min leaf 8, seed 13)."""
    return RandomForestRegressor(n_estimators=n_estimators, min_samples_leaf=min_samples_leaf,
                                 random_state=seed, n_jobs=n_jobs)


# True: predict through a cached, bit-identical FlatForest (dynakrag_lite.forest: a fraction of
# a millisecond where sklearn took tens of ms); False: the estimator's own (tests compare).
USE_FLAT_FOREST = True


def predict_forest(model, X) -> np.ndarray:
    """``model.predict(X)``, through the cached FlatForest when :data:`USE_FLAT_FOREST`."""
    flat = flat_forest_for(model) if USE_FLAT_FOREST else None
    return flat.predict(X) if flat is not None else model.predict(X)


def data_hash(data: TrainingData) -> str:
    h = hashlib.sha256()
    for s in data.samples:
        h.update(s.features.tobytes())
        h.update(np.float64(s.target).tobytes())
    return h.hexdigest()[:16]


STOP_RULES = ("level", "gain", "continuation")
# Actions that can bring a document: the only ones the "continuation" rule weighs.
_NO_SUPPORT = ("stop_answer", "sufficiency_check")


def select(values: dict[str, float], costs: dict[str, float], continue_gain: float | None,
           lam: float, veto_threshold: float, stop_rule: str = "level"
           ) -> tuple[str, dict[str, float], bool]:
    """The selection rule a* = argmax_{a in A(s)} score(s, a), score = v(s, a) - lambda c(s, a),
    with the continuation veto; returns (a*, scores, vetoed). Ties go to the earlier action in
    ``values``' order.

    ``stop_rule`` says what stop_answer is worth:

    * ``"level"`` (the paper's Eq. 1): v(s, stop) = SR(s), the support in hand, compared with
      acquisition values that are SR *gains*. Stopping wins whenever the support in hand
      exceeds every predicted gain, so lambda can only make stopping likelier and the veto
      alone decides how long to continue.
    * ``"gain"`` (ours): stopping adds no support, so its score is 0 - lambda c(s, stop) on the
      same scale as the acquisition gains. The controller continues while some action's
      predicted gain exceeds its price lambda c(s, a): lambda becomes the cost/quality knob.

    * ``"continuation"`` (ours, the diagnosis appendix): the continuation model decides the
      stop on its own, stopping iff its estimate of what continuing still adds
      (``continue_gain``) is below the threshold tau (``veto_threshold``); otherwise the best
      *acquisition* is taken. A
      sufficiency_check adds no document, so its SR gain is 0 and it never competes (under
      Eq. 1 its level label 1[SR = 1] outbids the gains at most states; see
      ``results/diagnostics/control-diagnosis.md``).

    The veto (``continue_gain > veto_threshold``) removes stop_answer whenever anything else
    is valid (level and gain rules)."""
    if stop_rule not in STOP_RULES:
        raise ValueError(f"unknown stop rule {stop_rule!r}; one of {STOP_RULES}")
    scores = {a: values[a] - lam * costs[a] for a in values}
    if stop_rule == "continuation":
        acquire = [a for a in scores if a not in _NO_SUPPORT]
        enough = continue_gain is not None and continue_gain < veto_threshold
        if "stop_answer" in scores and (enough or not acquire):
            return "stop_answer", scores, False
        pool = acquire or [a for a in scores if a != "stop_answer"] or list(scores)
        return max(pool, key=lambda a: scores[a]), scores, False
    if stop_rule == "gain" and "stop_answer" in scores:
        scores["stop_answer"] = -lam * costs["stop_answer"]
    veto = (continue_gain is not None and continue_gain > veto_threshold
            and "stop_answer" in scores and len(scores) > 1)
    allowed = [a for a in scores if not (veto and a == "stop_answer")]
    best = max(allowed, key=lambda a: scores[a])
    return best, scores, veto


@dataclass
class Policy:
    value_model: object
    continuation_model: object | None
    cost_model: CostModel
    lam: float = 0.0
    veto_threshold: float = 0.05
    meta: dict = field(default_factory=dict)
    name: str = "dynakrag"
    stop_rule: str = "level"  # see select()
    # evaluate --stop-after K: stop_answer withheld before K acquisitions and forced then
    stop_after: int | None = None
    # The calibrated sufficiency signal (sufficiency.SufficiencySignal) or None (text probe).
    sufficiency: object | None = None

    def configure(self, env, settings: RunSettings | None = None):
        """Make ``env``'s sufficiency_check use this policy's calibrated signal (if any) and
        take the decision settings ``settings`` gives (``lam``, ``veto_threshold``,
        ``stop_after``); returns ``env``. Call it before a run and before its fingerprint."""
        if self.sufficiency is not None:
            self.sufficiency.configure(env)
        for name in ("lam", "veto_threshold", "stop_after"):
            value = getattr(settings, name, None)
            if value is not None:
                setattr(self, name, value)
        return env

    # -- selection ---------------------------------------------------------------------
    def values(self, state: EvidenceState, valid: tuple[str, ...]) -> dict[str, float]:
        base = state_features(state)
        acts = [a for a in valid if a != "compress_answer_evidence"]
        dc, pa = self.meta.get("doc_chars", 600), self.meta.get("per_action", 3)
        X = np.stack([phi(state, a, heuristic_cost(state, a, dc, pa), base) for a in acts])
        return dict(zip(acts, predict_forest(self.value_model, X).tolist()))

    def continue_gain(self, state: EvidenceState) -> float | None:
        if self.continuation_model is None or not state.docs:
            return None
        base = state_features(state)
        x = np.array([[base[n] for n in STATE_FEATURE_NAMES]])
        return float(predict_forest(self.continuation_model, x)[0])

    def choose(self, state: EvidenceState, valid: tuple[str, ...]):
        if self.stop_after is not None:
            done = sum(a in RETRIEVAL_ACTIONS for a in state.history)
            if done >= self.stop_after and "stop_answer" in valid:
                return "stop_answer", {"stop_answer": {"schedule": float(self.stop_after)}}
            valid = tuple(a for a in valid if a != "stop_answer") or valid
        vals = self.values(state, valid)
        gain = None if self.stop_after is not None else self.continue_gain(state)
        acts = [a for a in valid if a in vals]
        costs = {a: self.cost_model(state, a) for a in acts}
        best, score, veto = select({a: vals[a] for a in acts}, costs, gain, self.lam,
                                   self.veto_threshold, self.stop_rule)
        scores = {a: {"value": round(vals[a], 4), "cost": round(costs[a], 1),
                      "score": round(score[a], 4)} for a in acts}
        if veto:
            scores["stop_answer"]["vetoed"] = 1.0
        if gain is not None:
            for a in scores:
                scores[a]["continue_gain"] = round(gain, 4)
        return best, scores

    # -- persistence -------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """joblib-dump the policy atomically, its meta recording the scikit-learn, numpy and
        joblib versions (:func:`check_policy` compares them). In a folder that keeps a
        ``MANIFEST.sha256`` it must then be registered before :meth:`load` accepts it."""
        meta = {**self.meta, "sklearn": sklearn.__version__, "numpy": np.__version__,
                "joblib": joblib.__version__}
        # replace() builds a clean copy: the load-time provenance of ``self`` is not pickled.
        pol = dataclasses.replace(self, meta=meta)
        buf = io.BytesIO()
        joblib.dump({"format": POLICY_FORMAT, "policy": pol}, buf, compress=3)
        self.meta = meta
        return atomic_write_bytes(path, buf.getvalue())

    @staticmethod
    def load(path: str | Path, *, trusted: bool | None = None) -> "Policy":
        """Load a policy saved by :meth:`save`, checking its feature names. **A joblib file is
        code**: ``trusted`` as :func:`~dynakrag_lite.storage.verified_sha256` takes it."""
        path = Path(path)
        if not path.exists():
            raise PolicyError(f"{path}: policy file not found")
        try:
            data = path.read_bytes()  # hash and unpickle the same bytes (no swap in between)
        except OSError as e:
            raise PolicyError(f"{path}: cannot read policy file ({e})") from None
        try:
            digest = verified_sha256(path, data, trusted, what="policy file",
                                     fix=MANIFEST_FIX.format(path=path))
        except ManifestError as e:
            raise PolicyError(str(e)) from None
        try:
            blob = joblib.load(io.BytesIO(data))
        except Exception as e:  # a truncated or foreign file
            # joblib's own message ("123", "pop from empty list") says nothing of the file
            why = _container_problem(data) or f"{type(e).__name__}: {e}"
            raise PolicyError(f"{path}: not a policy file written by Policy.save ({why})") \
                from None
        if not isinstance(blob, dict) or blob.get("format") != POLICY_FORMAT:
            raise PolicyError(f"{path}: unknown policy format")
        pol: Policy = blob["policy"]
        problem = _feature_problem(pol)
        if problem:
            raise PolicyError(f"{path}: {problem}")
        pol._source = (path, digest)
        return pol

    def provenance(self, path: str | Path | None = None) -> dict:
        """Where this policy came from, for run records: {"path" (relative), "sha256",
        "generator", "dataset", "n_train"}. Without ``path``, the file :meth:`load` read."""
        if path is not None:
            p = Path(path)
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            source = getattr(self, "_source", None)
            if source is None:
                raise PolicyError("this policy was not loaded from a file; pass its path")
            p, digest = source
        train_ids = self.meta.get("train_ids")
        return {"path": _display_path(p), "sha256": digest,
                "generator": self.meta.get("generator"), "dataset": self.meta.get("dataset"),
                "n_train": len(train_ids) if train_ids is not None
                else self.meta.get("n_questions")}


def _feature_problem(pol: Policy) -> str | None:
    names = tuple(pol.meta.get("feature_names", ()))
    if names != FEATURE_NAMES:
        missing = sorted(set(FEATURE_NAMES) - set(names))
        extra = sorted(set(names) - set(FEATURE_NAMES))
        how = (f"missing {missing[:5]}, unknown {extra[:5]}" if missing or extra
               else "same names in another order")
        return f"built for other features ({how}); retrain it with this version"
    n_in = getattr(pol.value_model, "n_features_in_", len(FEATURE_NAMES))
    if n_in != len(FEATURE_NAMES):
        return (f"value model expects {n_in} features, this version computes "
                f"{len(FEATURE_NAMES)}; retrain it with this version")
    return None


def embedder_key(name: str) -> str:
    """The embedder ``name`` stands for (an offline alias and its model count as one)."""
    return _OFFLINE_ALIASES.get(name.lower(), name)


def training_overlap(policy: Policy, ids: Iterable[str]) -> list[str]:
    """The ids (each once, in order) that were training questions of ``policy``."""
    train = set(map(str, policy.meta.get("train_ids") or ()))
    return [i for i in dict.fromkeys(map(str, ids)) if i in train]


def check_policy(policy: Policy, *, embedder: str, doc_chars: int | None, per_action: int,
                 eval_ids: Iterable[str] = ()) -> None:
    """Refuse a policy that does not fit the run (a :class:`PolicyError` listing every problem):
    feature names, embedder, ``doc_chars``, ``per_action``, scikit-learn version, and evaluation
    questions among the training ones. Another generator is allowed (generator transfer)."""
    meta = policy.meta
    src = getattr(policy, "_source", None)
    name = _display_path(src[0]) if src else "policy"
    problems: list[str] = []
    feat = _feature_problem(policy)
    if feat:
        problems.append(feat)
    missing = [k for k in ("embedder", "doc_chars", "per_action", "train_ids", "sklearn")
               if k not in meta]
    if missing:
        problems.append(f"its metadata lacks {missing}, so it cannot be checked against this "
                        "run; retrain it with 'python -m dynakrag_lite train'")
    if "embedder" in meta and embedder_key(str(meta["embedder"])) != embedder_key(embedder):
        problems.append(f"trained with embedder {meta['embedder']!r}, this run uses "
                        f"{embedder!r} (retrieval-score features differ); pass --embedder "
                        f"{meta['embedder']} or retrain")
    if "doc_chars" in meta and meta["doc_chars"] != doc_chars:
        problems.append(f"trained with documents cut at doc_chars={meta['doc_chars']}, this "
                        f"run uses {doc_chars}")
    if "per_action" in meta and meta["per_action"] != per_action:
        problems.append(f"trained with per_action={meta['per_action']} documents per "
                        f"retrieval, this run uses {per_action}")
    if "sklearn" in meta and meta["sklearn"] != sklearn.__version__:
        problems.append(f"saved with scikit-learn {meta['sklearn']}, installed is "
                        f"{sklearn.__version__}; install scikit-learn=={meta['sklearn']} "
                        "(requirements.txt pins it) or retrain")
    if "train_ids" in meta:
        overlap = training_overlap(policy, eval_ids)
        if overlap:
            problems.append(f"{len(overlap)} evaluation question(s) were training questions "
                            f"of this policy (e.g. {overlap[0]!r}); evaluate on held-out "
                            "questions (the default split) or retrain")
    if problems:
        raise PolicyError(f"{name} does not fit this run: " + "; ".join(problems))


def train_policy(data: TrainingData, n_estimators: int = 300, min_samples_leaf: int = 8,
                 seed: int = 13, lam: float = 0.0, veto_threshold: float = 0.05,
                 n_jobs: int = -1, meta: dict | None = None, sufficiency=None,
                 stop_rule: str = "level") -> Policy:
    """Fit the value, cost and continuation models on collected trajectories (``sufficiency``:
    a calibrated SufficiencySignal to keep with the policy; ``stop_rule``: see :func:`select`)."""
    if stop_rule not in STOP_RULES:
        raise ValueError(f"unknown stop rule {stop_rule!r}; one of {STOP_RULES}")
    X, y, acts = data.matrix()
    if len(y) == 0:
        raise PolicyError("no training samples")
    value = make_forest(n_estimators, min_samples_leaf, seed, n_jobs).fit(X, y)
    cont = None
    # Prefixes without a target (collected without answer calls) do not train it.
    targeted = [p for p in data.prefixes if np.isfinite(p.gain)]
    if targeted and data.continuation_target is None:
        raise PolicyError("the prefixes' gains have no stated continuation target "
                          "(TrainingData.continuation_target is None), so the continuation "
                          "model would learn an unknown target: pass continuation_target= when "
                          "building the TrainingData, or call set_continuation_target(kind)")
    if targeted:
        P = np.stack([p.features for p in targeted])
        g = np.array([p.gain for p in targeted])
        cont = make_forest(n_estimators, min_samples_leaf, seed, n_jobs).fit(P, g)
    # Fit in parallel, predict in the calling thread: a decision predicts a handful of rows,
    # where sklearn's dispatch to n_jobs workers costs far more than the trees themselves.
    value.n_jobs = 1
    if cont is not None:
        cont.n_jobs = 1
    cost = CostModel().fit(data)
    info = {
        "feature_names": FEATURE_NAMES, "state_feature_names": STATE_FEATURE_NAMES,
        "actions": ACTIONS, "n_samples": int(len(y)), "n_prefixes": len(data.prefixes),
        "n_continuation_prefixes": len(targeted),
        "n_continuation_questions": len({p.qid for p in targeted}),
        "n_questions": len(data.questions), "data_hash": data_hash(data),
        "sklearn": sklearn.__version__, "numpy": np.__version__,
        "python": platform.python_version(),  # save() adds the joblib version
        "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "rf": {"n_estimators": n_estimators, "min_samples_leaf": min_samples_leaf,
               "random_state": seed},
        "continuation_target": data.continuation_target,  # None only if no prefix has a gain
        "sufficiency": sufficiency.describe() if sufficiency is not None else None,
        "stop_rule": stop_rule,
    }
    info.update(meta or {})
    return Policy(value, cont, cost, lam=lam, veto_threshold=veto_threshold, meta=info,
                  sufficiency=sufficiency, stop_rule=stop_rule)


def feature_importances(policy: Policy, top: int = 15) -> list[tuple[str, float]]:
    imp = policy.value_model.feature_importances_
    order = np.argsort(imp)[::-1][:top]
    return [(FEATURE_NAMES[i], float(imp[i])) for i in order]
