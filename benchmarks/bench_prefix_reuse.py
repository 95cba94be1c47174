"""What llama.cpp's prefix reuse really saves: prompt tokens sent against tokens evaluated.

llama.cpp keeps the KV cache of its previous evaluation and evaluates only the part of a new
prompt after the longest common prefix of token ids (less one token when the whole prompt
matched). The library's prompts put the documents first for that reason. This benchmark
reads :class:`~dynakrag_lite.generators.llamacpp.LlamaCppGenerator`'s counters
(``last_reused_tokens``, ``prompt_tokens_sent``, ``prompt_tokens_evaluated``...), which
count live calls only.

Micro (``micro``): one real question (the first of the evaluation split), its top 2 x
``--docs`` documents as the library retrieves them: D = the first ``--docs``, D' = the next.
``--repeats`` times, interleaved: sufficiency probe over D (follows a prompt over D', so little
reuse: the cold reference), rewrite over D (the prefix through D is reused), rewrite over D'
(little reuse). ``max_tokens=1`` on the raw backend (no call cache), after one warm-up call.
Per call kind: median seconds, prompt tokens, reused and evaluated tokens; then seconds per
evaluated prompt token (= seconds saved per reused token), from the two rewrites' medians and
from a least-squares line seconds = a + b * evaluated over every call.

Per method (``methods``): fixed_k, ircot, self_ask, uniform and dynakrag on the first ``--n``
questions of the evaluation split, each method with a FRESH, EMPTY call cache in a temp dir
(every call is live except a method's own exact repeats, as in a real run) and the KV cache
reset at its start. Methods run through the library as ``python -m dynakrag_lite evaluate``
runs them (:func:`dynakrag_lite.methods.run_method` on a :func:`build_setup` environment)
and as data_scripts/main_experiment.py configures them: controller methods take the committed
policy's sufficiency signal and the extractive compressor when the dataset's sentence selector
exists; dynakrag needs ``results/policies/<dataset>-<generator>.joblib`` and is skipped with a
note without it. The counters are read around each question: prompt tokens sent, evaluated,
reused, completion tokens, LLM seconds; wall seconds per question.

    DYNAKRAG_N_THREADS=2 python benchmarks/bench_prefix_reuse.py            # a quiet machine
    DYNAKRAG_N_THREADS=1 nice -n 15 python benchmarks/bench_prefix_reuse.py --quick  # smoke

Writes ``--out`` (default results/benchmarks/prefix_reuse.json; rewritten after each part, so
an interrupted run keeps what it measured) with the date, command, CPU model, threads,
versions and the load average at start and end (a busy machine inflates the seconds; the
token counts do not depend on it).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(p))

from benchlib import (cpu_model, loadavg, recorded_command, shown_path,  # noqa: E402
                      usable_cpus, utc_date, versions)
from dynakrag_lite.storage import atomic_write_json  # noqa: E402

DEFAULT_OUT = ROOT / "results" / "benchmarks" / "prefix_reuse.json"
DEFAULT_GENERATOR = "qwen2.5-coder-0.5b"
METHODS = ("fixed_k", "ircot", "self_ask", "uniform", "dynakrag")
CONTROLLERS = ("dynakrag", "uniform")  # take the policy's signal and the run's compressor
QUICK = {"generator": "smollm2-135m", "dataset": "library", "n": 1, "repeats": 2}
KINDS = ("probe_D", "rewrite_same_docs", "rewrite_other_docs")
COUNTER_KEYS = ("live_calls", "prompt_tokens_sent", "prompt_tokens_evaluated",
                "prompt_tokens_reused", "completion_tokens_generated", "generation_seconds")
VERSIONS = ("llama_cpp", "numpy", "sklearn")  # modules whose __version__ the record states


# -- pure helpers (tests/test_bench_prefix_reuse.py) ---------------------------------------
def default_dataset(data_root: str | None = None) -> str:
    """hotpotqa when its file is in the data folder (``data_root``, else $DYNAKRAG_DATA_DIR,
    else ../shared/data), else the embedded library dataset."""
    from dynakrag_lite.data.sources import DATASET_FILES, data_dir
    root = data_dir(data_root)
    return "hotpotqa" if root is not None and (root / DATASET_FILES["hotpotqa"]).is_file() \
        else "library"


def delta(after: dict, before: dict) -> dict:
    """Counter differences between two :meth:`LlamaCppGenerator.counters` snapshots."""
    return {k: after[k] - before[k] for k in COUNTER_KEYS}


def slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of ys on xs (None when xs do not vary)."""
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def summarize_kind(calls: Sequence[dict]) -> dict:
    """Medians of one micro call kind."""
    med = lambda k: statistics.median(c[k] for c in calls)  # noqa: E731
    return {"n": len(calls), "seconds_median": round(med("seconds"), 4),
            "seconds_min": round(min(c["seconds"] for c in calls), 4),
            "prompt_tokens_median": med("prompt_tokens"), "reused_median": med("reused"),
            "evaluated_median": med("evaluated")}


