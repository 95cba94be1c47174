"""Train a DynaKRAG policy on a benchmark's train split and evaluate every method and ablation
on its held-out split, all through the public CLI, so each result folder records the exact
command that made it. Resumable: re-running skips finished questions (and a trained policy).

    python data_scripts/main_experiment.py --config results/configs/<experiment>.toml \
        [--runs dynakrag,fixed_k3,...] [--jobs 2]
    python data_scripts/main_experiment.py --dataset hotpotqa --generator qwen2.5-coder-0.5b \
        --train-limit 120 --eval-limit 40 [--runs dynakrag,fixed_k,...] [--jobs 2]

Settings come from the config (results/configs/base.toml without --config: the named runs,
the training settings, the folders; see dynakrag_lite/experiments/configs.py); a flag given
here replaces the config's experiment-wide setting of the same name (a run's own settings
stay). Each committed experiment has its config, which makes the commands its runs record.

Diagnostic runs on training questions the policy was not trained on (e.g. questions 301-330
of the training split, read by results/README.md's cost plan and the reader-stop study):

    python data_scripts/main_experiment.py --dataset hotpotqa --generator qwen2.5-coder-0.5b \
        --split train --offset 300 --eval-limit 30 --runs ircot,self_ask --compressor llm

Results: results/policies/<dataset>-<generator>.joblib (with its trajectories in
results/trajectories/<dataset>-<generator>.npz) and
results/experiments/<dataset>/<generator>/<run>/{predictions.jsonl,summary.json,run.json}.

The policy is trained with the settings of the committed policies (base.toml's ``[train]``:
``--continuation-questions 80 --sufficiency-signal learned``; change them with the flags of
the same names). Training a 1.5B policy takes several CPU hours and is not resumable by rows:
it resumes through the LLM call cache, which replays the questions already collected. To carry
an unfinished training run to another machine, snapshot its calls into results/llm_cache/ (a
few MB, kept in git):

    python -m dynakrag_lite cache merge ~/.cache/dynakrag_lite/llm_calls.sqlite \
        results/llm_cache/train-<dataset>-<generator>.sqlite --vacuum

This script merges that file (when present) into the active cache before it trains, so the
next run replays what was collected and goes on live from there.
Every command runs from the project folder with relative paths (``--data-dir`` too, never
resolved through a symlink: ``../shared/data`` stays that), so the commands recorded in the
results can be pasted back on any machine. A run folder refuses a resume with another setup
(see dynakrag_lite/experiments/run.py); questions that failed are retried by re-running.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import threading
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dynakrag_lite.experiments.cli import build_parser  # noqa: E402
from dynakrag_lite.experiments.configs import (CONTROLLERS, Config, ConfigError,  # noqa: E402
                                               evaluate_argv, to_flags)
from dynakrag_lite.experiments.maintenance import merge_cache  # noqa: E402
from dynakrag_lite.generators.cache import default_cache_path  # noqa: E402
from dynakrag_lite.storage import relative_command, relative_path  # noqa: E402
from dynakrag_lite.sufficiency import SIGNAL_CHOICES  # noqa: E402

BASE_CONFIG = ROOT / "results" / "configs" / "base.toml"
VARIANT_LOCK = threading.Lock()
PARSER = build_parser()  # the CLI's options: what a config's keys are checked against


def rel(path: str | os.PathLike) -> str:
    """``path`` relative to the project folder (the commands run there), so that the commands
    recorded in results/ carry no machine's absolute paths. Symlinks are not resolved: a
    ``../shared`` that links elsewhere is recorded as ``../shared``, which pastes anywhere."""
    return relative_path(path, ROOT)


def run(args: list[str], log: Path) -> int:
    """``python -m dynakrag_lite <args>`` from the project folder; ``args`` hold relative
    paths only. The command is printed as it will be recorded."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print("$", relative_command(args, cwd=ROOT), flush=True)
    with open(log, "a") as fh:
        return subprocess.call([sys.executable, "-m", "dynakrag_lite"] + args, cwd=ROOT,
                               stdout=fh, stderr=subprocess.STDOUT)


def training_cache_snapshot(dataset: str, generator: str) -> Path:
    """The committed snapshot of an unfinished training run's LLM calls (module docstring)."""
    return ROOT / "results" / "llm_cache" / f"train-{dataset}-{generator}.sqlite"


