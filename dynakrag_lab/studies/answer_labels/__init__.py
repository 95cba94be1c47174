"""Answer-utility labels for saved trajectories: the reader's answer F1 at every prefix of the
questions a ``train --save-data`` file holds without it, computed later, resumably.

``train --continuation-questions N`` makes answer calls on the first N training questions only
(with a 1.5B reader each costs minutes), so the other questions' prefixes have ``f1_now`` NaN.
:func:`label_questions` adds them without collecting again:

* **Replay, not re-collection.** The file records the action the rollout took at every step
  (``Sample.chosen``). From ``initial_state`` the chosen actions are applied in order on the
  training run's environment (:func:`dynakrag_lite.training.recipe.training_setup`: same
  index, reader and calibrated sufficiency signal), so the counterfactual branches, most of
  collection's cost, are not run again. At each state with documents (where
  ``collect_question`` records a prefix) one answer call gives ``answer_f1``.
* **Reproduction check.** Each replayed prefix's state features (as ``PrefixSample.features``
  is built) and SR must equal the file's (tolerance 1e-6, relative to values above 1). A
  question that differs is kept with ``reproduced: false`` and its first difference
  (``mismatch``); its rows also keep the replay's own states, the path the merge uses.
* **One row per question, appended.** The labels live in a JSONL file, not in the machine-local
  LLM call cache, so a run can stop and continue anywhere: line 1 is a header (the
  trajectories file's sha256, the collection command, the reader's model id, the label kind;
  a resume under another header is refused), then one row per question, flushed and fsynced
  as soon as the question is done. A truncated last line (a killed run) is reported and cut
  off, and its question redone; a corrupt line before it is an error. Earlier lines are never
  rewritten. The file is locked (``flock``) while a run appends to it.
* **Time limits.** A generation cut by the time limit (``Generation.truncated``, see
  :mod:`dynakrag_lite.generators.base`) reflects the machine's speed (or a paused process),
  not the reader: the row counts them (``truncated``), and a row with ``truncated`` > 0 is no
  label: the merge leaves it out and the next run redoes its question, appending a new row.
* **The latest row wins.** A question redone (after a cut row, or asked for with ``redo``:
  ``--redo QID``) has two rows; the later one is its label everywhere (merge, plan, resume).
  Rows written before ``truncated`` existed read as 0.

Row: ``{"qid", "reproduced", "truncated": int, "mismatch": null | {"prefix", "step", "field",
"npz", "replay"}, "prefixes": [{"step", "sr_now", "f1_now", "answer_tokens", "answer",
"tokens", "features"}], "seconds"}`` (NaN is written as null; rows written before ``answer``,
``tokens`` and ``features`` existed lack them).

:func:`~dynakrag_lab.studies.answer_labels.files.merge_answer_labels` (the file format and the merge;
``python -m dynakrag_lab.studies.answer_labels.train`` trains with them) and
:func:`with_answer_labels` put the labels into a :class:`~dynakrag_lite.trajectories.TrainingData`
(``f1_now``, ``answer_tokens``, then ``f1_end`` and the gains as ``collect_question`` sets
them); ``python -m dynakrag_lab.studies.diagnosis --answer-labels`` uses them too.
``python -m dynakrag_lab.studies.answer_labels`` is the command line.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from dynakrag_lite.actions import answer, apply_action
from dynakrag_lite.config import Environment
from dynakrag_lite.data.corpus import gold_titles
from dynakrag_lite.data.schema import Question
from dynakrag_lite.features import state_features
from dynakrag_lite.generators.base import Generation
from dynakrag_lite.metrics import em_f1
from dynakrag_lite.oracle import sr
from dynakrag_lite.state import initial_state
from dynakrag_lite.storage import LockedError
from dynakrag_lite.trajectories import PrefixSample, TrainingData
from dynakrag_lite.validity import valid_actions
from dynakrag_lab.studies.answer_labels.files import (KIND, TOLERANCE, AnswerLabelError, has_answer_f1,
                                          merge_answer_labels, parse_label_bytes,
                                          row_truncated, within_tolerance)

try:
    import fcntl
except ImportError:  # Windows: no advisory locks
    fcntl = None

__all__ = ["FORMAT", "HEADER_FIELDS", "LabelPlan", "default_label_path", "make_header",
           "check_header", "plan_labels", "replay_question", "label_questions",
           "unreproduced_without_states", "with_answer_labels"]

FORMAT = 1
# The header fields a resume must match (the "npz" path may differ between machines).
HEADER_FIELDS = ("answer_labels", "kind", "npz_sha256", "command", "generator_model_id")


def _note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def default_label_path(npz: str | Path) -> Path:
    """``<dir>/<name>.answer-f1.jsonl`` beside the trajectories file ``<dir>/<name>.npz``."""
    npz = Path(npz)
    return npz.with_name(f"{npz.stem}.answer-f1.jsonl")


def make_header(npz_sha256: str, command: str, generator_model_id: str | None,
                npz: str | None = None) -> dict:
    """Line 1 of a labels file (``npz``: the trajectories file's path, for the reader only)."""
    return {"answer_labels": FORMAT, "kind": KIND, "npz_sha256": npz_sha256,
            "command": command, "generator_model_id": generator_model_id, "npz": npz}


def check_header(path: str | Path, found: dict, expected: dict) -> None:
    """Raise :class:`AnswerLabelError` naming the file, the field and both values when
    ``found`` (a file's header) differs from ``expected`` in a :data:`HEADER_FIELDS` field."""
    for f in HEADER_FIELDS:
        if found.get(f) != expected.get(f):
            raise AnswerLabelError(
                f"{path}: its header's field {f!r} is {found.get(f)!r}, this run's is "
                f"{expected.get(f)!r}; these labels belong to another setup (use another "
                "--out file, or the trajectories/command/reader they were made with)")


class _Writer:
    """The labels file opened for appending: locked, header checked (or written), a
    truncated last line cut off. ``done``: the qids whose latest row is a label."""

    def __init__(self, path: Path, header: dict) -> None:
        self.path, self.header = Path(path), header
        self.fh = None
        self.done: set[str] = set()
        self.dropped: str | None = None

    def __enter__(self) -> "_Writer":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+b")
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    raise LockedError(f"{self.path}: another process is labelling into this "
                                      "file; wait for it or use another --out") from None
            fh.seek(0)
            lf = parse_label_bytes(fh.read(), self.path)
            if lf.header is not None:  # checked before anything is changed
                check_header(self.path, lf.header, self.header)
            if lf.dropped:
                _note(lf.dropped)
                self.dropped = lf.dropped
                fh.truncate(lf.keep)
            if lf.needs_newline:
                self._write(b"\n", fh)
            if lf.header is None:
                self._write_obj(fh, self.header)
            self.done = lf.done
        except BaseException:
            fh.close()
            raise
        self.fh = fh
        return self

    def _write(self, data: bytes, fh=None) -> None:
        fh = fh or self.fh
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())  # a killed run loses at most the question in progress

    def _write_obj(self, fh, obj: dict) -> None:
        self._write((json.dumps(_clean(obj), ensure_ascii=False, allow_nan=False) +
                     "\n").encode("utf-8"), fh)

    def append(self, row: dict) -> None:
        self._write_obj(self.fh, row)

    def __exit__(self, *exc) -> None:
        if self.fh is not None:
            self.fh.close()  # drops the lock
            self.fh = None


