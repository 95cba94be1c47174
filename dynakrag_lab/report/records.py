"""The records the book's settings come from (chapters 11b-16): how many questions a run
evaluated and from which split, what its policy was trained on and with which lambda and tau,
the control diagnosis of issue 24, and what lambda did to a cross-validated sweep.

A chapter states a count or a setting by reading it here, never by typing it: the evaluation
split (``--n-eval``) from the command a run's ``summary.json`` records, the training size and
the thresholds from the policy's own metadata or from the fingerprint of the run that used it.
Everything here only reads; paths under ``results/`` are found with
:func:`~dynakrag_lab.report.results.locate`, so a chapter running in ``book/`` needs no
path idiom of its own.
"""
from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from dynakrag_lite.experiments.artifacts import EXPERIMENTS_DIR, policy_file_name
from dynakrag_lite.policy import Policy

from .results import load_summary, locate, status_label

RESULTS_ROOT = "results"  # relative: found from the working folder or its parents
DIAGNOSIS_FILE = "diagnostics/control-diagnosis.json"
HORIZON_FILE = "diagnostics/control-diagnosis-horizon.json"
STOP_FILE = "diagnostics/control-diagnosis-stop.json"
DEFAULT_N_EVAL = 100  # the CLI's --n-eval default (an older command without the flag used it)


def results_path(*parts: str, root: str | Path = RESULTS_ROOT) -> Path:
    """``<root>/<parts>`` located from the working folder (a chapter runs in ``book/``); the
    path as given when it is nowhere (the caller checks ``exists()``)."""
    return locate(Path(root, *parts))


def command_options(command: str | None) -> dict[str, str | bool]:
    """The ``--flag value`` pairs of a recorded command line (a flag without a value: True)."""
    words = shlex.split(command or "")
    out: dict[str, str | bool] = {}
    for i, w in enumerate(words):
        if w.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else None
            out[w] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


def run_record(dataset: str, generator: str, run: str,
               root: str | Path = EXPERIMENTS_DIR) -> dict[str, Any]:
    """What one run folder records about its setting: ``n`` answered, ``n_expected``,
    ``complete``, ``status``, the evaluation split ``n_eval`` and ``split_seed`` (from the
    recorded command), the policy it used (``policy_path``, ``n_train``) with its ``lam`` and
    ``tau`` (from the run's fingerprint), the command and the control config. Raises
    FileNotFoundError for a run without a summary."""
    s = load_summary(dataset, generator, run, root)
    info = s.get("run") or {}
    opts = command_options(info.get("command"))
    policy = s.get("policy") or {}
    fp_policy = (s.get("fingerprint") or {}).get("policy") or {}
    n_eval = opts.get("--n-eval")
    return {"dataset": dataset, "generator": generator, "run": run, "n": s.get("n"),
            "n_expected": info.get("n_expected"), "complete": info.get("complete"),
            "status": status_label(s.get("n"), info.get("n_expected"), info.get("complete")),
            "n_eval": int(n_eval) if isinstance(n_eval, str) else DEFAULT_N_EVAL,
            "split_seed": int(opts.get("--split-seed", 0)),
            "policy_path": policy.get("path"), "n_train": policy.get("n_train"),
            "lam": fp_policy.get("lam"), "tau": fp_policy.get("veto_threshold"),
            "command": info.get("command"), "config": info.get("config") or {}}


def policy_path(dataset: str, generator: str, variant: str = "",
                root: str | Path = RESULTS_ROOT) -> Path | None:
    """``<root>/policies/<dataset>-<generator><variant>.joblib`` (``variant``: "",
    ``"-continuation"``, ``"-gain_stop"``) when it exists, else None."""
    name = policy_file_name(dataset, generator).replace(".joblib", f"{variant}.joblib")
    path = results_path("policies", name, root=root)
    return path if path.is_file() else None


def policy_record(policy: Policy | str | Path) -> dict[str, Any]:
    """A policy's settings from its metadata: ``n_train`` (training questions), ``lam``,
    ``tau``, ``stop_rule``, ``continuation_target`` and ``continuation_questions``, the
    sufficiency signal, and the tuning that chose lambda and tau (``tuning_metric``,
    ``tuning_folds``, ``token_price``; None when it was not cross-validated)."""
    p = policy if isinstance(policy, Policy) else Policy.load(policy)
    m, tuning = p.meta, p.meta.get("tuning") or {}
    return {"n_train": m.get("n_questions"), "lam": float(p.lam),
            "tau": float(p.veto_threshold), "stop_rule": p.stop_rule,
            "continuation_target": m.get("continuation_target"),
            "continuation_questions": m.get("n_continuation_questions"),
            "sufficiency": (m.get("sufficiency") or {}).get("kind"),
            "tuning_metric": tuning.get("metric"), "tuning_folds": tuning.get("folds"),
            "token_price": tuning.get("token_price"), "generator": m.get("generator"),
            "dataset": m.get("dataset")}


