"""Answer labels merged into saved trajectories: the rows of a labels file
(:mod:`dynakrag_lite.training.answer_labels`) become ``f1_now`` and ``answer_tokens`` per prefix of
a :class:`~dynakrag_lite.trajectories.TrainingData`, then ``f1_end`` and the gains as
``collect_question`` sets them. A question whose replay did not reproduce the file counts as the
path its replay took, when its row kept the replay's states (:func:`replayed_path`).

``data_scripts/control_diagnosis.py --answer-labels`` and ``train --from-data X.npz
--answer-labels FILE`` use them.
"""
from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..trajectories import PrefixSample, TrainingData, finish_prefixes
from .answer_labels import (KIND, TOLERANCE, AnswerLabelError, has_answer_f1, read_label_file,
                            row_truncated, within_tolerance)

__all__ = ["replayed_path", "unreproduced_without_states", "merge_answer_labels",
           "with_answer_labels"]


def replayed_path(row: Mapping[str, Any], n_features: int) -> list[PrefixSample] | None:
    """The prefixes of the path a non-reproduced replay took, from its row (features, SR, ledger
    tokens, answer F1 and tokens; ``onestep`` NaN, the ends left to ``finish_prefixes``), or
    None: a row older than these fields, features of another length, or a replay an invalid
    action cut short (its last prefix is not the rollout's end)."""
    if (row.get("mismatch") or {}).get("field") == "action" or not row["prefixes"]:
        return None
    out = []
    for r in row["prefixes"]:
        feats = r.get("features")
        if not isinstance(feats, list) or len(feats) != n_features or r.get("tokens") is None:
            return None
        out.append(PrefixSample(row["qid"], np.array([_num(v) for v in feats]), 0.0,
                                int(r["step"]), sr_now=_num(r["sr_now"]),
                                f1_now=_num(r["f1_now"]), tokens=_num(r["tokens"]),
                                answer_tokens=_num(r.get("answer_tokens"))))
    return out


def unreproduced_without_states(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The questions whose latest row (``LabelFile.rows``) did not reproduce the file and is
    older than rows keeping the replay's states: relabelled, they count (:func:`replayed_path`)."""
    return [q for q, r in rows.items() if not r["reproduced"] and any(
        "features" not in x for x in r["prefixes"])]


def merge_answer_labels(data: TrainingData, path: str | Path, npz_sha256: str | None = None,
                        include_unreproduced: bool = False) -> tuple[TrainingData, dict]:
    """(a copy of ``data`` with the labels of ``path`` filled in, the counts). For every
    question of ``data`` whose latest row is a label (not cut by the time limit; reproduced,
    or any with ``include_unreproduced`` whose steps match) and without finite F1s already:
    ``f1_now`` and ``answer_tokens`` per prefix, then ``f1_end`` and ``gain`` as
    ``collect_question`` sets them. ``npz_sha256``: the
    trajectories file's, checked against the header. Counts: ``labelled``, ``not_reproduced``
    (rows left out), ``truncated`` (rows left out: a generation hit the time limit; the next
    labelling run redoes them), ``missing`` (questions still without F1),
    ``already_labelled`` (F1s in the file; a row for one only counts as ``agree``/
    ``disagree``: same F1s and answer tokens, a check that the reader replies as it did; a
    cut row is not compared), ``rows_not_in_data``.

    A non-reproduced question (not taken with ``include_unreproduced``) whose row kept the
    replay's states counts as the path its replay took, a valid rollout of the same policy
    (:func:`replayed_path`; ``replayed``; the value model's samples stay the file's)."""
    path = Path(path)
    lf = read_label_file(path)
    if lf.header is None:
        raise AnswerLabelError(f"{path}: no answer labels (empty file, or no such file)")
    if lf.header.get("kind") != KIND:
        raise AnswerLabelError(f"{path}: its header's field 'kind' is "
                               f"{lf.header.get('kind')!r}, not {KIND!r}")
    if npz_sha256 is not None and lf.header.get("npz_sha256") != npz_sha256:
        raise AnswerLabelError(f"{path}: labels of other trajectories: its header's field "
                               f"'npz_sha256' is {lf.header.get('npz_sha256')!r}, the "
                               f"trajectories file's is {npz_sha256!r}")
    if data.prefixes and data.continuation_target is None:
        raise ValueError("the data's prefixes state no continuation target; call "
                         "set_continuation_target first")
    prefixes = [replace(p) for p in data.prefixes]  # the caller's data stays as it was
    by_q: dict[str, list[PrefixSample]] = {}
    for p in prefixes:
        by_q.setdefault(p.qid, []).append(p)
    counts = {"labelled": 0, "replayed": 0, "not_reproduced": 0, "truncated": 0, "missing": 0,
              "already_labelled": 0, "agree": 0, "disagree": 0,
              "rows_not_in_data": len(set(lf.rows) - set(data.questions))}
    for qid in data.questions:
        ps, row = by_q.get(qid, []), lf.rows.get(qid)
        steps = None if row is None else [r["step"] for r in row["prefixes"]]
        if row is not None and row["reproduced"] and steps != [p.step for p in ps]:
            raise AnswerLabelError(
                f"{path}: line {lf.lines[qid]}: question {qid}'s prefixes (steps {steps}) are "
                f"not those of the data (steps {[p.step for p in ps]}): labels of other "
                "trajectories")
        cut = row is not None and row_truncated(row) > 0
        if has_answer_f1(ps):
            counts["already_labelled"] += 1
            if row is not None and row["reproduced"] and not cut:
                same = all(
                    within_tolerance(p.f1_now, _num(r["f1_now"]), TOLERANCE)
                    and within_tolerance(p.answer_tokens, _num(r.get("answer_tokens")), TOLERANCE)
                    for p, r in zip(ps, row["prefixes"]))
                counts["agree" if same else "disagree"] += 1
            continue
        if not ps:
            continue
        if cut:
            counts["truncated"] += 1
            continue
        usable = row is not None and (row["reproduced"] or (
            include_unreproduced and steps == [p.step for p in ps]))
        own = None if usable or row is None else replayed_path(row, len(ps[0].features))
        if own is not None:
            finish_prefixes(own, data.continuation_target)
            by_q[qid] = own
            counts["replayed"] += 1
            continue
        if not usable:
            counts["not_reproduced" if row is not None else "missing"] += 1
            continue
        for p, r in zip(ps, row["prefixes"]):
            p.f1_now, p.answer_tokens = _num(r["f1_now"]), _num(r.get("answer_tokens"))
        finish_prefixes(ps, data.continuation_target)
        counts["labelled"] += 1
    if counts["replayed"]:  # the question order of the data, replayed paths in place
        prefixes = [p for q in dict.fromkeys(p.qid for p in prefixes) for p in by_q[q]]
    out = TrainingData(data.samples, prefixes, list(data.questions), data.continuation_target,
                       dict(data.run), data.calibration)
    return out, {"file": str(path), "sha256": hashlib.sha256(lf.raw).hexdigest(),
                 "dropped_line": lf.dropped, **counts}


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def with_answer_labels(data: TrainingData, jsonl_path: str | Path,
                       npz_sha256: str | None = None,
                       include_unreproduced: bool = False) -> TrainingData:
    """:func:`merge_answer_labels`, its counts reported on stderr."""
    out, counts = merge_answer_labels(data, jsonl_path, npz_sha256, include_unreproduced)
    print(f"answer labels {jsonl_path}: " + ", ".join(
        f"{k} {counts[k]}" for k in ("labelled", "replayed", "not_reproduced", "truncated",
                                     "missing",
                                     "already_labelled")), file=sys.stderr, flush=True)
    return out