def _clean(o: Any) -> Any:
    """JSON-ready: NaN as None, numpy scalars as Python numbers."""
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if isinstance(o, (np.floating, float)):
        return None if not math.isfinite(float(o)) else float(o)
    if isinstance(o, np.integer):
        return int(o)
    return o


# -- what to label -----------------------------------------------------------------------------
def _by_question(data: TrainingData) -> dict[str, tuple[list[tuple[int, str]],
                                                        list[PrefixSample]]]:
    """{qid: (the chosen (step, action) path in rollout order, the prefixes in order)}."""
    out: dict[str, tuple[list, list]] = {q: ([], []) for q in data.questions}
    for s in data.samples:
        if s.chosen:
            out.setdefault(s.qid, ([], []))[0].append((s.step, s.action))
    for p in data.prefixes:
        out.setdefault(p.qid, ([], []))[1].append(p)
    return out


@dataclass
class LabelPlan:
    """Which questions of a slice a run labels (``todo``, in the file's question order)."""
    todo: list[str]
    prefixes: int  # prefixes of the todo questions (one answer call each)
    in_slice: int
    already_labelled: int  # with finite F1 in the trajectories file (skipped: only_missing)
    in_label_file: int  # rows already written (skipped)
    no_prefixes: int  # never had documents: nothing to label
    redo_truncated: int = 0  # todo questions whose latest row was cut by the time limit
    redo_requested: int = 0  # todo questions asked for with ``redo`` (--redo)

    def as_dict(self) -> dict:
        return {"questions_in_slice": self.in_slice, "to_label": len(self.todo),
                "prefixes_to_label": self.prefixes,
                "skipped_labelled_in_npz": self.already_labelled,
                "skipped_in_label_file": self.in_label_file,
                "skipped_no_prefixes": self.no_prefixes,
                "redo_truncated": self.redo_truncated, "redo_requested": self.redo_requested}


