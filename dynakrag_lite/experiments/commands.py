"""What the ``train`` and ``evaluate`` commands run, built from their parsed arguments with
every check made first, before anything is indexed, loaded or written (the command line that
parses and reports is :mod:`dynakrag_lite.experiments.cli`; data_scripts/warm_cache.py builds
the same setups to warm a run's LLM calls)."""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from ..config import Environment, RunSettings
from ..data.schema import Question
from ..data.sources import data_sha256
from ..demonstrations import Demonstrations, build_ircot_demos
from ..pipeline import run_setup
from ..policy import Policy, check_policy, training_overlap
from ..storage import redact, relative_command
from ..training.concurrency import check_workers
from .artifacts import default_policy_path, display_path
from .fingerprint import run_fingerprint
from .folder import output_problem
from .run import evaluate
from .selection import selection_of


def check_settings(s: RunSettings) -> None:
    """Flag combinations that cannot run, refused before anything is indexed or loaded."""
    check_workers(s.workers, s.generator)  # from the spec
    if s.compressor == "extractive" and not s.selector:
        raise ValueError("--compressor extractive needs --selector FILE (a sentence selector, "
                         "e.g. results/selectors/hotpotqa-sentence-selector.joblib, built by "
                         "python -m dynakrag_lab.studies.selector)")
    if s.answer_docs_up_to < 0:
        raise ValueError(f"--answer-docs-up-to {s.answer_docs_up_to}: a number of documents, "
                         "0 or more")
    if s.selector and not Path(s.selector).is_file():
        raise ValueError(f"--selector {s.selector}: no such file")
    if s.policy and s.method not in ("dynakrag", "uniform", "oracle"):
        raise ValueError(f"--policy is for dynakrag, uniform and oracle, not {s.method}")
    if s.stop_after is not None and s.method not in ("dynakrag", "uniform"):
        raise ValueError(f"--stop-after is for dynakrag and uniform, not {s.method}")
    if s.policy_train_questions and s.split != "train":
        raise ValueError("--policy-train-questions is for --split train diagnostics; an "
                         "evaluation never runs on the policy's training questions")


def check_out(out: str | Path, folder: bool) -> None:
    """ValueError naming --out when nothing can be written there (folder.output_problem)."""
    problem = output_problem(out, folder=folder)
    if problem:
        raise ValueError(f"--out {out}: {problem}")


def check_selector(env: Environment, selector: str | None, eval_ids: list[str]) -> None:
    """Refuse the sentence selector of ``env.compressor`` (loaded from ``selector``) when it
    was trained on any evaluated question, as check_policy does for a policy."""
    if env.compressor is None:
        return
    train_ids = set(map(str, env.compressor.selector.meta.get("train_ids") or ()))
    overlap = [i for i in dict.fromkeys(map(str, eval_ids)) if i in train_ids]
    if overlap:
        raise ValueError(f"--selector {selector}: {len(overlap)} evaluation question(s) "
                         f"were among its training questions (e.g. {overlap[0]!r}); build a "
                         "selector on this split's training questions (python -m "
                         "dynakrag_lab.studies.selector --n-eval N)")


def training_recipe(args: argparse.Namespace) -> RunSettings:
    """The settings of a ``train`` command (its parsed ``args``), its flags checked first
    (also what data_scripts/warm_cache.py train builds from)."""
    s = RunSettings.from_args(args)
    check_settings(s)
    if s.unseen_by_selector:  # training takes its questions by split_ids, not run_setup
        raise ValueError("--unseen-by-selector is for evaluate, not train")
    check_out(s.out, folder=False)  # the policy file: before hours of collection
    return s