def import_training_cache(dataset: str, generator: str) -> int:
    """Merge the committed snapshot of an unfinished training run (if any) into the active
    LLM cache, so that training replays the questions it collected elsewhere. Only missing
    keys are added; returns how many."""
    snap = training_cache_snapshot(dataset, generator)
    if not snap.exists():
        return 0
    added = merge_cache(snap, default_cache_path())
    print(f"{added} calls of {rel(snap)} merged into the LLM cache {default_cache_path()}",
          flush=True)
    return added


def train_command(config: Config, settings: dict, origin: dict,
                  variant: str | None = None) -> list[str]:
    """The ``train`` command of the policy ``settings["policy"]`` (its config's ``[train]``):
    the main policy collects and saves its trajectories; a variant (``[variants.SUFFIX]``) is
    built from them, without a model call."""
    data = {k: settings[k] for k in ("data", "data_dir", "n_eval") if k in settings}
    train, vflags, origin = dict(settings["train"]), [], dict(origin)
    if variant:
        own, own_origin = config.table("variants", variant)
        if not own:
            raise ConfigError(f"{config.path}: no [variants.{variant}] table (nor in its base)")
        for k in [k for k in own if k in train]:  # the variant's own [train] values
            train[k], origin[f"train.{k}"] = own.pop(k), own_origin[k]
        train["from_data"] = train.pop("save_data")  # after the train settings, as recorded
        vflags = to_flags(own, own_origin, PARSER, "train")
    policy = {"generator": settings["policy_generator"], "out": settings["policy"]}
    limit = {"limit": train.pop("limit")}
    return ["train", *to_flags(data, origin, PARSER, "train"),  # the recorded order
            *to_flags(policy, origin, PARSER, "train"),
            *to_flags(limit, origin, PARSER, "train", prefix="train."), *vflags,
            *to_flags(train, origin, PARSER, "train", prefix="train.")]


def overrides_of(args: argparse.Namespace) -> tuple[dict, dict]:
    """The flags given, as settings: (experiment-wide, [train])."""
    top = {"data": args.dataset, "generator": args.generator,
           "policy_generator": args.policy_generator, "limit": args.eval_limit,
           "n_eval": args.n_eval, "split": args.split, "offset": args.offset,
           "data_dir": rel(args.data_dir) if args.data_dir else None,
           "out_root": args.out_root or ("results/diagnostics/train-split"
                                         if args.split == "train" and not args.config
                                         else None),
           "selector": rel(args.selector) if args.selector else None,
           "compressor": args.compressor}
    train = {"limit": args.train_limit, "continuation_questions": args.continuation_questions,
             "sufficiency_signal": args.sufficiency_signal}
    return ({k: v for k, v in top.items() if v is not None},
            {k: v for k, v in train.items() if v is not None})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=None, metavar="FILE.toml",
                    help="the experiment (results/configs/<name>.toml; default: base.toml, "
                    "with the flags below)")
    ap.add_argument("--dataset", default=None, help="the config's data (base: hotpotqa)")
    ap.add_argument("--generator", default=None)
    ap.add_argument("--policy-generator", default=None,
                    help="use the policy trained with this generator (generator transfer)")
    ap.add_argument("--train-limit", type=int, default=None)
    ap.add_argument("--eval-limit", type=int, default=None)
    ap.add_argument("--runs", default=None,
                    help="comma-separated (default: the config's runs)")
    ap.add_argument("--jobs", type=int, default=1, help="evaluations run in parallel")
    ap.add_argument("--continuation-questions", type=int, default=None,
                    help="training: answer calls on the first N training questions (the "
                    "committed policies: 80; 0 = all, several times the cost)")
    ap.add_argument("--sufficiency-signal", default=None, choices=SIGNAL_CHOICES,
                    help="training: the sufficiency signal to calibrate (the committed "
                    "policies use learned)")
    ap.add_argument("--n-eval", type=int, default=None,
                    help="questions held out for evaluation (the split; policy training "
                    "uses the rest). 2WikiMultiHopQA has 439 questions and MuSiQue 200 in "
                    "../shared/data, so 150 held out leaves 289 and 50 for training")
    ap.add_argument("--split", choices=("eval", "train"), default=None,
                    help="train: diagnostic runs on training questions the policy did not see "
                    "(with --offset), written under results/diagnostics/train-split/")
    ap.add_argument("--offset", type=int, default=None,
                    help="skip the first M questions of the split (--split train: at least "
                    "the policy's training questions)")
    ap.add_argument("--data-dir", default=os.environ.get("DYNAKRAG_DATA_DIR"),
                    help="default: $DYNAKRAG_DATA_DIR, else the config's (../shared/data)")
    ap.add_argument("--out-root", default=None, metavar="FOLDER",
                    help="where <dataset>/<generator>/<run> folders go (default: the config's; "
                    "results/experiments, or results/diagnostics/train-split with --split "
                    "train)")
    ap.add_argument("--selector", default=None, metavar="FILE.joblib",
                    help="the extractive compressor's sentence selector (default: results/"
                    "selectors/<dataset>-sentence-selector.joblib)")
    ap.add_argument("--compressor", choices=("extractive", "llm"), default=None,
                    help="terminal compression of the controller runs (dynakrag, uniform, "
                    "oracle); extractive needs results/selectors/<dataset>-sentence-selector"
                    ".joblib (python -m dynakrag_lab.studies.selector builds it)")
    args = ap.parse_args()
    try:
        return experiment(args)
    except ConfigError as e:
        raise SystemExit(f"error: {e}")