# -- the control diagnosis (issue 24; python -m dynakrag_lab.studies.diagnosis) ---------------
def diagnosis_report(root: str | Path = RESULTS_ROOT) -> dict | None:
    """``results/diagnostics/control-diagnosis.json``, or None when it was not measured."""
    path = results_path(DIAGNOSIS_FILE, root=root)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


DIAGNOSIS_COLUMNS = ("dataset", "reader", "questions", "decisions", "probe chosen",
                     "probe best", "gain forest", "gain uniform", "gain retrieve_more",
                     "gain w/o probe", "gain best", "regret forest", "regret uniform",
                     "regret retrieve_more", "AUC f1", "AUC sr", "AUC sr on F1")


def diagnosis_table(report: Mapping) -> pd.DataFrame:
    """One row per dataset x reader of the control diagnosis at lambda 0 (held-out
    decisions, cross-validated by question): how often the forest picks ``sufficiency_check``
    and how often it is strictly the best action; the realized support gain per decision of
    the forest, of a uniform pick, of always ``retrieve_more``, of the forest without the
    probe and of the best action, with the regrets (best minus chosen); and the stop AUCs of
    the continuation forest (``f1`` target; ``sr`` target; the ``sr`` forest on the F1
    event)."""
    rows = []
    for key, r in report["results"].items():
        dataset, _, reader = key.partition("/" if "/" in key else "-")
        c = r["choice"]["lambdas"]["0"]
        rm, auc = r["choice"]["retrieve_more"], r["stop"]["auc"]
        probe = c["actions"]["sufficiency_check"]
        rows.append(dict(zip(DIAGNOSIS_COLUMNS, (
            dataset, reader, r["n_questions"], c["n_states"], probe["chosen"],
            probe["strictly_best"], c["gain_chosen"], c["gain_uniform"], rm["gain_chosen"],
            r["choice"]["forest_acquisitions_only"]["gain_chosen"], c["gain_best"],
            c["regret"], c["regret_uniform"], rm["regret"], auc["f1"]["auc"],
            auc["sr"]["auc"], auc["sr_model_f1_event"]["auc"]))))
    return pd.DataFrame(rows, columns=list(DIAGNOSIS_COLUMNS))


def horizon_report(root: str | Path = RESULTS_ROOT) -> dict | None:
    """``results/diagnostics/control-diagnosis-horizon.json`` (section 8, horizon labels), or
    None when it was not measured."""
    path = results_path(HORIZON_FILE, root=root)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def stop_report(root: str | Path = RESULTS_ROOT) -> dict | None:
    """``results/diagnostics/control-diagnosis-stop.json`` (section 9, stop targets), or None
    when it was not measured."""
    path = results_path(STOP_FILE, root=root)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def stop_targets_table(report: Mapping, reader: str | None = None) -> pd.DataFrame:
    """One row per dataset x stop target (own / pooled training) of section 9: its mean F1
    over a random stop at equal tokens (``over random``) and, at its operating point, the
    share of questions stopping before the path's end, F1, the token ratio to always
    continuing, and the paired differences to always continuing and to the random stop with
    their 95 % intervals; only ``reader``'s files when given."""
    rows = []
    for key, r in report["results"].items():
        dataset, _, rd = key.partition("/")
        st = r["stop_targets"]
        if (reader and rd != reader) or "targets" not in st:
            continue
        for name, t in st["targets"].items():
            target, _, training = name.partition("/")
            op = t["operating_point"] or {}
            a_lo, a_hi = op.get("minus_end_ci") or (None, None)
            r_lo, r_hi = op.get("minus_random_ci") or (None, None)
            rows.append({"dataset": dataset, "reader": rd, "questions": st["n_questions"],
                         "target": target, "training": training,
                         "over random": t["over_random"], "stop early": op.get("stop_early"),
                         "F1": op.get("f1"), "token ratio": op.get("token_ratio"),
                         "minus always": op.get("minus_end"), "always lo": a_lo,
                         "always hi": a_hi, "minus random": op.get("minus_random"),
                         "random lo": r_lo, "random hi": r_hi})
    return pd.DataFrame(rows)


