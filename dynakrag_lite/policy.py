"""Learned control: the action-value model v(s, a), the cost model c(s, a), the continuation
model, and the learned chooser a* = argmax_{a in A(s)} v(s, a) - lambda * c(s, a).

* Value model: a random forest regressor on phi(s, a) (paper: 300 trees, min leaf 8, seed 13)
  fitted to the support-recall targets of :mod:`dynakrag_lite.trajectories`.
* Cost model: c(s, a) in tokens. An LLM action's cost grows with the evidence it reads, so per
  action we fit tokens = a + b * n_docs by least squares on logged costs. A retrieval action
  costs no tokens now but ``per_action`` more documents in every later prompt; we charge it the
  mean logged tokens of that many documents. lambda = 0 reproduces the paper's main runs.
* Continuation model: a random forest on trajectory prefixes (state features only) estimating
  the answer utility of continuing against stopping now (the paper's wording). Its target is
  chosen at collection time (:mod:`dynakrag_lite.trajectories`): ``f1`` = F1(answer at the end
  of the continued rollout) - F1(answer if stopping at this prefix) (default), ``sr`` = the same
  with SR (cheap: no answer calls), ``onestep`` = the best one-step SR gain (the earlier target).
  When its estimate exceeds ``veto_threshold`` and anything else is valid, stop_answer is
  removed from A(s) at that step (the paper's "can suppress stop_answer"). It matters because
  with the paper's targets v(s, stop) = SR(s) is a level while acquisition values are deltas:
  without a veto the value model stops as soon as some support is in hand.
* Stop rule (:func:`select`): ``level`` compares the paper's v(s, stop) = SR(s) with the
  acquisition gains as they are; ``gain`` (ours) prices stopping at 0 support gained, so the
  controller continues while a predicted gain exceeds lambda times its cost.
  ``data_scripts/stop_rule.py`` cross-validates both from saved trajectories.
* ``veto_threshold`` and ``lam`` are tuned by cross-validation on the training questions only
  (:func:`tune_continuation`, folds grouped by question): each fold's policy re-decides offline
  along the held-out questions' explored paths (:func:`replay_outcomes`), and the pair with the
  best mean answer F1 (or SR) at the replayed stopping points wins. :func:`lambda_sweep` returns
  the cost/quality curve (F1, SR, tokens per lambda) as a DataFrame.
* ``sufficiency``: the calibrated sufficiency signal trained with the policy
  (:class:`dynakrag_lite.sufficiency.SufficiencySignal`); :meth:`Policy.configure` applies it
  to an environment before a run.

Policies are saved with joblib together with metadata (feature names, training data hash,
generator, dataset, embedder, document truncation, retrieval budget, training question ids,
library versions). Loading checks the feature names; :func:`check_policy` checks the rest
against the run that is about to use the policy.

A joblib file is pickled Python: loading one runs code chosen by whoever wrote it. Policies
committed in the project's ``results/policies/`` are therefore listed with their sha256 in
``results/policies/MANIFEST.sha256`` and :meth:`Policy.load` refuses to unpickle one whose
bytes are not listed there (see that folder's README). Refresh the manifest after training
with :func:`update_manifest` or ``python -m dynakrag_lite.policy --update-manifest``.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import os
import platform
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from . import storage as _storage
from .features import FEATURE_NAMES, STATE_FEATURE_NAMES, heuristic_cost, phi, state_features
from .forest import flat_forest_for
from .state import ACTIONS, LLM_ACTIONS, RETRIEVAL_ACTIONS, EvidenceState
from .storage import ManifestError
from .trajectories import TrainingData

if TYPE_CHECKING:
    import pandas as pd

POLICY_FORMAT = 1
PROJECT_ROOT = Path(__file__).resolve().parents[1]
# The project's committed policies: loading from here is verified against the manifest.
POLICIES_DIR = PROJECT_ROOT / "results" / "policies"
MANIFEST_NAME = _storage.MANIFEST_NAME


class PolicyError(RuntimeError):
    pass


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# The manifest code is generic (storage: policies and sentence selectors share it); these
# wrappers keep this module's names and raise PolicyError, as before.
@contextmanager
def _policy_errors():
    try:
        yield
    except ManifestError as e:
        raise PolicyError(str(e)) from None


def read_manifest(folder: str | Path) -> dict[str, str]:
    """``{file name: sha256}`` from ``folder/MANIFEST.sha256`` (``sha256sum`` format); {} if absent."""
    with _policy_errors():
        return _storage.read_manifest(folder)


def update_manifest(folder: str | Path | None = None,
                    files: Iterable[str | Path] | None = None) -> Path:
    """Record the sha256 of policies in ``folder/MANIFEST.sha256`` (default: results/policies).

    With ``files``, only those entries are (re)written and the others kept, so refreshing the
    manifest after training one policy does not vouch for anything else in the folder. Without
    ``files``, the manifest is rebuilt from every ``*.joblib`` in the folder: run that only after
    checking what the folder holds. Returns the manifest path. PolicyError naming the file,
    with nothing written, when a file is missing or is not what :meth:`Policy.save` writes
    (:func:`_check_policy_file`).
    """
    with _policy_errors():
        return _storage.update_manifest(folder if folder is not None else POLICIES_DIR, files,
                                        check=_check_policy_file)


def _check_policy_file(path: Path) -> str:
    """PolicyError naming ``path`` unless it holds the container :meth:`Policy.save` writes:
    one complete zlib stream (joblib's ``compress=3``) holding one whole pickle (protocol
    opcode first, STOP last). Checked without unpickling: a joblib file is code, and the
    manifest is where a file is vouched for, not where it runs; so a pickle of something
    other than a policy passes here and is refused by :meth:`Policy.load`. Returns the
    sha256 of the bytes checked, for the manifest entry."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise PolicyError(f"{path}: policy file not found") from None
    except OSError as e:
        raise PolicyError(f"{path}: cannot read the policy file ({e})") from None
    z = zlib.decompressobj()
    try:
        body = z.decompress(raw)
    except zlib.error as e:
        why = f"not zlib-compressed: {e}"
    else:
        why = ("truncated: the compressed stream does not end" if not z.eof else
               "bytes follow the compressed stream" if z.unused_data else
               "its content is not a whole pickle" if body[:1] != b"\x80" or body[-1:] != b"."
               else None)
    if why:
        raise PolicyError(f"{path}: not a policy file written by Policy.save ({why}); "
                          "nothing was recorded")
    return hashlib.sha256(raw).hexdigest()


