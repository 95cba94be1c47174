"""Training-data files (chapters 9 and 13): collected trajectories as one pickle-free ``.npz``
(safe to load from anyone), with the settings they were collected under (``TrainingData.run``)
and the sufficiency calibration states (:class:`CalibrationTable`). With both, ``train
--from-data FILE`` rebuilds a whole policy without a model call; format-1 files (without
either) still load for re-tuning."""
from __future__ import annotations

import io
import json
import zipfile
import zlib
from dataclasses import fields
from pathlib import Path

import numpy as np

from ..features import FEATURE_NAMES, STATE_FEATURE_NAMES
from ..storage import atomic_write_bytes
from ..trajectories import CONTINUATION_TARGETS, PrefixSample, Sample, TrainingData
from .calibration import CalibrationTable, calibration_table

__all__ = ["FORMAT", "CalibrationTable", "build_calibration", "same_signal",
           "save_training_data", "load_training_data", "load_training_data_bytes"]

# 2: adds the "run" settings and the optional sufficiency calibration table (format 1 loads).
FORMAT = 2
_SAMPLE_SCALARS = ("step", "target", "cost_tokens", "n_docs", "chosen", "executed")


def build_calibration(questions, env, kind: str = "auto", rule: str = "youden",
                      llm_questions: int | None = 100, seed: int = 13, min_gain: float = 0.05,
                      live_signal=None, check: bool = True) -> CalibrationTable | None:
    """The :class:`CalibrationTable` of a training run (``train --save-data``; None for the text
    probe). With ``check``, ``reproduced`` records whether it rebuilds ``live_signal``."""
    table = calibration_table(questions, env, kind, rule, llm_questions, seed, min_gain)
    if table is not None:
        table.signal_info = live_signal.describe() if live_signal is not None else None
        if check:
            table.reproduced = same_signal(table.signal(), live_signal, table.features)
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
    """Write ``data`` to ``path`` (``.npz``, atomically); ValueError for prefixes without a
    stated ``continuation_target`` (a file must say what its gains are)."""
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
        arrays[f"s_{name}"] = np.array([getattr(s, name) for s in data.samples], dtype=np.float64)
    for name in pf:
        arrays[f"p_{name}"] = np.array([getattr(p, name) for p in data.prefixes], dtype=np.float64)
    if data.calibration is not None:
        arrays.update(data.calibration._arrays())
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return atomic_write_bytes(path, buf.getvalue())


def load_training_data(path: str | Path) -> TrainingData:
    """Read a file written by :func:`save_training_data`. Raises ValueError naming the file
    when it is not one, or when its features are not this library's (retrain or re-collect)."""
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
    return TrainingData(samples, prefixes, questions, target, dict(meta.get("run") or {}), table)
