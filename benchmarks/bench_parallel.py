"""Two processes with one llama.cpp thread each, against one process with two threads.

On a 2-core machine a run can spend its cores two ways: one process whose llama.cpp uses 2
threads, or two processes (each a share of the questions) with 1 thread each. llama.cpp's
threads synchronise at every layer, so the second thread buys less than a second process
would; this benchmark measures both on the same questions and methods.

Each configuration starts fresh worker processes (``--worker``) that build the library's
setup, load the model, and run their share of the questions through the same code as
``python -m dynakrag_lite evaluate`` (:func:`bench_prefix_reuse.prepare_method` and
:func:`bench_prefix_reuse.run_method_rows`: a fresh, empty call cache per method, so every
call is live). ``1x2``: one worker, ``DYNAKRAG_N_THREADS=2``, every question. ``2x1``: two
workers at once, ``DYNAKRAG_N_THREADS=1``, the even and the odd questions. Reported per
configuration: the wall seconds of the question loops (first loop start to last loop end,
model loading excluded), the wall seconds from spawn to exit, questions per hour, and the
LLM seconds the workers' calls took. The configurations run in alternating order over
``--rounds`` rounds, so drift in machine load hits both.

    python benchmarks/bench_parallel.py                       # a quiet machine: nothing else running
    python benchmarks/bench_parallel.py --quick               # smoke: smollm2-135m, library, 2 questions

Writes ``--out`` (default results/benchmarks/parallel.json) with the date, command, CPU model,
load averages and every worker's per-question rows.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(p))

from benchlib import cpu_model, loadavg, recorded_command, utc_date, versions  # noqa: E402
from dynakrag_lite.storage import atomic_write_json  # noqa: E402

DEFAULT_OUT = ROOT / "results" / "benchmarks" / "parallel.json"
CONFIGS = {"1x2": (1, 2), "2x1": (2, 1)}  # name -> (processes, llama.cpp threads each)
QUICK = {"generator": "smollm2-135m", "dataset": "library", "n": 2, "methods": "fixed_k"}
# The split the workers' build_setup makes (its defaults, as `evaluate` without --n-eval or
# --split-seed); the parent lists the same questions from the data alone (evaluation_ids).
N_EVAL, SPLIT_SEED = 100, 0


def autogroup() -> int | None:
    """Linux's sched_autogroup_enabled (None where absent). With autogroup on, the kernel
    shares the CPU between sessions first and applies nice only within a session, so a niced
    process started from another shell still takes its session's share: a "quiet machine"
    needs autogroup off (``echo 0 > /proc/sys/kernel/sched_autogroup_enabled``) or no other
    session running."""
    try:
        return int(Path("/proc/sys/kernel/sched_autogroup_enabled").read_text())
    except (OSError, ValueError):
        return None


# -- pure helpers (tests/test_bench_parallel.py) ---------------------------------------------
def shares(ids: Sequence[str], processes: int) -> list[list[str]]:
    """Question ids dealt round-robin to ``processes`` workers (every id exactly once)."""
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    return [list(ids[i::processes]) for i in range(processes)]


def evaluation_ids(dataset: str, data_dir: str | None, n: int) -> list[str]:
    """The ids of the first ``n`` evaluation questions of ``dataset``: ``setup.eval[:n]`` of
    the workers' ``build_setup(..., n_eval=N_EVAL, split_seed=SPLIT_SEED)``, taken from the
    data file alone through the CLI's split (``--n-eval``/``--split-seed``/``--limit``), so the
    parent loads no embedder, index or model."""
    from dynakrag_lite.pipeline import split_ids
    from dynakrag_lite.data.sources import load_dataset
    if n < 1:
        raise ValueError(f"--n must be >= 1, got {n}")
    questions = load_dataset(dataset, data_root=data_dir)
    ids, _ = split_ids(questions, "eval", N_EVAL, SPLIT_SEED, None, n)
    return ids


def combine(workers: Sequence[dict], spawn_wall: float) -> dict:
    """One configuration's figures from its workers' reports: loop wall from the first loop's
    start to the last loop's end (so model loading is excluded), throughput over it."""
    if not workers:
        raise ValueError("no worker reports")
    start = min(w["loop_start"] for w in workers)
    end = max(w["loop_end"] for w in workers)
    rows = [r for w in workers for m in w["methods"].values() for r in m["rows"]]
    n = len(rows)
    loop_wall = end - start
    return {
        "questions_x_methods": n,
        "errors": sum(1 for r in rows if r.get("error")),
        "loop_wall_seconds": round(loop_wall, 2),
        "spawn_to_exit_seconds": round(spawn_wall, 2),
        "setup_seconds_max": round(max(w["setup_seconds"] for w in workers), 2),
        "per_hour": round(3600 * n / loop_wall, 1) if loop_wall > 0 else None,
        "llm_seconds": round(sum(r["llm_seconds"] for r in rows), 2),
        "prompt_tokens_evaluated": sum(r["prompt_tokens_evaluated"] for r in rows),
        "completion_tokens": sum(r["completion_tokens"] for r in rows),
    }