def micro_savings(kinds: dict, calls: Sequence[dict]) -> dict:
    """Seconds per evaluated prompt token (= saved per reused token), two ways."""
    same, other = kinds["rewrite_same_docs"], kinds["rewrite_other_docs"]
    d_eval = other["evaluated_median"] - same["evaluated_median"]
    pair = (other["seconds_median"] - same["seconds_median"]) / d_eval if d_eval > 0 else None
    fit = slope([c["evaluated"] for c in calls], [c["seconds"] for c in calls])
    return {
        "seconds_saved_per_reused_token_pair": None if pair is None else round(pair, 7),
        "seconds_per_evaluated_token_fit": None if fit is None else round(fit, 7),
        "rewrite_same_over_other_seconds": round(
            same["seconds_median"] / other["seconds_median"], 4)
        if other["seconds_median"] > 0 else None,
        "note": "pair: (median s of rewrite over D' - over D) / (their median evaluated-token "
                "difference); fit: least-squares slope of seconds on evaluated tokens over "
                "every micro call. Both include one sampling step per call.",
    }


def method_totals(rows: Sequence[dict], seconds_per_token: float | None) -> dict:
    """Totals and per-question means over one method's question rows (error rows are counted
    apart: their calls are in the totals, they are not questions answered)."""
    n = len(rows)
    tot = {k: sum(r[k] for r in rows) for k in
           ("prompt_tokens_sent", "prompt_tokens_evaluated", "prompt_tokens_reused",
            "completion_tokens", "live_calls", "ledger_llm_calls", "ledger_prompt_tokens",
            "llm_seconds", "wall_seconds")}
    out: dict[str, Any] = {"questions": n, "errors": sum(1 for r in rows if r.get("error")),
                           **{k: round(v, 3) if isinstance(v, float) else v
                              for k, v in tot.items()}}
    sent = tot["prompt_tokens_sent"]
    out["reused_fraction"] = round(tot["prompt_tokens_reused"] / sent, 4) if sent else None
    per_q = {k: round(tot[k] / n, 3) if n else None for k in
             ("prompt_tokens_sent", "prompt_tokens_evaluated", "prompt_tokens_reused",
              "completion_tokens", "live_calls", "llm_seconds", "wall_seconds")}
    out["per_question"] = per_q
    out["estimated_seconds_saved_per_question"] = (
        round(per_q["prompt_tokens_reused"] * seconds_per_token, 3)
        if n and seconds_per_token is not None else None)
    return out


# -- measurement ------------------------------------------------------------------------------
def _docs(setup, q, k: int) -> tuple[tuple, tuple]:
    """The question's top 2k documents as a state holds them (RetrievedDoc, title dedup)."""
    from dynakrag_lite.evidence import search_new
    from dynakrag_lite.state import initial_state
    docs = search_new(initial_state(q.question, q.id), setup.env, q.question, 2 * k)
    if len(docs) < 2 * k:
        raise SystemExit(f"question {q.id}: only {len(docs)} documents retrieved, "
                         f"need 2 x --docs = {2 * k}")
    return tuple(docs[:k]), tuple(docs[k:])


