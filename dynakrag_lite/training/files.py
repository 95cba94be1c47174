"""Training-data files (chapters 9 and 13): collected trajectories as one pickle-free
``.npz``, with the sufficiency calibration states they were collected under.

:func:`save_training_data` writes a :class:`~dynakrag_lite.trajectories.TrainingData` as plain
arrays (no pickle, so a file from anyone is safe to load), with the settings the trajectories
were collected under (``TrainingData.run``) and the sufficiency calibration states
(:class:`CalibrationTable`). With both, ``train --from-data FILE`` rebuilds a whole policy,
calibrated signal included, without a model call, on any subset of the questions. Format-1
files (without either) still load for re-tuning; ``--from-data`` refuses them.
"""
from __future__ import annotations

import io
import json
import zipfile
import zlib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from ..features import FEATURE_NAMES, STATE_FEATURE_NAMES
from ..storage import atomic_write_bytes
from ..sufficiency import LEARNED_FEATURE_NAMES, SufficiencyError, learned_features
from ..trajectories import CONTINUATION_TARGETS, PrefixSample, Sample, TrainingData
from .calibration import (calibrate, calibration_states, fit_estimator, oof_estimator_scores,
                          signal_scores)

__all__ = ["FORMAT", "CalibrationTable", "build_calibration", "same_signal",
           "save_training_data", "load_training_data", "load_training_data_bytes"]

# 2: adds the "run" settings and the optional sufficiency calibration table (format 1 loads).
FORMAT = 2
_SAMPLE_SCALARS = ("step", "target", "cost_tokens", "n_docs", "chosen", "executed")


@dataclass
class CalibrationTable:
    """The states a sufficiency signal was calibrated on, as plain arrays (one row per state,
    in calibration order) so :meth:`signal` can redo the calibration without an environment.

    ``llm``: the row lies in the LLM-scored subset (where every signal's AUC is measured);
    ``scores``: per LLM signal the score of each row (NaN outside ``llm``); ``text_extra``: 1
    where the text probe replied SUFFICIENT; ``settings``: :func:`train_signal`'s arguments;
    ``signal_info``: describe() of the signal the trajectories were collected under;
    ``reproduced``: :meth:`signal` gave that same signal when the file was written."""
    qids: np.ndarray
    kinds: np.ndarray
    sr: np.ndarray
    features: np.ndarray
    llm: np.ndarray
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    text_extra: np.ndarray | None = None
    settings: dict = field(default_factory=dict)
    signal_info: dict | None = None
    reproduced: bool | None = None

    def __len__(self) -> int:
        return len(self.qids)

    def subset(self, qids) -> "CalibrationTable":
        keep = set(qids)
        m = np.array([q in keep for q in self.qids.tolist()], dtype=bool)
        return CalibrationTable(
            self.qids[m], self.kinds[m], self.sr[m], self.features[m], self.llm[m],
            {k: v[m] for k, v in self.scores.items()},
            None if self.text_extra is None else self.text_extra[m],
            dict(self.settings), self.signal_info, self.reproduced)

    def signal(self):
        """The calibrated signal (None for the text probe) these rows give: the arithmetic of
        :func:`.calibration.train_signal` on stored states (same seeds, same order: on the same
        rows the same signal). Raises ValueError when an LLM signal's scores are missing."""
        st = self.settings
        kind, seed = st["kind"], int(st["seed"])
        if kind == "text":
            return None
        kinds = ("text", "margin", "learned") if kind == "auto" else (kind,)
        if not len(self):
            raise SufficiencyError("no calibration states (no documents retrieved)")
        y = np.array([float(v >= 1.0 - 1e-9) for v in self.sr.tolist()])
        groups = np.array(self.qids.tolist(), dtype=object)
        sub = np.nonzero(self.llm)[0]
        scores: dict[str, np.ndarray] = {}
        estimator = None
        if "learned" in kinds:  # first, as in calibrate_for (dict order breaks AUC ties)
            # fitted on reachable states only, as calibrate_for does
            reach = self.kinds == "reachable"
            oof = oof_estimator_scores(self.features, y, groups, 5, kind="forest", seed=seed,
                                       train_mask=reach)
            estimator = fit_estimator(self.features[reach], y[reach], seed=seed)
            scores["learned"] = oof[sub]
        for k in kinds:
            if k == "learned":
                continue
            v = self.scores.get(k)
            if v is None or not np.all(np.isfinite(v[sub])):
                raise ValueError(f"the calibration table lacks {k!r} scores")
            scores[k] = v[sub]
        text_suff = self.text_extra[sub] if "text" in kinds and self.text_extra is not None \
            else None
        sig = calibrate(scores, y[sub], groups[sub], rule=st["rule"],
                        min_gain=float(st["min_gain"]), generator=st["generator"],
                        estimator=estimator, text_sufficient=text_suff, seed=seed)
        if kind != "auto" and sig.kind != kind:  # a named signal is kept (train_signal)
            s = sig.stats[kind]
            sig = replace(sig, kind=kind, threshold=s.threshold, gates=True, rule=s.rule,
                          estimator=estimator if kind == "learned" else None)
        return sig

    # -- persistence inside TrainingData's .npz ------------------------------------------
    def _arrays(self) -> dict[str, np.ndarray]:
        a = {"c_qid": np.array(self.qids.tolist(), dtype=str),
             "c_kind": np.array(self.kinds.tolist(), dtype=str),
             "c_sr": self.sr.astype(np.float64), "c_features": self.features.astype(np.float64),
             "c_llm": self.llm.astype(bool)}
        for k, v in self.scores.items():
            a[f"c_score_{k}"] = v.astype(np.float64)
        if self.text_extra is not None:
            a["c_text_extra"] = self.text_extra.astype(np.float64)
        return a

    def _meta(self) -> dict:
        return {"settings": self.settings, "signal": self.signal_info,
                "reproduced": self.reproduced, "score_kinds": sorted(self.scores),
                "learned_feature_names": list(LEARNED_FEATURE_NAMES)}

    @classmethod
    def _from(cls, a: dict, meta: dict, path: Path) -> "CalibrationTable":
        if meta.get("learned_feature_names") != list(LEARNED_FEATURE_NAMES):
            raise ValueError(f"{path}: its calibration states have other learned-signal "
                             "features than this library's; collect the trajectories again")
        n = len(a["c_qid"])
        return cls(np.array([str(q) for q in a["c_qid"]], dtype=object),
                   np.array([str(k) for k in a["c_kind"]], dtype=object),
                   a["c_sr"].astype(np.float64),
                   a["c_features"].astype(np.float64).reshape(n, len(LEARNED_FEATURE_NAMES)),
                   a["c_llm"].astype(bool),
                   {k: a[f"c_score_{k}"] for k in meta.get("score_kinds", [])},
                   a.get("c_text_extra"), dict(meta["settings"]), meta.get("signal"),
                   meta.get("reproduced"))


