"""Train a DynaKRAG policy on a benchmark's train split and evaluate every method and ablation
on its held-out split, all through the public CLI, so each result folder records the exact
command that made it. Resumable: re-running skips finished questions (and a trained policy).

    python data_scripts/main_experiment.py --dataset hotpotqa --generator qwen2.5-coder-0.5b \
        --train-limit 120 --eval-limit 40 [--runs dynakrag,fixed_k,...] [--jobs 2]

Diagnostic runs on training questions the policy was not trained on (e.g. questions 301-330
of the training split, read by results/README.md's cost plan and the reader-stop study):

    python data_scripts/main_experiment.py --dataset hotpotqa --generator qwen2.5-coder-0.5b \
        --split train --offset 300 --eval-limit 30 --runs ircot,self_ask --compressor llm

Results: results/policies/<dataset>-<generator>.joblib (with its trajectories in
results/trajectories/<dataset>-<generator>.npz) and
results/experiments/<dataset>/<generator>/<run>/{predictions.jsonl,summary.json,run.json}.

The policy is trained with the settings of the committed policies (``--continuation-questions
80 --sufficiency-signal learned``; change them with the flags of the same names). Training a
1.5B policy takes several CPU hours and is not resumable by rows: it resumes through the LLM
call cache, which replays the questions already collected. To carry an unfinished training run
to another machine, snapshot its calls into results/llm_cache/ (a few MB, kept in git):

    python -m dynakrag_lite cache merge ~/.cache/dynakrag_lite/llm_calls.sqlite \
        results/llm_cache/train-<dataset>-<generator>.sqlite --vacuum

This script merges that file (when present) into the active cache before it trains, so the
next run replays what was collected and goes on live from there.
Every command runs from the project folder with relative paths (``--data-dir`` too), so the
commands recorded in the results can be pasted back on any machine. A run folder refuses a
resume with another setup (see dynakrag_lite/experiments/run.py); questions that failed are
retried by re-running.
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
from dynakrag_lite.experiments.maintenance import merge_cache  # noqa: E402
from dynakrag_lite.generators.cache import default_cache_path  # noqa: E402
from dynakrag_lite.experiments.artifacts import (POLICY_VARIANT_SUFFIXES,  # noqa: E402
                                                 policy_file_name)
from dynakrag_lite.storage import relative_command  # noqa: E402
from dynakrag_lite.sufficiency import SIGNAL_CHOICES  # noqa: E402

UNIFORM_SEEDS = (13, 14, 15)
RUNS = {
    "dynakrag": ["--method", "dynakrag"],
    "fixed_k": ["--method", "fixed_k"],
    "fixed_k3": ["--method", "fixed_k", "--fixed-k", "3"],  # the token-matched pair
    "fixed_k6": ["--method", "fixed_k", "--fixed-k", "6"],
    "fixed_k12": ["--method", "fixed_k", "--fixed-k", "12"],  # the paper's document budget
    "ircot": ["--method", "ircot"],
    "self_ask": ["--method", "self_ask"],
    "uniform": ["--method", "uniform"],
    "oracle": ["--method", "oracle"],
    "dynakrag-no_compression": ["--method", "dynakrag", "--no-compression"],
    "dynakrag-no_sufficiency": ["--method", "dynakrag", "--no-sufficiency"],
    "dynakrag-cap1": ["--method", "dynakrag", "--retrieval-cap", "1"],
    "dynakrag-cap2": ["--method", "dynakrag", "--retrieval-cap", "2"],
    "dynakrag-cap3": ["--method", "dynakrag", "--retrieval-cap", "3"],
    "dynakrag-llm_compression": ["--method", "dynakrag", "--compressor", "llm"],
    # The gain stop rule at lambda 0 never stops before a cap: the value model's choice of
    # actions alone, against uniform's random valid choice over the same horizon.
    "dynakrag-gain_lam0": ["--method", "dynakrag", "--lam", "0"],
    # The gain stop rule at the lambda and veto threshold its own cross-validation chose.
    "dynakrag-gain": ["--method", "dynakrag"],
    # The continuation stop rule (ours, policy.select): acquisitions chosen by the value
    # model, the stop by the continuation model against tau, both from the training split.
    "dynakrag-cont": ["--method", "dynakrag"],
    # Stop-at-k schedules: the same learned choices, the stop forced after k acquisitions
    # (k = 4 never stops before the step cap: the always-continue schedule).
    **{f"dynakrag-cont-stop{k}": ["--method", "dynakrag", "--stop-after", str(k)]
       for k in (1, 2, 3, 4)},
    # Uniform-valid stop-at-k schedules: uniform's random valid choices, the stop forced after
    # k acquisitions; against dynakrag-cont-stop<k>, the learned choices at the same k.
    **{f"uniform-stop{k}": ["--method", "uniform", "--stop-after", str(k)]
       for k in (1, 2, 3, 4)},
    # Uniform-valid sampled, not drawn once: one run per seed (13 is the CLI's default seed,
    # the draw of `uniform`), compared as the per-question mean over seeds.
    **{f"uniform-seed{s}": ["--method", "uniform", "--seed", str(s)] for s in UNIFORM_SEEDS},
    **{f"uniform-seed{s}-stop2": ["--method", "uniform", "--seed", str(s), "--stop-after", "2"]
       for s in UNIFORM_SEEDS},
}
GAIN_STOP, CONTINUATION = POLICY_VARIANT_SUFFIXES  # find_policies skips variants unless asked
# The continuation variant is built from the saved trajectories without a model call: its
# continuation model learns the support still to come (sr target), and tau is chosen by
# cross-validated answer F1 on the training questions, priced at .01 F1 per 1,000 tokens.
CONTINUATION_FLAGS = ["--stop-rule", "continuation", "--continuation-target", "sr",
                      "--tune-metric", "f1", "--token-price", "1e-5"]
# Runs whose policy is a variant, trained separately: results/policies/<dataset>-<generator>
# <suffix>.joblib, built here from the saved trajectories (no model call) when missing.
POLICY_VARIANTS = {"dynakrag-gain_lam0": (GAIN_STOP, ["--stop-rule", "gain"]),
                   "dynakrag-gain": (GAIN_STOP, ["--stop-rule", "gain"]),
                   **{r: (CONTINUATION, CONTINUATION_FLAGS) for r in RUNS
                      if r.startswith("dynakrag-cont")}}
CONTROLLER_METHODS = ("dynakrag", "uniform", "oracle")
VARIANT_LOCK = threading.Lock()


def rel(path: str | os.PathLike) -> str:
    """``path`` relative to the project folder (the commands run there), so that the commands
    recorded in results/ carry no machine's absolute paths."""
    return os.path.relpath(Path(path).resolve(), ROOT)