def experiment(args: argparse.Namespace) -> int:
    """The runs of ``args`` (main's flags)."""
    config = Config.load(args.config or BASE_CONFIG)
    top, train_over = overrides_of(args)
    runs = [r for r in args.runs.split(",") if r] if args.runs else config.runs
    defined = config.table("runs")[0]  # the config's runs and its base's
    unknown = [r for r in runs if r not in defined]
    if unknown:
        raise SystemExit(f"unknown run(s) {unknown}; choose from "
                         f"{', '.join(defined)}")

    def settings(run: str | None) -> tuple[dict, dict]:
        s, origin = config.settings(run, top)
        s["train"].update(train_over)
        origin.update({f"train.{k}": "the command line" for k in train_over})
        return s, origin

    exp, exp_origin = settings(None)
    policy = ROOT / exp["policy"]
    transfer = exp["policy_generator"] != exp["generator"]
    logs = ROOT / "runs" / "logs"
    controllers = [r for r in runs if settings(r)[0].get("method") in CONTROLLERS]
    if controllers and not policy.exists():
        if transfer:
            raise SystemExit(f"{exp['policy']} missing: train it with --generator "
                             f"{exp['policy_generator']} first")
        import_training_cache(exp["data"], exp["generator"])
        rc = run(train_command(config, exp, exp_origin),
                 logs / f"train-{exp['data']}-{exp['generator']}.log")
        if rc:
            return rc
    for selector in {s["selector"] for s in map(lambda r: settings(r)[0], controllers)
                     if s["compressor"] == "extractive"}:
        if not (ROOT / selector).exists():
            raise SystemExit(f"{selector} missing: build it with python -m "
                             "dynakrag_lab.studies.selector, or pass --compressor llm")

    def one(name: str) -> int:
        s, origin = settings(name)
        if s.get("method") in CONTROLLERS and s["policy_suffix"] and \
                not (ROOT / s["policy"]).exists():
            train = train_command(config, s, origin, variant=s["policy_suffix"])
            saved = s["train"]["save_data"]
            if not (ROOT / saved).exists():
                print(f"{s['policy']} missing: train it with python -m dynakrag_lite "
                      + " ".join(train), file=sys.stderr)
                return 2
            # from the saved trajectories: no model call, no index
            with VARIANT_LOCK:  # parallel runs of one variant build it once
                if not (ROOT / s["policy"]).exists():
                    rc = run(train, logs / f"train-{s['data']}-{s['policy_generator']}"
                             f"{s['policy_suffix']}.log")
                    if rc:
                        return rc
        return run(evaluate_argv(s, origin, PARSER),
                   logs / f"eval-{s['data']}-{s['reader']}-{name}.log")

    # Each run has its own folder (and lock), so parallel jobs never write one file.
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        codes = list(pool.map(one, runs))
    return max(codes, default=0)


if __name__ == "__main__":
    raise SystemExit(main())