def agreement(a: dict, b: dict) -> dict:
    """How many (method, question) pairs got the same F1 under two configurations (thread
    counts change llama.cpp's float reductions, so greedy outputs may differ)."""
    def f1s(cfg: dict) -> dict:
        return {(m, r["id"]): r["f1"] for w in cfg["workers"]
                for m, mm in w["methods"].items() for r in mm["rows"]}
    fa, fb = f1s(a), f1s(b)
    common = sorted(set(fa) & set(fb))
    return {"pairs": len(common), "same_f1": sum(1 for k in common if fa[k] == fb[k])}


# -- worker -----------------------------------------------------------------------------------
def worker(args: argparse.Namespace) -> int:
    """Run this worker's share of the questions and write its report to ``--worker-out``."""
    t0 = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from bench_prefix_reuse import prepare_method, run_method_rows
    from dynakrag_lite.generators.spec import make_generator
    from dynakrag_lite.pipeline import build_setup

    setup = build_setup(args.dataset, generator=None, data_dir=args.data_dir,
                        n_eval=N_EVAL, split_seed=SPLIT_SEED, show_progress=False)
    raw = make_generator(args.generator, cache=False)
    by_id = {q.id: q for q in setup.eval}
    ids = [i for i in args.ids.split(",") if i]
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise SystemExit(f"--ids: not in {args.dataset}'s evaluation split: {missing[:3]}")
    questions = [by_id[i] for i in ids]
    eval_qs = setup.eval[:args.n]  # the same evaluated set in every worker (selector check)
    opts = SimpleNamespace(generator=args.generator, compressor="auto")
    report: dict[str, Any] = {"pid": os.getpid(), "threads": raw.n_threads,
                              "setup_seconds": time.perf_counter() - t0, "methods": {}}
    report["loop_start"] = time.time()
    with tempfile.TemporaryDirectory(prefix="bench-parallel-") as tmp:
        for method in [m for m in args.methods.split(",") if m]:
            env, settings, policy, demos, skip = prepare_method(method, setup, raw, eval_qs,
                                                                opts, Path(tmp))
            if skip:
                env.generator.cache.close()
                raise SystemExit(f"{method}: {skip}")
            rows = run_method_rows(method, env, raw, policy, demos, questions)
            env.generator.cache.close()
            report["methods"][method] = {"settings": settings, "rows": rows}
    report["loop_end"] = time.time()
    atomic_write_json(Path(args.worker_out), report)
    return 0