HORIZON_CHOOSERS = {"horizon_forest": "horizon forest",
                    "horizon_forest_acquisitions_only": "horizon, no probe",
                    "onestep_forest": "one-step forest",
                    "retrieve_more": "always retrieve_more"}


def horizon_table(report: Mapping) -> pd.DataFrame:
    """One row per dataset x chooser of the horizon-label diagnosis (held-out decisions,
    cross-validated by question): the chooser's importance-sampling support recall per
    decision, its difference to uniform with the question-bootstrap 95% interval (``lo``,
    ``hi``) and the share of decisions where it picks ``sufficiency_check``; indexed by
    (dataset, chooser)."""
    rows = {}
    for key, r in report["results"].items():
        h = r["horizon"]
        for name, label in HORIZON_CHOOSERS.items():
            c = h["choosers"][name]
            lo, hi = c["ci_minus_uniform"]
            rows[(key.split("/")[0], label)] = {
                "SR per decision": c["value"], "minus uniform": c["minus_uniform"],
                "lo": lo, "hi": hi, "picks probe": c["share_sufficiency_check"]}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis(["dataset", "chooser"])


# -- what lambda did to a cross-validated sweep ---------------------------------------------
def lambda_effect(grid: pd.DataFrame | list, tau: float) -> dict[str, Any]:
    """The lambdas of a tuning grid at veto threshold ``tau`` and what they changed:
    ``n_lams``, ``n_outcomes`` (distinct (F1, SR, tokens) triples, rounded to 6 decimals),
    ``early_min``/``early_max`` (share of questions stopped before the cap), and
    ``sentence``, a reading that stays true: "inert" when every lambda gives the same F1, SR
    and tokens (saying so even when only the early-stop share moved)."""
    g = pd.DataFrame(grid)
    g = g[[math.isclose(float(t), tau) for t in g["veto_threshold"]]]
    if g.empty:
        return {"n_lams": 0, "n_outcomes": 0, "early_min": math.nan, "early_max": math.nan,
                "sentence": f"the grid has no row at tau = {tau:g}"}
    outcomes = {tuple(round(float(r[k]), 6) for k in ("f1", "sr", "tokens"))
                for _, r in g.iterrows()}
    early = g["early"].astype(float) if "early" in g else pd.Series([math.nan])
    out = {"n_lams": int(g["lam"].nunique()), "n_outcomes": len(outcomes),
           "early_min": float(early.min()), "early_max": float(early.max())}
    if len(outcomes) == 1:
        moved = ("" if math.isclose(out["early_min"], out["early_max"]) else
                 f"; only the share of questions stopped before the cap moved, from "
                 f"{out['early_min']:.1%} to {out['early_max']:.1%}, which changes no answer")
        out["sentence"] = (f"all {out['n_lams']} values of λ gave the same F1, support recall "
                           f"and tokens: λ is inert here{moved}")
    else:
        f1 = g["f1"].astype(float)
        out["sentence"] = (f"the {out['n_lams']} values of λ gave {len(outcomes)} different "
                           f"outcomes, F1 from {f1.min():.3f} to {f1.max():.3f}: λ moved the "
                           "stops")
    return out


def stop_rule_reports(root: str | Path = RESULTS_ROOT, generator: str = "qwen2.5-coder-0.5b"
                      ) -> dict[str, dict]:
    """``results/diagnostics/<dataset>-<generator>-stop-rule.json`` (written by
    ``python -m dynakrag_lab.studies.stop_rule``) of every dataset that has one, by dataset."""
    folder = results_path("diagnostics", root=root)
    suffix = f"-{generator}-stop-rule.json"
    return {p.name[:-len(suffix)]: json.loads(p.read_text(encoding="utf-8"))
            for p in sorted(folder.glob(f"*{suffix}"))} if folder.is_dir() else {}


