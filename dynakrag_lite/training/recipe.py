"""The training recipe of ``python -m dynakrag_lite train``: calibrate the sufficiency signal,
collect trajectories, tune lambda and the veto threshold by cross-validation, fit the policy;
all on the training split.

* :class:`DataOptions`: which questions and which index a run reads (``--data``, the index
  options, the split, ``--offset``/``--limit``); :func:`build_run_setup` builds them as
  :func:`dynakrag_lite.pipeline.build_setup` does and cuts the split. ``train`` and
  ``evaluate`` share it, so a policy is never evaluated on its training questions.
* :class:`TrainingRecipe`: every option of one training run, typed; :func:`train` runs it and
  saves the policy. :func:`training_setup` is its first part (environment and calibrated
  signal), which a process warming the LLM cache for a training run
  (``data_scripts/warm_cache.py train``) must build exactly so.
* ``--save-data`` keeps the trajectories with the settings they were collected under
  (:func:`collection_run`) and the sufficiency calibration states; ``--from-data``
  (:func:`data_from_file`) rebuilds a policy from such a file without a model call, refusing a
  file collected under other settings (:func:`from_data_problems`) and keeping only this
  split's training questions (:func:`split_ids`); with ``--answer-labels FILE`` the answer F1s
  of ``dynakrag_lab/scripts/answer_labels.py`` are merged in first
  (:mod:`.answer_label_merge`), and the policy's meta records the file and its sha256.

Chapters 7-9 build the same pieces by hand; chapter 13 describes the tuning.
"""
from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import pipeline
from ..ann import DEFAULT_EF_SEARCH, DEFAULT_NPROBE
from .concurrency import check_workers, collect_in_parallel
from ..config import ControlConfig
from ..data.schema import Question
from ..data.sources import data_sha256, load_dataset, split_questions
from ..policy import Policy, embedder_key, train_policy
from ..retriever import DEFAULT_EMBEDDER
from ..storage import redact, relative_command, sha256_file
from ..sufficiency import SufficiencySignal
from ..trajectories import TrainingData, collect
from .answer_label_merge import merge_answer_labels
from .calibration import train_signal
from .files import build_calibration, load_training_data_bytes, save_training_data
from .tuning import (CONTINUATION_GRID, GAIN_LAMBDA_GRID, LAMBDA_GRID, VETO_GRID,
                     tune_continuation)

# ControlConfig fields that shape collected trajectories (a --from-data run must match them).
# The compression settings are not among them: compress_answer_evidence runs only after
# stop_answer, which collection never executes.
COLLECTION_CONFIG_FIELDS = ("per_action", "max_docs", "max_steps", "retrieval_cap",
                            "ranking_depth", "doc_chars", "use_sufficiency", "max_bridges",
                            "use_spacy")


@dataclass
class DataOptions:
    """The questions and the index a run reads (the command line's data and split options)."""
    data: str  # a JSONL path or a dataset name
    data_dir: str | None = None
    corpus: str | None = None  # own corpus JSONL (default: pooled from the data)
    embedder: str = DEFAULT_EMBEDDER
    index_dir: str | None = None
    index_factory: str | None = None
    index_mmap: bool = False
    nprobe: int = DEFAULT_NPROBE
    ef_search: int = DEFAULT_EF_SEARCH
    vectors: str | None = None
    split: str = "train"  # train | eval | all
    n_eval: int = 100
    split_seed: int = 0
    offset: int = 0
    limit: int | None = None


def _cut(qs: list, split: str, offset: int | None, limit: int | None) -> list:
    """``qs`` (the ``split`` part) from ``offset``, at most ``limit``; ValueError for an
    offset outside it, or an empty split (a file too small to hold questions out)."""
    if not qs:
        raise ValueError(f"--split {split}: no questions in that part of the file (--n-eval "
                         "holds out at most half of it)")
    offset = offset or 0
    if offset < 0 or (offset and offset >= len(qs)):
        raise ValueError(f"--offset {offset}: the {split} split has {len(qs)} questions")
    qs = qs[offset:]
    return qs[:limit] if limit else qs