def plan_labels(data: TrainingData, done: Iterable[str] | Mapping[str, dict] = (),
                start: int = 0, stop: int | None = None, only_missing: bool = True,
                redo: Iterable[str] = ()) -> LabelPlan:
    """Questions ``start``..``stop`` (positions in ``data.questions``) that need labels: not
    done in the labels file (``done``: the qids, or :attr:`LabelFile.rows`, whose rows cut by
    the time limit are not done; whatever ``only_missing``), with prefixes, and with
    ``only_missing`` lacking a finite F1 in the trajectories file. ``redo``: questions
    labelled again although done, whatever the slice and ``only_missing`` (an operator's
    explicit request; their new rows win)."""
    n = len(data.questions)
    if not 0 <= start <= n or (stop is not None and stop < start):
        raise ValueError(f"--start {start} / --stop {stop}: the file has {n} questions")
    cut: set[str] = set()
    if isinstance(done, Mapping):
        cut = {q for q, r in done.items() if row_truncated(r)}
    done = set(done) - cut
    redo = set(redo)
    unknown = sorted(redo - set(data.questions))
    if unknown:
        raise ValueError(f"--redo {unknown[0]}: not a question of the trajectories file")
    recs = _by_question(data)
    todo, n_pref, labelled, in_file, empty, n_cut, n_redo = [], 0, 0, 0, 0, 0, 0
    sliced = set(data.questions[start:stop])
    for qid in data.questions:  # in file order; redo questions may lie outside the slice
        if qid not in sliced and qid not in redo:
            continue
        ps = recs[qid][1]
        if not ps:
            if qid in redo:
                raise ValueError(f"--redo {qid}: the question never had documents, so it has "
                                 "no prefixes to label")
            empty += 1
        elif qid in redo:
            todo.append(qid)
            n_pref += len(ps)
            n_redo += 1
        elif qid in done:
            in_file += 1
        elif only_missing and has_answer_f1(ps):
            labelled += 1
        else:
            todo.append(qid)
            n_pref += len(ps)
            n_cut += qid in cut
    return LabelPlan(todo, n_pref, len(sliced), labelled, in_file, empty, n_cut, n_redo)


# -- the replay --------------------------------------------------------------------------------
class _CountingGenerator:
    """The environment's generator, counting the generations the time limit cut. Everything
    else (``option_logprobs``, ``spec``, ``model_id``...) is the wrapped ``inner`` one's, and
    an attribute it lacks stays missing (the sufficiency probe asks for ``option_logprobs``
    with ``getattr``)."""

    def __init__(self, wrapped: Any) -> None:
        self.inner = wrapped
        self.n_truncated = 0

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "n_truncated"):  # not set yet (copy/pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def generate(self, messages: list[dict], max_tokens: int = 64,
                 stop: list[str] | None = None) -> Generation:
        g = self.inner.generate(messages, max_tokens=max_tokens, stop=stop)
        self.n_truncated += bool(getattr(g, "truncated", False))
        return g


def _compare(i: int, state, sr_now: float, stored: Sequence[PrefixSample],
             tol: float, base: Mapping[str, float]) -> dict | None:
    """The first difference between replayed prefix ``i`` (its state features ``base``) and
    the file's, or None."""
    step = len(state.history)
    if i >= len(stored):
        return {"prefix": i, "step": step, "field": "n_prefixes", "npz": len(stored),
                "replay": i + 1}
    p = stored[i]
    if p.step != step:
        return {"prefix": i, "step": step, "field": "step", "npz": p.step, "replay": step}
    vec = np.array([base[n] for n in base], dtype=np.float64)  # as collect_question builds it
    if len(vec) != len(p.features):
        return {"prefix": i, "step": step, "field": "features", "npz": len(p.features),
                "replay": len(vec)}
    for name, a, b in zip(base, p.features, vec):
        if not within_tolerance(a, b, tol):
            return {"prefix": i, "step": step, "field": f"features.{name}", "npz": float(a),
                    "replay": float(b)}
    if not within_tolerance(p.sr_now, sr_now, tol):
        return {"prefix": i, "step": step, "field": "sr_now", "npz": float(p.sr_now),
                "replay": sr_now}
    return None


