"""A warm-cache re-run of a whole committed experiment against its cold run.

The issue's throughput target: re-running an experiment whose LLM calls are all in the call
cache (dynakrag_lite/cache.py) must be at least ``--target`` (50) times faster than the run
that made those calls. For each committed run folder (``results/experiments/<dataset>/
<generator>/<run>/``) this benchmark:

* reads the command the run recorded (``summary.json``: ``run.command``) and runs it again as
  a subprocess from the project root, ``--out`` replaced by a temp folder (``--data-dir``
  kept as recorded, or replaced by this benchmark's ``--data-dir``; $DYNAKRAG_DATA_DIR is
  passed on);
* replays against a private SNAPSHOT of the call cache (``--cache``, default the library's
  default file: $DYNAKRAG_LLM_CACHE, else $DYNAKRAG_CACHE_DIR or ~/.cache/dynakrag_lite), made
  with SQLite's backup API and handed to the child as $DYNAKRAG_LLM_CACHE: other processes
  writing the shared file cannot blur the count, and the re-run writes nothing into it. The
  library has no replay-only mode that refuses a miss, so misses are counted two ways: the
  snapshot's row count before and after (a stored miss adds a row; a generation cut by the
  time limit is not stored), and the cache's own hit/miss counters
  (:class:`~dynakrag_lite.generators.cache.CallCache` ``hits``/``misses``/``writes``, which also see
  option scoring) read around every question by a thin wrapper: the child is this script in
  ``--child`` mode, which patches ``experiments._run_question`` / ``commands.evaluate`` /
  ``pipeline.build_setup`` to take the readings and the times, then calls
  ``dynakrag_lite.experiments.cli.main`` with the recorded arguments (``--plain`` runs
  ``python -m dynakrag_lite`` itself: no per-question counts, no setup/loop split). Any live
  call is reported, with the questions that made it;
* times the whole wall clock (spawn to exit) and its parts: setup (imports, data, embedder,
  index, model; an index that had to be built is reported apart: encode and build seconds),
  the question loop (``evaluate()``), and the re-run rows' own ``seconds``;
* takes the cold time from the committed ``predictions.jsonl``: the ``seconds`` of the latest
  row of each question, summed (the figure used; cross-checked against ``summary.json``
  ``seconds_mean`` x ``n``). It covers the cold run's question loop only: its setup was not
  recorded, so "whole" ratios are conservative;
* checks the re-run's rows against the committed ones (prediction, EM, F1, support recall,
  and every other field but ``seconds``) and its fingerprint (run.json) against theirs.

    nice -n 5 python benchmarks/bench_warm_rerun.py                 # the two default runs
    python benchmarks/bench_warm_rerun.py results/experiments/musique/qwen2.5-coder-0.5b/oracle
    python benchmarks/bench_warm_rerun.py RUN --limit 5 --out /tmp/w.json   # a quick look

Writes ``--out`` (default results/benchmarks/warm_rerun.json; rewritten after each run) with
the date, command, CPU model, niceness, load averages and versions. ``--strict``: exit 1 when
a run made a live call, differs from the committed one, or misses the target.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Iterable, Sequence

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(p))

from benchlib import (cpu_model, loadavg, portable, recorded_command, shown_path,  # noqa: E402
                      usable_cpus, utc_date, versions)
from dynakrag_lite.storage import atomic_write_json, relative_command  # noqa: E402

DEFAULT_OUT = ROOT / "results" / "benchmarks" / "warm_rerun.json"
DEFAULT_RUNS = ("results/experiments/musique/qwen2.5-coder-0.5b/fixed_k3",
                "results/experiments/2wikimultihopqa/qwen2.5-coder-0.5b/dynakrag")
TARGET = 50.0
CLI_PREFIX = ("python", "-m", "dynakrag_lite")
COMPARED = ("prediction", "em", "f1", "support_recall")  # named in the report per question
TIMING = ("seconds",)  # the only row field that depends on wall-clock time
COUNTERS = ("hits", "misses", "writes", "corrupt")
# installed distributions whose versions the record states (the re-run's whole stack)
VERSIONS = ("llama-cpp-python", "numpy", "scikit-learn", "faiss-cpu", "sentence-transformers",
            "torch", "spacy")


# -- pure helpers (tests/test_bench_warm_rerun.py) -------------------------------------------
def recorded_args(command: str) -> list[str]:
    """The arguments after ``python -m dynakrag_lite`` of a recorded ``evaluate`` command."""
    parts = shlex.split(command)
    if tuple(parts[:3]) != CLI_PREFIX or len(parts) < 4 or parts[3] != "evaluate":
        raise ValueError(f"not a recorded `python -m dynakrag_lite evaluate` command: "
                         f"{command!r}")
    return parts[3:]


def set_option(args: Sequence[str], flag: str, value: str | None) -> list[str]:
    """``args`` with every ``flag VALUE`` / ``flag=VALUE`` dropped and ``flag value``
    appended (nothing appended when ``value`` is None: the option is removed)."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = True
            continue
        if a.startswith(flag + "="):
            continue
        out.append(a)
    return out + ([flag, str(value)] if value is not None else [])


