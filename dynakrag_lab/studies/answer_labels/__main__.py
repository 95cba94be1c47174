"""Answer-utility labels for saved trajectories: the reader's answer F1 at every prefix of the
training questions a ``train --save-data`` file holds without it, resumable, one JSONL row per
question (``dynakrag_lab.studies.answer_labels``).

    # label every HotpotQA 1.5B training question that lacks answer F1s (the collection
    # command is read from the file; run it again, on any machine, to continue)
    DYNAKRAG_N_THREADS=2 nice -n 10 python -m dynakrag_lab.studies.answer_labels \\
        results/trajectories/hotpotqa-qwen2.5-coder-1.5b.npz

    # what a run would label (no model, no index)
    python -m dynakrag_lab.studies.answer_labels \\
        results/trajectories/hotpotqa-qwen2.5-coder-1.5b.npz --dry-run

    # a slice (positions in the file's question list), the command from the policy
    python -m dynakrag_lab.studies.answer_labels \\
        results/trajectories/hotpotqa-qwen2.5-coder-1.5b.npz \\
        --policy results/policies/hotpotqa-qwen2.5-coder-1.5b.joblib --start 80 --stop 190

    # label a finished question again (e.g. a row written before rows counted the generations
    # the time limit cut): only it (--stop 0), in a new row that wins
    python -m dynakrag_lab.studies.answer_labels \\
        results/trajectories/hotpotqa-qwen2.5-coder-1.5b.npz --stop 0 --redo 5a79b525554299029c4b5f67

    # label again the questions whose replay did not reproduce the file, in rows that record
    # the replay's own states (the merge then uses each as the path its replay took)
    python -m dynakrag_lab.studies.answer_labels \\
        results/trajectories/hotpotqa-qwen2.5-coder-1.5b.npz --stop 0 --redo-unreproduced

    # use them
    python -m dynakrag_lab.studies.diagnosis --trajectories X.npz \\
        --answer-labels X.answer-f1.jsonl
    python -m dynakrag_lab.studies.answer_labels.train --answer-labels X.answer-f1.jsonl \\
        --from-data X.npz ...

The setup is the collection run's: its command line (``--command "python -m dynakrag_lite train
..."``, the meta of a policy it trained (``--policy``), or by default the file's own record) is
parsed by the project's parser and built by ``training_setup``, as ``data_scripts/warm_cache.py
train`` builds it: the same questions, index, reader and sufficiency signal calibrated as
training calibrated it. It is refused when its settings or reader differ from those the file
records (a signal calibrated differently is reported: the replay check decides). Each question's rollout is then replayed along its chosen actions
(no counterfactual branch) with one answer call per prefix, and checked against the file.

Output: ``--out`` (default ``<npz without .npz>.answer-f1.jsonl`` beside it). Line 1 is the
header (the file's sha256, the command, the reader's model id, the label kind); a resume under
another header is refused. Each row, appended and fsynced once its question is done:

    {"qid", "reproduced": bool, "truncated": int, "mismatch": null | {"prefix", "step", "field",
     "npz", "replay"}, "prefixes": [{"step", "sr_now", "f1_now", "answer_tokens", "answer",
     "tokens", "features"}], "seconds"}

``truncated`` counts the generations the time limit ($DYNAKRAG_GEN_TIMEOUT) cut: such a row is
no label (it measures the machine, e.g. a paused run); it is left out when the labels are used
and its question is labelled again by the next run, in a new row. ``--only-missing`` (default)
skips questions with answer F1s in the file; questions done in the labels file are skipped,
except those given to ``--redo`` (labelled again, whatever the slice). A question with two rows
is labelled by the later one. A truncated last line (a killed run) is reported and redone.
After ``--max-unreproduced`` non-reproduced questions in a row the run stops (that setup is not
the collection's). Prints a JSON summary; exit code 2 on an error.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import time
from pathlib import Path

from dynakrag_lite.experiments.cli import (build_parser, command_args,
                                           run_reporting_errors, training_recipe)
from dynakrag_lite.policy import Policy
from dynakrag_lite.storage import redact, relative_command
from dynakrag_lite.training.files import load_training_data_bytes
from dynakrag_lite.training.recipe import (collection_run, from_data_problems,
                                           training_setup)
from dynakrag_lab.studies.answer_labels.files import TOLERANCE, read_label_file
from dynakrag_lab.studies.answer_labels import (check_header, default_label_path,
                                                label_questions, make_header, plan_labels,
                                                unreproduced_without_states)


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="answer_labels.py", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("npz", type=Path, help="trajectories saved by train --save-data")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--policy", type=Path, default=None,
                     help="read the collection command from this policy's meta")
    src.add_argument("--command", default=None,
                     help="the collection command (python -m dynakrag_lite train ...)")
    ap.add_argument("--out", type=Path, default=None,
                    help="labels file (default: <npz stem>.answer-f1.jsonl beside it)")
    ap.add_argument("--start", type=int, default=0,
                    help="first question (position in the file's question list)")
    ap.add_argument("--stop", type=int, default=None, help="end of the slice (exclusive)")
    ap.add_argument("--only-missing", action=argparse.BooleanOptionalAction, default=True,
                    help="skip questions whose prefixes have answer F1s in the file")
    ap.add_argument("--max-unreproduced", type=int, default=5,
                    help="stop after this many non-reproduced questions in a row (0: never)")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE,
                    help="reproduction check: largest difference (relative above 1)")
    ap.add_argument("--redo", nargs="+", default=[], metavar="QID",
                    help="label these questions again although the labels file has a row for "
                         "them (appended; the new row wins)")
    ap.add_argument("--redo-unreproduced", action="store_true",
                    help="also label again every question whose row did not reproduce the "
                         "file and predates rows recording the replay's states (implies "
                         "--max-unreproduced 0: they are expected not to reproduce)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print what would be labelled and exit (no model, no index)")
    ap.add_argument("--no-progress", action="store_true")
    return ap.parse_args(argv)


def collection_command(own: argparse.Namespace, run: dict) -> list[str]:
    """The collection command's words: --command, the policy's meta, or the file's record."""
    if own.command:
        return shlex.split(own.command)
    if own.policy:
        cmd = Policy.load(own.policy).meta.get("command")
        if not cmd:
            raise ValueError(f"--policy {own.policy}: its meta records no command")
        return shlex.split(cmd)
    if run.get("command"):
        return shlex.split(run["command"])
    raise ValueError(f"{own.npz}: the file records no collection command (written before "
                     "train --save-data kept it); pass --policy FILE or --command '...'")


