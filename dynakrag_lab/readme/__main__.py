"""Rewrite results/README.md from what results/ holds: the experiment tables (one per dataset
and generator, with the exact commands that produced each row), breakdowns per question type
and hop count, the studies' sections, retrieval and speed figures.

    python -m dynakrag_lab.readme
    python -m dynakrag_lab.readme --results /tmp/copy-of-results  # another

Runs may be missing, just started or partial while they are re-run or extended: every table
labels a partial run (`partial: k of N`), pairs runs on the questions both answered (n), and
writes "not run yet" for a run that is not there.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from dynakrag_lite.experiments.artifacts import RESULTS
from dynakrag_lite.storage import atomic_write_text

from ..report.results import load_summaries
from ..studies.answer_stage import answer_stage_section
from ..studies.diagnosis.report import control_diagnosis_section
from .plan import plan_section
from .runs import (breakdown_section, check_set_section, dataset_section, headline_section,
                   policies_section, result_section, retrieval_section)
from .speed import speed_section

INTRO = """# Results

Everything here was measured on this project's 2-core CPU machines and is produced by the
commands listed with it. `oracle` reads the gold support labels: a greedy reference, not a
method and not an upper bound on F1 (on 2WikiMultiHopQA the controller's F1 is above it). Numbers are development numbers on subsets of the dev sets
(see `../shared/data/README.md`), with small bundled generators: they are not comparable to
the paper's Table 1 (Qwen2.5-7B-Instruct, full dev sets, BGE-large), only its shape is.

Columns: `n` questions; `status` (`complete`, or `partial: k of N` for a run still in
progress or being extended: its row covers the k questions answered so far); EM/F1 (HotpotQA
normalization, max over aliases); `support_recall` (share of gold supporting documents in the
final context); `all_support_rate` (share of questions with every gold document); mean
documents, tokens (all prompt + completion tokens of all calls), LLM calls, retrieval calls and
seconds per question.

Diagnostics (per run; definitions in `dynakrag_lite/experiments/diagnostics.py`): `errors` questions whose
method raised (not in the means; re-running retries them); how questions ended (`stop`);
sufficiency verdicts (sufficient / insufficient / unparsed); parser fallbacks per prompt kind;
stop vetoes of the continuation model (total, questions with one). Runs recorded before
diagnostics existed get them derived from their predictions' traces.
"""


# Finished studies taken out of the lab: neither the book nor this README read them. Each
# stays reachable at a git tag on the commit before its removal (the hash too, in case the
# tag was not pushed): (tag, commit, what it was).
REMOVED_STUDIES = (
    ("lab-signals-study", "997cad82a0f9c66006848bb64a22717df194dcca",
     "how well each sufficiency signal separates complete from incomplete evidence, the gold "
     "documents each action brings and the training-split diagnostic table "
     "(`dynakrag_lab/scripts/diagnose_signals.py`, `diagnostic_table.py`, "
     "`dynakrag_lab/studies/diagnostics.py`; reports `diagnostics/*-signals.json`, "
     "`diagnostics/hotpotqa-diagnostic-table.json`)"),
    ("lab-rerun-check-study", "997cad82a0f9c66006848bb64a22717df194dcca",
     "re-running the first questions of committed run folders in scratch folders and "
     "comparing them (`dynakrag_lab/scripts/rerun_check.py`; report "
     "`diagnostics/rerun-check.json`)"),
    ("lab-answer-labels-study", "8a4223e0f089cb70b62d24327eacfdb40337c740",
     "the reader's answer F1 at every prefix of the saved trajectories by a replay with "
     "answer calls, resumable, and training with those F1s (`dynakrag_lab/studies/"
     "answer_labels/`; the labels `trajectories/*.answer-f1.jsonl` stay, read by "
     "`dynakrag_lab.report.answer_labels`)"),
)


def removed_section() -> str:
    """Where the removed studies' code is: their tags and commits."""
    lines = ["## Removed studies\n",
             "Finished studies whose code left the lab; their reports stay here. "
             "`git checkout COMMIT` (or `TAG`, where your clone has the tag) brings the code "
             "back:\n"]
    lines += [f"- `{tag}` (commit `{commit}`): {what}." for tag, commit, what in REMOVED_STUDIES]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lab.readme",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=None,
                    help="the results folder to read and whose README.md to write (default: "
                         "this checkout's results/)")
    root = ap.parse_args(argv).results or RESULTS
    exp = root / "experiments"
    parts = [INTRO, result_section(exp)]
    s = load_summaries(exp)
    if len(s):
        parts.append(headline_section(s, root))
    for (dataset, generator), _ in s.groupby(["dataset", "generator"]):
        parts += dataset_section(s, dataset, generator, root)
    if len(s):
        parts.append(breakdown_section(s, root))
    sections = (check_set_section(root), answer_stage_section(root),
                control_diagnosis_section(root), policies_section(s, root))
    parts += [sec for sec in sections if sec]
    parts += retrieval_section(root)
    parts.append(plan_section(root))
    bench = root / "benchmarks"
    if bench.exists():
        parts.append(speed_section(bench))
    parts.append(removed_section())
    atomic_write_text(root / "README.md", "\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
