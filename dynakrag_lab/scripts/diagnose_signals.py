"""How well does each sufficiency signal separate complete from incomplete evidence, for one
generator, on TRAINING questions only (the evaluation split is never read)?

    python dynakrag_lab/scripts/diagnose_signals.py --dataset hotpotqa \
        --generator qwen2.5-coder-0.5b --limit 20 [--signals text,margin,learned,answer_conf] \
        [--per-question 4] \
        [--learned-questions 300] [--runs-dir results/experiments/hotpotqa/qwen2.5-coder-0.5b]

States: :func:`dynakrag_lite.training.calibration.calibration_states` on the first ``--limit``
training questions (retrieval-only walks: retrieve_more 1-3 times and a seeded retrieve/bridge
walk, so documents at different support recall; no LLM call to build them). Label: 1[SR(s) =
1]. Per signal: AUC (with a bootstrap standard error over questions), the within-question AUC
(pairs of states of the same question only), the SUFFICIENT rate (text: share of replies parsed
SUFFICIENT; margin: share with log P(S) > log P(INS), i.e. what greedy decoding of the first
token prefers; every signal: share at the calibrated threshold), and what
:func:`~dynakrag_lite.training.calibration.calibrate` would choose. The learned estimator's AUC
is out-of-fold (folds grouped by question) over the states of ``--learned-questions`` training
questions (cheap: no LLM), and also reported on the ``--limit`` subset.

With ``--runs-dir``, every ``*/predictions.jsonl`` below it is summarised as well: acquisition
actions per question (gap_query, rewrite_query, bridge_entity_expand, sufficiency_check) with
the share of their added documents that are gold, sufficiency verdicts, IRCoT iterations and
Self-Ask searches per question, and compression snippet validity where recorded
(``dynakrag_lab.studies.diagnostics.action_gold_hits``).

Writes ``results/diagnostics/<dataset>-<generator>-signals.json`` (with the command).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from dynakrag_lite import sufficiency as S  # noqa: E402
from dynakrag_lite.training import calibration as C  # noqa: E402
from dynakrag_lite.training.estimator import oof_estimator_scores  # noqa: E402
from dynakrag_lite.storage import atomic_write_text, relative_command  # noqa: E402
from dynakrag_lab.studies.diagnostics import summarise_runs  # noqa: E402



def within_question_auc(scores, labels, groups) -> float | None:
    """Mean over questions with both labels of the AUC among that question's states."""
    s, y, g = np.asarray(scores, float), np.asarray(labels, float), np.asarray(groups, object)
    vals = []
    for q in dict.fromkeys(g.tolist()):
        m = g == q
        if len(set(y[m].tolist())) == 2:
            vals.append(C.auc(s[m], y[m]))
    return round(float(np.mean(vals)), 4) if vals else None


def _r(x):
    return None if x is None or (isinstance(x, float) and not np.isfinite(x)) else round(x, 4)


