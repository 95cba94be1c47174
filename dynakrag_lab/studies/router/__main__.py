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
from dynakrag_lab.report.names import DATASETS
from dynakrag_lab.studies import router as R
from dynakrag_lab.studies.router.report import markdown


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dynakrag_lab.studies.router",
                                 description=__doc__.split("\n\n")[0])
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
                                               "reader": args.reader}, **res}, digits=None))
    atomic_write_text(out.with_suffix(".md"), markdown(res, command, seconds, args, R.F1_TIE))
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