def latest(rows: Iterable[dict]) -> dict[str, dict]:
    """The last row of each id (the row a summary counts), in first-appearance order."""
    out: dict[str, dict] = {}
    for r in rows:
        out[r["id"]] = r
    return out


def cold_seconds(rows: Sequence[dict], summary: dict, ids: Sequence[str] | None = None
                 ) -> dict:
    """The committed run's own question time. ``seconds``: the latest row of each question
    (of ``ids``, default all) summed, the figure used; beside it every row's seconds (retried
    error rows included) and the summary's ``seconds_mean`` x ``n`` (all questions)."""
    last = latest(rows)
    keep = list(last) if ids is None else [i for i in ids if i in last]
    chosen = [last[i] for i in keep]
    used = sum(float(r.get("seconds") or 0.0) for r in chosen)
    n = summary.get("n")
    mean = summary.get("seconds_mean")
    return {
        "seconds": round(used, 3),
        "source": "committed predictions.jsonl: 'seconds' of the latest row of each "
                  "re-run question, summed",
        "questions": len(chosen),
        "errors": sum(1 for r in chosen if "error" in r),
        "all_rows_seconds": round(sum(float(r.get("seconds") or 0.0) for r in rows), 3),
        "summary_seconds_mean_x_n": round(mean * n, 3) if mean is not None and n else None,
        "summary_n": n,
        "per_question_mean": round(used / len(chosen), 3) if chosen else None,
    }


def compare_rows(committed: Sequence[dict], rerun: Sequence[dict],
                 ids: Sequence[str] | None = None) -> dict:
    """The re-run's latest rows against the committed ones, per question: ``mismatches``
    lists every (id, field) of :data:`COMPARED` that differs (an error row on either side is
    a mismatch of field ``error``); ``other_fields_differ`` the ids equal on those fields but
    not on the whole row less ``seconds`` (trace, documents, ledger...)."""
    a, b = latest(committed), latest(rerun)
    want = list(a) if ids is None else [i for i in ids if i in a]
    mismatches: list[dict] = []
    other: dict[str, list[str]] = {}
    same_rows = 0
    missing = [i for i in want if i not in b]
    for i in want:
        if i not in b:
            continue
        x, y = a[i], b[i]
        if "error" in x or "error" in y:
            if x.get("error") != y.get("error"):
                mismatches.append({"id": i, "field": "error", "committed": x.get("error"),
                                   "rerun": y.get("error")})
                continue
        bad = [f for f in COMPARED if x.get(f) != y.get(f)]
        for f in bad:
            mismatches.append({"id": i, "field": f, "committed": x.get(f), "rerun": y.get(f)})
        fields = sorted(k for k in set(x) | set(y)
                        if k not in TIMING and x.get(k) != y.get(k))
        if not fields:
            same_rows += 1
        elif not bad:
            other[i] = fields
    return {"questions": len(want), "identical_rows_but_seconds": same_rows,
            "missing_in_rerun": missing,
            "extra_in_rerun": [i for i in b if i not in set(want)],
            "mismatch_questions": sorted({m["id"] for m in mismatches}),
            "mismatches": mismatches, "other_fields_differ": other,
            "equal": not mismatches and not missing and not other}