def signal_report(kind, scores, y, groups, seconds, extra=None, reachable=None) -> dict:
    a = C.auc(scores, y)
    thr = 0.5 if kind == "text" else C.youden_threshold(scores, y)
    out = {"auc": _r(a), "auc_se": _r(C.grouped_auc_se(scores, y, groups)),
           "within_question_auc": within_question_auc(scores, y, groups),
           "youden_threshold": _r(float(thr)),
           "sufficient_rate_at_threshold": _r(float(np.mean(scores >= thr))),
           "score_mean_sufficient": _r(float(np.mean(scores[y == 1]))) if (y == 1).any()
           else None,
           "score_mean_insufficient": _r(float(np.mean(scores[y == 0]))) if (y == 0).any()
           else None,
           "seconds": round(seconds, 1)}
    if reachable is not None and reachable.any():
        out["auc_reachable_only"] = _r(C.auc(scores[reachable], y[reachable]))
    if kind == "text":
        out["sufficient_rate"] = _r(float(np.mean(extra)))
    if kind == "margin":
        out["sufficient_rate"] = _r(float(np.mean(scores > 0)))  # greedy first-token choice
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--generator", required=True)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--limit", type=int, default=20, help="training questions for LLM signals")
    ap.add_argument("--per-question", type=int, default=4)
    ap.add_argument("--learned-questions", type=int, default=300)
    ap.add_argument("--signals", default="text,margin,learned")
    ap.add_argument("--n-eval", type=int, default=100)
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--doc-chars", type=int, default=600)
    ap.add_argument("--max-docs", type=int, default=12,
                    help="document cap of the states (smaller: shorter prompts, faster)")
    ap.add_argument("--runs-dir", default=None)
    ap.add_argument("--index-dir", default=None, help="dense index folder (default: the cache)")
    ap.add_argument("--out", default=str(ROOT / "results" / "diagnostics"))
    ap.add_argument("--seed", type=int, default=13)
    args = ap.parse_args(argv)
    from dataclasses import replace
    from dynakrag_lite.pipeline import build_setup
    t0 = time.perf_counter()
    kinds = [k for k in args.signals.split(",") if k]
    bad = [k for k in kinds if k not in S.SIGNALS]
    if bad:
        raise SystemExit(f"unknown signal(s) {bad}; choose from {S.SIGNALS}")
    setup = build_setup(args.dataset, generator=args.generator, data_dir=args.data_dir,
                        n_eval=args.n_eval, split_seed=args.split_seed, show_progress=False,
                        index_dir=args.index_dir)
    env = setup.env
    env.config = replace(env.config, doc_chars=args.doc_chars or None, max_docs=args.max_docs)
    train = setup.train  # never setup.eval
    qs = train[: args.limit]
    states = C.calibration_states(qs, env, per_question=args.per_question, seed=args.seed)
    y = np.array([float(c.sufficient) for c in states])
    groups = np.array([c.qid for c in states], dtype=object)
    reach = np.array([c.kind == "reachable" for c in states])
    report: dict = {
        "dataset": setup.dataset, "generator": args.generator, "split": "train",
        "n_questions": len(qs), "n_states": len(states), "positives": int(y.sum()),
        "sr_levels": dict(sorted(Counter(round(c.sr, 3) for c in states).items())),
        "docs_per_state": dict(sorted(Counter(len(c.state.docs) for c in states).items())),
        "state_kinds": dict(Counter(c.kind for c in states)),
        "signals": {}}
    scores: dict[str, np.ndarray] = {}
    text_extra = None
    llm_kinds = [k for k in kinds if k != "learned"]
    if llm_kinds:  # one pass over the states (their signals share the KV cache)
        t1 = time.perf_counter()
        got = C.signal_scores(states, env, llm_kinds, seed=args.seed, progress=True)
        secs = (time.perf_counter() - t1) / len(llm_kinds)
        for kind in llm_kinds:
            scores[kind] = got[kind]["score"]
            rec = signal_report(kind, got[kind]["score"], y, groups, secs,
                                got[kind].get("extra"), reach)
            rec["seconds_note"] = "the LLM signals' total time, split evenly"
            report["signals"][kind] = rec
            print(kind, json.dumps(rec), flush=True)
        text_extra = got.get("text", {}).get("extra")
    if "learned" in kinds:
        t1 = time.perf_counter()
        lq = train[: max(args.learned_questions, args.limit)]
        all_states = C.calibration_states(lq, env, per_question=args.per_question,
                                          seed=args.seed)
        X = np.stack([S.learned_features(c.state) for c in all_states])
        ya = np.array([float(c.sufficient) for c in all_states])
        ga = np.array([c.qid for c in all_states], dtype=object)
        ra = np.array([c.kind == "reachable" for c in all_states])
        oof = oof_estimator_scores(X, ya, ga, seed=args.seed, train_mask=ra)
        key = {(c.qid, c.state.doc_ids): i for i, c in enumerate(all_states)}
        sub = np.array([oof[key[(c.qid, c.state.doc_ids)]] for c in states])
        scores["learned"] = sub
        rec = signal_report("learned", sub, y, groups, time.perf_counter() - t1,
                            reachable=reach)
        rec["all_states"] = {"n_questions": len(lq), "n_states": len(all_states),
                             "positives": int(ya.sum()), "auc_oof": _r(C.auc(oof, ya)),
                             "auc_se": _r(C.grouped_auc_se(oof, ya, ga)),
                             "within_question_auc": within_question_auc(oof, ya, ga),
                             "auc_oof_reachable_only": _r(C.auc(oof[ra], ya[ra])),
                             "note": "trained on reachable states only (out-of-fold)"}
        report["signals"]["learned"] = rec
        print("learned", json.dumps(rec), flush=True)
    chosen = C.calibrate(scores, y, groups, generator=args.generator,
                         text_sufficient=text_extra, seed=args.seed)
    report["calibrated_choice"] = {"kind": chosen.kind, "threshold": _r(chosen.threshold),
                                   "gates": chosen.gates,
                                   "informative": {k: v.informative
                                                   for k, v in chosen.stats.items()}}
    if args.runs_dir:
        report["runs"] = summarise_runs(args.runs_dir)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    report["command"] = relative_command(sys.argv[1:] if argv is None else list(argv),
                                         prefix="python dynakrag_lab/scripts/diagnose_signals.py")
    out = Path(args.out) / (f"{setup.dataset}-{args.generator.replace('/', '_').replace(':', '_')}"
                            "-signals.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(report, indent=2) + "\n")
    print(f"wrote {relative_command([str(out)], prefix='')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
