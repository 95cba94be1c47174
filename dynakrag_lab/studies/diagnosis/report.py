"""The control diagnosis's reports: the Markdown beside each JSON report (sections 1-7, the
horizon labels of section 8, the stop targets of section 9) and its section of
results/README.md (:func:`control_diagnosis_section`)."""
from __future__ import annotations

import math
from pathlib import Path

from dynakrag_lite.storage import atomic_write_json, atomic_write_text

from dynakrag_lab.report.records import (DIAGNOSIS_FILE, HORIZON_FILE, STOP_FILE,
                                         diagnosis_report, horizon_report, stop_report)
from dynakrag_lab.report.results import json_clean
from dynakrag_lab.studies.diagnosis import verdict
from dynakrag_lab.studies.diagnosis.horizon import horizon_verdict
from dynakrag_lab.studies.diagnosis.stop_targets import verdict as stop_verdict

ACTION_ORDER = ("retrieve_more", "gap_query", "bridge_entity_expand", "rewrite_query",
                "sufficiency_check")
HORIZON_CHOOSERS = (("horizon_forest", "horizon forest"),
                    ("horizon_forest_acquisitions_only", "horizon forest w/o suff_check"),
                    ("onestep_forest", "one-step forest"),
                    ("onestep_forest_acquisitions_only", "one-step forest w/o suff_check"),
                    ("retrieve_more", "always retrieve_more"))


