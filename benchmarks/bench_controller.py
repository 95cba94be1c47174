"""The controller's own overhead: how long one learned decision takes, without any LLM call.

    nice -n 19 python benchmarks/bench_controller.py [--policy auto|train|PATH]

Target: a controller decision (``valid_actions`` + ``Policy.choose``, what
:func:`dynakrag_lite.controller.run_controller` does per step) under 2 ms.

States: the embedded ``library`` dataset, its dense index, no generator. From each of a few
held-out questions, retrieval-only actions (retrieve_more, bridge_entity_expand) reach states
holding 3, 6, 9 and 12 documents.

Policy (``--policy``):

* ``train``: collect trajectories on ~10 library training questions with a scripted reader
  (canned replies, no model; ``continuation="sr"``, so no answer calls) and fit the policy with
  the paper's forests (300 trees, min leaf 8, seed 13) through :func:`train_policy` and its
  default ``n_jobs=-1``, as ``python -m dynakrag_lite train`` does (train_policy fits in
  parallel, then sets ``n_jobs=1`` on the fitted forests).
* ``PATH``: load that policy file (:meth:`Policy.load`, manifest rules apply).
* ``auto`` (default): ``results/policies/hotpotqa-qwen2.5-coder-0.5b.joblib`` when it exists
  and loads, else ``train`` (the reason is recorded).

Timed per state size with ``time.perf_counter`` (wall) and ``time.process_time`` (CPU of the
whole process, so the worker threads of an ``n_jobs=-1`` predict count too), over many
repetitions cycling through that size's states: state_features, valid_actions, the phi matrix,
the cost model over A(s), then Policy.values, Policy.continue_gain, Policy.choose and the full
decision with five predictors for the same fitted forests (copies; the policy is not changed):

* ``library (FlatForest)``: the policy as the library runs it, its forests predicted through
  :class:`dynakrag_lite.forest.FlatForest` (``policy.USE_FLAT_FOREST``, the default);
* ``sklearn n_jobs=-1`` and ``sklearn n_jobs=1``: the forests' own predict (the library's
  path before FlatForest, with the flat path switched off), with the n_jobs of a policy
  trained before/after train_policy set n_jobs=1;
* two benchmark-only stand-ins that skip sklearn's per-call joblib dispatch
  (:class:`TreeLoopForest`, :class:`FlatForest` below), to show where the time goes.

Their agreement with the forests' own predict with ``n_jobs=1`` on the timed rows is recorded
(``max_abs_diff_vs_forest_predict``, and ``bit_identical_to_forest_predict``: the library's
FlatForest must be exact; sklearn with n_jobs=-1 adds the trees in thread order, so it may
differ from itself in the last bit).

At 12 documents the paper's caps (max_docs=12, max_steps=4) leave only stop_answer, and
run_controller stops there without calling choose; the timed A(s) therefore comes from the
same config with the caps relaxed (max_docs=16, max_steps=8), a worst case with every
applicable action. Both action sets are recorded.

Writes results/benchmarks/controller.json (figures, command, date, versions, CPU model, load
averages before and after, verdict) and prints a table. Run it niced on a busy machine: the
wall-clock figures then include preemption by other processes, the CPU figures do not.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import platform
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(p))

from benchlib import (loadavg, recorded_command, shown_path, usable_cpus,  # noqa: E402
                      utc_date, versions)

TARGET_MS = 2.0
SIZES = (3, 6, 9, 12)
PROJECT_POLICY = ROOT / "results" / "policies" / "hotpotqa-qwen2.5-coder-0.5b.joblib"
LIBRARY = "library (FlatForest)"
DEFAULT_OUT = ROOT / "results" / "benchmarks" / "controller.json"


# -- pure helpers (tests/test_bench_controller.py) -----------------------------------------
def cpu_model(cpuinfo: str) -> str | None:
    """The processor name from the text of /proc/cpuinfo (x86 'model name', ARM fallbacks)."""
    for key in ("model name", "Model", "Hardware", "cpu model", "Processor"):
        for line in cpuinfo.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return value.strip()
    return None


def summarize(wall_s: Sequence[float], cpu_s: Sequence[float] = ()) -> dict:
    """Median and p95 of per-call wall times (seconds in, ms out), plus the median CPU time."""
    w = np.asarray(wall_s, dtype=float) * 1e3
    if w.size == 0:
        raise ValueError("no timings")
    out = {"median_ms": round(float(np.median(w)), 4),
           "p95_ms": round(float(np.percentile(w, 95)), 4),
           "min_ms": round(float(w.min()), 4), "n": int(w.size)}
    if len(cpu_s):
        out["cpu_median_ms"] = round(float(np.median(np.asarray(cpu_s, float) * 1e3)), 4)
    return out


def time_call(fn: Callable[[int], object], *, min_reps: int = 20, max_reps: int = 2000,
              budget_s: float = 0.5, warmup: int = 3) -> dict:
    """Call ``fn(i)`` for i = 0, 1, ... timing each call alone; stop after ``max_reps`` calls,
    or once ``budget_s`` of wall time is spent and ``min_reps`` calls are done."""
    for i in range(warmup):
        fn(i)
    wall, cpu = [], []
    start = time.perf_counter()
    i = 0
    while i < max_reps and (i < min_reps or time.perf_counter() - start < budget_s):
        c0, t0 = time.process_time(), time.perf_counter()
        fn(i)
        t1, c1 = time.perf_counter(), time.process_time()
        wall.append(t1 - t0)
        cpu.append(c1 - c0)
        i += 1
    return summarize(wall, cpu)


def verdict(median_ms_by_size: dict, target_ms: float = TARGET_MS) -> dict:
    """Whether the median full decision is under ``target_ms`` at every state size."""
    worst = max(median_ms_by_size.values())
    return {"median_ms_by_size": median_ms_by_size, "worst_median_ms": worst,
            "under_target": bool(worst < target_ms)}


def with_n_jobs(policy, n_jobs: int):
    """A copy of ``policy`` whose forests predict with ``n_jobs`` (shallow copies of the
    fitted estimators: the trees are shared, the original policy is left as it is)."""
    def fix(est):
        if est is None or not hasattr(est, "n_jobs"):
            return est
        est = copy.copy(est)
        est.n_jobs = n_jobs
        return est
    return dataclasses.replace(policy, value_model=fix(policy.value_model),
                               continuation_model=fix(policy.continuation_model))


class TreeLoopForest:
    """A fitted RandomForestRegressor's predict without sklearn's joblib machinery: the sum of
    each tree's ``tree_.predict`` on float32 input, divided by the number of trees (the same
    arithmetic, in the same order, as the forest's own predict). Benchmark-only: shows what the
    per-call dispatch of ``forest.predict`` costs on a handful of rows."""

    def __init__(self, forest):
        self.trees = [t.tree_ for t in forest.estimators_]
        self.n_features_in_ = forest.n_features_in_

    def predict(self, X):
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        out = np.zeros(len(X32))
        for t in self.trees:
            out += t.predict(X32).reshape(len(X32), -1)[:, 0]
        return out / len(self.trees)


class FlatForest:
    """The same forest as flat node arrays, walked for all trees and rows at once with numpy
    (one step per tree level). Single-output regression forests without missing values only.
    Benchmark-only: an estimate of what a vectorized predict would cost."""

    def __init__(self, forest):
        trees = [t.tree_ for t in forest.estimators_]
        counts = np.array([t.node_count for t in trees])
        self.roots = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.intp)

        def shifted(child, off):
            return np.where(child >= 0, child + off, -1)
        self.left = np.concatenate([shifted(t.children_left, o) for t, o in zip(trees, self.roots)])
        self.right = np.concatenate([shifted(t.children_right, o)
                                     for t, o in zip(trees, self.roots)])
        self.leaf = self.left < 0
        self.feature = np.where(self.leaf, 0, np.concatenate([t.feature for t in trees]))
        self.threshold = np.concatenate([t.threshold for t in trees])
        self.value = np.concatenate([t.value.reshape(t.node_count, -1)[:, 0] for t in trees])
        self.depth = max(t.max_depth for t in trees)
        self.n_features_in_ = forest.n_features_in_

    def predict(self, X):
        # sklearn compares the float32 input, widened to float64, with float64 thresholds
        X = np.asarray(X, dtype=np.float32).astype(np.float64)
        rows = np.arange(len(X))[:, None]
        node = np.repeat(self.roots[None, :], len(X), axis=0)
        for _ in range(self.depth):
            nxt = np.where(X[rows, self.feature[node]] <= self.threshold[node],
                           self.left[node], self.right[node])
            node = np.where(self.leaf[node], node, nxt)
        return self.value[node].sum(axis=1) / len(self.roots)


@contextmanager
def library_flat_path(on: bool):
    """Switch the library's FlatForest predict path (``policy.USE_FLAT_FOREST``) for a block."""
    from dynakrag_lite import policy as policy_mod
    before = policy_mod.USE_FLAT_FOREST
    policy_mod.USE_FLAT_FOREST = on
    try:
        yield
    finally:
        policy_mod.USE_FLAT_FOREST = before