def run_micro(gen, setup, q, k: int, repeats: int) -> dict:
    from dynakrag_lite import prompts
    d, d2 = _docs(setup, q, k)
    chars = setup.env.config.doc_chars
    msgs = {"probe_D": prompts.sufficiency_messages(q.question, d, chars),
            "rewrite_same_docs": prompts.rewrite_messages(q.question, d, chars),
            "rewrite_other_docs": prompts.rewrite_messages(q.question, d2, chars)}
    gen.generate(msgs["rewrite_other_docs"], max_tokens=1)  # warm-up; the next probe follows D'
    calls: list[dict] = []
    for r in range(repeats):
        for kind in KINDS:  # interleaved, so drift in machine load hits every kind alike
            g = gen.generate(msgs[kind], max_tokens=1)
            calls.append({"repeat": r, "kind": kind, "seconds": g.seconds,
                          "prompt_tokens": g.prompt_tokens, "reused": gen.last_reused_tokens,
                          "evaluated": gen.last_evaluated_tokens})
    kinds = {kind: summarize_kind([c for c in calls if c["kind"] == kind]) for kind in KINDS}
    return {"question_id": q.id, "question": q.question, "docs_per_prompt": k,
            "doc_ids": {"D": [x.id for x in d], "D_other": [x.id for x in d2]},
            "max_tokens": 1, "repeats": repeats, "kinds": kinds,
            "savings": micro_savings(kinds, calls),
            "calls": [{**c, "seconds": round(c["seconds"], 4)} for c in calls]}


def _selector_for(dataset: str) -> Path:
    return ROOT / "results" / "selectors" / f"{dataset}-sentence-selector.joblib"


def prepare_method(method: str, setup, raw, eval_qs: Sequence, args, tmp: Path
                   ) -> tuple[Any, dict, Any, Any, str | None]:
    """(environment, settings, policy, demos, skip reason) for ``method``, configured as
    ``python -m dynakrag_lite evaluate`` with data_scripts/main_experiment.py's flags."""
    from dynakrag_lite.compression import load_selector
    from dynakrag_lite.generators.cache import CallCache
    from dynakrag_lite.experiments.artifacts import default_policy_path
    from dynakrag_lite.experiments.commands import check_selector
    from dynakrag_lite.config import ControlConfig, Environment
    from dynakrag_lite.generators.cache import CachedGenerator
    from dynakrag_lite.pipeline import extractive_compressor
    from dynakrag_lite.policy import Policy, PolicyError, check_policy
    from dynakrag_lite.retriever import DEFAULT_EMBEDDER
    from dynakrag_lite.storage import ManifestError

    dataset = setup.dataset
    settings: dict[str, Any] = {}
    cfg_kw: dict[str, Any] = {}
    compressor = None
    if method in CONTROLLERS:
        comp = args.compressor
        if comp == "auto":
            comp = "extractive" if _selector_for(dataset).is_file() else "llm"
        cfg_kw["compressor"] = comp
        settings["compressor"] = comp
        if comp == "extractive":
            compressor = extractive_compressor(load_selector(_selector_for(dataset)),
                                               setup.retriever)
    config = ControlConfig.for_dataset(dataset, **cfg_kw)
    cache_file = tmp / f"{method}.sqlite"  # fresh and empty: every call of the method is live
    env = Environment(setup.retriever, CachedGenerator(raw, CallCache(cache_file)), config,
                      compressor=compressor)
    # the CLI's own check: a selector must not have seen an evaluated question
    check_selector(env, str(_selector_for(dataset)), [q.id for q in eval_qs])
    policy = None
    if method in CONTROLLERS:
        try:
            path = default_policy_path(dataset, args.generator)
            policy = Policy.load(path)
            check_policy(policy, embedder=DEFAULT_EMBEDDER, doc_chars=config.doc_chars,
                         per_action=config.per_action, eval_ids=[q.id for q in eval_qs])
        except (PolicyError, ManifestError, OSError, ValueError) as e:
            if method == "dynakrag":
                return env, settings, None, None, f"no usable committed policy: {e}"
            policy = None
            settings["policy"] = f"none ({e}); the plain text sufficiency probe"
        if policy is not None:
            policy.configure(env)  # its calibrated sufficiency signal, as cmd_evaluate does
            settings["policy"] = os.path.relpath(path, ROOT)
            if method != "dynakrag":
                settings["policy_used_for"] = "sufficiency signal only"
                policy = None
        settings["sufficiency_signal"] = env.config.sufficiency_signal
    demos = None
    if method == "ircot":  # few-shot from training questions, as cmd_evaluate builds them
        from dynakrag_lite.demonstrations import build_ircot_demos
        evaluated = {q.id for q in eval_qs}
        demos = build_ircot_demos([q for q in setup.train if q.id not in evaluated],
                                  seed=0, eval_ids=sorted(evaluated))
        settings["ircot_demos"] = sorted(demos.ids)
    return env, settings, policy, demos, None


