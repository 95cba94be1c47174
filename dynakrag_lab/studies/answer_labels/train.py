"""Train a policy from saved trajectories with answer labels merged in first
(``dynakrag_lab.studies.answer_labels.files.train_with_answer_labels``).

    python -m dynakrag_lab.studies.answer_labels.train \\
        --answer-labels results/trajectories/hotpotqa-qwen2.5-coder-1.5b.answer-f1.jsonl \\
        --data hotpotqa --generator qwen2.5-coder-1.5b --limit 300 \\
        --from-data results/trajectories/hotpotqa-qwen2.5-coder-1.5b.npz --out POLICY.joblib

Every option but ``--answer-labels`` is ``python -m dynakrag_lite train``'s and means what it
means there (``--from-data`` is required). The labels (``python -m dynakrag_lab.studies.answer_labels``,
made for that trajectories file) fill in the answer F1s before the cut to this split's
training questions; with them, ``--continuation-questions`` need not match the collection's.
The policy's meta records the train command under ``command`` and the labels file, its sha256,
the merge's counts and this script's command line under ``answer_labels``. A policy saved into
results/policies is added to its manifest. Prints the report as JSON; exit code 2 on an error.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from dynakrag_lite.experiments.artifacts import register_policy
from dynakrag_lite.experiments.cli import (build_parser, run_reporting_errors,
                                           training_recipe)
from dynakrag_lite.storage import relative_command
from dynakrag_lab.studies.answer_labels.files import train_with_answer_labels


def _main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="train_with_labels.py", allow_abbrev=False,
                                 description=__doc__.split("\n\n")[0],
                                 epilog="other options: python -m dynakrag_lite train --help")
    ap.add_argument("--answer-labels", required=True, type=Path, metavar="FILE.jsonl",
                    help="answer F1s of python -m dynakrag_lab.studies.answer_labels for the "
                         "--from-data file")
    own, rest = ap.parse_known_args(argv)
    args = build_parser().parse_args(["train", *rest])
    args.argv = ["train", *rest]  # the train command, for the policy's meta
    t0 = time.perf_counter()
    command = relative_command(argv, prefix="python -m dynakrag_lab.studies.answer_labels.train")
    _, path, report = train_with_answer_labels(training_recipe(args), own.answer_labels,
                                               command)
    register_policy(path)  # keep results/policies/MANIFEST.sha256 in step with the file
    print(json.dumps({**report, "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_reporting_errors(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