def replay_question(q: Question, env: Environment, chosen: Sequence[tuple[int, str]],
                    stored: Sequence[PrefixSample], tolerance: float = TOLERANCE) -> dict:
    """One question's row (without ``seconds``): the rollout replayed along its ``chosen``
    (step, action) path, an answer call at every state with documents, each such prefix
    compared with the file's (``stored``). Never raises on a difference: the first one is the
    row's ``mismatch``; an action that is not valid in the replayed state ends the replay.
    ``truncated``: the generations (any call of the replay) cut by the time limit."""
    counter = None
    if env.generator is not None:
        counter = _CountingGenerator(env.generator)
        env = replace(env, generator=counter)
    gold = gold_titles(q)
    state = initial_state(q.question, q.id)
    out: list[dict] = []
    mismatch = None
    k = 0
    while True:
        if state.docs:
            now = sr(state, gold)
            base = state_features(state)
            if mismatch is None:
                mismatch = _compare(len(out), state, now, stored, tolerance, base)
            _, pred, gen = answer(state, env)  # as trajectories.answer_f1, keeping the text
            out.append({"step": len(state.history), "sr_now": now,
                        "f1_now": em_f1(pred, q.answers)[1] if q.answers else math.nan,
                        "answer_tokens": gen.prompt_tokens + gen.completion_tokens,
                        "answer": pred, "tokens": float(state.ledger.tokens),
                        "features": [float(base[n]) for n in base]})
        if k == len(chosen):
            break
        step, action = chosen[k]
        if action not in valid_actions(state, env.config):
            mismatch = mismatch or {"prefix": len(out), "step": len(state.history),
                                    "field": "action", "npz": action, "replay": None}
            break  # applying it would be meaningless (or raise)
        if mismatch is None and step != len(state.history):
            mismatch = {"prefix": len(out), "step": len(state.history), "field": "step",
                        "npz": step, "replay": len(state.history)}
        state = apply_action(state, action, env)
        k += 1
    if mismatch is None and len(out) != len(stored):
        mismatch = {"prefix": len(out), "step": len(state.history), "field": "n_prefixes",
                    "npz": len(stored), "replay": len(out)}
    return {"qid": q.id, "reproduced": mismatch is None,
            "truncated": counter.n_truncated if counter is not None else 0,
            "mismatch": mismatch, "prefixes": out}


def label_questions(data: TrainingData, questions: dict[str, Question], env: Environment,
                    path: str | Path, header: dict, qids: Sequence[str],
                    progress: bool = True, max_unreproduced: int | None = 5,
                    tolerance: float = TOLERANCE, redo: Iterable[str] = ()) -> dict:
    """Replay and label ``qids`` (normally :func:`plan_labels`'s ``todo``) into the labels
    file ``path``, one appended row per question; questions done there are skipped, except
    those in ``redo`` (labelled again: their new row wins). Stops with
    :class:`AnswerLabelError` after ``max_unreproduced`` non-reproduced questions in a row (a
    setup that does not reproduce the trajectories; None or 0: never). Returns a summary."""
    recs = _by_question(data)
    unknown = [q for q in qids if q not in questions]
    if unknown:
        raise ValueError(f"{len(unknown)} question(s) of the trajectories are not among this "
                         f"command's training questions (e.g. {unknown[0]!r})")
    redo = set(redo)
    labelled, flagged, cut, streak = 0, [], [], 0
    t0 = time.perf_counter()
    with _Writer(Path(path), header) as w:
        todo = [q for q in qids if q not in w.done or q in redo]
        bar = tqdm(todo, desc="answer labels", unit="q", disable=not progress)
        for qid in bar:
            t = time.perf_counter()
            chosen, stored = recs[qid]
            row = replay_question(questions[qid], env, chosen, stored, tolerance)
            row["seconds"] = round(time.perf_counter() - t, 2)
            w.append(row)
            labelled += 1
            streak = 0 if row["reproduced"] else streak + 1
            if row["truncated"]:  # machine speed (or a paused run), not the reader
                cut.append(qid)
                _note(f"{path}: question {qid}: {row['truncated']} generation(s) hit the time "
                      "limit; its row is not a label, the next run labels it again")
            if not row["reproduced"]:
                flagged.append({"qid": qid, **row["mismatch"]})
                bar.set_postfix(not_reproduced=len(flagged))
            if max_unreproduced and streak >= max_unreproduced:
                raise AnswerLabelError(
                    f"{path}: the last {streak} questions did not reproduce the saved "
                    f"trajectories (latest: {json.dumps(_clean(flagged[-1]))}); this setup is "
                    "not the one that collected them. Their rows are kept (flagged); pass "
                    "--max-unreproduced 0 to label on regardless")
    return {"labels": str(path), "labelled": labelled, "skipped_in_file": len(qids) - len(todo),
            "not_reproduced": flagged, "truncated": cut, "dropped_line": w.dropped,
            "seconds": round(time.perf_counter() - t0, 1)}


# -- the merge, as the lab reads it ------------------------------------------------------------
def unreproduced_without_states(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The questions whose latest row (``LabelFile.rows``) did not reproduce the file and is
    older than rows keeping the replay's states: relabelled, they count
    (:func:`~dynakrag_lab.studies.answer_labels.files.replayed_path`)."""
    return [q for q, r in rows.items() if not r["reproduced"] and any(
        "features" not in x for x in r["prefixes"])]


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