def run_method_rows(method: str, env, raw, policy, demos, questions: Sequence) -> list[dict]:
    """One row per question: the counters' differences around it, ledger and wall time."""
    from dynakrag_lite.config import RunSettings
    from dynakrag_lite.experiments.run import score
    from dynakrag_lite.methods import run_method
    raw.llama.reset()  # start cold: the previous method's last prompt must not be reused
    rows = []
    for q in questions:
        before = raw.counters()
        t0 = time.perf_counter()
        err, scored = None, None
        try:
            scored = score(q, run_method(RunSettings(method=method), q, env, policy, demos))
        except Exception as e:  # one question's failure is recorded, as evaluate does
            err = f"{type(e).__name__}: {e}"[:500]
        wall = time.perf_counter() - t0
        d = delta(raw.counters(), before)
        rows.append({
            "id": q.id, "error": err, "wall_seconds": round(wall, 3),
            "llm_seconds": round(d["generation_seconds"], 3), "live_calls": d["live_calls"],
            "prompt_tokens_sent": d["prompt_tokens_sent"],
            "prompt_tokens_evaluated": d["prompt_tokens_evaluated"],
            "prompt_tokens_reused": d["prompt_tokens_reused"],
            "completion_tokens": d["completion_tokens_generated"],
            # the ledger also counts call-cache replays (the method's own exact repeats)
            "ledger_llm_calls": scored["llm_calls"] if scored else 0,
            "ledger_prompt_tokens": scored["prompt_tokens"] if scored else 0,
            "f1": scored["f1"] if scored else None,
        })
        print(f"  {method} {q.id}: {rows[-1]['live_calls']} calls, "
              f"{d['prompt_tokens_sent']} sent, {d['prompt_tokens_evaluated']} evaluated, "
              f"{wall:.1f} s", flush=True)
    return rows


