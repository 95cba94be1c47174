"""Train a DynaKRAG policy on a benchmark's train split and evaluate every method and ablation
on its held-out split, all through the public CLI, so each result folder records the exact
command that made it. Resumable: re-running skips finished questions (and a trained policy).

    python data_scripts/main_experiment.py --dataset hotpotqa --generator qwen2.5-coder-0.5b \
        --train-limit 120 --eval-limit 40 [--runs dynakrag,fixed_k,...] [--jobs 2]

Results: results/policies/<dataset>-<generator>.joblib and
results/experiments/<dataset>/<generator>/<run>/{predictions.jsonl,summary.json}.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = {
    "dynakrag": ["--method", "dynakrag"],
    "fixed_k": ["--method", "fixed_k"],
    "ircot": ["--method", "ircot"],
    "self_ask": ["--method", "self_ask"],
    "uniform": ["--method", "uniform"],
    "oracle": ["--method", "oracle"],
    "dynakrag-no_compression": ["--method", "dynakrag", "--no-compression"],
    "dynakrag-no_sufficiency": ["--method", "dynakrag", "--no-sufficiency"],
    "dynakrag-cap1": ["--method", "dynakrag", "--retrieval-cap", "1"],
    "dynakrag-cap2": ["--method", "dynakrag", "--retrieval-cap", "2"],
    "dynakrag-cap3": ["--method", "dynakrag", "--retrieval-cap", "3"],
}


def run(cmd: list[str], log: Path) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    print("$", " ".join(cmd), flush=True)
    with open(log, "a") as fh:
        return subprocess.call(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)


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
    ap.add_argument("--data-dir", default=os.environ.get("DYNAKRAG_DATA_DIR"))
    args = ap.parse_args()
    py = [sys.executable, "-m", "dynakrag_lite"]
    data = ["--data", args.dataset] + (["--data-dir", args.data_dir] if args.data_dir else [])
    pol_gen = args.policy_generator or args.generator
    policy = ROOT / "results" / "policies" / f"{args.dataset}-{pol_gen}.joblib"
    logs = ROOT / "runs" / "logs"
    runs = [r for r in args.runs.split(",") if r]
    if any(RUNS[r][1] == "dynakrag" for r in runs) and not policy.exists():
        if args.policy_generator:
            raise SystemExit(f"{policy} missing: train it with --generator {pol_gen} first")
        rc = run(py + ["train"] + data + ["--generator", args.generator, "--out", str(policy),
                                           "--limit", str(args.train_limit)],
                 logs / f"train-{args.dataset}-{args.generator}.log")
        if rc:
            return rc
    gen_dir = args.generator if not args.policy_generator else \
        f"{args.generator}-policy-{pol_gen}"

    def one(name: str) -> int:
        out = ROOT / "results" / "experiments" / args.dataset / gen_dir / name
        extra = ["--policy", str(policy.relative_to(ROOT))] if RUNS[name][1] == "dynakrag" else []
        return run(py + ["evaluate"] + data + RUNS[name] + extra + [
            "--generator", args.generator, "--limit", str(args.eval_limit),
            "--out", str(out.relative_to(ROOT))],
            logs / f"eval-{args.dataset}-{gen_dir}-{name}.log")

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        codes = list(pool.map(one, runs))
    return max(codes, default=0)


if __name__ == "__main__":
    raise SystemExit(main())
