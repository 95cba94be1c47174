"""Write the cost/quality figure of every dataset x reader that has continuation runs:
answer F1 against tokens per question for the evaluation runs, beside the training split's
cross-validated tau curve (dynakrag_lab.report.pareto).

    python dynakrag_lab/scripts/pareto.py [--dataset hotpotqa] [--generator qwen2.5-coder-1.5b]

Writes results/figures/pareto-<dataset>-<generator>.png and .json (the points, their
intervals, and the operating point against the always-continue schedule). No model call.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from dynakrag_lite.experiments.artifacts import EXPERIMENTS_DIR  # noqa: E402
from dynakrag_lite.policy import Policy  # noqa: E402
from dynakrag_lite.storage import atomic_write_json  # noqa: E402
from dynakrag_lab.report.paper import DATASETS  # noqa: E402
from dynakrag_lab.report.pareto import (OPERATING_POINT, pareto_figure,  # noqa: E402
                                        pareto_points, pareto_summary, tau_curve)
from dynakrag_lab.report.records import policy_path  # noqa: E402
from dynakrag_lab.report.results import run_names  # noqa: E402


def records(frame) -> list[dict]:
    """Rows as dicts rounded to 6 decimals, a missing value as null (NaN is not JSON)."""
    return json.loads(frame.round(6).to_json(orient="records"))


def write(dataset: str, generator: str, out_dir: Path) -> Path | None:
    if OPERATING_POINT not in run_names(dataset, generator, EXPERIMENTS_DIR):
        return None
    points = pareto_points(dataset, generator)
    policy = policy_path(dataset, generator, "-continuation", root=ROOT / "results")
    curve = tau_curve(Policy.load(policy)) if policy else None
    fig = pareto_figure(points, curve, f"{dataset}, {generator}")
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / f"pareto-{dataset}-{generator}.png"
    fig.savefig(png, dpi=110)
    atomic_write_json(png.with_suffix(".json"), {
        "dataset": dataset, "generator": generator,
        "points": records(points),
        "tau_curve": [] if curve is None else records(curve),
        "summary": pareto_summary(points),
        "command": "python dynakrag_lab/scripts/pareto.py"})
    return png


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default=None)
    ap.add_argument("--generator", default=None)
    ap.add_argument("--out", default=str(ROOT / "results" / "figures"))
    args = ap.parse_args(argv)
    written = 0
    for d in [args.dataset] if args.dataset else DATASETS:
        folder = EXPERIMENTS_DIR / d
        gens = [args.generator] if args.generator else \
            sorted(p.name for p in folder.iterdir()) if folder.exists() else []
        for g in gens:
            png = write(d, g, Path(args.out))
            if png:
                print(png.relative_to(ROOT) if png.is_relative_to(ROOT) else png)
                written += 1
    if not written:
        print("no dataset has a dynakrag-cont run yet", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