def live_calls(child: dict | None, rows_before: int, rows_after: int) -> dict:
    """Live calls of a re-run: the snapshot's new rows and, from the child's readings of the
    call cache's counters, hits and misses in the questions and before them (setup), and the
    questions that made a live call (a miss)."""
    out: dict[str, Any] = {"snapshot_rows_before": rows_before,
                           "snapshot_rows_after": rows_after,
                           "new_rows": rows_after - rows_before}
    if child is None:
        out.update({"counted": "snapshot rows only (--plain)",
                    "live_calls": None, "live": rows_after != rows_before})
        return out
    qs = child.get("questions", [])
    tot = {k: sum(q.get(k, 0) for q in qs) for k in COUNTERS}
    setup = (child.get("evaluate") or {}).get("cache_before") or {}
    whole = child.get("cache_end") or {}
    live_q = [{"id": q["id"], "misses": q["misses"], "writes": q["writes"],
               "backend_generations": q.get("backend_generations")}
              for q in qs if q.get("misses") or q.get("backend_generations")]
    after_loop = {k: whole.get(k, 0) - setup.get(k, 0) - tot[k] for k in COUNTERS} \
        if whole else None
    misses = tot["misses"] + setup.get("misses", 0) + \
        (after_loop["misses"] if after_loop else 0)
    out.update({
        "counted": "CallCache counters read around each question, plus the snapshot rows",
        "cache_file_seen_by_child": child.get("cache_path"),
        "questions": {**tot, "lookups": tot["hits"] + tot["misses"],
                      "backend_generations": sum(q.get("backend_generations") or 0
                                                 for q in qs)},
        "setup": {k: setup.get(k, 0) for k in COUNTERS},
        "after_loop": after_loop,
        "live_calls": misses,
        "questions_with_live_calls": live_q,
        "live": bool(misses) or rows_after != rows_before
        or any(q.get("backend_generations") for q in qs),
    })
    return out


def ratio(cold: float, warm: float | None) -> float | None:
    return round(cold / warm, 2) if warm and warm > 0 else None


def timings(child: dict | None, t_spawn: float, t_exit: float,
            rerun_rows: Sequence[dict]) -> dict:
    """The re-run's wall clock and its parts (epoch seconds from the parent and the child)."""
    wall = t_exit - t_spawn
    secs = [float(r.get("seconds") or 0.0) for r in rerun_rows]
    out: dict[str, Any] = {"wall_seconds": round(wall, 3),
                           "question_seconds_sum": round(sum(secs), 3),
                           "first_question_seconds": round(secs[0], 3) if secs else None}
    ev = (child or {}).get("evaluate") or {}
    if not ev.get("t0") or not ev.get("t1"):
        out.update({"setup_seconds": None, "loop_seconds": None, "index": None})
        return out
    loop = ev["t1"] - ev["t0"]
    setup = ev["t0"] - t_spawn
    idx = (child or {}).get("index") or {}
    rebuilt = idx.get("loaded_from_disk") is False
    index_build = (idx.get("encode_seconds", 0.0) + idx.get("build_seconds", 0.0)) \
        if rebuilt else 0.0
    bs = (child or {}).get("build_setup") or {}
    qs = (child or {}).get("questions") or []
    first = (qs[0]["t1"] - qs[0]["t0"]) if qs else None
    out.update({
        "setup_seconds": round(setup, 3),
        "setup_parts": {
            "interpreter_and_imports": round(child["t_start_main"] - t_spawn, 3)
            if child.get("t_start_main") else None,
            "build_setup": round(bs["t1"] - bs["t0"], 3) if bs.get("t1") else None,
            "after_build_setup": round(ev["t0"] - bs["t1"], 3) if bs.get("t1") else None,
        },
        "index": {**idx, "rebuilt": rebuilt, "rebuild_seconds": round(index_build, 3)},
        "loop_seconds": round(loop, 3),
        "loop_seconds_after_first_question": round(loop - first, 3) if first else None,
        "exit_seconds": round(t_exit - ev["t1"], 3),
        "wall_seconds_without_index_build": round(wall - index_build, 3),
    })
    return out


def verdict(cold: float, warm: dict, target: float) -> dict:
    """Ratios of the cold question time to the warm re-run's parts, and the target."""
    r = {"whole": ratio(cold, warm["wall_seconds"]),
         "whole_without_index_build": ratio(cold, warm.get("wall_seconds_without_index_build")),
         "without_setup": ratio(cold, warm.get("loop_seconds")),
         "question_seconds": ratio(cold, warm["question_seconds_sum"])}
    return {"ratios": r, "target": target,
            "target_met_whole": r["whole"] is not None and r["whole"] >= target,
            "target_met_without_setup": (r["without_setup"] or r["question_seconds"] or 0)
            >= target}


def sqlite_rows(path: Path) -> int:
    with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as c:
        return c.execute("SELECT COUNT(*) FROM calls").fetchone()[0]