# -- orchestration ----------------------------------------------------------------------------
def run_config(name: str, ids: Sequence[str], args: argparse.Namespace, tmp: Path,
               round_no: int) -> dict:
    processes, threads = CONFIGS[name]
    env = {**os.environ, "DYNAKRAG_N_THREADS": str(threads)}
    procs, outs = [], []
    t0 = time.perf_counter()
    for i, share in enumerate(shares(ids, processes)):
        out = tmp / f"{name}-r{round_no}-w{i}.json"
        outs.append(out)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker",
               "--worker-out", str(out), "--ids", ",".join(share),
               "--generator", args.generator, "--dataset", args.dataset,
               "--methods", args.methods, "--n", str(args.n)]
        if args.data_dir:
            cmd += ["--data-dir", args.data_dir]
        procs.append(subprocess.Popen(cmd, env=env))
    codes = [p.wait() for p in procs]
    spawn_wall = time.perf_counter() - t0
    if any(codes):
        raise SystemExit(f"{name}: worker exit codes {codes}")
    workers = [json.loads(o.read_text()) for o in outs]
    return {"processes": processes, "threads_each": threads, "round": round_no,
            **combine(workers, spawn_wall), "workers": workers}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--generator", default=None, help="default qwen2.5-coder-0.5b")
    ap.add_argument("--dataset", default=None, help="default: hotpotqa when found, else library")
    ap.add_argument("--data-dir", default=None, help="default: $DYNAKRAG_DATA_DIR")
    ap.add_argument("--n", type=int, default=None,
                    help="the first N evaluation questions (default 6)")
    ap.add_argument("--methods", default=None, help="default fixed_k,ircot,dynakrag")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--quick", action="store_true", help="smoke test (explicit options win)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ids", default="", help=argparse.SUPPRESS)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)
    defaults = QUICK if args.quick else {"generator": "qwen2.5-coder-0.5b", "n": 6,
                                         "methods": "fixed_k,ircot,dynakrag"}
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    from bench_prefix_reuse import VERSIONS, default_dataset  # the same code is measured
    args.dataset = args.dataset or default_dataset(args.data_dir)
    try:
        ids = evaluation_ids(args.dataset, args.data_dir, args.n)
    except ValueError as e:  # DataError too: a missing or unreadable data file
        ap.error(str(e))

    report: dict[str, Any] = {
        "benchmark": "2 processes x 1 llama.cpp thread vs 1 process x 2 threads",
        # no DYNAKRAG_N_THREADS: each configuration sets its workers' own
        "command": recorded_command(argv, __file__, env_keys=()),
        "date": utc_date(), "cpu_model": cpu_model(), "cpus": os.cpu_count(),
        "versions": versions(VERSIONS),
        "loadavg_start": loadavg(),
        "sched_autogroup_enabled": autogroup(),
        "settings": {"generator": args.generator, "dataset": args.dataset,
                     "question_ids": ids, "methods": args.methods.split(","),
                     "rounds": args.rounds,
                     "call_cache": "fresh and empty per worker and method: every call live"},
        "runs": [],
    }
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-parallel-") as tmp:
        for r in range(args.rounds):
            order = list(CONFIGS) if r % 2 == 0 else list(reversed(CONFIGS))
            for name in order:
                print(f"round {r}: {name}", flush=True)
                report["runs"].append({"config": name,
                                       **run_config(name, ids, args, Path(tmp), r)})
                report["loadavg_end"] = loadavg()
                report["total_wall_seconds"] = round(time.perf_counter() - t_start, 1)
                atomic_write_json(args.out, report)  # a kill keeps the finished rounds
    summary = {}
    for name in CONFIGS:
        runs = [x for x in report["runs"] if x["config"] == name]
        summary[name] = {"loop_wall_seconds": [x["loop_wall_seconds"] for x in runs],
                         "per_hour": [x["per_hour"] for x in runs]}
    best = min(CONFIGS, key=lambda c: sum(summary[c]["loop_wall_seconds"]))
    a, b = (next(x for x in report["runs"] if x["config"] == c) for c in CONFIGS)
    report["summary"] = {**summary, "faster": best,
                         "speedup_2x1_over_1x2": round(
                             sum(summary["1x2"]["loop_wall_seconds"])
                             / sum(summary["2x1"]["loop_wall_seconds"]), 3),
                         "f1_agreement": agreement(a, b)}
    atomic_write_json(args.out, report)
    for name in CONFIGS:
        print(f"{name}: loop wall {summary[name]['loop_wall_seconds']} s, "
              f"{summary[name]['per_hour']} question-methods per hour")
    print(f"faster: {best}; speedup of 2x1 over 1x2: "
          f"{report['summary']['speedup_2x1_over_1x2']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
