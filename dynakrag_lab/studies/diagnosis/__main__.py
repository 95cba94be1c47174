"""Where learned control loses its signal, per dataset x reader, from saved trajectories only
(issue 24, part 1; no model call):

    nice -n 10 python -m dynakrag_lab.studies.diagnosis \\
        --trajectories results/trajectories/*.npz

For each file (``train --save-data``): out-of-fold action choice of the value forest (per
lambda), of "always retrieve_more" and of the oracle; the continuation forest's AUC and
stop-after-k along the uniform rollouts; permutation importances; the data-size curve; and a
verdict read off the numbers (``dynakrag_lab.studies.diagnosis``). Writes every number to
``--out`` (JSON) and the tables a reader reads to the same path with ``.md``.

Section 8, horizon labels (``--sections horizon`` runs it alone, in seconds): a value forest on
the Monte-Carlo returns of the uniform rollouts' taken actions, every chooser valued off-policy
by importance sampling; written to ``--horizon-out`` (default: ``--out`` with ``-horizon``
before the suffix) and its ``.md``, so a horizon-only run leaves sections 1-7 as they are.

Section 9, stop targets (``--sections stop``, a few minutes; ``--stop-out``, default ``--out``
with ``-stop``): on the questions with answer F1, each candidate stop target (SR gain, F1 gain,
best later F1 gain, F1 now) run as a stop rule along the uniform paths, its threshold swept,
against a random stop at equal tokens and against always continuing, per file and pooled with
the other files of the same reader (``dynakrag_lab.studies.diagnosis.stop_targets``).

``--answer-labels FILE ...``: answer F1s added later (``*.answer-f1.jsonl``,
:mod:`dynakrag_lab.report.answer_labels`), each merged into the trajectories file its header
names (by sha256; questions the replay did not reproduce are left out), so the stop AUC and
stop-after-k use every labelled question:

    python -m dynakrag_lab.studies.diagnosis \
        --trajectories results/trajectories/hotpotqa-qwen2.5-coder-1.5b.npz \
        --answer-labels results/trajectories/hotpotqa-qwen2.5-coder-1.5b.answer-f1.jsonl
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path
from typing import Any

from dynakrag_lite.storage import relative_command
from dynakrag_lite.training.files import load_training_data_bytes
from dynakrag_lite.trajectories import TrainingData
from dynakrag_lab.report.answer_labels import merge_answer_labels, read_label_file
from dynakrag_lab.report.names import DATASETS
from dynakrag_lab.studies.diagnosis import CHOICE_LAMBDAS, diagnose, verdict
from dynakrag_lab.studies.diagnosis.horizon import diagnose_horizon, horizon_verdict
from dynakrag_lab.studies.diagnosis.report import (horizon_markdown, markdown, stop_markdown,
                                                   write_report)
from dynakrag_lab.studies.diagnosis.stop_targets import TARGETS, study, verdict as stop_verdict

# "main": sections 1-7 (--out); "horizon": section 8 (--horizon-out); "stop": section 9
SECTIONS = ("main", "horizon", "stop")


def name_of(path: Path, data: TrainingData) -> tuple[str, str]:
    """(dataset, reader) from the run settings, else from ``<dataset>-<reader>.npz``."""
    stem = path.stem
    ds = data.run.get("dataset") or stem.split("-", 1)[0]
    reader = data.run.get("generator") or stem[len(ds) + 1:]
    return ds, reader


def labels_for(paths: list[Path], labels: list[Path]) -> dict[Path, Path]:
    """{trajectories file: its labels file}, matched by the sha256 each labels header records;
    ValueError for a labels file of none of them, or two for one."""
    if not labels:
        return {}
    sha = {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in paths}
    out: dict[Path, Path] = {}
    for lp in labels:
        h = read_label_file(lp).header
        if h is None:
            raise ValueError(f"--answer-labels {lp}: no labels in it (empty or missing)")
        p = sha.get(h.get("npz_sha256"))
        if p is None:
            raise ValueError(f"--answer-labels {lp}: made for a trajectories file (sha256 "
                             f"{h.get('npz_sha256')}, {h.get('npz')}) not among --trajectories")
        if p in out:
            raise ValueError(f"--answer-labels {out[p]} and {lp} are both for {p}")
        out[p] = lp
    return out


def in_paper_order(files: dict[tuple[str, str], Any]) -> dict[tuple[str, str], Any]:
    """``files`` keyed by (dataset, reader) in the paper's dataset order (others last, by
    name), whatever the order of the arguments: the stop section pools the other datasets in
    this order, and a forest's bootstrap depends on the order of its rows."""
    rank = {d: i for i, d in enumerate(DATASETS)}
    return dict(sorted(files.items(), key=lambda kv: (rank.get(kv[0][0], len(rank)), kv[0])))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lab.studies.diagnosis",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--trajectories", nargs="+", required=True, type=Path,
                    help=".npz files from train --save-data")
    ap.add_argument("--out", type=Path, default=Path("results/diagnostics/control-diagnosis.json"))
    ap.add_argument("--horizon-out", type=Path, default=None,
                    help="section 8's JSON (default: --out with -horizon before the suffix)")
    ap.add_argument("--stop-out", type=Path, default=None,
                    help="section 9's JSON (default: --out with -stop before the suffix)")
    ap.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                    help="main: sections 1-7 (--out); horizon: section 8 (--horizon-out); "
                         "stop: section 9 (--stop-out); default all")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5, help="permutation-importance repeats")
    ap.add_argument("--sizes", type=int, nargs="*", default=[25, 50, 100],
                    help="training questions per fold for the data-size curve (plus all)")
    ap.add_argument("--boot", type=int, default=2000,
                    help="question-level bootstrap resamples (sections 8 and 9)")
    ap.add_argument("--answer-labels", nargs="+", type=Path, default=[],
                    help="answer F1 files (*.answer-f1.jsonl), each merged "
                    "into the trajectories file it was made for")
    args = ap.parse_args(argv)
    labels = labels_for(args.trajectories, args.answer_labels)  # before hours of work
    forest = {"n_estimators": 300, "min_samples_leaf": 8, "seed": 13, "n_jobs": 1}
    settings = {"main": {"folds": args.folds, "repeats": args.repeats, "sizes": args.sizes,
                         "lambdas": list(CHOICE_LAMBDAS), "forest": forest},
                "horizon": {"folds": args.folds, "boot": args.boot, "boot_seed": 13,
                            "forest": forest},
                "stop": {"folds": args.folds, "boot": args.boot, "boot_seed": 13,
                         "targets": list(TARGETS), "forest": forest}}
    files: dict[tuple[str, str], tuple[Path, TrainingData, dict | None]] = {}
    for path in args.trajectories:
        raw = path.read_bytes()
        data = load_training_data_bytes(raw, path)
        merged = None
        if path in labels:  # questions it did not reproduce stay without F1
            data, merged = merge_answer_labels(data, labels[path],
                                               npz_sha256=hashlib.sha256(raw).hexdigest())
            merged["file"] = labels[path].as_posix()
            print(f"{path}: answer labels {merged}", flush=True)
        files[name_of(path, data)] = (path, data, merged)
    files = in_paper_order(files)
    results: dict[str, dict] = {sec: {} for sec in args.sections}
    clock = {sec: [0.0, 0.0] for sec in args.sections}  # wall, CPU seconds per section
    for key, (path, data, merged) in files.items():
        for sec in args.sections:
            t, c = time.perf_counter(), time.process_time()
            if sec == "main":
                r = diagnose(data, folds=args.folds, sizes=args.sizes, n_repeats=args.repeats)
                lines = verdict(r)
            elif sec == "horizon":
                r = {"horizon": diagnose_horizon(data, folds=args.folds, n_boot=args.boot)}
                lines = [horizon_verdict(r["horizon"])]
            else:  # pooled with the other datasets read by the same reader
                extra = [d for k, (_, d, _) in files.items() if k != key and k[1] == key[1]]
                r = {"stop_targets": study(data, folds=args.folds, extra=extra,
                                           n_boot=args.boot)}
                lines = [stop_verdict(r["stop_targets"])]
            results[sec][key] = {**r, "file": path.as_posix(), "n_questions":
                                 len(data.questions),
                                 **({"answer_labels": merged} if merged else {})}
            clock[sec][0] += time.perf_counter() - t
            clock[sec][1] += time.process_time() - c
            print(f"{key[0]} {key[1]} [{sec}]: {time.perf_counter() - t:.0f} s", flush=True)
            for v in lines:
                print("  -", v, flush=True)
    command = relative_command(list(argv if argv is not None else sys.argv[1:]),
                               prefix="python -m dynakrag_lab.studies.diagnosis")
    outs = {"main": (args.out, markdown),
            "horizon": (args.horizon_out or args.out.with_name(
                f"{args.out.stem}-horizon{args.out.suffix}"), horizon_markdown),
            "stop": (args.stop_out or args.out.with_name(
                f"{args.out.stem}-stop{args.out.suffix}"), stop_markdown)}
    for sec in args.sections:
        out, md_of = outs[sec]
        md = write_report(out, results[sec], settings[sec], command, *clock[sec], md_of)
        print(f"wrote {out} and {md} ({clock[sec][0]:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