def run(args: list[str], log: Path) -> int:
    """``python -m dynakrag_lite <args>`` from the project folder; ``args`` hold relative
    paths only. The command is printed as it will be recorded."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print("$", relative_command(args, cwd=ROOT), flush=True)
    with open(log, "a") as fh:
        return subprocess.call([sys.executable, "-m", "dynakrag_lite"] + args, cwd=ROOT,
                               stdout=fh, stderr=subprocess.STDOUT)


def trajectories_file(dataset: str, generator: str) -> Path:
    """Where the training run keeps its trajectories (``train --save-data``), from which the
    stop-rule variants and the lambda sweep are rebuilt without a model call."""
    return ROOT / "results" / "trajectories" / f"{dataset}-{generator}.npz"


def training_cache_snapshot(dataset: str, generator: str) -> Path:
    """The committed snapshot of an unfinished training run's LLM calls (module docstring)."""
    return ROOT / "results" / "llm_cache" / f"train-{dataset}-{generator}.sqlite"


def training_flags(dataset: str, generator: str, continuation_questions: int,
                   sufficiency_signal: str) -> list[str]:
    """The ``train`` flags of the committed policies (their recorded commands carry them)."""
    flags = ["--sufficiency-signal", sufficiency_signal,
             "--save-data", rel(trajectories_file(dataset, generator))]
    if continuation_questions:
        flags = ["--continuation-questions", str(continuation_questions)] + flags
    return flags


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--generator", default="qwen2.5-coder-0.5b")
    ap.add_argument("--policy-generator", default=None,
                    help="use the policy trained with this generator (generator transfer)")
    ap.add_argument("--train-limit", type=int, default=120)
    ap.add_argument("--eval-limit", type=int, default=40)
    ap.add_argument("--runs", default=",".join(RUNS))
    ap.add_argument("--jobs", type=int, default=1, help="evaluations run in parallel")
    ap.add_argument("--continuation-questions", type=int, default=80,
                    help="training: answer calls on the first N training questions (as for "
                    "the committed policies; 0 = all, several times the cost)")
    ap.add_argument("--sufficiency-signal", default="learned", choices=SIGNAL_CHOICES,
                    help="training: the sufficiency signal to calibrate (the committed "
                    "policies use learned)")
    ap.add_argument("--n-eval", type=int, default=100,
                    help="questions held out for evaluation (the split; policy training "
                    "uses the rest). 2WikiMultiHopQA has 439 questions and MuSiQue 200 in "
                    "../shared/data, so 150 held out leaves 289 and 50 for training")
    ap.add_argument("--split", choices=("eval", "train"), default="eval",
                    help="train: diagnostic runs on training questions the policy did not see "
                    "(with --offset), written under results/diagnostics/train-split/")
    ap.add_argument("--offset", type=int, default=0,
                    help="skip the first M questions of the split (--split train: at least "
                    "the policy's training questions)")
    ap.add_argument("--data-dir", default=os.environ.get("DYNAKRAG_DATA_DIR"))
    ap.add_argument("--out-root", default=None, metavar="FOLDER",
                    help="where <dataset>/<generator>/<run> folders go (default: results/"
                    "experiments, or results/diagnostics/train-split with --split train); the "
                    "primary family's runs use results/primary/eval and results/primary/check "
                    "(results/primary_tests.toml)")
    ap.add_argument("--selector", default=None, metavar="FILE.joblib",
                    help="the extractive compressor's sentence selector (default: results/"
                    "selectors/<dataset>-sentence-selector.joblib)")
    ap.add_argument("--compressor", choices=("extractive", "llm"), default="extractive",
                    help="terminal compression of the controller runs (dynakrag, uniform, "
                    "oracle); extractive needs results/selectors/<dataset>-sentence-selector"
                    ".joblib (python -m dynakrag_lab.studies.selector builds it)")
    args = ap.parse_args()
    runs = [r for r in args.runs.split(",") if r]
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        raise SystemExit(f"unknown run(s) {unknown}; choose from {', '.join(RUNS)}")
    data = ["--data", args.dataset] + (["--data-dir", rel(args.data_dir)] if args.data_dir
                                       else [])
    if args.n_eval != 100:  # 100 is the CLI's default: keep the recorded commands short
        data += ["--n-eval", str(args.n_eval)]
    pol_gen = args.policy_generator or args.generator
    policy = ROOT / "results" / "policies" / policy_file_name(args.dataset, pol_gen)
    logs = ROOT / "runs" / "logs"
    if any(RUNS[r][1] in CONTROLLER_METHODS for r in runs) and not policy.exists():
        if args.policy_generator:
            raise SystemExit(f"{rel(policy)} missing: train it with --generator {pol_gen} "
                             "first")
        import_training_cache(args.dataset, args.generator)
        rc = run(["train"] + data + ["--generator", args.generator, "--out", rel(policy),
                                     "--limit", str(args.train_limit)]
                 + training_flags(args.dataset, args.generator, args.continuation_questions,
                                  args.sufficiency_signal),
                 logs / f"train-{args.dataset}-{args.generator}.log")
        if rc:
            return rc
    gen_dir = args.generator if not args.policy_generator else \
        f"{args.generator}-policy-{pol_gen}"

    selector = Path(args.selector) if args.selector else \
        ROOT / "results" / "selectors" / f"{args.dataset}-sentence-selector.joblib"
    if args.compressor == "extractive" and not selector.exists() and \
            any(RUNS[r][1] in CONTROLLER_METHODS for r in runs):
        raise SystemExit(f"{rel(selector)} missing: build it with python -m "
                         "dynakrag_lab.studies.selector, or pass --compressor llm")

    root = ROOT / args.out_root if args.out_root else \
        ROOT / "results" / "experiments" if args.split == "eval" else \
        ROOT / "results" / "diagnostics" / "train-split"
    split = [] if args.split == "eval" and not args.offset else \
        ["--split", args.split, "--offset", str(args.offset)]

    def one(name: str) -> int:
        out = root / args.dataset / gen_dir / name
        extra = []
        if RUNS[name][1] in CONTROLLER_METHODS:
            # uniform and oracle take the policy's sufficiency signal (see cli.cmd_evaluate),
            # so the three controllers differ only in how they choose.
            pol = policy
            if name in POLICY_VARIANTS:
                suffix, flags = POLICY_VARIANTS[name]
                pol = policy.with_name(policy.stem + suffix + policy.suffix)
                if not pol.exists():
                    saved = trajectories_file(args.dataset, pol_gen)
                    train = ["train"] + data + ["--generator", pol_gen, "--out", rel(pol),
                                                "--limit", str(args.train_limit)] + flags + \
                        training_flags(args.dataset, pol_gen, args.continuation_questions,
                                       args.sufficiency_signal)[:-2]  # not --save-data
                    if not saved.exists():
                        print(f"{rel(pol)} missing: train it with python -m dynakrag_lite "
                              + " ".join(train), file=sys.stderr)
                        return 2
                    # from the saved trajectories: no model call, no index
                    with VARIANT_LOCK:  # parallel runs of one variant build it once
                        if not pol.exists():
                            rc = run(train + ["--from-data", rel(saved)],
                                     logs / f"train-{args.dataset}-{pol_gen}{suffix}.log")
                            if rc:
                                return rc
            extra = ["--policy", rel(pol)]
            if "--compressor" not in RUNS[name]:
                extra += ["--compressor", args.compressor]
                if args.compressor == "extractive":
                    extra += ["--selector", rel(selector)]
        return run(["evaluate"] + data + split + RUNS[name] + extra + [
            "--generator", args.generator, "--limit", str(args.eval_limit), "--out", rel(out)],
            logs / f"eval-{args.dataset}-{gen_dir}-{name}.log")

    # Each run has its own folder (and lock), so parallel jobs never write one file.
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        codes = list(pool.map(one, runs))
    return max(codes, default=0)


if __name__ == "__main__":
    raise SystemExit(main())