def snapshot_cache(src: Path, dst: Path) -> int:
    """Copy the call cache ``src`` to ``dst`` (SQLite's online backup: consistent while other
    processes write ``src``); returns the row count of the copy."""
    if not src.is_file():
        raise SystemExit(f"call cache {src} not found: nothing to replay (--cache)")
    if dst.exists():
        dst.unlink()
    with closing(sqlite3.connect(f"{src.resolve().as_uri()}?mode=ro", uri=True)) as s, \
            closing(sqlite3.connect(str(dst))) as d:
        s.backup(d)
    return sqlite_rows(dst)


# -- the child: the recorded command with readings around it ---------------------------------
def _find(gen: Any, attr: str) -> Any:
    """The first object on ``gen``'s ``.inner`` chain that has ``attr`` (wrappers delegate)."""
    seen = 0
    while gen is not None and seen < 10:
        if attr == "cache" and getattr(gen, "cache", None) is not None \
                and hasattr(gen, "inner"):
            return gen.cache
        if attr != "cache" and hasattr(gen, attr):
            return gen
        gen, seen = getattr(gen, "inner", None), seen + 1
    return None


def _counters(cache: Any, backend: Any) -> dict:
    out = {k: int(getattr(cache, k, 0) or 0) for k in COUNTERS} if cache is not None else {}
    out["backend_generations"] = int(getattr(backend, "live_calls", 0) or 0) \
        if backend is not None else None
    return out


def _minus(a: dict, b: dict) -> dict:
    return {k: (a[k] - b[k]) if a.get(k) is not None and b.get(k) is not None else None
            for k in a}


def child_main(report_path: str, argv: list[str]) -> int:
    """``python -m dynakrag_lite <argv>`` in this process, with the readings the parent needs
    written to ``report_path`` at exit. Patches only wrap; they change no result."""
    import atexit
    rec: dict[str, Any] = {"t_start_main": time.time(), "questions": []}
    from dynakrag_lite.experiments import cli, commands, run as experiments
    from dynakrag_lite import pipeline
    held: dict[str, Any] = {"cache": None, "backend": None}

    orig_build = pipeline.build_setup

    def build_setup(*a, **k):
        t0 = time.time()
        setup = orig_build(*a, **k)
        rec["build_setup"] = {"t0": t0, "t1": time.time()}
        r = setup.env.retriever
        rec["index"] = {f: getattr(r, f, None) for f in (
            "loaded_from_disk", "load_seconds", "encode_seconds", "build_seconds")}
        rec["index"]["dir"] = str(getattr(r, "index_dir", ""))
        return setup

    orig_eval = experiments.evaluate

    def evaluate(questions, method, env, *a, **k):
        held["cache"] = _find(env.generator, "cache")
        held["backend"] = _find(env.generator, "live_calls")
        rec["cache_path"] = str(getattr(held["cache"], "path", None))
        rec["evaluate"] = {"t0": time.time(), "questions": len(questions),
                           "cache_before": _counters(held["cache"], held["backend"])}
        try:
            return orig_eval(questions, method, env, *a, **k)
        finally:
            rec["evaluate"]["t1"] = time.time()

    orig_question = experiments._run_question

    def run_question(q, method, env, *a, **k):
        before = _counters(held["cache"], held["backend"])
        t0 = time.time()
        out = orig_question(q, method, env, *a, **k)
        rec["questions"].append({"id": q.id, "t0": t0, "t1": time.time(),
                                 **_minus(_counters(held["cache"], held["backend"]), before)})
        return out

    def dump() -> None:
        rec["t_end"] = time.time()
        if held["cache"] is not None:
            rec["cache_end"] = _counters(held["cache"], held["backend"])
        torch = sys.modules.get("torch")  # the query/sentence encoder's intra-op threads
        rec["torch_threads"] = torch.get_num_threads() if torch is not None else None
        atomic_write_json(report_path, rec, indent=None)

    pipeline.build_setup = build_setup
    commands.evaluate = evaluate  # the name the command's EvaluationSetup.run calls
    experiments._run_question = run_question
    atexit.register(dump)
    return cli.main(argv)


# -- one run ---------------------------------------------------------------------------------
def rerun_command(run_dir: Path, out_dir: Path, data_dir: str | None, limit: int | None
                  ) -> tuple[str, list[str]]:
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    recorded = summary["run"]["command"]
    args = set_option(recorded_args(recorded), "--out", str(out_dir))
    if data_dir is not None:
        args = set_option(args, "--data-dir", data_dir)
    if limit is not None:
        args = set_option(args, "--limit", str(limit))
    return recorded, args


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-n:]
    except OSError:
        return ""


