"""Execute the results chapter (12) with full parameters and write its table.

    python data_scripts/run_experiments.py [--generator qwen2.5-coder-1.5b] [--chapters 12] [--rerun]

The chapter is executed through papermill (``quick=True`` reads ``results/experiments``;
``--rerun`` passes ``quick=False``, which first resumes every run of the reader's grid with
its recorded command), from the ``book/`` folder, into the git-ignored
``runs/notebooks/<chapter>.ipynb``. Each chapter writes its tidy table to
``results/tables/<chapter>.csv`` (parameter ``table_out``); this script then writes the
sidecar ``results/tables/<chapter>.json`` with the command, the parameters, the generator and
its model hash, the dataset file's hash, a hash of the result summaries the table was built
from, the git commit and the date.

Without ``--rerun`` it only reads what is already in ``results/``; produce that first with
``data_scripts/main_experiment.py`` (long; resumable).
"""
from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = {"12": "12_results"}
DATASETS = ("hotpotqa", "2wikimultihopqa", "musique")  # the results chapter reads all three


def data_hash(dataset: str) -> str | None:
    """sha256 of the dataset's normalized file (the library: of its generated JSON); the same
    hash evaluate records in each run's fingerprint (``experiments.data_sha256``)."""
    from dynakrag_lite.data.sources import data_sha256
    return data_sha256(dataset)


def model_hash(generator: str) -> str | None:
    """The expected sha256 of a bundled model's GGUF file (None for hf:/openai: specs)."""
    from dynakrag_lite.generators.models import REGISTRY
    entry = REGISTRY.get(generator)
    return entry.sha256 if entry else None


def results_hash(root: Path) -> str:
    """One hash over every summary.json under ``root`` (path and content), in sorted order."""
    h = hashlib.sha256()
    for p in sorted(root.glob("*/*/*/summary.json")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--generator", default="qwen2.5-coder-1.5b",
                    help="the reader whose grid the chapter reads")
    ap.add_argument("--chapters", default=",".join(CHAPTERS))
    ap.add_argument("--rerun", action="store_true",
                    help="let the chapter resume every run of the grid first (long)")
    ap.add_argument("--timeout", type=int, default=None, help="per-cell timeout (seconds)")
    args = ap.parse_args(argv)

    keys = [c.strip() for c in args.chapters.split(",") if c.strip()]
    unknown = [k for k in keys if k not in CHAPTERS]
    if unknown:
        raise SystemExit(f"unknown chapter(s) {unknown}; choose from {', '.join(CHAPTERS)}")
    import papermill as pm

    out_dir = ROOT / "runs" / "notebooks"
    tables = ROOT / "results" / "tables"
    out_dir.mkdir(parents=True, exist_ok=True)
    tables.mkdir(parents=True, exist_ok=True)
    from dynakrag_lite.storage import atomic_write_json, relative_command
    command = relative_command(sys.argv[1:] if argv is None else argv,
                               prefix="python data_scripts/run_experiments.py")
    for key in keys:
        name = CHAPTERS[key]
        params = {"quick": not args.rerun, "reader": args.generator,
                  # relative to book/, where the notebook runs
                  "table_out": f"../results/tables/{name}.csv"}
        print(f"executing {name} with {params}", flush=True)
        (tables / f"{name}.csv").unlink(missing_ok=True)  # never keep a stale table
        pm.execute_notebook(str(BOOK / f"{name}.ipynb"), str(out_dir / f"{name}.ipynb"),
                            parameters=params, cwd=str(BOOK), progress_bar=False,
                            execution_timeout=args.timeout)
        csv = tables / f"{name}.csv"
        generators = [args.generator]
        sidecar = {
            "chapter": name, "command": command, "parameters": params,
            "table": f"results/tables/{name}.csv" if csv.exists() else None,
            "executed_notebook": f"runs/notebooks/{name}.ipynb",
            "data_sha256": {d: data_hash(d) for d in DATASETS},
            "generators": {g: {"model_sha256": model_hash(g)} for g in generators},
            "results_sha256": results_hash(ROOT / "results" / "experiments"),
            "git_commit": git_commit(),
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        atomic_write_json(tables / f"{name}.json", sidecar)
        print(f"  table: {sidecar['table'] or '(none: no results for this chapter yet)'}; "
              f"sidecar results/tables/{name}.json", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