@dataclass
class EvaluationSetup:
    """What an ``evaluate`` command runs (:func:`evaluation_setup`): its settings, questions,
    run folder and what was built from them; ``extra`` goes into the summary."""
    settings: RunSettings
    questions: list[Question]
    out: Path
    env: Environment
    dataset: str
    policy: Policy | None
    demos: Demonstrations | None
    extra: dict
    data_sha256: str | None

    @property
    def policy_sha256(self) -> str | None:
        return self.extra["policy"]["sha256"] if "policy" in self.extra else None

    @property
    def run_info(self) -> dict:
        """The summary's ``"run"`` block: the command, the generator, the environment's
        config."""
        return {"command": relative_command(self.settings.argv),
                "generator_model_id": redact(self.env.generator.model_id),
                "config": dict(self.env.config.__dict__)}

    def fingerprint(self) -> dict:
        """The fingerprint the run records in ``out/run.json``."""
        return run_fingerprint(self.settings, self.env, policy=self.policy,
                               policy_sha256=self.policy_sha256, data_sha256=self.data_sha256,
                               demos=self.demos, questions=self.questions)

    def run(self, questions=None, out: str | Path | None = None,
            run_info: dict | None = None) -> dict:
        """:func:`experiments.run.evaluate` of this setup, on ``questions`` into ``out`` with
        ``run_info`` when given (a subset makes the whole run's calls for those questions:
        every choice is seeded per question)."""
        return evaluate(self.questions if questions is None else list(questions),
                        self.settings, self.env, self.out if out is None else Path(out),
                        self.policy, self.dataset, run_info=run_info or self.run_info,
                        data_sha256=self.data_sha256, policy_sha256=self.policy_sha256,
                        summary_extra=self.extra, demos=self.demos,
                        # which questions: compared on resume, apart from the fingerprint
                        selection=selection_of(self.settings))


def evaluation_setup(args: argparse.Namespace) -> EvaluationSetup:
    """The settings, questions, folder and setup of an ``evaluate`` command (its parsed
    ``args``), every check made: what :func:`cmd_evaluate` runs, and what a process warming
    the LLM cache for that run (data_scripts/warm_cache.py evaluate) must build."""
    s = RunSettings.from_args(args)
    check_settings(s)
    if s.out:  # before anything is indexed or loaded (the default folder: below)
        check_out(s.out, folder=True)
    policy, path = None, None
    if s.policy:  # fail fast, before indexing anything
        path = Path(s.policy)
        policy = Policy.load(path)
    setup, eval_qs = run_setup(s)
    dataset, env = setup.dataset, setup.env
    if s.method == "dynakrag" and policy is None:
        path = default_policy_path(dataset, s.generator)
        policy = Policy.load(path)
    check_selector(env, s.selector, [q.id for q in eval_qs])
    extra = {}
    if env.compressor is not None:  # what the run's evidence lines depend on
        extra["selector"] = {"path": display_path(s.selector),
                             "sha256": env.compressor.selector.sha256}
    if policy is not None:
        ids = [q.id for q in eval_qs]
        check_policy(policy, embedder=s.embedder, doc_chars=env.config.doc_chars,
                     per_action=env.config.per_action,
                     eval_ids=() if s.policy_train_questions else ids)
        # the path as the project knows it (results/policies/...), from any working directory
        extra["policy"] = {**policy.provenance(), "path": display_path(path)}
        if s.policy_train_questions:  # in-sample for the policy: the record says how many
            extra["policy"]["training_questions_run"] = len(training_overlap(policy, ids))
        trained_on = policy.meta.get("dataset")
        if trained_on and trained_on != dataset:  # allowed (a transfer), but never silently
            extra["warnings"] = [f"the policy {display_path(path)} was trained on dataset "
                                 f"{trained_on!r}; this run evaluates dataset {dataset!r}"]
            print(f"warning: {extra['warnings'][0]}", file=sys.stderr)
        # Before the fingerprint. uniform and oracle take only the signal, so that every
        # controller sees the same sufficiency verdicts and differs only in how it chooses.
        policy.configure(env, s)
        if s.method != "dynakrag":
            extra["policy"]["used_for"] = "sufficiency signal only"
            policy = None
    out = Path(s.out or f"runs/{dataset}-{s.method}")
    check_out(out, folder=True)
    demos = None
    if s.method == "ircot":  # few-shot from training questions, never an evaluated one
        evaluated = {q.id for q in eval_qs}
        demos = build_ircot_demos([q for q in setup.train if q.id not in evaluated],
                                  seed=s.split_seed, eval_ids=[q.id for q in eval_qs])
        extra["ircot_demos"] = sorted(demos.ids)
    return EvaluationSetup(s, list(eval_qs), out, env, dataset, policy, demos, extra,
                           data_sha256(s.data, s.data_dir))
