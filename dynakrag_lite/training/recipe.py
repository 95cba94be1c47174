"""The training recipe of ``python -m dynakrag_lite train``: calibrate the sufficiency signal,
collect trajectories, tune lambda and the veto threshold by cross-validation, fit the policy;
all on the training split.

The run's :class:`~dynakrag_lite.config.RunSettings` are its recipe: :func:`train` runs them;
:func:`training_setup` is its first part, which ``data_scripts/warm_cache.py train`` builds
exactly so. ``--save-data`` keeps the trajectories with their settings and the calibration
states; ``--from-data`` (:func:`data_from_file`) rebuilds a policy from such a file without a
model call, refusing one collected under other settings, after an optional ``relabel`` step.
Chapters 7-9 build the same pieces by hand.
"""
from __future__ import annotations

import hashlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable

from .. import pipeline
from .concurrency import check_workers, collect_in_parallel
from ..config import ControlConfig, RunSettings
from ..data.schema import Question
from ..data.sources import data_sha256, load_dataset
from ..policy import Policy, embedder_key, train_policy
from ..storage import redact, relative_command, sha256_file
from ..sufficiency import SufficiencySignal
from ..trajectories import TrainingData, collect
from .calibration import train_signal
from .files import build_calibration, load_training_data_bytes, save_training_data
from .tuning import (CONTINUATION_GRID, GAIN_LAMBDA_GRID, LAMBDA_GRID, VETO_GRID,
                     tune_continuation)

# ControlConfig fields that shape collected trajectories (a --from-data run must match them;
# compression is not among them: collection never executes stop_answer).
COLLECTION_CONFIG_FIELDS = ("per_action", "max_docs", "max_steps", "retrieval_cap",
                            "ranking_depth", "doc_chars", "use_sufficiency", "max_bridges",
                            "use_spacy")
# (data read by --from-data, that file's sha256) -> (data with answer F1s added, what the
# policy's meta records under "answer_labels")
Relabel = Callable[[TrainingData, str], tuple[TrainingData, dict]]


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def training_setup(s: RunSettings
                   ) -> tuple[pipeline.Setup, list[Question], SufficiencySignal | None]:
    """(setup, training questions, calibrated sufficiency signal or None) of a training run,
    the environment configured with the signal: the trajectories depend on it."""
    check_workers(s.workers, s.generator)  # from the spec: before any model loads
    # collection never compresses (it never executes stop_answer): no selector to load
    setup, train_qs = pipeline.run_setup(replace(s, selector=None))
    signal = None
    if setup.env.config.use_sufficiency:
        signal = train_signal(train_qs, setup.env, s.sufficiency_signal, s.sufficiency_rule,
                              s.calibration_questions or None, seed=s.seed, workers=s.workers)
        if signal is not None:
            signal.configure(setup.env)
    return setup, train_qs, signal


def collection_run(s: RunSettings, dataset: str, config: ControlConfig,
                   generator_model_id: str | None) -> dict:
    """What a training run collects its trajectories under (TrainingData.run, saved with
    --save-data); :func:`from_data_problems` compares a later run's settings with it."""
    return {
        "dataset": dataset, "generator": s.generator,
        "generator_model_id": redact(generator_model_id) if generator_model_id else None,
        "embedder": s.embedder, "doc_chars": config.doc_chars,
        "per_action": config.per_action,
        "config": {f: getattr(config, f) for f in COLLECTION_CONFIG_FIELDS},
        "index_factory": s.index_factory, "nprobe": s.nprobe, "ef_search": s.ef_search,
        "corpus_sha256": sha256_file(s.corpus) if s.corpus else None,
        "data_sha256": data_sha256(s.data, s.data_dir),
        "seed": s.seed, "continuation_target": s.continuation_target,
        "continuation_questions": s.continuation_questions,
        "sufficiency_signal": s.sufficiency_signal if config.use_sufficiency else None,
        "sufficiency_rule": s.sufficiency_rule,
        "calibration_questions": s.calibration_questions,
        "split": {"split": s.split, "n_eval": s.n_eval, "split_seed": s.split_seed,
                  "offset": s.offset, "limit": s.limit},
        "command": relative_command(s.argv)}


def from_data_problems(saved: dict, now: dict, answer_labels: bool = False) -> list[str]:
    """Every setting of ``now`` (this run) that differs from ``saved`` (the file's run), as
    "field: file X, this run Y". Not compared: the split, the continuation target (recomputed)
    and the command; with ``answer_labels`` merged in, ``continuation_questions``."""
    keys = ["dataset", "generator", "embedder", "doc_chars", "per_action", "index_factory",
            "corpus_sha256", "data_sha256", "seed", "sufficiency_signal"]
    if now["index_factory"]:  # search parameters matter for an approximate index only
        keys += ["nprobe", "ef_search"]
    if now["continuation_target"] == "f1" and not answer_labels:  # which carry answer F1s
        keys.append("continuation_questions")
    if now["sufficiency_signal"] not in (None, "text"):  # what the calibration used
        keys += ["sufficiency_rule", "calibration_questions"]
    out = []
    for k in keys:
        a, b = saved.get(k), now.get(k)
        if k == "embedder" and a is not None:
            a, b = embedder_key(str(a)), embedder_key(str(b))
        if a != b:
            out.append(f"{k}: file {saved.get(k)!r}, this run {now.get(k)!r}")
    conf = saved.get("config") or {}
    for k in COLLECTION_CONFIG_FIELDS:
        if k not in ("doc_chars", "per_action") and conf.get(k) != now["config"][k]:
            out.append(f"config.{k}: file {conf.get(k)!r}, this run {now['config'][k]!r}")
    return out