def build_calibration(questions, env, kind: str = "auto", rule: str = "youden",
                      llm_questions: int | None = 100, seed: int = 13, min_gain: float = 0.05,
                      live_signal=None, check: bool = True) -> CalibrationTable | None:
    """The :class:`CalibrationTable` of a training run (``train --save-data``): the states of
    :func:`.calibration.calibrate_for` with the LLM signals' scores (cache hits of the calls
    ``train_signal`` just made); None for the text probe. With ``check``, ``reproduced``
    records whether the table's own :meth:`~CalibrationTable.signal` equals ``live_signal``,
    so a table that would rebuild another signal is never used silently."""
    if kind == "text":
        return None
    kinds = ("text", "margin", "learned") if kind == "auto" else (kind,)
    qs = list(questions)
    # per_question=4 and the contrast states: calibrate_for's (and train_signal's) defaults
    states = calibration_states(qs, env, per_question=4, seed=seed)
    llm_ids = {q.id for q in qs[:llm_questions]} if llm_questions else {q.id for q in qs}
    llm = np.array([c.qid in llm_ids for c in states], dtype=bool)
    scores: dict[str, np.ndarray] = {}
    text_extra = None
    llm_kinds = [k for k in kinds if k != "learned"]
    if llm_kinds:
        idx = np.nonzero(llm)[0]
        got = signal_scores([states[i] for i in idx], env, llm_kinds, seed=seed)
        for k in llm_kinds:
            scores[k] = np.full(len(states), np.nan)
            scores[k][idx] = got[k]["score"]
        if "text" in got and "extra" in got["text"]:
            text_extra = np.full(len(states), np.nan)
            text_extra[idx] = got["text"]["extra"]
    X = np.stack([learned_features(c.state) for c in states]) if states else \
        np.zeros((0, len(LEARNED_FEATURE_NAMES)))
    table = CalibrationTable(
        np.array([c.qid for c in states], dtype=object),
        np.array([c.kind for c in states], dtype=object),
        np.array([c.sr for c in states], dtype=np.float64), X, llm, scores, text_extra,
        {"kind": kind, "rule": rule, "llm_questions": llm_questions, "seed": seed,
         "min_gain": min_gain,
         "generator": None if env.generator is None else env.generator.spec},
        live_signal.describe() if live_signal is not None else None)
    if check:
        table.reproduced = same_signal(table.signal(), live_signal, X)
    return table


def same_signal(a, b, X: np.ndarray) -> bool:
    """Two calibrated signals agree: same summary (kind, threshold, gates, every candidate's
    AUC and threshold) and, for learned ones, the same estimator predictions on ``X``."""
    if a is None or b is None:
        return a is None and b is None
    if a.describe() != b.describe():
        return False
    ea, eb = a.estimator, b.estimator
    if (ea is None) != (eb is None):
        return False
    return ea is None or not len(X) or bool(np.array_equal(ea.predict(X), eb.predict(X)))