def bench_run(run_dir: Path, args: argparse.Namespace, work: Path, cache_src: Path) -> dict:
    from dynakrag_lite.experiments.fingerprint import fingerprint_diff
    from dynakrag_lite.experiments.folder import read_predictions
    name = "-".join(run_dir.resolve().parts[-3:])
    out_dir = work / name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    committed = read_predictions(run_dir / "predictions.jsonl")
    recorded, cli_args = rerun_command(run_dir, out_dir, args.data_dir, args.limit)
    snap = work / f"{name}.llm_calls.sqlite"
    rows_before = snapshot_cache(cache_src, snap)
    env = {**os.environ, "DYNAKRAG_LLM_CACHE": str(snap)}
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    report_path = work / f"{name}.child.json"
    if report_path.exists():
        report_path.unlink()
    if args.plain:
        cmd = [sys.executable, "-m", "dynakrag_lite", *cli_args]
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(report_path),
               "--", *cli_args]
    log_out, log_err = work / f"{name}.stdout.log", work / f"{name}.stderr.log"
    print(f"{run_dir}: {len(latest(committed))} committed questions; re-running "
          f"(cache snapshot: {rows_before} rows)", flush=True)
    with open(log_out, "wb") as fo, open(log_err, "wb") as fe:
        t_spawn = time.time()
        code = subprocess.run(cmd, cwd=ROOT, env=env, stdout=fo, stderr=fe).returncode
        t_exit = time.time()
    rows_after = sqlite_rows(snap)
    child = None
    if not args.plain and report_path.is_file():
        child = json.loads(report_path.read_text(encoding="utf-8"))
    rerun = read_predictions(out_dir / "predictions.jsonl")
    rerun_latest = list(latest(rerun).values())
    ids = list(latest(committed))[:args.limit] if args.limit else list(latest(committed))
    cold = cold_seconds(committed, summary, ids)
    warm = timings(child, t_spawn, t_exit, rerun_latest)
    warm["exit_code"] = code
    warm["torch_threads"] = (child or {}).get("torch_threads")
    res: dict[str, Any] = {
        "run": os.path.relpath(run_dir.resolve(), ROOT),
        "recorded_command": recorded,
        "rerun_command": relative_command(cli_args, cwd=ROOT),
        "n_questions": len(ids), "n_rerun_rows": len(rerun_latest),
        # an incomplete committed run: the re-run answers its missing questions live
        "committed_complete": summary.get("run", {}).get("complete"),
        "cold": {**cold, "note": "the cold run's question loop only: its setup (model and "
                                 "index loading) was not recorded, so the whole-run ratio "
                                 "is conservative; a cold run that already hit the cache for "
                                 "some calls would make it more so"},
        "warm": warm,
        "calls": live_calls(child, rows_before, rows_after),
        "predictions": compare_rows(committed, rerun, ids),
    }
    fp_old, fp_new = (run_dir / "run.json"), (out_dir / "run.json")
    if fp_old.is_file() and fp_new.is_file():
        res["fingerprint_diff"] = fingerprint_diff(
            json.loads(fp_old.read_text())["fingerprint"],
            json.loads(fp_new.read_text())["fingerprint"])
    if (out_dir / "summary.json").is_file():
        s2 = json.loads((out_dir / "summary.json").read_text(encoding="utf-8"))
        res["summary_means"] = {k: {"committed": summary.get(k), "rerun": s2.get(k)}
                                for k in ("n", "em", "f1", "support_recall",
                                          "llm_calls_mean", "seconds_mean")}
    res.update(verdict(cold["seconds"], warm, args.target))
    if code != 0:
        res["child_stderr_tail"] = _tail(log_err)
        print(f"  the re-run exited with code {code}:\n{res['child_stderr_tail']}",
              file=sys.stderr)
    return res


