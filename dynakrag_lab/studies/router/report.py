"""The router study's report: the reading in plain sentences generated from the numbers of
``results/diagnostics/router.json`` (:func:`reading`; the book shows them) and the Markdown
written beside it (:func:`markdown`)."""
from __future__ import annotations

from dynakrag_lab.report.names import MULTI_STEP_RUN, ONE_SHOT_RUN
from dynakrag_lab.report.verdicts import pair_word


# -- the reading ---------------------------------------------------------------------------
def ci(d: dict, fmt: str = "+.3f") -> str:
    """A difference record as '+.052 [+.005, +.102]'."""
    return f"{d['diff']:{fmt}} [{d['lo']:{fmt}}, {d['hi']:{fmt}}]"


def token_diff(d: dict) -> str:
    """A token difference record as '+123'."""
    return f"{d['diff']:+.0f}"


def reading(res: dict) -> list[str]:
    """The report's reading: plain sentences generated from the numbers of
    ``results/diagnostics/router.json`` (the script writes them to the .md; the book shows
    them)."""
    per, pooled = res["per_dataset"], res["pooled"]
    aucs = [v for r in per.values() for v in r["cv"]["auc"].values()]
    out = [f"Training signal: out-of-fold AUC for \"multi-step beats one-shot\" is "
           f"{min(aucs):.2f}-{max(aucs):.2f} over the datasets and models (nested "
           + ", ".join(f"{d} {r['cv']['nested_auc']:.2f}" for d, r in per.items())
           + "; one router on the three training sets together: "
           + ", ".join(f"{k} {v:.2f}" for k, v in pooled["trained_together"]["auc"].items())
           + "). " + ("That is chance: after one retrieval, the question's shape and the "
                      "retrieval scores do not tell which questions the longer walk helps."
                      if max(aucs) < 0.6 else "There is some ranking signal.")]
    rnd = pooled["cv"]["against"]["random_same_rate"]["f1"]
    out.append(f"Cross-validated (nested) routing, pooled: F1 {pooled['cv']['f1']:.3f} at a "
               f"multi-step rate of {pooled['cv']['multi_rate']:.0%}; against a random router "
               f"at each dataset's same rate {ci(rnd)}"
               + f" ({pair_word(rnd['verdict'])})"
               + ". What the router does is mostly pick the better constant per dataset: "
               + "; ".join(f"{d}: multi-step on {r['cv']['nested']['multi_rate']:.0%}"
                           for d, r in per.items()) + ".")
    gaps = {d: (r["training"]["f1_multi_step"] - r["training"]["f1_one_shot"],
                r["evaluation"]["against"][MULTI_STEP_RUN]["f1"]["mean_b"]
                - r["evaluation"]["against"][ONE_SHOT_RUN]["f1"]["mean_b"])
            for d, r in per.items()}
    out.append("Label transfer: multi-step minus one-shot F1 is "
               + "; ".join(f"{d} {a:+.3f} on the training paths (uniform walk) vs {b:+.3f} "
                           f"on the evaluation runs (the controller's walk)"
                           for d, (a, b) in gaps.items())
               + ".")
    flip = [d for d, (a, b) in gaps.items() if a <= 0 < b]
    if flip:
        out[-1] += (" On " + ", ".join(flip) + " the sign flips: the training label says the "
                    "longer walk does not pay, the controller's walk does, so a router trained "
                    "on these labels leans to one-shot where the evaluation rewards "
                    "multi-step.")
    ms, one, same = (pooled["evaluation"]["against"][k]["f1"]
                     for k in (MULTI_STEP_RUN, ONE_SHOT_RUN, "random_same_rate"))
    out.append(f"Read once on the evaluation split (pooled, n = {pooled['evaluation']['n']}): "
               f"routed F1 {pooled['evaluation']['f1']:.3f}, tokens "
               f"{pooled['evaluation']['tokens']:.0f}; vs {MULTI_STEP_RUN} {ci(ms)} "
               f"({pair_word(ms['verdict'])}), vs {ONE_SHOT_RUN} {ci(one)} "
               f"({pair_word(one['verdict'])}), vs the random router at the same rates "
               f"{ci(same)} ({pair_word(same['verdict'])}). The router's score against the "
               f"evaluation's own \"multi-step beats one-shot\": AUC "
               + ", ".join(f"{d} {r['evaluation']['auc']:.2f} ({r['evaluation']['helps_rate']:.0%}"
                           f" positive)" for d, r in per.items()) + ".")
    return out

NAMES = {"one_shot": "always one-shot", "multi_step": "always multi-step",
         "random_same_rate": "random, same multi-step rate"}


def markdown(res: dict, command: str, seconds: float, args, f1_tie: float) -> str:
    """The report beside the JSON: the method, the tables per dataset and pooled, the reading."""
    per, pooled = res["per_dataset"], res["pooled"]
    L = ["# Question-level router: one-shot or multi-step (issue 35, item 2)", "",
         f"Command: `{command}` ({seconds:.0f} s, one job). No model call: training labels "
         "from `results/trajectories/<dataset>-" + args.reader + ".npz` + `.answer-f1.jsonl`, "
         f"evaluation outcomes from the committed rows of `{ONE_SHOT_RUN}` (one-shot) and "
         f"`{MULTI_STEP_RUN}` (multi-step) in `{args.experiments}`. Method: "
         "`dynakrag_lab/studies/router/`.", "",
         "**Label** (per training question): multi-step helps = F1 at the end of the saved "
         "(uniform-valid) path > F1 at its first prefix (one retrieval, three documents); equal "
         "F1s go to one-shot. **Features** (computed identically from a training prefix and an "
         "evaluation row): `features.question_shape` of the question (14) and the first three "
         "documents' retrieval scores rounded to 4 decimals (sorted, mean, gaps 1-2 and 1-3). "
         "**Model**: logistic regression or a random forest (300 trees, min leaf 8) for "
         "P(helps); route multi-step when P > tau; (model, tau in 0.05..0.95) chosen by mean "
         f"routed F1 over GroupKFold ({args.folds} folds by question), F1s within {f1_tie} of "
         "the best broken by fewer tokens. The CV numbers against the baselines are "
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
                 f"{a['multi_rate']:.0%} | {ci(ag['one_shot']['f1'])} | "
                 f"{ci(ag['multi_step']['f1'])} | {ci(ag['random_same_rate']['f1'])} | "
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
          "| dataset | n | router | multi-step | routed F1 | tokens | vs " + MULTI_STEP_RUN
          + " | vs " + ONE_SHOT_RUN + " | vs uniform | vs fixed_k6 | vs random same rate "
          "| AUC on eval label (positive) | oracle F1 |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    evs = [(d, r["evaluation"], r["cv"]["choice"]) for d, r in per.items()] + \
        [("pooled", pooled["evaluation"], None)]
    for d, e, ch in evs:
        ag = e["against"]
        cells = []
        for name in (MULTI_STEP_RUN, ONE_SHOT_RUN, "uniform", "fixed_k6",
                     "random_same_rate"):
            cells.append(f"{ci(ag[name]['f1'])}; {token_diff(ag[name]['tokens'])} tok"
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