# -- the .npz file ---------------------------------------------------------------------------
def save_training_data(data: TrainingData, path: str | Path) -> Path:
    """Write ``data`` to ``path`` (``.npz``, written atomically). Raises ValueError when
    there are prefixes but no stated ``continuation_target`` (a file must say what its
    gains are)."""
    if data.continuation_target is not None and \
            data.continuation_target not in CONTINUATION_TARGETS:
        raise ValueError(f"unknown continuation target {data.continuation_target!r}; one "
                         f"of {CONTINUATION_TARGETS}")
    if data.prefixes and data.continuation_target is None:
        raise ValueError("these prefixes have no stated continuation target "
                         "(continuation_target is None): pass continuation_target= when "
                         "building the TrainingData, or call set_continuation_target(kind), "
                         "before saving")
    n_feat, n_state = len(FEATURE_NAMES), len(STATE_FEATURE_NAMES)
    pf = [f.name for f in fields(PrefixSample) if f.name not in ("qid", "features")]
    arrays = {
        "meta": np.array(json.dumps({
            "format": FORMAT, "continuation_target": data.continuation_target,
            "questions": list(data.questions), "feature_names": list(FEATURE_NAMES),
            "state_feature_names": list(STATE_FEATURE_NAMES), "prefix_fields": pf,
            "run": data.run, "calibration": None if data.calibration is None
            else data.calibration._meta()})),
        "s_qid": np.array([s.qid for s in data.samples], dtype=str),
        "s_action": np.array([s.action for s in data.samples], dtype=str),
        "s_features": np.stack([s.features for s in data.samples]).astype(np.float64)
        if data.samples else np.zeros((0, n_feat)),
        "p_qid": np.array([p.qid for p in data.prefixes], dtype=str),
        "p_features": np.stack([p.features for p in data.prefixes]).astype(np.float64)
        if data.prefixes else np.zeros((0, n_state)),
    }
    for name in _SAMPLE_SCALARS:
        arrays[f"s_{name}"] = np.array([getattr(s, name) for s in data.samples],
                                       dtype=np.float64)
    for name in pf:
        arrays[f"p_{name}"] = np.array([getattr(p, name) for p in data.prefixes],
                                       dtype=np.float64)
    if data.calibration is not None:
        arrays.update(data.calibration._arrays())
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return atomic_write_bytes(path, buf.getvalue())


def load_training_data(path: str | Path) -> TrainingData:
    """Read a file written by :func:`save_training_data`. Raises ValueError naming the file
    when it is not one, or when its features are not this library's (retrain or
    re-collect)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ValueError(f"{path}: cannot read the training-data file ({e})") from None
    return load_training_data_bytes(raw, path)


def load_training_data_bytes(raw: bytes, path: str | Path = "<bytes>") -> TrainingData:
    """:func:`load_training_data` from the file's bytes (``path`` names it in errors): a
    caller that records the file's sha256 hashes exactly the bytes it loads."""
    path = Path(path)
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as z:
            a = {k: z[k] for k in z.files}
        meta = json.loads(str(a["meta"]))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        raise ValueError(f"{path}: not a training-data file written by "
                         f"save_training_data ({e})") from None
    if meta.get("format", 1) > FORMAT:
        raise ValueError(f"{path}: training-data format {meta.get('format')} is newer "
                         f"than this library's ({FORMAT}); update the library")
    for name, ours in (("feature_names", FEATURE_NAMES),
                       ("state_feature_names", STATE_FEATURE_NAMES)):
        if meta.get(name) != list(ours):
            raise ValueError(f"{path}: its feature names (field {name!r}) differ from "
                             "this library's; collect the trajectories again")
    try:  # every format writes these fields: a file without one is not complete
        samples = [Sample(str(q), int(st), str(act), f, float(t), float(c), int(nd),
                          bool(ch), bool(ex))
                   for q, st, act, f, t, c, nd, ch, ex in zip(
                       a["s_qid"], a["s_step"], a["s_action"], a["s_features"],
                       a["s_target"], a["s_cost_tokens"], a["s_n_docs"], a["s_chosen"],
                       a["s_executed"])]
        prefixes = []
        for i, (q, f) in enumerate(zip(a["p_qid"], a["p_features"])):
            kw = {name: float(a[f"p_{name}"][i]) for name in meta["prefix_fields"]}
            kw["step"] = int(kw["step"])
            prefixes.append(PrefixSample(str(q), f, **kw))
        questions = list(meta["questions"])
        # stated by every saved file; never defaulted (a guess would mislabel the gains)
        target = meta["continuation_target"]
    except KeyError as e:
        raise ValueError(f"{path}: not a complete training-data file (no field {e})") \
            from None
    if target is not None and target not in CONTINUATION_TARGETS:
        raise ValueError(f"{path}: field 'continuation_target' is {target!r}, not one of "
                         f"{CONTINUATION_TARGETS}")
    if prefixes and target is None:
        raise ValueError(f"{path}: field 'continuation_target' is null but the file has "
                         f"{len(prefixes)} prefixes: what their gains are is not stated")
    calib = meta.get("calibration")
    try:
        table = CalibrationTable._from(a, calib, path) if calib else None
    except KeyError as e:
        raise ValueError(f"{path}: its calibration table is incomplete (no {e})") from None
    return TrainingData(samples, prefixes, questions, target, dict(meta.get("run") or {}),
                        table)