# -- main -------------------------------------------------------------------------------------
def print_table(report: dict) -> None:
    hdr = (f"{'run':<58}{'q':>4}{'cold s':>9}{'warm s':>8}{'setup':>7}{'loop':>7}"
           f"{'x whole':>8}{'x loop':>8}{'live':>6}{'same':>6}")
    print(hdr)
    print("-" * len(hdr))
    for r in report["runs"]:
        w, v = r["warm"], r["ratios"]
        fmt = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
        live = r["calls"]["live_calls"]
        print(f"{r['run'][-58:]:<58}{r['n_questions']:>4}{r['cold']['seconds']:>9.1f}"
              f"{w['wall_seconds']:>8.1f}{fmt(w.get('setup_seconds')):>7}"
              f"{fmt(w.get('loop_seconds')):>7}{fmt(v['whole']):>8}"
              f"{fmt(v['without_setup'] or v['question_seconds']):>8}"
              f"{'?' if live is None else live:>6}"
              f"{'yes' if r['predictions']['equal'] else 'NO':>6}")
    print(f"target {report['settings']['target']:g}x: whole "
          f"{[r['target_met_whole'] for r in report['runs']]}, without setup "
          f"{[r['target_met_without_setup'] for r in report['runs']]}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        if len(argv) < 3 or argv[2] != "--":
            raise SystemExit("usage: bench_warm_rerun.py --child REPORT.json -- ARGS...")
        return child_main(argv[1], argv[3:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="*", default=list(DEFAULT_RUNS),
                    help="committed run folders (default: %(default)s)")
    ap.add_argument("--cache", type=Path, default=None,
                    help="call cache to replay (default: the library's default file)")
    ap.add_argument("--data-dir", default=None,
                    help="replace the recorded --data-dir (default: as recorded)")
    ap.add_argument("--limit", type=int, default=None,
                    help="re-run only the first N questions (a quick look; the cold time "
                    "is then summed over the same questions)")
    ap.add_argument("--target", type=float, default=TARGET)
    ap.add_argument("--plain", action="store_true",
                    help="run `python -m dynakrag_lite` itself: misses from the snapshot's "
                    "row count only, no setup/loop split")
    ap.add_argument("--work-dir", type=Path, default=None,
                    help="keep the re-run folders, cache snapshots and logs here "
                    "(default: a temp folder, removed)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 on a live call, a mismatch or a missed target")
    args = ap.parse_args(argv)
    runs = [Path(r) if Path(r).is_absolute() else ROOT / r for r in args.runs]
    for r in runs:
        if not (r / "summary.json").is_file() or not (r / "predictions.jsonl").is_file():
            ap.error(f"{r}: not a run folder (summary.json and predictions.jsonl)")
    from dynakrag_lite.generators.cache import default_cache_path
    cache_src = (args.cache or default_cache_path()).expanduser()
    report: dict[str, Any] = {
        "benchmark": "warm-cache re-run of a committed experiment vs its cold run",
        # the thread settings are in "settings", not in the command
        "command": recorded_command(argv, __file__, env_keys=()),
        "date": utc_date(), "cpu_model": cpu_model(), "cpus": os.cpu_count(),
        "cpus_usable": usable_cpus(), "platform": platform.platform(),
        "versions": versions(VERSIONS, metadata=True),
        "machine": {"loadavg_start": loadavg(),
                    "loadavg_end": None, "niceness": os.nice(0),
                    "note": "load averages over 1/5/15 min; a load near or above the usable "
                            "cores means the warm seconds include waiting for a core"},
        "settings": {"target": args.target, "cache_source": str(cache_src),
                     "cache_replayed": "a private snapshot per run (SQLite backup), given "
                                       "to the child as $DYNAKRAG_LLM_CACHE",
                     "mode": "plain" if args.plain else "instrumented (--child wrapper)",
                     "limit": args.limit, "data_dir": args.data_dir,
                     "DYNAKRAG_DATA_DIR": os.environ.get("DYNAKRAG_DATA_DIR"),
                     **{v: os.environ.get(v) for v in ("DYNAKRAG_N_THREADS",
                                                       "OMP_NUM_THREADS")}},
        "runs": [],
    }
    t0 = time.perf_counter()
    tmp = None
    if args.work_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="warm-rerun-")
        work = Path(tmp.name)
    else:
        work = args.work_dir
        work.mkdir(parents=True, exist_ok=True)
    try:
        for r in runs:
            report["runs"].append(bench_run(r, args, work, cache_src))
            report["machine"]["loadavg_end"] = loadavg()
            report["total_wall_seconds"] = round(time.perf_counter() - t0, 1)
            atomic_write_json(args.out, portable(report))  # a kill keeps the finished runs
    finally:
        if tmp is not None:
            tmp.cleanup()
    print_table(report)
    print(f"wrote {shown_path(args.out)}")
    bad = [r["run"] for r in report["runs"]
           if r["calls"]["live"] or not r["predictions"]["equal"] or not r["target_met_whole"]
           or r["warm"]["exit_code"] != 0]
    if bad:
        print(f"not a clean warm re-run at {args.target:g}x: {bad}", file=sys.stderr)
    return 1 if args.strict and bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