def with_predictor(policy, kind):
    """A copy of ``policy`` whose forests predict through ``kind`` (TreeLoopForest, FlatForest)."""
    cont = policy.continuation_model
    return dataclasses.replace(policy, value_model=kind(policy.value_model),
                               continuation_model=kind(cont) if cont is not None else None)


# -- setup ----------------------------------------------------------------------------------
class ScriptedReader:
    """Canned replies by prompt kind, so that collecting trajectories calls no model: every
    sufficiency probe says insufficient with a gap, every rewrite returns one fixed query."""
    spec = model_id = "scripted-reader"

    def generate(self, messages, max_tokens: int = 64, stop=None):
        from dynakrag_lite.generators.base import Generation
        user = messages[-1]["content"]
        if "contain every fact" in user:
            text = "INSUFFICIENT: where the founder was born"
        elif "new search query" in user:
            text = "birthplace of the founder"
        else:
            text = "Answer: unknown"
        return Generation(text, len(user) // 4, 8, 0.0)


def build_states(env, questions, sizes: Sequence[int] = SIZES) -> dict[int, list]:
    """{n_docs: [states]}: retrieval-only walks (bridge_entity_expand when a bridge candidate
    exists and it adds a full batch, else retrieve_more) from each question's initial state."""
    from dynakrag_lite.actions import apply_action
    from dynakrag_lite.state import initial_state
    per = env.config.per_action
    out: dict[int, list] = {n: [] for n in sizes}
    for q in questions:
        s = initial_state(q.question, q.id)
        s = apply_action(s, "retrieve_more", env)
        while len(s.docs) <= max(sizes):
            if len(s.docs) in out:
                out[len(s.docs)].append(s)
            if len(s.docs) >= max(sizes):
                break
            nxt = None
            if s.unexpanded_bridges:
                b = apply_action(s, "bridge_entity_expand", env)
                if len(b.docs) == len(s.docs) + per:
                    nxt = b
            if nxt is None:
                nxt = apply_action(s, "retrieve_more", env)
                if len(nxt.docs) == len(s.docs):  # ranking exhausted
                    break
            s = nxt
    return out


def forest_info(est) -> dict | None:
    if est is None:
        return None
    trees = getattr(est, "estimators_", [])
    return {"n_estimators": len(trees), "n_jobs": getattr(est, "n_jobs", None),
            "min_samples_leaf": getattr(est, "min_samples_leaf", None),
            "mean_depth": round(float(np.mean([t.get_depth() for t in trees])), 2) if trees
            else None,
            "mean_leaves": round(float(np.mean([t.get_n_leaves() for t in trees])), 1) if trees
            else None}


def get_policy(mode: str, env, train_questions, n_train: int):
    """(policy, description dict) for ``--policy``."""
    from dynakrag_lite.config import Environment
    from dynakrag_lite.policy import Policy, PolicyError, train_policy
    from dynakrag_lite.trajectories import collect
    why = "requested (--policy train)"
    if mode != "train":
        path = PROJECT_POLICY if mode == "auto" else Path(mode)
        if path.exists():
            try:
                t0 = time.perf_counter()
                pol = Policy.load(path)
                return pol, {"source": "loaded", "path": pol.provenance()["path"],
                             "sha256": pol.provenance()["sha256"],
                             "load_seconds": round(time.perf_counter() - t0, 3),
                             "trained_on": pol.meta.get("dataset"),
                             "generator": pol.meta.get("generator"),
                             "n_samples": pol.meta.get("n_samples"),
                             "n_prefixes": pol.meta.get("n_continuation_prefixes")}
            except PolicyError as e:
                if mode != "auto":
                    raise
                why = f"{path.name} did not load: {e}"
        elif mode != "auto":
            raise SystemExit(f"error: policy file not found: {path}")
        else:
            why = f"{path.relative_to(ROOT).as_posix()} is absent"
    genv = Environment(env.retriever, ScriptedReader(), env.config)
    qs = list(train_questions)[:n_train]
    t0 = time.perf_counter()
    data = collect(qs, genv, progress=False, continuation="sr")
    t_collect = time.perf_counter() - t0
    t0 = time.perf_counter()
    pol = train_policy(data, n_estimators=300, min_samples_leaf=8, seed=13)  # n_jobs=-1 default
    t_fit = time.perf_counter() - t0
    return pol, {"source": "trained here", "why": why, "n_questions": len(qs),
                 "question_ids": [q.id for q in qs], "generator": ScriptedReader.spec,
                 "continuation": "sr", "n_samples": pol.meta["n_samples"],
                 "n_prefixes": pol.meta["n_continuation_prefixes"],
                 "collect_seconds": round(t_collect, 2), "fit_seconds": round(t_fit, 2),
                 "train_policy_args": "n_estimators=300, min_samples_leaf=8, seed=13, "
                                      "n_jobs=-1 (default; the fitted forests then get "
                                      "n_jobs=1)"}


# -- main -----------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="auto",
                    help="auto (default), train, or a policy file path")
    ap.add_argument("--train-questions", type=int, default=10)
    ap.add_argument("--state-questions", type=int, default=4,
                    help="held-out questions whose walks give the timed states")
    ap.add_argument("--budget", type=float, default=0.4,
                    help="wall seconds per timed item and state size (after min reps)")
    ap.add_argument("--min-reps", type=int, default=15)
    ap.add_argument("--max-reps", type=int, default=1500)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)

    load_before = loadavg(None)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import joblib
    from dynakrag_lite import policy as policy_mod
    from dynakrag_lite.features import (STATE_FEATURE_NAMES, heuristic_cost, phi,
                                        state_features)
    from dynakrag_lite.forest import FlatForest as LibraryFlatForest
    from dynakrag_lite.pipeline import build_setup
    from dynakrag_lite.validity import valid_actions

    setup = build_setup("library", generator=None, show_progress=False)
    env = setup.env
    cfg = env.config
    relaxed = dataclasses.replace(cfg, max_docs=16, max_steps=8)
    t0 = time.perf_counter()
    pol, pol_info = get_policy(args.policy, env, setup.train, args.train_questions)
    setup_policy_s = time.perf_counter() - t0
    states = build_states(env, setup.eval[:args.state_questions])
    pol1 = with_n_jobs(pol, 1)
    # label: (policy, the library's flat path on?); the first is the library as it runs
    variants = {LIBRARY: (pol, True),
                "sklearn n_jobs=-1": (with_n_jobs(pol, -1), False),
                "sklearn n_jobs=1": (pol1, False),
                "tree loop (no joblib)": (with_predictor(pol, TreeLoopForest), False),
                "flat numpy forest (stand-in)": (with_predictor(pol, FlatForest), False)}
    dc, pa = pol.meta.get("doc_chars", 600), pol.meta.get("per_action", 3)
    build_ms = {}  # the library's one-off cost per policy: building its FlatForests
    for name in ("value_model", "continuation_model"):
        est = getattr(pol, name)
        if est is not None:
            t0 = time.perf_counter()
            LibraryFlatForest(est)
            build_ms[name] = round((time.perf_counter() - t0) * 1e3, 2)

    def timed(fn):
        return time_call(fn, min_reps=args.min_reps, max_reps=args.max_reps,
                         budget_s=args.budget)

    rows: dict[str, dict] = {}
    exact: dict[str, float] = {}
    identical: dict[str, bool] = {}
    for n in SIZES:
        ss = states[n]
        if not ss:
            continue
        k = len(ss)
        valid = [valid_actions(s, relaxed) for s in ss]
        acts = [tuple(a for a in v if a != "compress_answer_evidence") for v in valid]
        X = [np.stack([phi(s, a, heuristic_cost(s, a, dc, pa)) for a in aa])
             for s, aa in zip(ss, acts)]
        P = [np.array([[state_features(s)[f] for f in STATE_FEATURE_NAMES]]) for s in ss]
        r = {"n_states": k,
             "valid_paper_caps": [list(valid_actions(s, cfg)) for s in ss],
             "valid_timed": [list(v) for v in valid],
             "timings": {}}
        t = r["timings"]
        t["state_features"] = timed(lambda i: state_features(ss[i % k]))
        t["valid_actions"] = timed(lambda i: valid_actions(ss[i % k], relaxed))
        def phi_matrix(i):
            s = ss[i % k]
            base = state_features(s)
            return np.stack([phi(s, a, heuristic_cost(s, a, dc, pa), base) for a in acts[i % k]])
        t["state_features + phi_matrix"] = timed(phi_matrix)
        t["cost_model_over_valid"] = timed(
            lambda i: [pol.cost_model(ss[i % k], a) for a in valid[i % k]])
        for label, (p, flat) in variants.items():
            with library_flat_path(flat):
                exact.setdefault(label, 0.0)
                identical.setdefault(label, True)
                # agreement with the forests' own predict (n_jobs=1) on these rows, through
                # the predict path Policy uses for this variant
                for est, ref, mats in ((p.value_model, pol1.value_model, X),
                                       (p.continuation_model, pol1.continuation_model, P)):
                    if est is None:
                        continue
                    for m in mats:
                        got, want = policy_mod.predict_forest(est, m), ref.predict(m)
                        exact[label] = max(exact[label], float(np.max(np.abs(got - want))))
                        identical[label] &= bool(np.array_equal(got, want))
                t[f"Policy.values [{label}]"] = timed(
                    lambda i, p=p: p.values(ss[i % k], valid[i % k]))
                t[f"Policy.continue_gain [{label}]"] = timed(
                    lambda i, p=p: p.continue_gain(ss[i % k]))
                t[f"Policy.choose [{label}]"] = timed(
                    lambda i, p=p: p.choose(ss[i % k], valid[i % k]))
                t[f"decision: valid_actions + choose [{label}]"] = timed(
                    lambda i, p=p: p.choose(ss[i % k], valid_actions(ss[i % k], relaxed)))
        rows[str(n)] = r
        print(f"{n} docs: done ({k} states)", flush=True)

    load_after = loadavg()
    labels = list(variants)
    verdicts = {}
    for label in labels:
        key = f"decision: valid_actions + choose [{label}]"
        verdicts[label] = verdict({n: r["timings"][key]["median_ms"] for n, r in rows.items()})
    niceness = os.nice(0)
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    decision_library = verdicts[LIBRARY]
    out = {
        "benchmark": "controller decision overhead (no LLM call)",
        "target": f"a controller decision (valid_actions + Policy.choose) under {TARGET_MS} ms",
        "command": recorded_command(argv, __file__, env_keys=(), niceness=niceness),
        "date": utc_date(), **versions(("sklearn", "numpy", "joblib")),
        "platform": platform.platform(),
        "cpu_model": cpu_model(cpuinfo), "cpus": os.cpu_count(), "cpus_usable": usable_cpus(),
        "joblib_cpu_count": joblib.cpu_count(),
        "machine": {
            "loaded": True if load_before[0] >= 1.0 else False,
            "niceness": niceness,
            "loadavg_before": loadavg(values=load_before),
            "loadavg_after": load_after,
            "note": "measured while other jobs (experiment runs) kept the CPU cores busy and "
                    "this process ran niced: wall-clock times include waiting for a core; "
                    "cpu_median_ms is CPU time of this process (all its threads)"
            if load_before[0] >= 1.0 else "machine idle at start",
        },
        "policy": {**pol_info, "value_forest": forest_info(pol.value_model),
                   "continuation_forest": forest_info(pol.continuation_model),
                   "lam": pol.lam, "veto_threshold": pol.veto_threshold},
        "dataset": "library (embedded)", "embedder": pol.meta.get("embedder")
        or "all-MiniLM-L6-v2",
        "config": {"paper_caps": {"max_docs": cfg.max_docs, "max_steps": cfg.max_steps},
                   "timed_caps": {"max_docs": relaxed.max_docs, "max_steps": relaxed.max_steps},
                   "use_spacy": cfg.use_spacy, "per_action": cfg.per_action},
        "timing_method": {"clock": "time.perf_counter (wall) and time.process_time (CPU)",
                          "min_reps": args.min_reps, "max_reps": args.max_reps,
                          "budget_seconds_per_item": args.budget, "warmup_calls": 3},
        "sizes": rows,
        "verdict": {
            "target_ms": TARGET_MS,
            "median_full_decision_under_target_library": decision_library["under_target"],
            "by_predictor": verdicts,
            "note": f"'{LIBRARY}' is the library's predict path (Policy with its default "
                    "USE_FLAT_FOREST); 'sklearn n_jobs=-1' / 'sklearn n_jobs=1' are the "
                    "forests' own predict, the path before FlatForest, for a policy trained "
                    "before / after train_policy set n_jobs=1 (a policy file saved earlier "
                    "keeps n_jobs=-1); 'tree loop' and 'flat numpy forest (stand-in)' are "
                    "benchmark-only predictors, shown for what they would cost",
        },
        "library_flat_forest_build_ms": build_ms,
        "max_abs_diff_vs_forest_predict": exact,
        "bit_identical_to_forest_predict": identical,
        "setup_policy_seconds": round(setup_policy_s, 2),
        "total_cpu_seconds": round(time.process_time() - cpu0, 1),
        "total_wall_seconds": round(time.perf_counter() - wall0, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print_table(out)
    print(f"wrote {shown_path(args.out)}")
    return 0


def print_table(out: dict) -> None:
    rows = out["sizes"]
    names = list(next(iter(rows.values()))["timings"])
    sizes = list(rows)
    w = max(len(n) for n in names)
    print(f"{'median / p95 ms':<{w}}  " + "  ".join(f"{s + ' docs':>15}" for s in sizes))
    for name in names:
        cells = []
        for s in sizes:
            t = rows[s]["timings"].get(name)
            cells.append(f"{t['median_ms']:7.3f}/{t['p95_ms']:<7.3f}" if t else " " * 15)
        print(f"{name:<{w}}  " + "  ".join(cells))
    print("verdict:", json.dumps(out["verdict"]))
    print("load before/after:", out["machine"]["loadavg_before"], out["machine"]["loadavg_after"])


if __name__ == "__main__":
    raise SystemExit(main())