def data_from_file(s: RunSettings, relabel: Relabel | None = None
                   ) -> tuple[TrainingData, SufficiencySignal | None, str, dict, dict]:
    """(training data, calibrated signal or None, dataset, policy-meta extras, question
    counts) of ``train --from-data``: the file checked against this run's settings and cut to
    this split's training questions (after offset/limit). No index, no generator."""
    path = Path(s.from_data)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"--from-data {s.from_data}: cannot read it ({e})") from None
    data = load_training_data_bytes(raw, path)  # hash exactly the bytes that are used
    shown = relative_command([str(path)], prefix="")
    if not data.run:
        raise ValueError(f"{shown}: written before train --from-data existed, it lacks the "
                         "'run' metadata (dataset, generator, embedder, doc_chars, "
                         "per_action, seed, ...) needed to check it against this run; "
                         "collect the trajectories again with train --save-data")
    labels = None
    if relabel is not None:  # before the cut: the labels are per question of the file
        data, labels = relabel(data, hashlib.sha256(raw).hexdigest())
    questions = load_dataset(s.data, data_root=s.data_dir)
    dataset = questions[0].dataset
    config = s.control_config(dataset)
    problems = from_data_problems(data.run, collection_run(s, dataset, config, None),
                                  answer_labels=labels is not None)
    if problems:
        raise ValueError(f"{shown} was collected under other settings than this run: "
                         + "; ".join(problems) + ". Run with the file's settings or "
                         "collect again (without --from-data)")
    wanted, eval_list = pipeline.split_ids(questions, s.split, s.n_eval, s.split_seed,
                                           s.offset, s.limit)
    have = set(data.questions)
    want = set(wanted)
    eval_ids = set(eval_list) if s.split == "train" else set()
    kept = [q for q in data.questions if q in want]
    if not kept:
        raise ValueError(f"{shown}: none of its {len(have)} questions is among this run's "
                         f"{len(wanted)} training questions")
    counts = {"in_file": len(have), "kept": len(kept),
              "moved_to_eval": len(have & eval_ids),  # dropped: now evaluation questions
              "not_selected": len(have - want - eval_ids),  # dropped by offset/limit
              "missing": len(want - have)}  # this run's questions the file never collected
    data = data.subset(kept)
    if s.continuation_target != data.continuation_target:
        try:  # exact: the stored components give every target the file has answers for
            data.set_continuation_target(s.continuation_target)
        except ValueError as e:
            raise ValueError(f"{shown}: field 'continuation_target' is "
                             f"{data.run.get('continuation_target')!r} in the file; "
                             f"{e}") from None
    signal, recalibrated = None, False
    if config.use_sufficiency and s.sufficiency_signal != "text":
        table = data.calibration
        if table is None:
            raise ValueError(f"{shown}: --sufficiency-signal {s.sufficiency_signal} needs "
                             "the calibration states, which this file lacks (written before "
                             "train --save-data kept them); collect again with --save-data")
        if table.reproduced is False:
            raise ValueError(f"{shown}: its calibration table did not reproduce the run's "
                             "sufficiency signal when it was written; collect again")
        # On the kept questions only: calibrated on a question now in evaluation, the
        # signal would have seen its gold support.
        signal = table.signal()
        recalibrated = len(kept) < len(have) or table.signal_info != (
            signal.describe() if signal is not None else None)
    extra = {"from_data": shown, "from_data_sha256": hashlib.sha256(raw).hexdigest(),
             "from_data_questions": counts,
             "collection": {k: data.run.get(k) for k in ("command", "split")},
             "sufficiency_recalibrated": recalibrated, "run_metadata_from": "from_data",
             **({"answer_labels": labels} if labels else {})}
    return data, signal, dataset, extra, counts


def _collect(s: RunSettings
             ) -> tuple[TrainingData, SufficiencySignal | None, str, str | None, list[str]]:
    """Calibrate the signal and collect the trajectories (saved with --save-data): (data,
    signal, dataset, generator model id, training question ids)."""
    setup, train_qs, signal = training_setup(s)
    env = setup.env
    model_id = env.generator.model_id
    calibration = None
    if s.save_data and signal is not None:
        # The calibration states, so that --from-data can recalibrate on any subset of these
        # questions (retrieval only; the LLM signals' calls are cache hits).
        calibration = build_calibration(
            train_qs, env, s.sufficiency_signal, s.sufficiency_rule,
            s.calibration_questions or None, seed=s.seed, live_signal=signal)
        if not calibration.reproduced:
            _note("warning: the saved calibration states do not reproduce this run's "
                  "sufficiency signal; --from-data will refuse them")
    data = collect(train_qs, env, seed=s.seed, continuation=s.continuation_target,
                   answer_questions=s.continuation_questions or None,
                   runner=collect_in_parallel(s.workers, env.generator))
    data.run = collection_run(s, setup.dataset, env.config, model_id)
    data.calibration = calibration
    if s.save_data:
        save_training_data(data, s.save_data)
    return data, signal, setup.dataset, model_id, [q.id for q in train_qs]


