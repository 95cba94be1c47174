"""The answer stage decided on training questions, then read once where the choice never looked
(issue 24, part 2: "the full documents where the question's shape needs them"):

    python -m dynakrag_lab.studies.answer_stage --dataset hotpotqa --reader qwen2.5-coder-1.5b \
        --choose-on results/diagnostics/answer-stage \
        --check results/experiments results/diagnostics/check-set

The rule answers from the full documents when the final state holds at most K of them and from
the compressor's snippets above that (``dynakrag_lab.studies.answer_stage``). Each root
holds ``<dataset>/<reader>/<run>`` and ``<run>-no_compression`` (same trajectories, the second
without the compressor). K is chosen on ``--choose-on`` (highest mean F1 over the curve of K =
0..12); on every ``--check`` root the rule with that K is paired, per question, against both
answer modes and against every other run there (F1 and tokens, paired bootstrap 95 %). No
model call. Writes ``--out`` (JSON) and the same path with ``.md``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dynakrag_lite.storage import (atomic_write_json, atomic_write_text,
                                   relative_command)
from dynakrag_lab.report.comparison import compare_runs, paired_rows
from dynakrag_lab.report.results import read_run, run_names
from dynakrag_lab.studies.answer_stage import (FULL_SUFFIX, choose_full_up_to,
                                               report_markdown, rule_curve, rule_rows, rule_summary,
                                               same_walk)


def twin_pairs(root: str, dataset: str, reader: str, run: str) -> tuple[list, int]:
    """(same-walk pairs, differing) of ``run`` and its no-compression twin under ``root``."""
    snippets, _ = read_run(dataset, reader, run, root)
    full, _ = read_run(dataset, reader, run + FULL_SUFFIX, root)
    if not snippets or not full:
        raise SystemExit(f"{root}/{dataset}/{reader}: needs both {run} and {run}{FULL_SUFFIX} "
                         f"with answered questions (found {len(snippets)} and {len(full)})")
    return same_walk(snippets, full)


def check_root(root: str, dataset: str, reader: str, runs: list[str], k: int) -> list[dict]:
    """The rule with ``k`` on every run of ``runs`` that has its twin under ``root``, against
    both answer modes and every other run there."""
    names = run_names(dataset, reader, root)
    out = []
    for run in (r for r in runs if r in names and r + FULL_SUFFIX in names):
        pairs, differing = twin_pairs(root, dataset, reader, run)
        rows = rule_rows(pairs, k)
        others = {f"{run} (snippets)": ([s for s, _ in pairs], ""),
                  f"{run} (documents)": ([f for _, f in pairs], "")}
        for name in names:
            if name not in (run, run + FULL_SUFFIX):
                rs, rec = read_run(dataset, reader, name, root)
                others[name] = (rs, rec["status"])
        against = []
        for o, (rs, status) in others.items():
            if paired_rows(rows, rs):  # compare_runs refuses a pair without common questions
                diffs = compare_runs(rows, rs, metrics=("f1", "tokens"))
                against.append({"other": o, "status": status,
                                **{m: d.to_dict() for m, d in diffs.items()}})
        out.append({"root": root, "run": run, "k": k, **rule_summary(rows),
                    "differing": differing, "against": against})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lab.studies.answer_stage",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--reader", default="qwen2.5-coder-1.5b")
    ap.add_argument("--choose-on", default="results/diagnostics/answer-stage",
                    help="root whose <dataset>/<reader>/<run> and its twin choose K")
    ap.add_argument("--run", default="dynakrag", help="the run K is chosen on")
    ap.add_argument("--check", nargs="*", default=[],
                    help="roots the chosen K is read on, once")
    ap.add_argument("--check-runs", nargs="+", default=["dynakrag", "uniform"],
                    help="runs the rule is applied to where their twin exists")
    ap.add_argument("--out", default=None,
                    help="default: <choose-on>/<dataset>-<reader>.json (and .md)")
    args = ap.parse_args(argv)
    out = Path(args.out or Path(args.choose_on) / f"{args.dataset}-{args.reader}.json")
    pairs, differing = twin_pairs(args.choose_on, args.dataset, args.reader, args.run)
    curve = rule_curve(pairs)
    k = choose_full_up_to(curve)
    report = {"command": relative_command(list(argv if argv is not None else sys.argv[1:]),
                                          prefix="python -m dynakrag_lab.studies.answer_stage"),
              "dataset": args.dataset, "reader": args.reader,
              "choose_on": {"root": args.choose_on, "run": args.run, "n": len(pairs),
                            "differing": differing, "k": k,
                            "curve": curve.to_dict(orient="records")},
              "checks": [c for root in args.check for c in
                         check_root(root, args.dataset, args.reader, args.check_runs, k)]}
    atomic_write_json(out, report)
    atomic_write_text(out.with_suffix(".md"), report_markdown(report))
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
