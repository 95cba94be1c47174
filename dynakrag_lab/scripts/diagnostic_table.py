"""One table of the control signals per generator: are they informative, do the acquisition
actions find gold evidence, does compression keep it, what do the baselines do?

    python dynakrag_lab/scripts/diagnostic_table.py --dataset hotpotqa \
        --generators qwen2.5-coder-0.5b,qwen2.5-coder-1.5b [--out results/diagnostics]

Reads only what earlier commands measured (no model call), each source named in the output:

* ``results/diagnostics/<dataset>-<generator>-signals.json`` (``diagnose_signals.py``, training
  questions): AUC of each sufficiency signal against 1[SR = 1], the text probe's SUFFICIENT
  rate, the learned estimator's SUFFICIENT rate at its calibrated threshold.
* ``results/policies/<dataset>-<generator>.joblib`` (``python -m dynakrag_lite train``, training
  questions): per acquisition action, every executed branch of the trajectories (chosen or
  counterfactual) with its share of calls that added a gold document and its mean SR gain.
* ``results/diagnostics/train-split/<dataset>/<generator>[-policy-<other>]/<run>/``
  (``main_experiment.py --split train --offset M``: training questions the policy did not
  see, never the evaluation split): actions per question and their gold hits in the dynakrag
  and uniform runs, IRCoT iterations, Self-Ask searches, snippet validity, and each run's
  F1, SR, tokens, LLM calls and seconds per question (the cost of each method per generator).
* ``results/diagnostics/compression.json`` (``compression_diagnostics.py``): the LLM
  compressor's snippet validity and answer survival against the extractive selector's.

A missing source leaves its cells empty ("not measured"), never a made-up zero. Writes
``<out>/<dataset>-diagnostic-table.json`` and prints the table as markdown.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from dynakrag_lite.experiments.artifacts import policy_file_name  # noqa: E402
from dynakrag_lite.storage import atomic_write_text, relative_command  # noqa: E402
from dynakrag_lab.studies.diagnostics import summarise_runs  # noqa: E402

ACTIONS = ("gap_query", "rewrite_query", "bridge_entity_expand", "retrieve_more")


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def signals_part(dataset: str, generator: str) -> dict:
    d = _json(ROOT / "results" / "diagnostics" / f"{dataset}-{generator}-signals.json")
    if d is None:
        return {}
    sig = d["signals"]
    out = {"source": f"results/diagnostics/{dataset}-{generator}-signals.json",
           "questions": d["n_questions"], "states": d["n_states"],
           "chosen": d["calibrated_choice"]["kind"]}
    for k, v in sig.items():
        out[f"auc_{k}"] = v["auc"]
        if k == "learned" and "all_states" in v:
            out["auc_learned_oof"] = v["all_states"]["auc_oof"]
            out["learned_oof_questions"] = v["all_states"]["n_questions"]
    if "text" in sig:
        out["text_sufficient_rate"] = sig["text"].get("sufficient_rate")
    chosen = d["calibrated_choice"]["kind"]
    out["chosen_sufficient_rate"] = sig[chosen]["sufficient_rate_at_threshold"]
    return out


def training_part(dataset: str, generator: str) -> dict:
    path = ROOT / "results" / "policies" / policy_file_name(dataset, generator)
    if not path.exists():
        return {}
    from dynakrag_lite.policy import Policy
    meta = Policy.load(path).meta
    gains = meta.get("action_gains") or {}
    out = {"source": str(path.relative_to(ROOT)), "questions": meta.get("n_questions"),
           "continuation_target": meta.get("continuation_target"),
           "continuation_questions": meta.get("n_continuation_questions")}
    for a in ACTIONS:
        if a in gains:
            g = gains[a]
            out[a] = {"calls": g["calls"], "hit_rate": g["hit_rate"],
                      "mean_sr_gain": g["mean_sr_gain"]}
    return out


TRAIN_RUNS = ROOT / "results" / "diagnostics" / "train-split"
COST_FIELDS = ("n", "f1", "support_recall", "tokens_mean", "llm_calls_mean",
               "retrieval_calls_mean", "seconds_mean")


def run_folders(dataset: str, generator: str, root: Path = TRAIN_RUNS) -> list[Path]:
    """The folders holding ``generator``'s runs: its own (``<generator>``) and those run with
    another generator's policy (``<generator>-policy-<other>``, main_experiment.py's name)."""
    base = root / dataset
    return sorted(p for p in base.glob(f"{generator}*") if p.is_dir() and (
        p.name == generator or p.name.startswith(f"{generator}-policy-")))


def runs_part(dataset: str, generator: str, root: Path = TRAIN_RUNS) -> dict:
    """Behaviour of the runs on training questions the policy did not see (main_experiment.py
    --split train --offset M): actions per question with gold hits (dynakrag, uniform), IRCoT
    iterations, Self-Ask searches, snippet validity (runs with --compressor llm), and each
    run's cost and quality from its summary.json."""
    folders = run_folders(dataset, generator, root)
    if not folders:
        return {}
    out: dict = {"source": [str(f.relative_to(ROOT)) for f in folders], "cost": {}}
    for folder in folders:
        policy_from = folder.name[len(generator) + len("-policy-"):] \
            if folder.name != generator else None
        runs = summarise_runs(folder)
        for name, r in runs.items():
            summary = _json(folder / name / "summary.json") or {}
            cost = {k: summary.get(k) for k in COST_FIELDS}
            cost["complete"] = (summary.get("run") or {}).get("complete")
            if policy_from:
                cost["policy_generator"] = policy_from
            out["cost"][name] = cost
            if name in ("dynakrag", "uniform"):
                per = r["actions_per_question"]
                rec = {"questions": r["questions"], "policy_generator": policy_from,
                       "sufficiency_verdicts": r["sufficiency_verdicts"],
                       "gaps_written_per_question": r.get("gaps_written_per_question"),
                       "snippet_validity": r.get("snippet_validity")}
                for a in ACTIONS:
                    rec[a] = {"per_question": per.get(a, 0.0),
                              "hit_rate": r["actions_with_gold_hit"].get(a)}
                out[name] = rec
            if name == "ircot":
                out["ircot_iterations_per_question"] = r.get("ircot_iterations_per_question")
                out["ircot_questions"] = r["questions"]
            if name == "self_ask":
                out["self_ask_searches_per_question"] = r.get("self_ask_searches_per_question")
                out["self_ask_questions"] = r["questions"]
    return out


