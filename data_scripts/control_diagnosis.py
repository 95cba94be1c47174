"""Where learned control loses its signal, per dataset x reader, from saved trajectories only
(issue 24, part 1; no model call):

    nice -n 10 python data_scripts/control_diagnosis.py --trajectories results/trajectories/*.npz

For each file (``train --save-data``): out-of-fold action choice of the value forest (per
lambda), of "always retrieve_more" and of the oracle; the continuation forest's AUC and
stop-after-k along the uniform rollouts; permutation importances; the data-size curve; and a
verdict read off the numbers (``dynakrag_lite.training.diagnosis``). Writes every number to
``--out`` (JSON) and the tables a reader reads to the same path with ``.md``.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dynakrag_lite.storage import atomic_write_json, atomic_write_text, \
    relative_command  # noqa: E402
from dynakrag_lite.training.diagnosis import CHOICE_LAMBDAS, diagnose  # noqa: E402
from dynakrag_lite.training.files import load_training_data  # noqa: E402
from dynakrag_lite.trajectories import TrainingData  # noqa: E402

ACTION_ORDER = ("retrieve_more", "gap_query", "bridge_entity_expand", "rewrite_query",
                "sufficiency_check")


def name_of(path: Path, data: TrainingData) -> tuple[str, str]:
    """(dataset, reader) from the run settings, else from ``<dataset>-<reader>.npz``."""
    stem = path.stem
    ds = data.run.get("dataset") or stem.split("-", 1)[0]
    reader = data.run.get("generator") or stem[len(ds) + 1:]
    return ds, reader


def clean(o):
    """JSON without NaN (null instead) and with 4-decimal floats."""
    if isinstance(o, dict):
        return {str(k): clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [clean(v) for v in o]
    if isinstance(o, float):
        return None if not math.isfinite(o) else round(o, 4)
    return o


def _f(x, fmt=".3f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) \
        else format(x, fmt)


def markdown(results: dict, command: str, seconds: float, settings: dict,
             cpu: float = float("nan")) -> str:
    L = ["# Control diagnosis: where learned control loses its signal",
         "",
         f"Command: `{command}` ({seconds / 60:.1f} min wall, {cpu / 60:.1f} min CPU, "
         "one job). No model call: only the saved "
         "trajectories (`results/trajectories/*.npz`, seeded uniform-valid rollouts with every "
         "valid action labelled at each visited state). Cross-validation: GroupKFold by "
         f"question, {settings['folds']} folds; forests: 300 trees, min leaf 8, seed 13.",
         "",
         "A *decision* is a visited state with at least two valid non-stop actions. Realized "
         "gain: the action's SR(s') - SR(s); sufficiency_check adds no document, so 0. "
         "*best* = the oracle's pick (highest realized gain), *uniform* = mean gain over the "
         "options, regret = best - chosen, agreement = the pick ties the best. *decisive* = "
         "decisions whose options do not all tie.",
         "", "## 1. Action choice, lambda = 0 (held-out decisions)", "",
         "| dataset | reader | decisions | decisive | best | forest | forest w/o suff_check "
         "| retrieve_more | uniform | regret forest | regret retrieve_more | regret uniform | "
         "agree forest | agree retrieve_more | regret forest (decisive) |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (ds, rd), r in results.items():
        c = r["choice"]
        f, a, m = c["lambdas"]["0"], c["forest_acquisitions_only"], c["retrieve_more"]
        L.append(f"| {ds} | {rd} | {f['n_states']} | {f['share_decisive']:.0%} | "
                 f"{f['gain_best']:.3f} | {f['gain_chosen']:.3f} | {a['gain_chosen']:.3f} | "
                 f"{m['gain_chosen']:.3f} | {f['gain_uniform']:.3f} | {f['regret']:.3f} | "
                 f"{m['regret']:.3f} | {f['regret_uniform']:.3f} | {f['agreement']:.2f} | "
                 f"{m['agreement']:.2f} | {_f(f['regret_decisive'])} |")
    L += ["", "## 2. Per action, lambda = 0: share of decisions where it is valid, chosen by the "
          "forest, best (ties included), strictly best; its mean realized gain when valid", "",
          "| dataset | reader | action | valid | chosen | best (ties) | strictly best | "
          "mean gain |", "|---|---|---|---|---|---|---|---|"]
    for (ds, rd), r in results.items():
        acts = r["choice"]["lambdas"]["0"]["actions"]
        for a in ACTION_ORDER:
            if a in acts:
                x = acts[a]
                L.append(f"| {ds} | {rd} | {a} | {x['valid']:.0%} | {x['chosen']:.0%} | "
                         f"{x['best']:.0%} | {x['strictly_best']:.0%} | {x['mean_gain']:.3f} |")
    lams = [f"{x:g}" for x in settings["lambdas"]]
    L += ["", "## 3. Per lambda (argmax v - lambda c over the non-stop options): forest's "
          "realized gain per decision / share choosing sufficiency_check / share whose pick "
          "scores below 0 (where the 'gain' stop rule, stop scoring 0, would stop instead)", "",
          "| dataset | reader | " + " | ".join(f"λ={x}" for x in lams) + " |",
          "|---|---|" + "---|" * len(lams)]
    for (ds, rd), r in results.items():
        cells = []
        for x in lams:
            m = r["choice"]["lambdas"][x]
            sc = m["actions"].get("sufficiency_check", {}).get("chosen", 0.0)
            cells.append(f"{m['gain_chosen']:.3f} / {sc:.0%} / {m['pick_score_negative']:.0%}")
        L.append(f"| {ds} | {rd} | " + " | ".join(cells) + " |")
    L += ["", "## 4. Stop", "",
          "Continuation forest, out-of-fold AUC for \"continuing raises the final answer's "
          "F1\" (f1 target, the 80 questions with answer F1) and \"... raises SR\" (sr target, "
          "all questions); the rollout's last prefix (stop forced) is not scored. "
          "Stop-after-k: answer F1 / tokens (ledger + answer call) right after the k-th "
          "acquisition **along the saved uniform rollouts** (not the learned path); "
          "a path with fewer acquisitions stops at its end (share reaching k in brackets); "
          "*end* = the path's end, *best* = a perfect per-question stop along the same path.",
          "",
          "| dataset | reader | AUC f1 (pos. rate) | AUC sr (pos. rate) | sr forest on F1 event "
          "| k=1 | k=2 | k=3 | k=4 | end | best |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (ds, rd), r in results.items():
        au, k = r["stop"]["auc"], r["stop"]["at_k"]
        ks = []
        for key in ("1", "2", "3", "4", "end", "best"):
            reach = f" ({k[key]['reached']:.0%})" if key.isdigit() and k[key]["reached"] < 1 \
                else ""
            ks.append(f"{k[key]['f1']:.3f} / {k[key]['tokens']:.0f}{reach}")
        L.append(f"| {ds} | {rd} | {_f(au['f1']['auc'], '.2f')} "
                 f"({au['f1']['positive_rate']:.0%} of {au['f1']['n_prefixes']}) | "
                 f"{_f(au['sr']['auc'], '.2f')} "
                 f"({au['sr']['positive_rate']:.0%} of {au['sr']['n_prefixes']}) | "
                 f"{_f(au['sr_model_f1_event']['auc'], '.2f')} | " + " | ".join(ks) + " |")
    L += ["", "## 5. Value forest: out-of-fold permutation importance on the held-out "
          f"acquisition samples (drop in R², {settings['repeats']} repeats per fold; mean ± "
          "std over folds × repeats). *q* = constant within every question "
          "(tells questions apart, never one question's states or actions).", ""]
    for (ds, rd), r in results.items():
        c = r["choice"]
        imp = c.get("importance", [])[:10]
        L.append(f"**{ds}, {rd}** (held-out R² {_f(c['value_r2_acquisitions'])}): " + "; ".join(
            f"{t['feature']}{' (q)' if t['constant'] == 'question' else ''} "
            f"{t['mean']:.3f} ± {t['std']:.3f}" for t in imp) + ".")
        if c.get("constant_in_dataset"):
            L.append(f"Constant in the whole file: {', '.join(c['constant_in_dataset'])}.")
        L.append("")
    sizes = sorted({k for r in results.values() for k in r["choice"]["data_size"]},
                   key=lambda k: float("inf") if k == "all" else int(k))
    L += ["## 6. Data size: forest regret at lambda 0 with N training questions per fold "
          "(same held-out decisions): all options / without sufficiency_check (its agreement)",
          "",
          "| dataset | reader | " + " | ".join(f"N={s}" for s in sizes) + " |",
          "|---|---|" + "---|" * len(sizes)]
    for (ds, rd), r in results.items():
        d = r["choice"]["data_size"]
        L.append(f"| {ds} | {rd} | " + " | ".join(
            f"{d[s]['regret']:.3f} / {d[s]['regret_acquisitions_only']:.3f} "
            f"({d[s]['agreement_acquisitions_only']:.2f})" if s in d else "—"
            for s in sizes) + " |")
    L += ["", "## 7. Verdict per dataset x reader (generated from the numbers above)", ""]
    for (ds, rd), r in results.items():
        L.append(f"**{ds}, {rd}**")
        L.append("")
        L += [f"- {v}" for v in r["verdict"]]
        L.append("")
    return "\n".join(L)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trajectories", nargs="+", required=True, type=Path,
                    help=".npz files from train --save-data")
    ap.add_argument("--out", type=Path, default=Path("results/diagnostics/control-diagnosis.json"))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=5, help="permutation-importance repeats")
    ap.add_argument("--sizes", type=int, nargs="*", default=[25, 50, 100],
                    help="training questions per fold for the data-size curve (plus all)")
    args = ap.parse_args(argv)
    t0, c0 = time.perf_counter(), time.process_time()
    settings = {"folds": args.folds, "repeats": args.repeats, "sizes": args.sizes,
                "lambdas": list(CHOICE_LAMBDAS),
                "forest": {"n_estimators": 300, "min_samples_leaf": 8, "seed": 13,
                           "n_jobs": 1}}
    results = {}
    for path in args.trajectories:
        t = time.perf_counter()
        data = load_training_data(path)
        key = name_of(path, data)
        results[key] = diagnose(data, folds=args.folds, sizes=args.sizes,
                                n_repeats=args.repeats)
        results[key]["file"] = path.as_posix()
        print(f"{key[0]} {key[1]}: {time.perf_counter() - t:.0f} s", flush=True)
        for v in results[key]["verdict"]:
            print("  -", v, flush=True)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    command = relative_command(list(argv if argv is not None else sys.argv[1:]),
                               prefix="python data_scripts/control_diagnosis.py")
    atomic_write_json(args.out, clean({
        "command": command, "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 1), "settings": settings,
        "results": {f"{ds}/{rd}": r for (ds, rd), r in results.items()}}))
    md = args.out.with_suffix(".md")
    atomic_write_text(md, markdown(results, command, seconds, settings, cpu) + "\n")
    print(f"wrote {args.out} and {md} ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