def _f(x, fmt=".3f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) \
        else format(x, fmt)


def _cost(command: str, seconds: float, cpu: float) -> str:
    """The opening of every report: its command and what it cost (one job), bracket open."""
    return (f"Command: `{command}` ({seconds / 60:.1f} min wall, {cpu / 60:.1f} min CPU, "
            "one job")


def markdown(results: dict, command: str, seconds: float, settings: dict,
             cpu: float = float("nan")) -> str:
    L = ["# Control diagnosis: where learned control loses its signal",
         "",
         _cost(command, seconds, cpu) + "). No model call: only the saved "
         "trajectories (`results/trajectories/*.npz`, seeded uniform-valid rollouts with every "
         "valid action labelled at each visited state). Cross-validation: GroupKFold by "
         f"question, {settings['folds']} folds; forests: 300 trees, min leaf 8, seed 13.",
         "",
         "A *decision* is a visited state with at least two valid non-stop actions. Realized "
         "gain: the action's SR(s') - SR(s); sufficiency_check adds no document, so 0. "
         "*best* = the oracle's pick (highest realized gain), *uniform* = mean gain over the "
         "options, regret = best - chosen, agreement = the pick gains as much as the best. "
         "*decisive* = decisions whose options do not all gain the same.",
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
          "forest, best (shared best included), strictly best; its mean realized gain when valid",
          "", "| dataset | reader | action | valid | chosen | best | strictly best | "
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
          "F1\" (f1 target, the questions with answer F1: those the saved trajectories "
          "answered, plus those of the --answer-labels files) and \"... "
          "raises SR\" (sr target, all questions); the rollout's last prefix (stop forced) is "
          "not scored. "
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
        L += [f"- {v}" for v in verdict(r)]
        L.append("")
    return "\n".join(L)


def horizon_markdown(results: dict, command: str, seconds: float, settings: dict,
                     cpu: float = float("nan")) -> str:
    """Section 8 of the diagnosis, in its own file."""
    L = ["# Control diagnosis, section 8: horizon labels",
         "",
         _cost(command, seconds, cpu) + "; the wall time depends on the machine's load, the "
         "CPU time is the cost). No "
         "model call: the saved trajectories only. Sections 1-7 are in "
         "`control-diagnosis.md`. Cross-validation: GroupKFold by question, "
         f"{settings['folds']} folds; forests: 300 trees, min leaf 8, seed 13; bootstrap: "
         f"{settings['boot']} resamples of the questions, seed 13.",
         "",
         "**Labels.** For the action the uniform-valid rollout took at a visited state s, its "
         "Monte-Carlo return G = SR(end of the rollout) - SR(s) is an unbiased sample of "
         "Q^uniform(s, a). G is the sum of the taken actions' realized one-step gains from s "
         "on; with the raw labels, where a taken sufficiency_check counts its level label "
         "1[SR=1], the identity fails (checked per file below). The *horizon forest* is the "
         "value forest fitted to (phi(s, a), G) over the taken actions of the training "
         "questions; acting greedily on it is one step of policy improvement over uniform.",
         "",
         "**Estimator.** On the held-out decisions (visited states with at least two options; "
         "the options are the rollout's own, every valid action but stop_answer, so "
         "|A(s)| is 3 to 5), a chooser pi is valued by importance sampling against the "
         "uniform behaviour: the mean of 1[pi(s) = a_taken] * G * |A(s)|. Its expectation "
         "is the mean of Q^uniform(s, pi(s)) over the states uniform visits: the support "
         "recall of deviating once to pi, then continuing uniformly, not of running pi "
         "throughout (that needs a live run). Uniform's value is the mean of G. Only the "
         "decisions where pi picks the taken action carry the estimate (*pick = taken*, "
         "about 1/|A|). Intervals: 95% question-level bootstrap of (chooser - uniform), "
         "paired (the same resamples for every chooser).",
         "",
         "## 8. Horizon labels (held-out decisions)",
         "",
         "| dataset | reader | chooser | value | - uniform | 95% CI | pick = taken | "
         "picks suff_check |",
         "|---|---|---|---|---|---|---|---|"]
    for (ds, rd), r in results.items():
        h = r["horizon"]
        L.append(f"| {ds} | {rd} | uniform (mean G) | {h['uniform']['value']:.3f} | — | — | "
                 "— | — |")
        for key, label in HORIZON_CHOOSERS:
            c = h["choosers"][key]
            lo, hi = c["ci_minus_uniform"]
            L.append(f"| {ds} | {rd} | {label} | {c['value']:.3f} | "
                     f"{c['minus_uniform']:+.3f} | [{lo:+.3f}, {hi:+.3f}] | "
                     f"{c['share_pick_taken']:.0%} | {c['share_sufficiency_check']:.0%} |")
    L += ["", "Per file: decisions, the horizon forest's held-out R² on G (all taken actions "
          "of the held-out questions), the identity check, and the mean G of each action "
          "where the rollout took it (n).", ""]
    for (ds, rd), r in results.items():
        h, idn = r["horizon"], r["horizon"]["identity"]
        mr = h["mean_return_taken"]
        L.append(f"- **{ds}, {rd}**: {h['n_decisions']} decisions of {h['n_questions']} "
                 f"questions; R² {h['r2_returns']:.2f}; G = SR(end) - SR(s) at "
                 f"{idn['n_states']} taken states, max |difference| "
                 f"{_f(idn['max_abs_diff'], '.1e')}; with raw labels it differs at "
                 f"{idn['share_raw_labels_differ']:.0%} of them (max "
                 f"{_f(idn['max_abs_diff_raw_labels'], '.2f')}); mean G when taken: "
                 + ", ".join(f"{a} {mr[a]['mean']:.3f} ({mr[a]['n']})"
                             for a in ACTION_ORDER if a in mr) + ".")
    L += ["", "## Verdict per dataset x reader (generated from the numbers above)", ""]
    for (ds, rd), r in results.items():
        L.append(f"- **{ds}, {rd}**: {horizon_verdict(r['horizon'])}")
    return "\n".join(L)


def stop_markdown(results: dict, command: str, seconds: float, settings: dict,
                  cpu: float = float("nan")) -> str:
    """Section 9 of the diagnosis, in its own file."""
    L = ["# Control diagnosis, section 9: which stop target can a forest learn?",
         "",
         _cost(command, seconds, cpu) + "). No model call: the saved trajectories and the "
         "answer F1 of every prefix "
         "(`--answer-labels`). Only questions whose every prefix has F1. "
         f"Cross-validation: GroupKFold by question, {settings['folds']} folds; forests: 300 "
         f"trees, min leaf 8, seed 13; intervals: {settings['boot']} question-level bootstrap "
         "resamples, paired.",
         "",
         "**The rule.** Along each question's uniform-valid path, continue past a prefix while "
         "the forest's out-of-fold score is above tau; answer at the first prefix where it is "
         "not. Targets: *sr* = SR(end) - SR(now) (the committed continuation model); *f1* = "
         "F1(end) - F1(now); *f1_best* = the best later prefix's F1 - F1(now); *f1_now* = "
         "F1(now), continuing where the forest expects a bad answer. *own*: trained on the "
         "file's questions; *pooled*: plus every labelled question of the other datasets with "
         "the same reader. *random*: continue at each prefix with probability c, c set so "
         "its expected tokens equal the rule's (exact expectation per question).",
         "",
         "*over random*: the mean, over the thresholds where 20-80 % of questions stop before "
         "the end, of the rule's F1 minus the random stop's at the same tokens (the forest's "
         "ranking in one number). *Operating point*: the threshold with the highest F1 among "
         "those, picked on the same out-of-fold scores (optimistic by the noise between "
         "neighbouring thresholds, about .01 here); paired differences with 95 % intervals.",
         "",
         "| dataset | reader | questions | target | over random | stop early | F1 | tokens "
         "(x end) | - always continue | - random at equal tokens |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for (ds, rd), r in results.items():
        st = r["stop_targets"]
        if "targets" not in st:
            L.append(f"| {ds} | {rd} | {st['n_questions']} | {st.get('skipped', '')} "
                     "| | | | | | |")
            continue
        for name, t in st["targets"].items():
            op = t["operating_point"]
            if op is None:
                L.append(f"| {ds} | {rd} | {st['n_questions']} | {name} | "
                         f"{_f(t['over_random'], '+.3f')} | no threshold in 20-80 % | | | | |")
                continue
            L.append(f"| {ds} | {rd} | {st['n_questions']} | {name} | "
                     f"{_f(t['over_random'], '+.3f')} | {op['stop_early']:.0%} | "
                     f"{op['f1']:.3f} | {op['tokens']:.0f} ({op['token_ratio']:.2f}) | "
                     f"{op['minus_end']:+.3f} [{op['minus_end_ci'][0]:+.3f}, "
                     f"{op['minus_end_ci'][1]:+.3f}] | {op['minus_random']:+.3f} "
                     f"[{op['minus_random_ci'][0]:+.3f}, {op['minus_random_ci'][1]:+.3f}] |")
    L += ["", "Always continuing (the path's end) and stopping at the first prefix, per file:", ""]
    for (ds, rd), r in results.items():
        st = r["stop_targets"]
        if "targets" in st:
            c = next(iter(st["targets"].values()))["curve"]
            L.append(f"- **{ds}, {rd}**: first prefix F1 {c[0]['f1']:.3f} at {c[0]['tokens']:.0f}"
                     f" tokens; end F1 {c[-1]['f1']:.3f} at {c[-1]['tokens']:.0f}; positive "
                     "rates of the gain targets at the decision prefixes: " + ", ".join(
                         f"{k} {v:.0%}" for k, v in st["positive_rate"].items()) + ".")
    L += ["", "## Verdict per dataset x reader (generated from the numbers above)", ""]
    for (ds, rd), r in results.items():
        L.append(f"- **{ds}, {rd}**: {stop_verdict(r['stop_targets'])}")
    return "\n".join(L)


def write_report(path: Path, results: dict, settings: dict, command: str, seconds: float,
                 cpu: float, markdown_of) -> Path:
    """``path`` (JSON, every number unrounded: results/README.md words them again) and its
    ``.md`` (``markdown_of``'s tables)."""
    atomic_write_json(path, json_clean({
        "command": command, "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1),
        "settings": settings,
        "results": {f"{ds}/{rd}": r for (ds, rd), r in results.items()}}, digits=None))
    md = path.with_suffix(".md")
    atomic_write_text(md, markdown_of(results, command, seconds, settings, cpu) + "\n")
    return md


def control_diagnosis_section(root: Path) -> str | None:
    """The offline control diagnosis (issue 24; ``python -m dynakrag_lab.studies.diagnosis``):
    where its reports are and each one's reading per dataset x reader, worded here from the
    stored numbers (the four words for an interval), or None before any."""
    reports = [(DIAGNOSIS_FILE, diagnosis_report(root), lambda r: verdict(r)[-1]),
               (HORIZON_FILE, horizon_report(root), lambda r: horizon_verdict(r["horizon"])),
               (STOP_FILE, stop_report(root), lambda r: stop_verdict(r["stop_targets"]))]
    reports = [(name, rep, last) for name, rep, last in reports if rep is not None]
    if not reports:
        return None
    lines = ["## Control diagnosis (offline, from the saved trajectories)\n",
             "No model call: cross-validation grouped by question on the uniform-valid "
             "rollouts of `trajectories/`. The tables are in the Markdown file beside each "
             "report; the readings, worded from its numbers:\n"]
    for name, rep, last in reports:
        lines.append(f"`{name}` (command: `{rep.get('command', '-')}`):\n")
        lines += [f"- **{key}**: {last(r)}" for key, r in rep["results"].items()]
        lines.append("")
    return "\n".join(lines)