def run_rows(dataset: str, generator: str, root: Path = TRAIN_RUNS) -> dict[str, list[dict]]:
    """Per run name: the latest rows of ``generator``'s training-split runs (own folder and
    policy-transfer folders alike)."""
    from dynakrag_lite.experiments.folder import latest_rows, read_predictions
    out = {}
    for folder in run_folders(dataset, generator, root):
        for pred in sorted(folder.glob("*/predictions.jsonl")):
            out[pred.parent.name] = latest_rows(read_predictions(pred), errors=False)
    return out


def generator_pairs(dataset: str, big: str, small: str, root: Path = TRAIN_RUNS) -> list[dict]:
    """Per run both generators made on the same training questions: the paired difference
    ``big`` - ``small`` in F1 and SR (paired bootstrap 95 % interval, permutation p)."""
    from dynakrag_lab.report.comparison import compare_runs
    a, b = run_rows(dataset, big, root), run_rows(dataset, small, root)
    out = []
    for name in sorted(set(a) & set(b)):
        for metric, d in compare_runs(a[name], b[name], ("f1", "support_recall")).items():
            out.append({"run": name, "metric": metric, "n": d.n, big: round(d.mean_a, 4),
                        small: round(d.mean_b, 4), "diff": round(d.diff, 4),
                        "lo": round(d.lo, 4), "hi": round(d.hi, 4),
                        "p_value": round(d.p_value, 4), "verdict": d.verdict})
    return out


def compression_part(generator: str) -> dict:
    d = _json(ROOT / "results" / "diagnostics" / "compression.json")
    if d is None or d.get("llm", {}).get("generator") != generator:
        return {}
    llm, ext = d["llm"], d["extractive"]
    return {"source": "results/diagnostics/compression.json",
            "llm_questions": llm["questions"], "llm_snippet_validity": llm["validity_rate"],
            "llm_answer_survival": llm["survival_validated"],
            "extractive_questions": ext["questions"],
            "extractive_answer_survival": ext["survival_rate"],
            "answer_f1": llm.get("answer_f1"), "answer_f1_n": llm.get("answer_f1_n")}


def _f(x, fmt=".2f") -> str:
    return "–" if x is None else format(x, fmt) if isinstance(x, float) else str(x)


