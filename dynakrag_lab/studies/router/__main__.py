"""A question-level router (one-shot or multi-step, Adaptive-RAG style), trained on the training
questions by cross-validation and read once on the evaluation split (issue 35, item 2):

    nice python -m dynakrag_lab.studies.router --out results/diagnostics/router.json

No model call: the training labels are the answer F1s saved with the trajectories
(``results/trajectories/<dataset>-<reader>.npz`` and its ``.answer-f1.jsonl``), the evaluation
outcomes are the committed prediction rows of ``dynakrag-cont-stop1`` (one-shot) and
``dynakrag-cont`` (multi-step) under ``--experiments``. Method: ``dynakrag_lab.studies.router``.
Writes every number to ``--out`` (JSON) and a short report beside it (``.md``).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from dynakrag_lite.storage import (atomic_write_json, atomic_write_text,
                                   relative_command)
from dynakrag_lab.report.results import json_clean
from dynakrag_lab.studies import router as R

DATASETS = ("hotpotqa", "2wikimultihopqa", "musique")
NAMES = {"one_shot": "always one-shot", "multi_step": "always multi-step",
         "random_same_rate": "random, same multi-step rate"}



def study_dataset(ds: str, args) -> tuple[dict, list, dict]:
    """(the dataset's report, its training questions, its nested CV outcomes)."""
    npz = Path(args.trajectories) / f"{ds}-{args.reader}.npz"
    data, merge = R.load_training(npz)
    qs = R.training_questions(data)
    cv = R.cross_validate(qs, args.folds, seed=args.seed)
    nested = cv.pop("nested")
    model = R.fit_router(qs, cv["choice"]["model"], args.seed)
    ev = R.evaluation_report(ds, args.reader, args.experiments, model, cv["choice"]["tau"],
                             train_x=np.stack([q.x for q in qs]))
    rep = {"training": {"file": str(npz), "questions_in_file": len(data.questions),
                        "merge": {k: merge.get(k) for k in ("labelled", "replayed",
                                                            "not_reproduced", "missing",
                                                            "already_labelled")},
                        "n": len(qs),
                        "f1_one_shot": float(np.mean([q.f1_one for q in qs])),
                        "f1_multi_step": float(np.mean([q.f1_multi for q in qs])),
                        "tokens_one_shot": float(np.mean([q.tokens_one for q in qs])),
                        "tokens_multi_step": float(np.mean([q.tokens_multi for q in qs]))},
           "score_recovery": R.score_recovery(data),
           "feature_aucs": R.feature_aucs(qs)[:5],
           "cv": {**cv, "nested": R.against_constants(qs, nested["f1"], nested["tokens"],
                                                      nested["multi"])},
           "evaluation": ev}
    return rep, qs, nested


def run(args) -> dict:
    per, all_qs, all_nested, rates = {}, [], {"f1": [], "tokens": [], "multi": []}, []
    for ds in args.datasets:
        t = time.perf_counter()
        rep, qs, nested = study_dataset(ds, args)
        per[ds] = rep
        all_qs += qs
        for k in all_nested:
            all_nested[k].append(nested[k])
        rates.append(np.full(len(qs), nested["multi"].mean()))
        print(f"{ds}: {len(qs)} training questions, {rep['evaluation']['n']} evaluation "
              f"questions ({time.perf_counter() - t:.0f} s)", file=sys.stderr, flush=True)
    pooled_cv = R.against_constants(all_qs, *(np.concatenate(all_nested[k])
                                              for k in ("f1", "tokens", "multi")),
                                    rate=np.concatenate(rates))
    # One router on the three training sets together: is the lack of signal a lack of data?
    together = R.cross_validate(all_qs, args.folds, seed=args.seed)
    pooled = {"cv": pooled_cv,
              "trained_together": {"n": len(all_qs), "auc": together["auc"],
                                   "nested_auc": together["nested_auc"],
                                   "positive_rate": together["positive_rate"]},
              "evaluation": R.pooled_report({d: per[d]["evaluation"] for d in per},
                                            args.experiments, args.reader)}
    return {"per_dataset": per, "pooled": pooled}


# -- the report --------------------------------------------------------------------------------
_ci, _tok, reading = R.ci, R.token_diff, R.reading


def markdown(res: dict, command: str, seconds: float, args) -> str:
    per, pooled = res["per_dataset"], res["pooled"]
    L = ["# Question-level router: one-shot or multi-step (issue 35, item 2)", "",
         f"Command: `{command}` ({seconds:.0f} s, one job). No model call: training labels "
         "from `results/trajectories/<dataset>-" + args.reader + ".npz` + `.answer-f1.jsonl`, "
         f"evaluation outcomes from the committed rows of `{R.ONE_SHOT_RUN}` (one-shot) and "
         f"`{R.MULTI_STEP_RUN}` (multi-step) in `{args.experiments}`. Method: "
         "`dynakrag_lab/studies/router.py`.", "",
         "**Label** (per training question): multi-step helps = F1 at the end of the saved "
         "(uniform-valid) path > F1 at its first prefix (one retrieval, three documents); a tie "
         "goes to one-shot. **Features** (computed identically from a training prefix and an "
         "evaluation row): `features.question_shape` of the question (14) and the first three "
         "documents' retrieval scores rounded to 4 decimals (sorted, mean, gaps 1-2 and 1-3). "
         "**Model**: logistic regression or a random forest (300 trees, min leaf 8) for "
         "P(helps); route multi-step when P > tau; (model, tau in 0.05..0.95) chosen by mean "
         f"routed F1 over GroupKFold ({args.folds} folds by question), F1 ties within "
         f"{R.F1_TIE} broken by fewer tokens. The CV numbers against the baselines are "
         "*nested* (each outer fold chooses on its own training questions). Intervals: paired "
         "bootstrap 95 % over questions (`comparison.paired_difference`, 10,000 resamples); "
         "the random router is the exact expectation at the same multi-step share.", "",
         "## 1. Training questions, cross-validated", "",
         "| dataset | n | helps / hurts | AUC logreg / forest | nested AUC | chosen (all folds) "
         "| routed F1 (nested) | tokens | multi-step | vs one-shot | vs multi-step | vs random "
         "same rate | oracle F1 |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = [(d, r["cv"], r["cv"]["nested"]) for d, r in per.items()] + \
        [("pooled", None, pooled["cv"])]
    for d, cv, a in rows:
        ag = a["against"]
        head = (f"{cv['positive_rate']:.0%} / {cv['hurts_rate']:.0%} | "
                f"{cv['auc']['logreg']:.2f} / {cv['auc']['forest']:.2f} | "
                f"{cv['nested_auc']:.2f} | {cv['choice']['model']}, tau "
                f"{cv['choice']['tau']:.2f} (F1 {cv['choice']['f1']:.3f}) |"
                if cv else "— | — | — | — |")
        L.append(f"| {d} | {a['n']} | {head} {a['f1']:.3f} | {a['tokens']:.0f} | "
                 f"{a['multi_rate']:.0%} | {_ci(ag['one_shot']['f1'])} | "
                 f"{_ci(ag['multi_step']['f1'])} | {_ci(ag['random_same_rate']['f1'])} | "
                 f"{a['oracle_f1']:.3f} |")
    tt = pooled["trained_together"]
    L += ["", f"One router trained on the three training sets together (n = {tt['n']}, "
          f"{tt['positive_rate']:.0%} helps): out-of-fold AUC "
          + ", ".join(f"{k} {v:.2f}" for k, v in tt["auc"].items())
          + f", nested {tt['nested_auc']:.2f}. Strongest single features (training AUC, no "
          "folds): " + "; ".join(f"{d}: " + ", ".join(f"{x['feature']} {x['auc']:.2f}"
                                                      for x in r["feature_aucs"][:3])
                                  for d, r in per.items()) + ".",
          "", "## 2. Evaluation split, read once", "",
          "Routed F1 per question = the chosen run's F1, paired by question id. Differences "
          "are routed minus the other (F1 with 95 % interval; tokens, mean).", "",
          "| dataset | n | router | multi-step | routed F1 | tokens | vs " + R.MULTI_STEP_RUN
          + " | vs " + R.ONE_SHOT_RUN + " | vs uniform | vs fixed_k6 | vs random same rate "
          "| AUC on eval label (positive) | oracle F1 |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    evs = [(d, r["evaluation"], r["cv"]["choice"]) for d, r in per.items()] + \
        [("pooled", pooled["evaluation"], None)]
    for d, e, ch in evs:
        ag = e["against"]
        cells = []
        for name in (R.MULTI_STEP_RUN, R.ONE_SHOT_RUN, "uniform", "fixed_k6",
                     "random_same_rate"):
            cells.append(f"{_ci(ag[name]['f1'])}; {_tok(ag[name]['tokens'])} tok"
                         if name in ag else "—")
        L.append(f"| {d} | {e['n']} | "
                 + (f"{ch['model']}, tau {ch['tau']:.2f}" if ch else "—")
                 + f" | {e['multi_rate']:.0%} | {e['f1']:.3f} | {e['tokens']:.0f} | "
                 + " | ".join(cells) + f" | {e['auc']:.2f} ({e['helps_rate']:.0%}) | "
                 f"{e['oracle_f1']:.3f} |")
    L += ["", "## 3. Checks", ""]
    for d, r in per.items():
        sr, e = r["score_recovery"], r["evaluation"]
        L.append(f"- **{d}**: training {r['training']['n']} of "
                 f"{r['training']['questions_in_file']} questions have answer F1 on every "
                 f"prefix; the scores recovered from the npz (max, 3 mean - max - min, min) "
                 f"match the stored rank_gap_1_3 on {sr['n']} first prefixes that read the "
                 f"ranking's top three (max |diff| {sr['max_abs_diff']:.1e}); "
                 f"{e['same_first_docs']}/{e['n']} evaluation questions have the same first "
                 f"three documents in both runs; largest train-vs-eval feature shift: "
                 + ", ".join(f"{x['feature']} {x['smd']:+.2f} sd" for x in e["drift"][:3])
                 + ".")
    L += ["", "## 4. Reading", ""] + [f"- {s}" for s in reading(res)] + [
        "- Caveats: the training label's multi-step is the uniform-valid walk (the "
        "controller's own depth cannot be replayed on these paths) and its F1s are answers "
        "from the documents, while the evaluation runs answer from the compressor's snippets; "
        "the evaluation AUC is a reading on few positives, nothing was chosen on it.", ""]
    return "\n".join(L)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/diagnostics/router.json")
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--reader", default="qwen2.5-coder-1.5b")
    ap.add_argument("--trajectories", default="results/trajectories")
    ap.add_argument("--experiments", default="results/experiments")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=R.SEED)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = run(args)
    seconds = time.perf_counter() - t0
    command = relative_command(list(argv if argv is not None else sys.argv[1:]),
                               prefix="python -m dynakrag_lab.studies.router")
    out = Path(args.out)
    atomic_write_json(out, json_clean({"command": command, "seconds": seconds,
                                  "settings": {"folds": args.folds, "seed": args.seed,
                                               "models": R.MODELS, "taus": R.TAUS,
                                               "features": R.ROUTER_FEATURES,
                                               "reader": args.reader}, **res}))
    atomic_write_text(out.with_suffix(".md"), markdown(res, command, seconds, args))
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