def build_run_setup(options: DataOptions, generator: str | None = None,
                    control: dict[str, Any] | None = None,
                    selector: str | Path | None = None
                    ) -> tuple[pipeline.Setup, list[Question]]:
    """(setup, the run's questions): questions, corpus, retriever, generator, the extractive
    compressor of ``selector`` and the train/eval split as
    :func:`~dynakrag_lite.pipeline.build_setup` makes them, the environment's configuration
    ``ControlConfig.for_dataset(dataset, **control)`` when ``control`` is given, and the
    ``split`` part of the questions cut by ``offset`` and ``limit``."""
    o = options
    setup = pipeline.build_setup(o.data, generator=generator, data_dir=o.data_dir,
                                 embedder=o.embedder, n_eval=o.n_eval, split_seed=o.split_seed,
                                 corpus_file=o.corpus, index_dir=o.index_dir,
                                 index_factory=o.index_factory, index_mmap=o.index_mmap,
                                 nprobe=o.nprobe, ef_search=o.ef_search,
                                 vectors_path=o.vectors, selector=selector)
    if control is not None:
        setup.env.config = ControlConfig.for_dataset(setup.dataset, **control)
    if o.split != "all" and o.n_eval > len(setup.eval):  # capped at half: say so
        _note(f"note: --n-eval {o.n_eval} is more than half of the {len(setup.questions)} "
              f"questions of {o.data}; {len(setup.eval)} are held out for evaluation")
    qs = {"train": setup.train, "eval": setup.eval, "all": setup.questions}[o.split]
    return setup, _cut(qs, o.split, o.offset, o.limit)