def register_policy(path: str | Path) -> Path | None:
    """After training: record a just-saved policy in its folder's manifest when that folder is
    the project's ``results/policies`` or already keeps a manifest; returns the manifest path
    (None for a folder without one, where :meth:`Policy.load` trusts the user's own files)."""
    with _policy_errors():
        return _storage.register_in_manifest(path, POLICIES_DIR)


def _in_project_policies(path: Path) -> bool:
    return _storage.in_folder(path, POLICIES_DIR)


def _verify_manifest(path: Path, data: bytes) -> str:
    """sha256 of ``data``; PolicyError unless it is the one the folder's manifest lists."""
    fix = (f"if you trained it yourself, run: python -m dynakrag_lite.policy --update-manifest "
           f"{path}; otherwise do not load it")
    with _policy_errors():
        return _storage.verify_manifest(path, data, what="policy file", fix=fix)


def _display_path(path: Path) -> str:
    """A path worth recording: relative to the project or the working directory, never a
    machine's absolute path when either contains it."""
    p = path.resolve()
    for base in (PROJECT_ROOT, Path.cwd().resolve()):
        try:
            return p.relative_to(base).as_posix()
        except ValueError:
            continue
    try:
        return os.path.relpath(p, Path.cwd().resolve())
    except ValueError:  # another drive (Windows)
        return p.name