def markdown(table: dict) -> str:
    lines = ["| generator | probe AUC text / margin / learned (OOF) | SUFFICIENT rate text / "
             "chosen | gap, rewrite, bridge hit rate (training branches) | gap, rewrite, "
             "bridge per question (uniform) | gap, rewrite, bridge per question (dynakrag) | "
             "snippet validity (LLM) | IRCoT iterations / q | Self-Ask searches / q |",
             "|---|---|---|---|---|---|---|---|---|"]
    for gen, row in table["generators"].items():
        s, t, r, c = row["signals"], row["training"], row["runs"], row["compression"]
        auc = " / ".join(_f(s.get(k)) for k in ("auc_text", "auc_margin", "auc_learned_oof"))
        rate = f"{_f(s.get('text_sufficient_rate'))} / {_f(s.get('chosen_sufficient_rate'))}"
        hits = ", ".join(_f((t.get(a) or {}).get("hit_rate"))
                         for a in ("gap_query", "rewrite_query", "bridge_entity_expand"))

        def per(run: str) -> str:
            d = r.get(run) or {}
            return ", ".join(
                f"{_f((d.get(a) or {}).get('per_question'))} "
                f"({_f((d.get(a) or {}).get('hit_rate'))})"
                for a in ("gap_query", "rewrite_query", "bridge_entity_expand"))
        validity = (r.get("uniform") or {}).get("snippet_validity")
        if validity is None:
            validity = c.get("llm_snippet_validity")
        lines.append(f"| {gen} | {auc} | {rate} | {hits} | {per('uniform')} | "
                     f"{per('dynakrag')} | {_f(validity)} | "
                     f"{_f(r.get('ircot_iterations_per_question'))} | "
                     f"{_f(r.get('self_ask_searches_per_question'))} |")
    lines += ["", "Per question on the same training questions (per generator): n, F1, SR, "
              "tokens, LLM calls, seconds", "",
              "| generator | run | n | F1 | SR | tokens | LLM calls | seconds | complete |",
              "|---|---|---|---|---|---|---|---|---|"]
    for gen, row in table["generators"].items():
        for name, cst in sorted((row["runs"].get("cost") or {}).items()):
            tag = f" (policy {cst['policy_generator']})" if cst.get("policy_generator") else ""
            lines.append(f"| {gen} | {name}{tag} | {_f(cst.get('n'))} | {_f(cst.get('f1'))} | "
                         f"{_f(cst.get('support_recall'))} | "
                         f"{_f(cst.get('tokens_mean'), '.0f')} | "
                         f"{_f(cst.get('llm_calls_mean'))} | "
                         f"{_f(cst.get('seconds_mean'), '.1f')} | {cst.get('complete')} |")
    pairs = table.get("generator_pairs")
    if pairs and pairs["rows"]:
        a, b = pairs["a"], pairs["b"]
        lines += ["", f"Paired differences {a} minus {b} on the same training questions "
                  "(paired bootstrap 95 % interval, permutation p):", "",
                  "| run | metric | n | A | B | A - B | interval | p | verdict |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in pairs["rows"]:
            lines.append(f"| {r['run']} | {r['metric']} | {r['n']} | {r[a]:.3f} | {r[b]:.3f} "
                         f"| {r['diff']:+.3f} | [{r['lo']:+.3f}, {r['hi']:+.3f}] | "
                         f"{r['p_value']:.3f} | {r['verdict']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--generators", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    ap.add_argument("--out", default=str(ROOT / "results" / "diagnostics"))
    args = ap.parse_args(argv)
    table = {"dataset": args.dataset, "generators": {},
             "command": relative_command(["python", "dynakrag_lab/scripts/diagnostic_table.py"]
                                         + (argv if argv is not None else sys.argv[1:]),
                                         prefix="")}
    for gen in [g for g in args.generators.split(",") if g]:
        table["generators"][gen] = {"signals": signals_part(args.dataset, gen),
                                    "training": training_part(args.dataset, gen),
                                    "runs": runs_part(args.dataset, gen),
                                    "compression": compression_part(gen)}
    gens = [g for g in args.generators.split(",") if g]
    if len(gens) == 2:
        table["generator_pairs"] = {"a": gens[1], "b": gens[0],
                                    "rows": generator_pairs(args.dataset, gens[1], gens[0])}
    out = Path(args.out) / f"{args.dataset}-diagnostic-table.json"
    atomic_write_text(out, json.dumps(table, indent=1) + "\n")
    print(markdown(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