def split_ids(questions: list[Question], split: str, n_eval: int, split_seed: int,
              offset: int | None, limit: int | None) -> tuple[list[str], list[str]]:
    """(ids of the questions a run with these split options takes, in order; ids of the
    split's evaluation questions): the split build_setup makes, then offset/limit as
    :func:`build_run_setup` cuts it; from the questions alone (no index, no model)."""
    train, evals = split_questions(questions, min(n_eval, len(questions) // 2), split_seed)
    qs = {"train": train, "eval": evals, "all": questions}[split]
    return [q.id for q in _cut(qs, split, offset, limit)], [q.id for q in evals]


@dataclass
class TrainingRecipe:
    """Every option of one training run (the ``train`` command's flags, typed)."""
    data: DataOptions
    generator: str
    out: str | Path
    # ControlConfig.for_dataset keyword arguments (budgets, sufficiency on/off, compressor)
    control: dict[str, Any] = field(default_factory=dict)
    seed: int = 13
    trees: int = 300
    min_leaf: int = 8
    continuation_target: str = "f1"  # f1 | sr | onestep
    continuation_questions: int = 0  # answer calls on the first N questions (0 = all)
    sufficiency_signal: str = "auto"
    sufficiency_rule: str = "youden"
    calibration_questions: int = 100  # questions whose states score the LLM signals (0 = all)
    tune_folds: int = 5  # 0 or 1: no cross-validation
    tune_metric: str | None = None  # f1 | sr (default: f1 for the f1 target, else sr)
    lambdas: list[float] = field(default_factory=list)  # [] = the stop rule's grid
    veto_thresholds: list[float] = field(default_factory=list)  # [] = VETO_GRID
    stop_rule: str = "level"
    # tuning objective: metric - token_price * tokens (0: the metric alone)
    token_price: float = 0.0
    lam: float | None = None  # fixed: no tuning of lambda
    veto_threshold: float | None = None  # fixed: no tuning of the threshold
    save_data: str | Path | None = None  # also write the trajectories here
    from_data: str | Path | None = None  # collect nothing: read them from here
    answer_labels: str | Path | None = None  # with from_data: answer F1s merged in
    workers: int = 1
    argv: list[str] = field(default_factory=list)  # the command line, for the records


def _note(message: str) -> None:
    print(message, file=sys.stderr)


def training_setup(recipe: TrainingRecipe
                   ) -> tuple[pipeline.Setup, list[Question], SufficiencySignal | None]:
    """(setup, training questions, calibrated sufficiency signal or None) of a training run,
    the environment configured with the signal: the trajectories depend on it."""
    check_workers(recipe.workers, recipe.generator)  # from the spec: before any model loads
    setup, train_qs = build_run_setup(recipe.data, recipe.generator, recipe.control)
    signal = None
    if setup.env.config.use_sufficiency:
        signal = train_signal(train_qs, setup.env, recipe.sufficiency_signal,
                              recipe.sufficiency_rule, recipe.calibration_questions or None,
                              seed=recipe.seed, workers=recipe.workers)
        if signal is not None:
            signal.configure(setup.env)
    return setup, train_qs, signal


def collection_run(recipe: TrainingRecipe, dataset: str, config: ControlConfig,
                   generator_model_id: str | None) -> dict:
    """What a training run collects its trajectories under (TrainingData.run, saved with
    --save-data); :func:`from_data_problems` compares a later run's settings with it."""
    r, o = recipe, recipe.data
    return {
        "dataset": dataset, "generator": r.generator,
        "generator_model_id": redact(generator_model_id) if generator_model_id else None,
        "embedder": o.embedder, "doc_chars": config.doc_chars,
        "per_action": config.per_action,
        "config": {f: getattr(config, f) for f in COLLECTION_CONFIG_FIELDS},
        "index_factory": o.index_factory, "nprobe": o.nprobe, "ef_search": o.ef_search,
        "corpus_sha256": sha256_file(o.corpus) if o.corpus else None,
        "data_sha256": data_sha256(o.data, o.data_dir),
        "seed": r.seed, "continuation_target": r.continuation_target,
        "continuation_questions": r.continuation_questions,
        "sufficiency_signal": r.sufficiency_signal if config.use_sufficiency else None,
        "sufficiency_rule": r.sufficiency_rule,
        "calibration_questions": r.calibration_questions,
        "split": {"split": o.split, "n_eval": o.n_eval, "split_seed": o.split_seed,
                  "offset": o.offset, "limit": o.limit},
        "command": relative_command(r.argv)}


def from_data_problems(saved: dict, now: dict, answer_labels: bool = False) -> list[str]:
    """Every setting of ``now`` (this run) that differs from ``saved`` (the file's run), as
    "field: file X, this run Y". The split is not compared (serving another split is the
    point), nor the continuation target (recomputed from stored components) or the command;
    with ``answer_labels`` merged in, nor ``continuation_questions`` (the labels, not the
    collection's answer calls, say which questions carry F1)."""
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


def data_from_file(recipe: TrainingRecipe
                   ) -> tuple[TrainingData, SufficiencySignal | None, str, dict, dict]:
    """(training data, calibrated signal or None, dataset, policy-meta extras, question
    counts) of ``train --from-data``: the file checked against this run's settings and cut to
    this split's training questions (after offset/limit). No index, no generator."""
    o = recipe.data
    path = Path(recipe.from_data)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"--from-data {recipe.from_data}: cannot read it ({e})") from None
    data = load_training_data_bytes(raw, path)  # hash exactly the bytes that are used
    shown = relative_command([str(path)], prefix="")
    if not data.run:
        raise ValueError(f"{shown}: written before train --from-data existed, it lacks the "
                         "'run' metadata (dataset, generator, embedder, doc_chars, "
                         "per_action, seed, ...) needed to check it against this run; "
                         "collect the trajectories again with train --save-data")
    labels = None
    if recipe.answer_labels:  # before the cut: the labels are per question of the file
        data, labels = merge_answer_labels(data, recipe.answer_labels,
                                           npz_sha256=hashlib.sha256(raw).hexdigest())
        labels["file"] = relative_command([str(recipe.answer_labels)], prefix="")
    questions = load_dataset(o.data, data_root=o.data_dir)
    dataset = questions[0].dataset
    config = ControlConfig.for_dataset(dataset, **recipe.control)
    problems = from_data_problems(data.run, collection_run(recipe, dataset, config, None),
                                  answer_labels=labels is not None)
    if problems:
        raise ValueError(f"{shown} was collected under other settings than this run: "
                         + "; ".join(problems) + ". Run with the file's settings or "
                         "collect again (without --from-data)")
    wanted, eval_list = split_ids(questions, o.split, o.n_eval, o.split_seed, o.offset,
                                  o.limit)
    have = set(data.questions)
    want = set(wanted)
    eval_ids = set(eval_list) if o.split == "train" else set()
    kept = [q for q in data.questions if q in want]
    if not kept:
        raise ValueError(f"{shown}: none of its {len(have)} questions is among this run's "
                         f"{len(wanted)} training questions")
    counts = {"in_file": len(have), "kept": len(kept),
              "moved_to_eval": len(have & eval_ids),  # dropped: now evaluation questions
              "not_selected": len(have - want - eval_ids),  # dropped by offset/limit
              "missing": len(want - have)}  # this run's questions the file never collected
    data = data.subset(kept)
    if recipe.continuation_target != data.continuation_target:
        try:  # exact: the stored components give every target the file has answers for
            data.set_continuation_target(recipe.continuation_target)
        except ValueError as e:
            raise ValueError(f"{shown}: field 'continuation_target' is "
                             f"{data.run.get('continuation_target')!r} in the file; "
                             f"{e}") from None
    signal, recalibrated = None, False
    if config.use_sufficiency and recipe.sufficiency_signal != "text":
        table = data.calibration
        if table is None:
            raise ValueError(f"{shown}: --sufficiency-signal {recipe.sufficiency_signal} needs "
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


def _collect(recipe: TrainingRecipe
             ) -> tuple[TrainingData, SufficiencySignal | None, str, ControlConfig, str | None,
                        list[str]]:
    """Calibrate the signal and collect the trajectories (saved with --save-data): (data,
    signal, dataset, config, generator model id, training question ids)."""
    setup, train_qs, signal = training_setup(recipe)
    env = setup.env
    model_id = env.generator.model_id
    calibration = None
    if recipe.save_data and signal is not None:
        # The calibration states, so that --from-data can recalibrate on any subset of these
        # questions (retrieval only; the LLM signals' calls are cache hits).
        calibration = build_calibration(
            train_qs, env, recipe.sufficiency_signal, recipe.sufficiency_rule,
            recipe.calibration_questions or None, seed=recipe.seed, live_signal=signal)
        if not calibration.reproduced:
            _note("warning: the saved calibration states do not reproduce this run's "
                  "sufficiency signal; --from-data will refuse them")
    data = collect(train_qs, env, seed=recipe.seed, continuation=recipe.continuation_target,
                   answer_questions=recipe.continuation_questions or None,
                   runner=collect_in_parallel(recipe.workers, env.generator))
    data.run = collection_run(recipe, setup.dataset, env.config, model_id)
    data.calibration = calibration
    if recipe.save_data:
        save_training_data(data, recipe.save_data)
    return data, signal, setup.dataset, env.config, model_id, [q.id for q in train_qs]


def _read(recipe: TrainingRecipe
          ) -> tuple[TrainingData, SufficiencySignal | None, str, ControlConfig, str | None,
                     list[str], dict]:
    """:func:`data_from_file` with its notes on stderr: as :func:`_collect`, plus the extras
    the policy's meta records."""
    data, signal, dataset, extra, counts = data_from_file(recipe)
    if counts["moved_to_eval"] or counts["missing"]:
        _note(f"note: {counts['moved_to_eval']} question(s) of {extra['from_data']} are "
              f"evaluation questions of this split and were dropped; {counts['missing']} "
              "training question(s) of this split have no trajectories there")
    if extra["sufficiency_recalibrated"]:
        _note("note: the sufficiency signal was recalibrated on the kept questions; the "
              "trajectories were collected under the file's signal "
              f"({(data.calibration.signal_info or {}).get('kind')})")
    config = ControlConfig.for_dataset(dataset, **recipe.control)
    return (data, signal, dataset, config, data.run.get("generator_model_id"),
            list(data.questions), extra)


def train(recipe: TrainingRecipe) -> tuple[Policy, Path, dict]:
    """Calibrate the sufficiency signal, collect trajectories (or read them, ``from_data``),
    tune lambda and the veto threshold by cross-validation (all on the training split), fit
    and save the policy to ``recipe.out``. Returns (policy, its path, the run's report)."""
    check_workers(recipe.workers, recipe.generator)  # from the spec: before anything loads
    if recipe.answer_labels and not recipe.from_data:
        raise ValueError("--answer-labels adds answer F1s to saved trajectories: it needs "
                         "--from-data FILE.npz")
    extra: dict = {}
    if recipe.from_data:
        data, signal, dataset, cfg, model_id, train_ids, extra = _read(recipe)
    else:
        data, signal, dataset, cfg, model_id, train_ids = _collect(recipe)
    # Under the continuation rule lambda only ranks acquisitions, which a replay along the
    # collected paths cannot score: it stays 0 unless given; tau gets its own grid.
    grid = {"gain": GAIN_LAMBDA_GRID, "continuation": (0.0,)}.get(recipe.stop_rule, LAMBDA_GRID)
    lams = [recipe.lam] if recipe.lam is not None else (list(recipe.lambdas) or list(grid))
    thrs = [recipe.veto_threshold] if recipe.veto_threshold is not None else \
        (list(recipe.veto_thresholds) or list(CONTINUATION_GRID if recipe.stop_rule ==
                                              "continuation" else VETO_GRID))
    lam, thr, tuning = lams[0], (thrs[0] if len(thrs) == 1 else 0.05), None
    if recipe.tune_folds >= 2 and len(train_ids) >= 2 and len(lams) * len(thrs) > 1:
        metric = recipe.tune_metric or ("f1" if recipe.continuation_target == "f1" else "sr")
        lam, thr, frame = tune_continuation(
            data, lams, thrs, folds=recipe.tune_folds, metric=metric, seed=recipe.seed,
            n_estimators=recipe.trees, min_samples_leaf=recipe.min_leaf,
            stop_rule=recipe.stop_rule, token_price=recipe.token_price)
        tuning = {"metric": metric, "folds": recipe.tune_folds,
                  "token_price": recipe.token_price,
                  "grid": frame.round(6).to_dict("records")}
    pol = train_policy(data, n_estimators=recipe.trees, min_samples_leaf=recipe.min_leaf,
                       seed=recipe.seed, lam=lam, veto_threshold=thr, sufficiency=signal,
                       stop_rule=recipe.stop_rule, meta={
                           "dataset": dataset, "generator": recipe.generator,
                           "generator_model_id": model_id,
                           "embedder": recipe.data.embedder, "doc_chars": cfg.doc_chars,
                           "per_action": cfg.per_action,
                           "train_ids": train_ids,
                           "action_gains": data.action_gains(),
                           "tuning": tuning, **extra,
                           "command": relative_command(recipe.argv)})
    path = pol.save(recipe.out)
    report = {"policy": str(path), "questions": len(train_ids),
              "samples": pol.meta["n_samples"], "prefixes": pol.meta["n_prefixes"],
              "continuation_target": recipe.continuation_target,
              "sufficiency": None if signal is None else
              {"kind": signal.kind, "threshold": signal.threshold, "gates": signal.gates},
              "lam": lam, "veto_threshold": thr, "stop_rule": recipe.stop_rule,
              **({"from_data": extra["from_data"],
                  "from_data_questions": extra["from_data_questions"]}
                 if recipe.from_data else {}),
              **({"answer_labels": extra["answer_labels"]} if "answer_labels" in extra else {})}
    return pol, path, report
