"""Fill the LLM call cache from a second process for questions a long ``train`` or ``evaluate``
run will reach later, so that the run replays them from the cache instead of waiting for the
model.

    # evaluate: questions 100.. of the run's list, last one first, into a scratch folder
    python data_scripts/warm_cache.py evaluate --start 100 -- \\
        python -m dynakrag_lite evaluate --data hotpotqa --data-dir ../shared/data \\
        --method ircot --generator qwen2.5-coder-1.5b --limit 150 \\
        --out results/experiments/hotpotqa/qwen2.5-coder-1.5b/ircot

    # train: training questions 180.. in order
    python data_scripts/warm_cache.py train --start 180 -- \\
        --data hotpotqa --data-dir ../shared/data --generator qwen2.5-coder-0.5b \\
        --out results/policies/hotpotqa-qwen2.5-coder-0.5b.joblib --limit 300 \\
        --continuation-questions 80 --sufficiency-signal learned

Everything after ``--`` is the run's own command line, parsed by the project's parser: as
recorded (``python -m dynakrag_lite evaluate ...``, e.g. a summary's ``run.command``), or
without ``python -m dynakrag_lite``, or without the subcommand too. Both processes must use
the same LLM call cache ($DYNAKRAG_CACHE_DIR / $DYNAKRAG_LLM_CACHE; SQLite in WAL mode, safe
for two processes). With one model process each on few cores, set DYNAKRAG_N_THREADS=1.

``evaluate``: builds the run's setup exactly as the command does (``evaluation_setup`` of the
command line: data, split, --offset/--limit, policy and its sufficiency signal, IRCoT's
demonstrations drawn for the whole question list) and evaluates questions ``--start`` ..
``--stop`` of its list into a scratch folder (``--scratch``, default
``runs/warm-cache/<the --out path>``), never into the run's --out folder: last question first
by default, so the run and this process meet in the middle (``--forward`` keeps the run's
order). Every choice is seeded per question, so the scratch run makes the very calls the run
will make for those questions. Questions the run has already written to --out are left out,
and a --out folder whose ``run.json`` records another setup or another question list (the
checks of a resume, ``fingerprint.check_recorded_run``) is refused. The scratch folder is
an ordinary run folder (resumable; its rows are the run's rows for those questions); delete
it once the run is complete.

``train``: builds the setup as ``train`` does (``training_setup`` of the command's recipe,
``dynakrag_lite.training.recipe``: the sufficiency signal calibrated as train calibrates it)
and collects the trajectories of training questions ``--start`` .. ``--stop``, in order, each
with the answer calls its position in the training list gets (``--continuation-questions``).
Nothing is written but cache entries; the policy still comes from ``train``.

A cached reply is the warming process's: with llama.cpp the run takes the replies this process
decoded, which the committed runs found identical to the run's own (greedy decoding).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dynakrag_lite.experiments.cli import (build_parser, command_args,  # noqa: E402
                                           run_reporting_errors)
from dynakrag_lite.experiments.commands import evaluation_setup, training_recipe  # noqa: E402
from dynakrag_lite.experiments.fingerprint import (FingerprintError,  # noqa: E402
                                                   check_recorded_run)
from dynakrag_lite.experiments.selection import selection_of  # noqa: E402
from dynakrag_lite.experiments.folder import (PREDICTIONS_FILE, latest_rows,  # noqa: E402
                                              read_predictions)
from dynakrag_lite.storage import relative_command  # noqa: E402
from dynakrag_lite.training.recipe import training_setup  # noqa: E402
from dynakrag_lite.trajectories import collect  # noqa: E402

USAGE = ("usage: warm_cache.py {train,evaluate} --start N [--stop M] [evaluate: --forward] "
         "[--scratch DIR] -- [python -m dynakrag_lite] [train|evaluate] <the run's arguments>")
SCRATCH_ROOT = Path("runs") / "warm-cache"


def parse_own(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="warm_cache.py", description=__doc__.split("\n\n")[0],
                                 usage=USAGE.removeprefix("usage: "))
    sub = ap.add_subparsers(dest="mode", required=True)
    for mode in ("train", "evaluate"):
        p = sub.add_parser(mode, usage=USAGE.removeprefix("usage: "))
        p.add_argument("--start", type=int, required=True,
                       help="first question to warm: a position in the run's question list")
        p.add_argument("--stop", type=int, default=None,
                       help="end of the slice (exclusive; default: the end of the list)")
        if mode == "evaluate":
            p.add_argument("--forward", action="store_true",
                           help="warm in the run's order (default: last question first)")
            p.add_argument("--scratch", default=None,
                           help="the scratch run folder (default: runs/warm-cache/<the run's "
                           "--out path>); never the run's --out")
    return ap.parse_args(argv)


def same_folder(a: str | Path, b: str | Path) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def default_scratch(out: Path) -> Path:
    """``runs/warm-cache/<out's path, relative to here where it can be, parts joined by
    '-'>``: one scratch folder per run folder, so warming again resumes it."""
    path = Path(out).expanduser()
    try:
        path = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        pass
    parts = [p for p in path.parts if p not in (path.anchor, "..", ".")]
    return SCRATCH_ROOT / "-".join(parts or ["run"])


def check_slice(start: int, stop: int | None, n: int, what: str) -> int:
    """The slice's end; ValueError for a start outside the list."""
    if not 0 <= start < n:
        raise ValueError(f"--start {start}: the run has {n} {what} (positions 0..{n - 1})")
    if stop is not None and stop <= start:
        raise ValueError(f"--stop {stop} must be above --start {start}")
    return n if stop is None else min(stop, n)


