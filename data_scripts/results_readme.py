"""Rewrite results/README.md from what results/ holds: the experiment tables (one per dataset
and generator, with the exact commands that produced each row), retrieval and speed figures.

    python data_scripts/results_readme.py
"""
from __future__ import annotations

import json
from pathlib import Path

from dynakrag_lite.experiments import diagnostics, latest_rows, read_predictions
from dynakrag_lite.results import load_summaries, markdown_table, paired_table, results_table
from dynakrag_lite.storage import atomic_write_text

ROOT = Path(__file__).resolve().parents[1] / "results"

INTRO = """# Results

Everything here was measured on this project's 2-core CPU machines and is produced by the
commands listed with it. `oracle` reads the gold support labels: it is an upper bound on
evidence control, not a method. Numbers are development numbers on subsets of the dev sets
(see `../shared/data/README.md`), with small bundled generators: they are not comparable to
the paper's Table 1 (Qwen2.5-7B-Instruct, full dev sets, BGE-large), only its shape is.

Columns: `n` questions; EM/F1 (HotpotQA normalization, max over aliases); `support_recall`
(share of gold supporting documents in the final context); `all_support_rate` (share of
questions with every gold document); mean documents, tokens (all prompt + completion tokens of
all calls), LLM calls, retrieval calls and seconds per question.

Diagnostics (per run; definitions in `dynakrag_lite/experiments.py`): `errors` questions whose
method raised (not in the means; re-running retries them); how questions ended (`stop`);
sufficiency verdicts (sufficient / insufficient / unparsed); parser fallbacks per prompt kind;
stop vetoes of the continuation model (total, questions with one). Runs recorded before
diagnostics existed get them derived from their predictions' traces.
"""


def run_diagnostics(summary_path: Path) -> dict | None:
    """The run's recorded diagnostics, else derived from its predictions (read-only)."""
    s = json.loads(summary_path.read_text())
    if isinstance(s.get("diagnostics"), dict):
        return s["diagnostics"]
    preds = summary_path.parent / "predictions.jsonl"
    return diagnostics(latest_rows(read_predictions(preds))) if preds.exists() else None


def _counts(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items() if v) or "-"


def diagnostics_table(rows) -> str:
    lines = ["| run | errors | stop | sufficiency (s/i/u) | parse fallbacks | vetoes |",
             "|---|---|---|---|---|---|"]
    for _, row in rows.iterrows():
        d = run_diagnostics(ROOT / "experiments" / row.path)
        if d is None:
            continue
        suff = d["sufficiency"]
        v = d["vetoes"]
        lines.append(f"| {row.run} | {d['errors']} | {_counts(d['stop_reasons'])} | "
                     f"{suff['sufficient']}/{suff['insufficient']}/{suff['unparsed']} | "
                     f"{_counts(d['parse_fallbacks'])} | {v['total']} ({v['questions']}) |")
    return "\n".join(lines)


def main() -> int:
    parts = [INTRO]
    s = load_summaries(ROOT / "experiments")
    for (dataset, generator), _ in s.groupby(["dataset", "generator"]):
        parts.append(f"## {dataset}, generator `{generator}`\n")
        parts.append(markdown_table(results_table(s, dataset, generator)) + "\n")
        mine = s[(s.dataset == dataset) & (s.generator == generator)]
        if "dynakrag" in set(mine.run):
            pt = paired_table(dataset, generator, root=ROOT / "experiments")
            if len(pt):
                parts.append("Paired differences, dynakrag minus each run (per question; "
                             "paired bootstrap 95 % interval, 10,000 resamples; sign-flip "
                             "permutation p). The verdict names dynakrag as A; an interval "
                             "containing 0, or p >= .05, is no measurable difference:\n")
                pt = pt.assign(interval=[f"[{lo:+.3f}, {hi:+.3f}]"
                                         for lo, hi in zip(pt.lo, pt.hi)])
                parts.append(markdown_table(pt[["run", "metric", "n", "dynakrag", "other",
                                                "diff", "interval", "p_value",
                                                "verdict"]]) + "\n")
        parts.append("Diagnostics:\n")
        parts.append(diagnostics_table(mine) + "\n")
        parts.append("Commands:\n")
        for _, row in mine.iterrows():
            parts.append(f"- `{row.run}`: `{row.command}`")
        parts.append("")
    pol = sorted((ROOT / "policies").glob("*.joblib"))
    if pol:
        parts.append("## Policies\n")
        for p in pol:
            parts.append(f"- `policies/{p.name}`")
        parts.append("")
    sr = sorted((ROOT / "retrieval").glob("sr-*.json"))
    if sr:
        parts.append("## One-shot retrieval (question as query), support recall at k\n")
        parts.append("| dataset | questions | documents | SR@3 | SR@6 | SR@12 |\n|---|---|---|---|---|---|")
        for p in sr:
            d = json.loads(p.read_text())
            parts.append(f"| {d['dataset']} | {d['n']} | {d['documents']} | {d['SR@3']:.3f} | "
                         f"{d['SR@6']:.3f} | {d['SR@12']:.3f} |")
        parts.append("\nCommand: `python -m dynakrag_lite retrieval-eval --data <dataset> "
                     "--data-dir ../shared/data --k 3,6,12` (all-MiniLM-L6-v2, FAISS flat IP, "
                     "pooled corpus of the file).\n")
    bench = ROOT / "benchmarks"
    if bench.exists():
        parts.append("## Speed\n")
        for p in sorted(bench.glob("*.json")):
            parts.append(f"- `benchmarks/{p.name}` (see the file for figures, date and command)")
        parts.append("")
    atomic_write_text(ROOT / "README.md", "\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