def setup_problems(data, recipe, setup) -> list[str]:
    """How the rebuilt setup differs from the one the file records (empty: none found)."""
    run = data.run
    if not run:  # a format-1 file records nothing to check; the replay check remains
        return []
    model_id = setup.env.generator.model_id
    now = collection_run(recipe, setup.dataset, setup.env.config, model_id)
    problems = from_data_problems(run, now)
    if run.get("split") and run["split"] != now["split"]:
        problems.append(f"split: file {run['split']!r}, this command {now['split']!r}")
    if run.get("generator_model_id") and run["generator_model_id"] != now["generator_model_id"]:
        problems.append(f"generator_model_id: file {run['generator_model_id']!r}, this "
                        f"reader {now['generator_model_id']!r}")
    return problems


def signal_difference(data, signal) -> str | None:
    """A note when the signal calibrated now is not the one the file records. Not an error:
    it decides sufficiency_check's verdicts, and the per-question check shows whether any
    verdict along a path changed (--max-unreproduced stops a run where many did)."""
    info = getattr(data.calibration, "signal_info", None)
    ours = json.loads(json.dumps(signal.describe())) if signal is not None else None
    if info is None or ours == info:
        return None
    return (f"warning: the sufficiency signal calibrated now differs from the one the "
            f"trajectories were collected under: file {json.dumps(info)}, now "
            f"{json.dumps(ours)}")


def _main(argv: list[str]) -> int:
    own = parse(argv)
    t0 = time.perf_counter()
    try:
        raw = own.npz.read_bytes()
    except OSError as e:
        raise ValueError(f"{own.npz}: cannot read it ({e})") from None
    data = load_training_data_bytes(raw, own.npz)  # hash exactly the bytes that are used
    sha = hashlib.sha256(raw).hexdigest()
    cmd = command_args("train", collection_command(own, data.run))
    args = build_parser().parse_args(cmd)
    args.argv = cmd  # as the run recorded it
    if args.from_data:
        raise ValueError("the command has --from-data: it collected nothing to replay")
    command = relative_command(cmd)
    out = own.out or default_label_path(own.npz)
    shown_npz = relative_command([str(own.npz)], prefix="")
    existing = read_label_file(out)  # read-only here: nothing is changed before the checks
    expected = make_header(sha, command, data.run.get("generator_model_id"), shown_npz)
    if existing.header is not None:  # early: before an index or a model loads
        if not data.run:  # the reader's id is known once it loads (checked again then)
            expected["generator_model_id"] = existing.header.get("generator_model_id")
        check_header(out, existing.header, expected)
    if own.redo_unreproduced:
        own.redo = list(dict.fromkeys(own.redo + unreproduced_without_states(existing.rows)))
        own.max_unreproduced = 0
    plan = plan_labels(data, existing.rows, own.start, own.stop, own.only_missing, own.redo)
    report = {"npz": shown_npz, "labels": relative_command([str(out)], prefix=""),
              **plan.as_dict()}
    if existing.dropped:
        report["dropped_line"] = existing.dropped
    if own.dry_run or not plan.todo:
        print(json.dumps({**report, "dry_run": own.dry_run}))
        return 0
    recipe = training_recipe(args)
    setup, train_qs, signal = training_setup(recipe)  # as train (and warm_cache.py) build it
    problems = setup_problems(data, recipe, setup)
    if problems:
        raise ValueError(f"{shown_npz} was collected under another setup than this command "
                         "rebuilds: " + "; ".join(problems))
    differs = signal_difference(data, signal)
    if differs:
        print(differs, file=sys.stderr, flush=True)
    model_id = setup.env.generator.model_id
    header = make_header(sha, command, redact(model_id) if model_id else None, shown_npz)
    summary = label_questions(data, {q.id: q for q in train_qs}, setup.env, out, header,
                              plan.todo, progress=not own.no_progress,
                              max_unreproduced=own.max_unreproduced or None,
                              tolerance=own.tolerance, redo=own.redo)
    print(json.dumps({**report, **summary, "labels": report["labels"],
                      "n_not_reproduced": len(summary["not_reproduced"]),
                      "n_truncated": len(summary["truncated"]),
                      "signal_as_recorded": differs is None,
                      "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_reporting_errors(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