def sweep_sentence(report: Mapping, dataset: str) -> str:
    """One dataset's stop-rule report in words: per rule, the pair (lambda, tau) its
    cross-validation chose with the F1, tokens and early-stop share there, and what lambda
    did at that tau (:func:`lambda_effect`)."""
    parts = []
    for rule, r in report["rules"].items():
        best = r.get("best") or {}
        effect = lambda_effect(r["grid"], float(r["veto_threshold"]))
        parts.append(f"the {rule} rule chose λ = {float(r['lam']):g}, τ = "
                     f"{float(r['veto_threshold']):g} (F1 {float(best.get('f1', math.nan)):.3f} "
                     f"at {float(best.get('tokens', math.nan)):,.0f} tokens, stopped before the "
                     f"cap on {float(best.get('early', math.nan)):.0%} of the questions); at "
                     f"that τ {effect['sentence']}")
    return (f"{dataset} ({report.get('questions')} training questions, "
            f"{report.get('folds')} folds): " + "; ".join(parts))


__all__ = ["DIAGNOSIS_COLUMNS", "HORIZON_CHOOSERS", "command_options",
           "diagnosis_report", "diagnosis_table", "horizon_report", "horizon_table",
           "lambda_effect", "policy_path", "policy_record", "results_path", "run_record",
           "stop_rule_reports", "sweep_sentence"]


# -- stop-rule reports (python -m dynakrag_lab.studies.stop_rule) ----------------------------
STOP_RULE_COLUMNS = ("dataset", "generator", "rule", "lam", "veto_threshold", "f1", "sr",
                     "tokens", "early", "vetoes", "n_questions", "chosen")


def stop_rule_table(report: Mapping, dataset: str | None = None,
                    all_thresholds: bool = False) -> pd.DataFrame:
    """A stop-rule report (the JSON of ``python -m dynakrag_lab.studies.stop_rule``, read with
    ``json``) as one tidy row per (stop rule, λ), at the veto threshold τ that rule's cross-validation chose
    (``all_thresholds=True``: every (λ, τ) of both grids). Columns
    :data:`STOP_RULE_COLUMNS`: the cross-validated answer F1, support recall ``sr``, mean
    tokens per question, ``early`` (the fraction of questions stopped before the step cap),
    mean ``vetoes``, ``n_questions`` (the held-out questions scored: those collected with
    answer calls) and ``chosen`` (the (λ, τ) the rule picked: one row per rule).

    ``dataset`` and ``generator`` come from the report's trajectories file,
    ``<dataset>-<generator>.npz`` (``dataset`` overrides; a dataset name has no hyphen).
    ``attrs`` keeps the report's ``questions`` (training questions), ``folds``, ``metric``
    and ``trajectories``. Pure: reads nothing but ``report``."""
    rules = report.get("rules")
    if not isinstance(rules, Mapping) or not rules:
        raise ValueError("not a stop-rule report: no 'rules' (python -m "
                         "dynakrag_lab.studies.stop_rule writes one)")
    stem = Path(str(report.get("trajectories") or "")).stem
    if dataset is None:
        dataset = stem.split("-", 1)[0] or None
    generator = stem[len(dataset) + 1:] if dataset and stem.startswith(f"{dataset}-") else None
    if not generator and "-" in stem:
        generator = stem.split("-", 1)[1]
    out = []
    for rule, r in rules.items():
        lam, tau = float(r["lam"]), float(r["veto_threshold"])
        rows = [g for g in r["grid"]
                if all_thresholds or math.isclose(float(g["veto_threshold"]), tau)]
        chosen = [math.isclose(float(g["lam"]), lam) and
                  math.isclose(float(g["veto_threshold"]), tau) for g in rows]
        if sum(chosen) != 1:
            raise ValueError(f"rule {rule!r}: its chosen pair λ={lam:g}, τ={tau:g} is "
                             f"{'missing from' if not any(chosen) else 'repeated in'} its grid")
        for g, c in zip(rows, chosen):
            out.append({"dataset": dataset, "generator": generator, "rule": rule,
                        "lam": float(g["lam"]), "veto_threshold": float(g["veto_threshold"]),
                        **{k: float(g.get(k, math.nan)) for k in
                           ("f1", "sr", "tokens", "early", "vetoes")},
                        "n_questions": int(g.get("n_questions", 0)), "chosen": c})
    df = pd.DataFrame(out, columns=list(STOP_RULE_COLUMNS))
    order = {rule: i for i, rule in enumerate(rules)}
    df = df.sort_values(["rule", "veto_threshold", "lam"],
                        key=lambda c: c.map(order) if c.name == "rule" else c,
                        kind="stable").reset_index(drop=True)
    df.attrs.update({k: report[k] for k in ("questions", "folds", "metric", "trajectories")
                     if k in report})
    return df
