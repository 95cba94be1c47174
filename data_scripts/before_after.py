"""Which fix moved what: each method's run before the control-signal fixes (read from an
older commit of this repository) against its run now, paired on the questions both answered.

    python data_scripts/before_after.py --old-commit 74fbb9b --dataset hotpotqa \
        --generator qwen2.5-coder-0.5b \
        --pairs fixed_k:fixed_k6,ircot:ircot,self_ask:self_ask,dynakrag:dynakrag,uniform:uniform,oracle:oracle

``old:new`` pairs name the run folder at the old commit and the one in the working tree (the
old Fixed-K run used K = 6). Per pair: the paired F1 / EM / SR differences new - old with
bootstrap intervals (:mod:`dynakrag_lite.experiments.comparison`) and the behaviour of both runs
(:func:`dynakrag_lite.experiments.diagnostics.run_behaviour`: actions per question, gold-hit rates,
sufficiency verdicts, gaps, IRCoT iterations, Self-Ask searches, snippet validity).
Reads git objects and result files only; writes
``results/diagnostics/<dataset>-<generator>-before-after.json``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dynakrag_lite.experiments.comparison import compare_runs  # noqa: E402
from dynakrag_lite.experiments.diagnostics import run_behaviour  # noqa: E402
from dynakrag_lite.experiments.folder import latest_rows, read_predictions  # noqa: E402
from dynakrag_lite.storage import atomic_write_text  # noqa: E402


def old_rows(commit: str, rel: str) -> list[dict]:
    text = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return latest_rows(rows, errors=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old-commit", required=True)
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--generator", default="qwen2.5-coder-0.5b")
    ap.add_argument("--pairs", required=True, help="old_run:new_run,...")
    args = ap.parse_args(argv)
    base = f"results/experiments/{args.dataset}/{args.generator}"
    out = {"old_commit": args.old_commit, "dataset": args.dataset,
           "generator": args.generator, "pairs": {},
           "command": "python data_scripts/before_after.py " + " ".join(
               argv if argv is not None else sys.argv[1:])}
    for pair in args.pairs.split(","):
        old, new = pair.split(":")
        new_path = ROOT / base / new / "predictions.jsonl"
        if not new_path.exists():
            out["pairs"][pair] = {"missing": str(new_path.relative_to(ROOT))}
            continue
        o = old_rows(args.old_commit, f"{base}/{old}/predictions.jsonl")
        n = latest_rows(read_predictions(new_path), errors=False)
        ids = {r["id"] for r in o}
        n_common = [r for r in n if r["id"] in ids]
        o_common = [r for r in o if r["id"] in {r["id"] for r in n_common}]
        diffs = compare_runs(n_common, o_common)
        out["pairs"][pair] = {
            "n": len(n_common),
            "diff_new_minus_old": {m: d.to_dict() for m, d in diffs.items()},
            "behaviour_old": run_behaviour(o_common),
            "behaviour_new": run_behaviour(n_common),
            "tokens_mean": {"old": sum(r["tokens"] for r in o_common) / max(1, len(o_common)),
                            "new": sum(r["tokens"] for r in n_common) / max(1, len(n_common))},
        }
        d = diffs["f1"]
        print(f"{pair:22s} n={d.n:3d}  F1 old {d.mean_b:.3f} new {d.mean_a:.3f}  "
              f"diff {d.diff:+.3f} [{d.lo:+.3f}, {d.hi:+.3f}]  {d.verdict}")
    path = ROOT / "results" / "diagnostics" / f"{args.dataset}-{args.generator}-before-after.json"
    atomic_write_text(path, json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
