"""Which stop rule, and which lambda? Cross-validated on the training questions only, from saved
trajectories (no model call):

    python -m dynakrag_lab.studies.stop_rule \\
        --trajectories results/trajectories/hotpotqa-qwen2.5-coder-0.5b.npz

The trajectories come from ``python -m dynakrag_lite train ... --save-data FILE``. For each
stop rule (``level``: the paper's v(s, stop) = SR(s); ``gain``: stopping adds no support and is
priced like every other action, see ``dynakrag_lite.policy.select``) the 5-fold grouped
cross-validation of ``training.tuning.tune_continuation`` replays each held-out question's
explored path for every (lambda, veto threshold) pair and records where the policy stops:
answer F1 (the questions collected with answer calls), SR and tokens there. Writes
``results/diagnostics/<dataset>-<generator>-stop-rule.json`` (both grids, the pair each rule
picks) and prints the lambda curve of each rule at its chosen veto threshold.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from dynakrag_lite.experiments.artifacts import RESULTS
from dynakrag_lite.policy import STOP_RULES
from dynakrag_lite.storage import atomic_write_json, relative_command
from dynakrag_lite.training.tuning import (CONTINUATION_GRID, GAIN_LAMBDA_GRID,
                                           LAMBDA_GRID, VETO_GRID, tune_continuation)
from dynakrag_lite.training.files import load_training_data
from dynakrag_lite.trajectories import TrainingData


def compare(data: TrainingData, folds: int = 5, metric: str = "f1", trees: int = 300,
            rules: tuple[str, ...] = ("level", "gain"), token_price: float = 0.0) -> dict:
    """Per stop rule: the chosen (lambda, veto threshold), its cross-validated row, and the
    whole grid (one row per pair)."""
    out = {}
    for rule in rules:
        lams = {"gain": GAIN_LAMBDA_GRID, "continuation": (0.0,)}.get(rule, LAMBDA_GRID)
        taus = CONTINUATION_GRID if rule == "continuation" else VETO_GRID
        t0 = time.perf_counter()
        lam, thr, frame = tune_continuation(data, lams, taus, folds=folds, metric=metric,
                                            n_estimators=trees, stop_rule=rule,
                                            token_price=token_price)
        best = frame[frame.best].iloc[0].to_dict()
        out[rule] = {"lam": lam, "veto_threshold": thr,
                     "best": {k: (round(v, 6) if isinstance(v, float) else v)
                              for k, v in best.items()},
                     "grid": frame.round(6).to_dict("records"),
                     "seconds": round(time.perf_counter() - t0, 1)}
    return out


def curve(result: dict, rule: str) -> list[dict]:
    """The lambda curve of ``rule`` at its chosen veto threshold (rows sorted by lambda)."""
    thr = result[rule]["veto_threshold"]
    rows = [r for r in result[rule]["grid"] if r["veto_threshold"] == thr]
    return sorted(rows, key=lambda r: r["lam"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lab.studies.stop_rule",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--trajectories", required=True, help=".npz from train --save-data")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--metric", choices=("f1", "sr"), default="f1")
    ap.add_argument("--trees", type=int, default=300)
    ap.add_argument("--rules", default="level,gain",
                    help=f"comma-separated, of {', '.join(STOP_RULES)}")
    ap.add_argument("--token-price", type=float, default=0.0,
                    help="objective: metric - PRICE x tokens (as train --token-price)")
    ap.add_argument("--out", default=None, help="JSON file (default: results/diagnostics/"
                    "<trajectories stem>-stop-rule.json)")
    args = ap.parse_args(argv)
    path = Path(args.trajectories)
    data = load_training_data(path)
    rules = tuple(r for r in args.rules.split(",") if r)
    unknown = [r for r in rules if r not in STOP_RULES]
    if unknown:
        ap.error(f"unknown stop rule(s) {unknown}; one of {STOP_RULES}")
    result = compare(data, args.folds, args.metric, args.trees, rules, args.token_price)
    out = Path(args.out) if args.out else \
        RESULTS / "diagnostics" / f"{path.stem}-stop-rule.json"
    atomic_write_json(out, {
        "trajectories": relative_command([str(path)], prefix=""),
        "questions": len(data.questions), "samples": len(data.samples),
        "metric": args.metric, "folds": args.folds, "rules": result,
        "command": relative_command(["python", "python -m dynakrag_lab.studies.stop_rule"]
                                    + (argv if argv is not None else sys.argv[1:]),
                                    prefix="")})
    for rule in result:
        print(f"\n{rule}: lambda {result[rule]['lam']}, veto threshold "
              f"{result[rule]['veto_threshold']}")
        print("| lambda | F1 | SR | tokens | early stop | n |\n|---|---|---|---|---|---|")
        for r in curve(result, rule):
            print(f"| {r['lam']:g} | {r['f1']:.3f} | {r['sr']:.3f} | {r['tokens']:.0f} | "
                  f"{r['early']:.2f} | {r['n_questions']} |")
    print(json.dumps({"out": str(out)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
