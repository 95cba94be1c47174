"""Answer labels: the file format of the reader's answer F1 at every prefix of saved
trajectories (``results/trajectories/<dataset>-<reader>.answer-f1.jsonl``) and their merge into
a :class:`~dynakrag_lite.trajectories.TrainingData`, which the control diagnosis and the router
read.

A labels file is JSONL: line 1 a header (the trajectories file's sha256, the collection command,
the reader's model id, the label kind), then one row per question, appended; a question's latest
row wins, a truncated last line (a killed run) is ignored, a row with ``truncated`` > 0 (a
generation cut by the time limit) is no label. Row: ``{"qid", "reproduced", "truncated": int,
"mismatch": null | {...}, "prefixes": [{"step", "sr_now", "f1_now", "answer_tokens", "answer",
"tokens", "features"}], "seconds"}`` (NaN written as null).

The merge makes the rows ``f1_now`` and ``answer_tokens`` per prefix, then ``f1_end`` and the
gains as ``collect_question`` sets them. A question whose replay did not reproduce the file
counts as the path its replay took, when its row kept the replay's states
(:func:`replayed_path`). The labels were produced by a replay with answer calls, a finished
study whose code is at the git tag ``lab-answer-labels-study`` (results/README.md).
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from dynakrag_lite.trajectories import PrefixSample, TrainingData, finish_prefixes

__all__ = ["KIND", "TOLERANCE", "AnswerLabelError", "LabelFile",
           "parse_label_bytes", "read_label_file", "row_truncated", "has_answer_f1",
           "within_tolerance", "replayed_path", "merge_answer_labels"]

KIND = "answer_f1"
# Retrieval scores are float32: the same documents scored on another machine or after an
# index rebuild differ by ~1e-8 (measured: 4e-8 on a HotpotQA score_mean); another document
# changes the features by far more.
TOLERANCE = 1e-6
ROW_FIELDS = ("qid", "reproduced", "mismatch", "prefixes", "seconds")


class AnswerLabelError(ValueError):
    """A labels file that cannot be used (corrupt, of other trajectories, another header)."""


# -- the file ----------------------------------------------------------------------------------


@dataclass
class LabelFile:
    """A labels file as read: its header (None for a new or empty file), each question's latest
    row by qid with its line number, the bytes that were read, and what a resume must repair:
    ``keep`` bytes (the end of the last good line) and whether that line lacks its newline."""
    path: Path
    header: dict | None = None
    rows: dict[str, dict] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    raw: bytes = b""
    keep: int = 0
    needs_newline: bool = False
    dropped: str | None = None  # the note on a truncated/corrupt last line

    @property
    def done(self) -> set[str]:
        """The questions whose latest row is a label (not cut by the time limit)."""
        return {q for q, r in self.rows.items() if not row_truncated(r)}


def row_truncated(row: Mapping[str, Any]) -> int:
    """How many of a row's generations hit the time limit (0 for rows written before the field
    existed: kept as labels)."""
    return int(row.get("truncated") or 0)


def _row_problem(obj: Any) -> str | None:
    if not isinstance(obj, dict) or not all(k in obj for k in ROW_FIELDS):
        return f"not a row (a JSON object with {', '.join(ROW_FIELDS)})"
    if not isinstance(obj["qid"], str) or not isinstance(obj["reproduced"], bool):
        return "'qid' must be a string and 'reproduced' a boolean"
    ps = obj["prefixes"]
    if not isinstance(ps, list) or not all(
            isinstance(p, dict) and isinstance(p.get("step"), int) and "f1_now" in p
            for p in ps):
        return "'prefixes' must be a list of objects with 'step' and 'f1_now'"
    n = obj.get("truncated", 0)  # absent in rows written before it existed
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        return "'truncated' must be a count (an integer >= 0)"
    return None


def parse_label_bytes(raw: bytes, path: Path) -> LabelFile:
    out = LabelFile(path, raw=raw)
    chunks, offsets, pos = raw.split(b"\n"), [], 0
    for c in chunks:
        offsets.append(pos)
        pos += len(c) + 1
    if chunks and chunks[-1] == b"":  # the text ends with a newline (or is empty)
        chunks.pop()
    for i, chunk in enumerate(chunks):
        lineno, last = i + 1, i == len(chunks) - 1
        try:
            obj = json.loads(chunk.decode("utf-8"))
            if i == 0:
                problem = None if isinstance(obj, dict) and "answer_labels" in obj else \
                    "not an answer-labels header (no field 'answer_labels')"
            else:
                problem = _row_problem(obj)
        except (UnicodeDecodeError, ValueError) as e:
            obj, problem = None, f"not JSON: {e}"
        if problem is None:
            if i == 0:
                out.header = obj
            else:
                out.rows[obj["qid"]] = obj  # a later row of a question replaces the earlier
                out.lines[obj["qid"]] = lineno
            out.keep = offsets[i] + len(chunk)
            out.needs_newline = last and not raw.endswith(b"\n")
        elif last and not (i == 0 and isinstance(obj, dict)):
            # A killed run leaves at most its last line half written: ignore it (and cut it
            # off before appending), its question is redone.
            out.dropped = (f"{path}: line {lineno} is truncated or corrupt ({problem}); "
                           "ignored, its question is labelled again")
            out.keep, out.needs_newline = offsets[i], False
        else:
            raise AnswerLabelError(f"{path}: line {lineno} is corrupt ({problem}); only a "
                                   "truncated last line is ignored, so repair or remove this "
                                   "line by hand")
    return out


def read_label_file(path: str | Path) -> LabelFile:
    """Read a labels file (a missing file reads as empty). Raises :class:`AnswerLabelError`
    naming the file and line for a corrupt line other than the last."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = b""
    return parse_label_bytes(raw, path)


def has_answer_f1(prefixes: Sequence[PrefixSample]) -> bool:
    """Every prefix has a finite answer F1 (and there is one)."""
    return bool(prefixes) and all(np.isfinite(p.f1_now) for p in prefixes)


def within_tolerance(a: float, b: float, tol: float) -> bool:
    """``a`` and ``b`` differ by at most ``tol`` (relative above 1); two NaNs agree."""
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= tol * max(1.0, abs(a), abs(b))


# -- the merge ---------------------------------------------------------------------------------


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