# -- main -----------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--generator", default=None,
                    help=f"bundled model or gguf:PATH (default {DEFAULT_GENERATOR})")
    ap.add_argument("--dataset", default=None,
                    help="default: hotpotqa when its data is found, else library")
    ap.add_argument("--data-dir", default=None, help="default: $DYNAKRAG_DATA_DIR")
    ap.add_argument("--n", type=int, default=None, help="questions per method (default 5)")
    ap.add_argument("--repeats", type=int, default=None, help="micro repeats (default 5)")
    ap.add_argument("--docs", type=int, default=6, help="documents per micro prompt")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--compressor", choices=("auto", "extractive", "llm"), default="auto",
                    help="controller runs' terminal compression; auto = extractive when the "
                    "dataset's sentence selector exists (main_experiment.py's default)")
    ap.add_argument("--skip-micro", action="store_true")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: smollm2-135m, library, --n 1, --repeats 2 (explicit "
                    "options still win)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = ap.parse_args(argv)
    defaults = QUICK if args.quick else {"generator": DEFAULT_GENERATOR, "n": 5, "repeats": 5}
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    methods = [m for m in args.methods.split(",") if m]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        ap.error(f"unknown method(s) {bad}; choose from {', '.join(METHODS)}")

    load_start = loadavg()
    t_start = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from dynakrag_lite.generators import models
    from dynakrag_lite.generators.llamacpp import LlamaCppGenerator
    from dynakrag_lite.generators.spec import make_generator
    from dynakrag_lite.pipeline import build_setup

    dataset = args.dataset or default_dataset(args.data_dir)
    setup = build_setup(dataset, generator=None, data_dir=args.data_dir, show_progress=False)
    raw = make_generator(args.generator, cache=False)  # the backend itself: its counters
    if not isinstance(raw, LlamaCppGenerator):
        ap.error(f"--generator {args.generator}: prefix reuse is measured on llama.cpp "
                 "(a bundled model or gguf:PATH)")
    eval_qs = setup.eval[:args.n]
    report: dict[str, Any] = {
        "benchmark": "llama.cpp prefix reuse: prompt tokens sent vs evaluated, seconds",
        # the command with the thread setting and niceness that shape its timings
        "command": recorded_command(argv, __file__),
        "date": utc_date(), "cpu_model": cpu_model(), "cpus": os.cpu_count(),
        "cpus_usable": usable_cpus(), "platform": platform.platform(),
        "versions": versions(VERSIONS),
        "machine": {"loadavg_start": load_start, "loadavg_end": None,
                    "niceness": os.nice(0),
                    "note": "load averages over 1/5/15 min; a load near or above the usable "
                            "cores means the seconds include waiting for a core (the token "
                            "counts do not depend on it)"},
        "settings": {"generator": args.generator,
                     "model_id": models.REGISTRY[args.generator].sha256
                     if args.generator in models.REGISTRY else raw.model_id,
                     "dataset": setup.dataset, "n_questions": len(eval_qs),
                     "question_ids": [q.id for q in eval_qs], "repeats": args.repeats,
                     "docs_per_micro_prompt": args.docs, "quick": args.quick,
                     "DYNAKRAG_N_THREADS": os.environ.get("DYNAKRAG_N_THREADS"),
                     "llama_n_threads": raw.n_threads, "llama_n_ctx": raw.n_ctx,
                     "call_cache": "a fresh, empty SQLite file per method in a temp dir",
                     "kv_cache": "reset at the start of each method (Llama.reset)"},
        "counters": "LlamaCppGenerator counters of live calls: reused = prompt tokens whose KV "
                    "cache llama.cpp kept (longest common token prefix with its previous "
                    "evaluation, less the one token it re-evaluates when the whole prompt "
                    "matched); evaluated = sent - reused",
        "micro": None, "methods": {}, "skipped": [],
    }

    def write() -> None:
        report["machine"]["loadavg_end"] = loadavg()
        report["total_wall_seconds"] = round(time.perf_counter() - t_start, 1)
        atomic_write_json(args.out, report)  # after every part: a kill keeps what was measured

    seconds_per_token = None
    if not args.skip_micro:
        print(f"micro: {args.repeats} repeats on {setup.dataset} {eval_qs[0].id}", flush=True)
        report["micro"] = run_micro(raw, setup, eval_qs[0], args.docs, args.repeats)
        report["machine"]["loadavg_after_micro"] = loadavg()
        sv = report["micro"]["savings"]
        seconds_per_token = sv["seconds_per_evaluated_token_fit"] or \
            sv["seconds_saved_per_reused_token_pair"]
        write()

    with tempfile.TemporaryDirectory(prefix="prefix-reuse-") as tmp:
        for method in methods:
            env, settings, policy, demos, skip = prepare_method(method, setup, raw, eval_qs,
                                                                args, Path(tmp))
            if skip:
                report["skipped"].append({"method": method, "reason": skip})
                print(f"skipped {method}: {skip}", flush=True)
                env.generator.cache.close()
                continue
            rows = run_method_rows(method, env, raw, policy, demos, eval_qs)
            env.generator.cache.close()
            report["methods"][method] = {"settings": settings,
                                         "totals": method_totals(rows, seconds_per_token),
                                         "questions": rows}
            write()
    write()
    print_table(report)
    print(f"wrote {shown_path(args.out)}")
    return 0


def print_table(report: dict) -> None:
    m = report["micro"]
    if m:
        print(f"{'micro (max_tokens=1)':<22}{'median s':>10}{'sent':>8}{'reused':>8}"
              f"{'evaluated':>11}")
        for kind, k in m["kinds"].items():
            print(f"{kind:<22}{k['seconds_median']:>10.3f}{k['prompt_tokens_median']:>8}"
                  f"{k['reused_median']:>8}{k['evaluated_median']:>11}")
        print("savings:", {k: v for k, v in m["savings"].items() if k != "note"})
    hdr = (f"{'method':<10}{'q':>3}{'calls/q':>9}{'sent/q':>9}{'eval/q':>9}{'reused':>8}"
           f"{'compl/q':>9}{'llm s/q':>9}{'wall s/q':>10}{'saved s/q':>10}")
    print(hdr)
    print("-" * len(hdr))
    for name, r in report["methods"].items():
        t, p = r["totals"], r["totals"]["per_question"]
        saved = t["estimated_seconds_saved_per_question"]
        print(f"{name:<10}{t['questions']:>3}{p['live_calls']:>9.1f}"
              f"{p['prompt_tokens_sent']:>9.0f}{p['prompt_tokens_evaluated']:>9.0f}"
              f"{(t['reused_fraction'] or 0):>8.0%}{p['completion_tokens']:>9.1f}"
              f"{p['llm_seconds']:>9.2f}{p['wall_seconds']:>10.2f}"
              f"{saved if saved is not None else float('nan'):>10.2f}")
    for s in report["skipped"]:
        print(f"skipped {s['method']}: {s['reason']}")
    print("load start/end:", report["machine"]["loadavg_start"],
          report["machine"]["loadavg_end"])


if __name__ == "__main__":
    raise SystemExit(main())