def _read(s: RunSettings, relabel: Relabel | None = None
          ) -> tuple[TrainingData, SufficiencySignal | None, str, str | None, list[str], dict]:
    """:func:`data_from_file` with its notes on stderr: as :func:`_collect`, plus the extras
    the policy's meta records."""
    data, signal, dataset, extra, counts = data_from_file(s, relabel)
    if counts["moved_to_eval"] or counts["missing"]:
        _note(f"note: {counts['moved_to_eval']} question(s) of {extra['from_data']} are "
              f"evaluation questions of this split and were dropped; {counts['missing']} "
              "training question(s) of this split have no trajectories there")
    if extra["sufficiency_recalibrated"]:
        _note("note: the sufficiency signal was recalibrated on the kept questions; the "
              "trajectories were collected under the file's signal "
              f"({(data.calibration.signal_info or {}).get('kind')})")
    return data, signal, dataset, data.run.get("generator_model_id"), list(data.questions), extra


def train(s: RunSettings, relabel: Relabel | None = None) -> tuple[Policy, Path, dict]:
    """Calibrate the sufficiency signal, collect trajectories (or read them, ``from_data``,
    with ``relabel`` applied), tune lambda and the veto threshold by cross-validation (all on
    the training split), fit and save the policy to ``s.out``. Returns (policy, its path, the
    run's report)."""
    check_workers(s.workers, s.generator)  # from the spec: before anything loads
    if relabel is not None and not s.from_data:
        raise ValueError("relabelling adds answer F1s to saved trajectories: it needs "
                         "--from-data FILE.npz")
    extra: dict = {}
    if s.from_data:
        data, signal, dataset, model_id, train_ids, extra = _read(s, relabel)
    else:
        data, signal, dataset, model_id, train_ids = _collect(s)
    cfg = s.control_config(dataset)
    # Under the continuation rule lambda only ranks acquisitions, which a replay along the
    # collected paths cannot score: it stays 0 unless given; tau gets its own grid.
    grid = {"gain": GAIN_LAMBDA_GRID, "continuation": (0.0,)}.get(s.stop_rule, LAMBDA_GRID)
    lams = [s.lam] if s.lam is not None else (list(s.lambdas) or list(grid))
    thrs = [s.veto_threshold] if s.veto_threshold is not None else \
        (list(s.veto_thresholds) or
         list(CONTINUATION_GRID if s.stop_rule == "continuation" else VETO_GRID))
    lam, thr, tuning = lams[0], (thrs[0] if len(thrs) == 1 else 0.05), None
    if s.tune_folds >= 2 and len(train_ids) >= 2 and len(lams) * len(thrs) > 1:
        metric = s.tune_metric or ("f1" if s.continuation_target == "f1" else "sr")
        lam, thr, frame = tune_continuation(
            data, lams, thrs, folds=s.tune_folds, metric=metric, seed=s.seed,
            n_estimators=s.trees, min_samples_leaf=s.min_leaf, stop_rule=s.stop_rule,
            token_price=s.token_price)
        tuning = {"metric": metric, "folds": s.tune_folds, "token_price": s.token_price,
                  "grid": frame.round(6).to_dict("records")}
    pol = train_policy(data, n_estimators=s.trees, min_samples_leaf=s.min_leaf, seed=s.seed,
                       lam=lam, veto_threshold=thr, sufficiency=signal,
                       stop_rule=s.stop_rule, meta={
                           "dataset": dataset, "generator": s.generator,
                           "generator_model_id": model_id,
                           "embedder": s.embedder, "doc_chars": cfg.doc_chars,
                           "per_action": cfg.per_action,
                           "train_ids": train_ids,
                           "action_gains": data.action_gains(),
                           "tuning": tuning, **extra,
                           "command": relative_command(s.argv)})
    path = pol.save(s.out)
    report = {"policy": str(path), "questions": len(train_ids),
              "samples": pol.meta["n_samples"], "prefixes": pol.meta["n_prefixes"],
              "continuation_target": s.continuation_target,
              "sufficiency": None if signal is None else
              {"kind": signal.kind, "threshold": signal.threshold, "gates": signal.gates},
              "lam": lam, "veto_threshold": thr, "stop_rule": s.stop_rule,
              **({"from_data": extra["from_data"],
                  "from_data_questions": extra["from_data_questions"]}
                 if s.from_data else {}),
              **({"answer_labels": extra["answer_labels"]} if "answer_labels" in extra else {})}
    return pol, path, report