def warm_evaluate(own: argparse.Namespace, args: argparse.Namespace, argv: list[str]) -> int:
    if args.replay_only:
        raise ValueError("--replay-only: that run never calls the model; there is nothing to "
                         "warm")
    if own.scratch and args.out and same_folder(own.scratch, args.out):
        raise ValueError(f"--scratch {own.scratch} is the run's --out folder; the warming "
                         "run needs a folder of its own (its rows come in another order)")
    t0 = time.perf_counter()
    run = evaluation_setup(args)
    stop = check_slice(own.start, own.stop, len(run.questions), "questions")
    scratch = Path(own.scratch) if own.scratch else default_scratch(run.out)
    if same_folder(scratch, run.out):
        raise ValueError(f"--scratch {scratch} is the run's --out folder; the warming run "
                         "needs a folder of its own (its rows come in another order)")
    # The run's folder, read only: the checks its resume makes (same setup, same question
    # list), then its finished questions are skipped.
    try:
        check_recorded_run(run.out, run.fingerprint(), selection_of(run.settings),
                           corpus=run.env.retriever.corpus)
    except FingerprintError as e:
        raise ValueError(f"{e}; warming for this command would fill the cache with calls "
                         "that run never makes") from None
    done = {r["id"] for r in latest_rows(read_predictions(run.out / PREDICTIONS_FILE),
                                         errors=False)}
    todo = [q for q in run.questions[own.start:stop] if q.id not in done]
    if not own.forward:
        todo.reverse()
    report = {"scratch": str(scratch), "warmed": len(todo),
              "already_done": len(run.questions[own.start:stop]) - len(todo),
              "first": todo[0].id if todo else None}
    if not todo:  # the run is past the slice: no folder, no call
        print(json.dumps({**report, "seconds": round(time.perf_counter() - t0, 1)}))
        return 0
    info = {**run.run_info,
            "command": relative_command(["data_scripts/warm_cache.py", *argv],
                                        prefix="python"),
            "warms": {"out": relative_command([str(run.out)], prefix=""),
                      "command": run.run_info["command"]}}
    summary = run.run(todo, scratch, run_info=info)
    print(json.dumps({**report, "errors": summary.get("errors"),
                      "seconds": round(time.perf_counter() - t0, 1)}))
    return 0


def warm_train(own: argparse.Namespace, args: argparse.Namespace) -> int:
    if args.from_data:
        raise ValueError("--from-data: that run makes no model call; there is nothing to warm")
    t0 = time.perf_counter()
    setup, train_qs, _ = training_setup(training_recipe(args))  # as cmd_train builds it
    env = setup.env
    stop = check_slice(own.start, own.stop, len(train_qs), "training questions")
    n_answer = args.continuation_questions or None
    for i in range(own.start, stop):
        # One question at a time, with its position in the training list: the answer calls
        # depend on it (--continuation-questions).
        collect([train_qs[i]], env, seed=args.seed, progress=False,
                continuation=args.continuation_target,
                answer_questions=None if n_answer is None else (1 if i < n_answer else 0))
        print(f"warmed question {i} ({train_qs[i].id}) at {time.perf_counter() - t0:.0f} s",
              flush=True)
    return 0


def _main(argv: list[str]) -> int:
    if "--" not in argv:
        parse_own(argv)  # --help (also after the mode) prints the options; else the usage
        raise SystemExit(USAGE)
    cut = argv.index("--")
    own = parse_own(argv[:cut])
    cmd = command_args(own.mode, argv[cut + 1:])
    args = build_parser().parse_args(cmd)
    args.argv = cmd  # what the run's records say it ran
    if own.mode == "evaluate":
        return warm_evaluate(own, args, argv)
    return warm_train(own, args)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_reporting_errors(_main, argv)


if __name__ == "__main__":
    raise SystemExit(main())