@dataclass
class CostModel:
    coef: dict[str, tuple[float, float]] = field(default_factory=dict)  # action -> (a, b)
    retrieval_tokens: float = 450.0

    def fit(self, data: TrainingData, per_action: int = 3) -> "CostModel":
        by: dict[str, list[tuple[int, float]]] = {}
        for s in data.samples:
            # executed calls only (a counterfactual probe is labelled without running); a
            # learned-signal probe can really cost 0 tokens
            if s.action in LLM_ACTIONS and getattr(s, "executed", True) and (
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


def _forest(n_estimators: int, min_samples_leaf: int, seed: int, n_jobs: int):
    from sklearn.ensemble import RandomForestRegressor
    return RandomForestRegressor(n_estimators=n_estimators, min_samples_leaf=min_samples_leaf,
                                 random_state=seed, n_jobs=n_jobs)


# The forests' predict path. True: a FlatForest (dynakrag_lite.forest) built on first use and
# cached by forest, outside the policy (nothing is added to what a policy pickles); it is
# bit-identical to the forest's own predict with n_jobs=1 and takes a fraction of a millisecond
# on a decision's few rows, where sklearn's per-tree dispatch took tens of ms. False: the
# estimator's own predict (tests compare the two). Anything FlatForest does not support (not a
# single-output RandomForestRegressor) always uses its own predict.
USE_FLAT_FOREST = True


def _predict(model, X) -> np.ndarray:
    flat = flat_forest_for(model) if USE_FLAT_FOREST else None
    return flat.predict(X) if flat is not None else model.predict(X)


def data_hash(data: TrainingData) -> str:
    h = hashlib.sha256()
    for s in data.samples:
        h.update(s.features.tobytes())
        h.update(np.float64(s.target).tobytes())
    return h.hexdigest()[:16]


STOP_RULES = ("level", "gain")


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

    The veto (``continue_gain > veto_threshold``) removes stop_answer whenever anything else
    is valid."""
    if stop_rule not in STOP_RULES:
        raise ValueError(f"unknown stop rule {stop_rule!r}; one of {STOP_RULES}")
    scores = {a: values[a] - lam * costs[a] for a in values}
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
    stop_rule: str = "level"  # see select(); policies saved before it existed are "level"
    # The calibrated sufficiency signal (sufficiency.SufficiencySignal) or None (text probe).
    sufficiency: object | None = None

    def configure(self, env):
        """Make ``env``'s sufficiency_check use this policy's calibrated signal (no-op for a
        policy without one); returns ``env``. Call it before a run (and before its
        fingerprint: the signal enters ``env.config``)."""
        if getattr(self, "sufficiency", None) is not None:
            self.sufficiency.configure(env)
        return env

    # -- selection ---------------------------------------------------------------------
    def values(self, state: EvidenceState, valid: tuple[str, ...]) -> dict[str, float]:
        base = state_features(state)
        acts = [a for a in valid if a != "compress_answer_evidence"]
        dc, pa = self.meta.get("doc_chars", 600), self.meta.get("per_action", 3)
        X = np.stack([phi(state, a, heuristic_cost(state, a, dc, pa), base) for a in acts])
        return dict(zip(acts, _predict(self.value_model, X).tolist()))

    def continue_gain(self, state: EvidenceState) -> float | None:
        if self.continuation_model is None or not state.docs:
            return None
        base = state_features(state)
        x = np.array([[base[n] for n in STATE_FEATURE_NAMES]])
        return float(_predict(self.continuation_model, x)[0])

    def choose(self, state: EvidenceState, valid: tuple[str, ...]):
        vals = self.values(state, valid)
        gain = self.continue_gain(state)
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
        """joblib-dump the policy (atomically: a unique temp file, then ``os.replace``).

        The meta records the scikit-learn, numpy and joblib versions doing the pickling, which
        :func:`check_policy` compares with the installed ones. A policy saved into the
        project's ``results/policies`` must then be added to the manifest
        (:func:`update_manifest` with ``files=[path]``) before :meth:`load` accepts it.
        """
        import joblib
        import sklearn
        from .storage import atomic_write_bytes
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
        """Load a policy saved by :meth:`save`.

        **A joblib file is code**: unpickling it runs whatever its author put in it, so load
        only files you trust. ``trusted`` says whether this one is:

        * ``None`` (default): files in the project's ``results/policies/`` are *not* trusted
          and must match their sha256 in ``results/policies/MANIFEST.sha256`` (a missing entry
          or a different hash raises :class:`PolicyError` before anything is unpickled); a file
          anywhere else is your own and is trusted.
        * ``False``: verify against ``MANIFEST.sha256`` in the file's own folder, wherever it is.
        * ``True``: skip the manifest (you vouch for the file).

        Also checks the policy's feature names against this version of the features (see
        :func:`check_policy` for the checks against a run's settings). After loading,
        :meth:`provenance` returns the file's relative path and sha256.
        """
        import joblib
        path = Path(path)
        if not path.exists():
            raise PolicyError(f"{path}: policy file not found")
        if trusted is None:
            trusted = not _in_project_policies(path)
        try:
            data = path.read_bytes()  # hash and unpickle the same bytes (no swap in between)
        except OSError as e:
            raise PolicyError(f"{path}: cannot read policy file ({e})") from None
        digest = _sha256_bytes(data) if trusted else _verify_manifest(path, data)
        try:
            blob = joblib.load(io.BytesIO(data))
        except Exception as e:  # a truncated or foreign file
            raise PolicyError(f"{path}: not a readable policy file ({e})") from None
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
            digest = _sha256_bytes(p.read_bytes())
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


def _embedder_key(name: str) -> str:
    from .retriever import _OFFLINE_ALIASES
    return _OFFLINE_ALIASES.get(name.lower(), name)


def check_policy(policy: Policy, *, embedder: str, doc_chars: int | None, per_action: int,
                 eval_ids: Iterable[str] = ()) -> None:
    """Refuse a policy that does not fit the run about to use it (raises :class:`PolicyError`
    listing every problem).

    Checked against the policy's meta: feature names (this library version's phi), the
    embedder (retrieval scores are features), document truncation ``doc_chars`` and the
    per-action retrieval budget (both enter the cost features), the scikit-learn version it was
    pickled with (forests are not guaranteed to unpickle or predict the same across versions),
    and that no evaluation question was a training question. A policy trained with another
    generator is allowed: that is the paper's generator-transfer setting.
    """
    import sklearn
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
    if "embedder" in meta and _embedder_key(str(meta["embedder"])) != _embedder_key(embedder):
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
        train = set(map(str, meta["train_ids"]))
        overlap = [i for i in dict.fromkeys(map(str, eval_ids)) if i in train]
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
    a calibrated SufficiencySignal to keep with the policy; ``stop_rule``: see
    :func:`select`)."""
    if stop_rule not in STOP_RULES:
        raise ValueError(f"unknown stop rule {stop_rule!r}; one of {STOP_RULES}")
    import sklearn
    X, y, acts = data.matrix()
    if len(y) == 0:
        raise PolicyError("no training samples")
    value = _forest(n_estimators, min_samples_leaf, seed, n_jobs).fit(X, y)
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
        cont = _forest(n_estimators, min_samples_leaf, seed, n_jobs).fit(P, g)
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
    all_values = _predict(policy.value_model, X)
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
            gain = float(_predict(policy.continuation_model,
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


# -- offline tuning of the stop rule: veto threshold and lambda -------------------------
VETO_GRID = (-1.0, 0.0, 0.02, 0.05, 0.1, 0.2, 1.0)  # F1/SR targets lie in [-1, 1]
LAMBDA_GRID = (0.0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3)  # per token; retrieval ~450 tokens
# Under the "gain" stop rule lambda trades a predicted SR gain (~0.05-0.25 per action) against
# ~100-500 tokens, so the interesting range reaches higher.
GAIN_LAMBDA_GRID = (0.0, 1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 5e-3)


def _redecide(d: dict, lam: float, thr: float) -> tuple[str, bool]:
    """The selection rule of :meth:`Policy.choose` on one replayed state's values/costs."""
    chosen, _, veto = select(d["values"], d["costs"], d["continue_gain"], lam, thr,
                             d.get("stop_rule", "level"))
    return chosen, veto


def _outcomes(decisions: list[dict], data: TrainingData, grid: Iterable[tuple[float, float]]
              ) -> list[dict]:
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


def replay_outcomes(policy: Policy, data: TrainingData, lam: float | None = None,
                    veto_threshold: float | None = None) -> "pd.DataFrame":
    """Where the policy would stop on each question of ``data``, replayed offline.

    Walks each question's explored path (its visited states in order) with the decisions of
    :func:`replay_decisions`; the first state where the policy chooses stop_answer (else the
    path's end, where a cap forced the stop) is its stopping point. Assumption: while the policy
    continues it follows the explored path (an acquisition action other than the rollout's is
    not executed), so this scores the *stop rule* (value of stopping, the veto, lambda), not the
    choice among acquisition actions. Outcome columns, read at the stopping point from the
    prefix records: ``sr``, ``f1`` (reader's answer F1 from those documents; NaN unless collected
    with continuation="f1"), ``tokens`` (ledger tokens to reach it + its answer call), plus
    ``stop_step``, ``early`` (stopped before the path's end), ``vetoes``, ``sr_end``/``f1_end``.
    Gold labels enter only through these recorded outcomes, never the decisions.
    """
    import pandas as pd
    lam = policy.lam if lam is None else lam
    thr = policy.veto_threshold if veto_threshold is None else veto_threshold
    decisions = replay_decisions(policy, data, lam=0.0, veto_threshold=np.inf)
    return pd.DataFrame(_outcomes(decisions, data, [(lam, thr)]))


def tune_continuation(data: TrainingData, lams: Sequence[float] = LAMBDA_GRID,
                      thresholds: Sequence[float] = VETO_GRID, folds: int = 5,
                      metric: str = "f1", seed: int = 13, n_estimators: int = 300,
                      min_samples_leaf: int = 8, n_jobs: int = -1, progress: bool = False,
                      stop_rule: str = "level") -> tuple[float, float, "pd.DataFrame"]:
    """Choose ``(lam, veto_threshold)`` by cross-validation on the training questions.

    Folds are grouped by question (GroupKFold over ``data.questions``). Each fold trains a
    policy on the other folds and replays its decisions on the held-out questions for every
    grid pair (:func:`replay_outcomes`); the pair with the highest mean ``metric`` ("f1" or
    "sr") over all held-out questions wins, ties broken by fewer tokens, then by the larger
    threshold (vetoing less) and the smaller lambda. Returns (lam, threshold, frame): one row
    per grid pair with the means of f1, sr, tokens, early (share stopping before the cap),
    vetoes, and ``best``.
    """
    import pandas as pd
    from sklearn.model_selection import GroupKFold
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
        for r in _outcomes(decisions, held, grid):
            r["fold"] = i
            rows.append(r)
        if progress:
            print(f"fold {i + 1}/{k} done", flush=True)
    per_q = pd.DataFrame(rows)
    frame = (per_q.groupby(["lam", "veto_threshold"], as_index=False)
             .agg(f1=("f1", "mean"), sr=("sr", "mean"), tokens=("tokens", "mean"),
                  early=("early", "mean"), vetoes=("vetoes", "mean"),
                  n_questions=("qid", "nunique")))
    order = frame.sort_values([metric, "tokens", "veto_threshold", "lam"],
                              ascending=[False, True, False, True])
    best = order.index[0]
    frame["best"] = frame.index == best
    frame["metric"] = metric
    frame["stop_rule"] = stop_rule
    return float(frame.loc[best, "lam"]), float(frame.loc[best, "veto_threshold"]), frame


def lambda_sweep(data: TrainingData, lams: Sequence[float] = LAMBDA_GRID,
                 veto_threshold: float = 0.05, folds: int = 5, metric: str = "f1",
                 **kw) -> "pd.DataFrame":
    """The cost/quality curve: cross-validated mean F1, SR and tokens per lambda at one veto
    threshold (a DataFrame sorted by lambda; the book plots f1/sr against tokens)."""
    _, _, frame = tune_continuation(data, lams, (veto_threshold,), folds, metric, **kw)
    return frame.sort_values("lam").reset_index(drop=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dynakrag_lite.policy --update-manifest [FOLDER | FILE ...]``. A bad file
    (missing, not a policy file, truncated) is reported as one line ``error: ...`` naming it,
    exit code 2, as by ``python -m dynakrag_lite``; the manifest is then left as it was."""
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lite.policy",
                                 description="maintain results/policies/MANIFEST.sha256")
    ap.add_argument("--update-manifest", action="store_true", required=True,
                    help="record the sha256 of the given policy files (or, given a folder or "
                         "nothing, of every *.joblib in it) in the folder's MANIFEST.sha256")
    ap.add_argument("paths", nargs="*", type=Path,
                    help=f"policy files, or one folder (default: {_display_path(POLICIES_DIR)})")
    args = ap.parse_args(argv)
    from .experiments.cli import run_reporting_errors
    # this module's own PolicyError (a second copy of the module under python -m), and OSError
    # (a manifest that cannot be written)
    return run_reporting_errors(_manifest_command, args, also=(PolicyError, OSError))


def _manifest_command(args: argparse.Namespace) -> int:
    if not args.paths or (len(args.paths) == 1 and args.paths[0].is_dir()):
        out = update_manifest(args.paths[0] if args.paths else None)
    else:
        folders = {p.resolve().parent for p in args.paths}
        if len(folders) != 1:
            raise PolicyError("give files of one folder at a time")
        out = update_manifest(args.paths[0].parent, files=args.paths)
    print(f"updated {_display_path(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
