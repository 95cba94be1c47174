"""The run tables of results/README.md: the headline against the best baseline, one table per
dataset and generator with its paired differences, diagnostics and commands, the breakdowns per
question type, the check set, the saved policies and the one-shot retrieval figures."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from dynakrag_lite.experiments.artifacts import RESULTS
from dynakrag_lite.experiments.diagnostics import diagnostics
from dynakrag_lite.experiments.folder import latest_rows, read_predictions

from ..report.breakdown import MIN_GROUP_N, breakdown_table
from ..report.claims import claim_sentences, f1_differences, fmt_p, headline_claims
from ..report.comparison import paired_rows
from ..report.headline import check_set_pairs
from ..report.names import ABLATIONS, BASELINES, GRID_METHODS, locate, transfer_folder
from ..report.results import (STARTED, TRANSFER_RUNS, best_baseline, is_partial, load_summaries,
                              markdown_table, paired_table, read_run, results_table, run_policy,
                              run_status, transfer_baselines)
from ..report.verdicts import (BETTER, INCONCLUSIVE, TOML, WORSE, Rules, equivalent_word, holm,
                               num, pair_word, read_differences, rules)
from .plan import _num


def run_diagnostics(summary_path: Path) -> dict | None:
    """The run's recorded diagnostics, else derived from its predictions (read-only)."""
    s = json.loads(summary_path.read_text())
    if isinstance(s.get("diagnostics"), dict):
        return s["diagnostics"]
    preds = summary_path.parent / "predictions.jsonl"
    return diagnostics(latest_rows(read_predictions(preds))) if preds.exists() else None


def _counts(d: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items() if v) or "-"


def diagnostics_table(rows: pd.DataFrame, root: Path | None = None) -> str:
    root = root or RESULTS
    lines = ["| run | errors | stop | sufficiency (s/i/u) | parse fallbacks | vetoes |",
             "|---|---|---|---|---|---|"]
    for _, row in rows.iterrows():
        d = run_diagnostics(root / "experiments" / row.path)
        if d is None:
            continue
        suff = d["sufficiency"]
        v = d["vetoes"]
        lines.append(f"| {row.run} | {d['errors']} | {_counts(d['stop_reasons'])} | "
                     f"{suff['sufficient']}/{suff['insufficient']}/{suff['unparsed']} | "
                     f"{_counts(d['parse_fallbacks'])} | {v['total']} ({v['questions']}) |")
    return "\n".join(lines)


def labelled(run: str, status: str) -> str:
    """A run's name in code font, with its status when it is known to be unfinished: a partial
    run must not read as a finished one wherever it is named."""
    return f"`{run}` ({status})" if is_partial(status) or status == STARTED else f"`{run}`"


def partial_note(rows: pd.DataFrame) -> str:
    """One sentence naming the partial runs among ``rows`` (a load_summaries frame), or ""."""
    part = [labelled(r.run, r.status) for r in rows.itertuples() if is_partial(r.status)]
    return ("Partial runs (their rows cover the questions answered so far): "
            + ", ".join(part) + ".\n") if part else ""


# The controller runs the headline pairs with the best baseline: the paper's level stop rule
# (dynakrag), and our gain stop rule where its policy was run (chosen by cross-validation on
# the training split, so it is a method of its own, not a pick among evaluation results).
HEADLINE_RUNS = ("dynakrag", "dynakrag-gain")


def result_section(exp: Path) -> str:
    """The result in three sentences, computed from the runs (as README, the preface and the
    results chapter state it), when the 1.5B grid it reads is there."""
    try:
        sentences = claim_sentences(headline_claims(root=exp))
    except (FileNotFoundError, ValueError) as e:  # another results folder: no such grid
        return f"## The result\n\nNot computed here: {e}.\n"
    return ("## The result (exploratory)\n\n"
            + "\n".join(f"{i}. {t}" for i, t in enumerate(sentences, 1))
            + "\n\nExploratory: these runs were read before the primary tests were named "
            "(`results/primary/family/family.md`). The tests behind each sentence are in the "
            "book's results chapter (`book/12_results.ipynb`).\n")


def headline_section(s: pd.DataFrame, root: Path | None = None) -> str:
    """Per dataset and generator: DynaKRAG (each of :data:`HEADLINE_RUNS` present) against
    the baseline with the highest F1 on the questions both answered, with the paired interval
    of F1, EM and SR and the F1 difference's reading (:func:`read_headline`). Every dataset of
    ``s`` gets a row: a missing controller run or baseline, or a pair without common
    questions, is written as such; a partial run is labelled."""
    root = root or RESULTS
    rule = rules(locate(TOML))
    lines = ["## Headline: DynaKRAG against the best baseline\n",
             "Per dataset, the baseline (" + ", ".join(f"`{b}`" for b in BASELINES) + ") with "
             "the highest mean F1, paired with dynakrag on the questions both answered "
             "(dynakrag minus baseline; paired bootstrap 95 % interval, 10,000 resamples; "
             "sign-flip permutation p), among the baselines paired on the most questions (a run "
             "still in progress competes once it covers them). n: paired questions. A run "
             "marked `partial: k of N` is still running or being extended: its comparison "
             "covers only the questions answered so far. "
             "`dynakrag` stops by the paper's level rule; `dynakrag-gain`, where it was run, "
             "by our gain rule with the lambda its cross-validation on the training split chose "
             "(the book's diagnosis appendix). The tables below give every run.\n",
             f"The F1 difference is read in four words ({BETTER}, {WORSE}, "
             f"{equivalent_word(rule.margin)}, {INCONCLUSIVE}; `results/primary_tests.toml`), "
             "with Holm's adjustment over the datasets of one generator and run; `detectable`: "
             f"the smallest difference this n detects with {rule.power:.0%} power. Exploratory: "
             "these runs were read before the primary tests were named.\n",
             "| dataset | generator | run | n | best baseline | F1 run / baseline | F1 diff "
             "[95 % CI], p | EM diff [95 % CI], p | SR diff [95 % CI], p | reading (F1) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    paired = []  # (line, Holm family, F1 differences, p) of each row still to be read

    def gap(dataset, generator, run, why):  # a row that says why there is no comparison
        lines.append(f"| {dataset} | {generator} | {run} | 0 | - | - | - | - | - | {why} |")

    for (dataset, generator), mine in s.groupby(["dataset", "generator"]):
        status = dict(zip(mine.run, mine.status))
        if "-policy-" in generator:  # a transferred policy: read against its reader's baselines
            if (d := transfer_row(lines, dataset, generator, status, root)) is not None:
                paired.append((len(lines) - 1, (generator, "dynakrag"), *d))
            continue
        base = [b for b in BASELINES if b in status]
        if "dynakrag" not in status:
            gap(dataset, generator, "`dynakrag`", "not run yet: dynakrag")
            continue
        if not base:
            gap(dataset, generator, labelled("dynakrag", status["dynakrag"]),
                "not run yet: baselines")
            continue
        for ctl in (r for r in HEADLINE_RUNS if r in status):
            pt = paired_table(dataset, generator, base=ctl, runs=base,
                              root=root / "experiments")
            best = best_baseline(pt)
            if best is None:  # e.g. a re-run that has only reached questions no baseline has
                gap(dataset, generator, labelled(ctl, status[ctl]),
                    "not paired: " + "; ".join(sorted(set(pt.verdict))))
                continue
            lines.append(f"| {dataset} | {generator} | {labelled(ctl, status[ctl])} | "
                         f"{int(best.n)} | {labelled(best.run, best.status)} | "
                         f"{best[ctl]:.3f} / {best.other:.3f} | "
                         + _diff_cells(pt[pt.run == best.run]))
            paired.append((len(lines) - 1, (generator, ctl), _f1_differences(
                dataset, (generator, ctl), (generator, best.run), root), best.p_value))
    read_headline(lines, paired, rule)
    return "\n".join(lines) + "\n"


def _diff_cells(pairs: pd.DataFrame) -> str:
    """The F1, EM and SR cells of one pair's rows: 'diff [lo, hi], p |' each."""
    rows = [pairs[pairs.metric == m].iloc[0] for m in ("f1", "em", "support_recall")]
    return " | ".join(f"{r['diff']:+.3f} [{r.lo:+.3f}, {r.hi:+.3f}], {r.p_value:.3f}"
                      for r in rows) + " |"


def _f1_differences(dataset: str, a: tuple[str, str], b: tuple[str, str], root: Path
                    ) -> np.ndarray:
    """F1 of run ``a`` minus run ``b`` ((generator, run) each) per question both answered."""
    rows = [read_run(dataset, *run, root / "experiments")[0] for run in (a, b)]
    return f1_differences(paired_rows(*rows))


def read_headline(lines: list[str], paired: list[tuple[int, tuple, np.ndarray, float]],
                  rule: Rules) -> None:
    """Close each paired headline row (line index, Holm family, F1 differences, p) with its
    reading: Holm over its family (the datasets of one generator and run), then the four
    words (:mod:`..report.verdicts`), Holm p and the smallest difference this n detects."""
    for family in dict.fromkeys(fam for _, fam, _, _ in paired):
        rows = [(i, d, p) for i, fam, d, p in paired if fam == family]
        for (i, d, _), p_holm in zip(rows, holm([p for *_, p in rows])):
            rd = read_differences(d, p_holm, rule)
            lines[i] += f" {rd.word} (Holm p {fmt_p(p_holm)}, detectable {num(rd.mde)}) |"


def transfer_row(lines: list[str], dataset: str, generator: str, status: dict,
                 root: Path) -> tuple[np.ndarray, float] | None:
    """The headline row of a transfer folder ``<A>-policy-<P>``: its dynakrag run against the
    best of answer generator A's own baselines (all of :data:`BASELINES`), paired per question
    across the two folders, so the policy is judged against no policy with the same reader.
    Returns the F1 differences and p for :func:`read_headline`, which closes the row; a pair
    not made yet is a row saying why (None returned)."""
    if "dynakrag" not in status:
        return None  # a transfer folder holds dynakrag runs only; others are not headline rows
    ctl = labelled("dynakrag", status["dynakrag"])
    pt = transfer_baselines(dataset, generator, root / "experiments")
    best = best_baseline(pt)
    if best is None:
        why = "; ".join(sorted(set(pt[pt.metric == "f1"].verdict))) or "not run yet: baselines"
        lines.append(f"| {dataset} | {generator} | {ctl} | 0 | - | - | - | - | - | "
                     f"not paired: {why} |")
        return None
    base = labelled(f"{best.other_generator}/{best.other_run}", best.status)
    lines.append(f"| {dataset} | {generator} | {ctl} | {int(best.n)} | {base} | "
                 f"{best.transferred:.3f} / {best.other:.3f} | "
                 + _diff_cells(pt[pt.other_run == best.other_run]))
    return _f1_differences(dataset, (generator, "dynakrag"),
                           (best.other_generator, best.other_run), root), best.p_value


def breakdown_section(s: pd.DataFrame, root: Path | None = None) -> str:
    """Per dataset and generator: each run's n, EM, F1 and SR per question type (MuSiQue: hop
    count), and dynakrag's paired F1 difference against each run within the group. A transfer
    folder ``<A>-policy-<P>`` holds no baseline: its dynakrag run is paired with A's best
    baseline of the headline (:func:`best_baseline`), read from A's folder."""
    root = root or RESULTS
    lines = ["## Breakdowns per question type and hop count\n",
             "Each run's questions split by group: the dataset's question type (HotpotQA, "
             "2WikiMultiHopQA), the hop count of MuSiQue's hop shape (`3hop1` and `3hop2` are "
             "3-hop); `untyped`: HotpotQA records whose source did not keep the type. `n` "
             "questions of the group the run answered; EM, F1, SR (support recall) their means. "
             "`diff`: dynakrag's F1 minus the run's on the questions of the group both runs "
             "answered (`paired`), with the paired bootstrap 95 % interval, sign-flip "
             "permutation p and exploratory verdict as above. A transfer folder "
             "(`<A>-policy-<P>`) holds no baseline: its dynakrag run is paired with A's best "
             "baseline of the headline, named "
             "`<A>/<run>`, on the questions both answered. A group with fewer than "
             f"{MIN_GROUP_N} questions (or paired questions) is marked *too few to read*: its "
             "numbers are printed, not interpreted.\n"]
    exp = root / "experiments"
    for (dataset, generator), _ in s.groupby(["dataset", "generator"]):
        transfer, runs, against = transfer_folder(generator), None, None
        if transfer:  # its baselines are the answer generator's: paired across the folders
            pairs = transfer_baselines(dataset, generator, exp, metrics=("f1",))
            best = best_baseline(pairs)
            if best is not None:
                against = f"{best.other_generator}/{best.other_run}"
                runs = [r for r in results_table(s, dataset, generator).run
                        if run_status(dataset, generator, r, exp)["answered"]] + [against]
        bt = breakdown_table(dataset, generator, runs=runs, root=exp)
        if bt.empty:
            continue
        paired = bt.n_paired.notna().any()
        lines.append(f"### {dataset}, generator `{generator}`\n")
        note = partial_note(s[(s.dataset == dataset) & (s.generator == generator)])
        if note:
            lines.append(note)
        if against:
            lines.append(f"`dynakrag` here answers with `{transfer[0]}` using the policy of "
                         f"`{transfer[1]}`; `diff` pairs it with `{against}`, the answer "
                         "generator's best baseline in the headline.\n")
        if not paired:
            lines.append(no_pair_note(bt, transfer, pairs if transfer else None))
        lines += breakdown_rows(bt) + [""]
    return "\n".join(lines)


def breakdown_rows(bt: pd.DataFrame) -> list[str]:
    """A :func:`breakdown_table` as Markdown table lines, group-major (the runs of one group
    sit together), with the paired columns when any row is paired, else a note column."""
    paired = bt.n_paired.notna().any()
    head = ["group", "run", "n", "em", "f1", "SR"]
    head += ["paired", "diff (F1)", "interval", "p_value", "verdict"] if paired else ["note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    groups = list(dict.fromkeys(bt.group))
    bt = bt.assign(_g=[groups.index(g) for g in bt.group]).sort_values("_g", kind="stable")
    for r in bt.itertuples(index=False):
        few = "too few to read" if r.too_few else ""
        cells = [r.group, r.run, str(r.n), _num(r.em), _num(r.f1), _num(r.support_recall)]
        if paired:
            own = pd.isna(r.n_paired)  # the base run itself
            cells += ["-" if own else str(r.n_paired), _num(r.diff, "+.3f"),
                      "-" if pd.isna(r.lo) else f"[{r.lo:+.3f}, {r.hi:+.3f}]",
                      _num(r.p_value), few or pair_word(r.verdict) or "-"]
        else:
            cells.append(few or "-")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def no_pair_note(bt: pd.DataFrame, transfer: tuple[str, str] | None,
                 pairs: pd.DataFrame | None) -> str:
    """Why a breakdown ``bt`` has no paired difference: no dynakrag run, nothing in its folder
    to pair it with, or (a transfer folder: ``transfer`` and its :func:`transfer_baselines`
    ``pairs``) none of the answer generator's baselines paired with it yet."""
    if "dynakrag" not in set(bt.run):
        return "No dynakrag run yet: no paired differences.\n"
    if transfer and pairs is not None:
        names = ", ".join(f"`{r}`" for r in dict.fromkeys(pairs.other_run))
        why = "; ".join(sorted(set(pairs.verdict))) or "not run yet"
        return (f"No paired differences: this folder holds no baseline; the baselines of "
                f"`{transfer[0]}`" + (f" ({names})" if names else "") + ", in its own "
                f"folder, are not paired with its dynakrag run yet ({why}).\n")
    return "No other run in this folder to pair dynakrag with: no paired differences.\n"


def baselines_note(s: pd.DataFrame, dataset: str, answer: str, policy: str) -> str:
    """The line of a transfer folder ``<answer>-policy-<policy>`` saying where its baselines
    are: a baseline uses no policy, so it is run once, in the answer generator's folder."""
    there = s[(s.dataset == dataset) & (s.generator == answer) & s.run.isin(BASELINES)]
    where = (f"see `{answer}`" if len(there) else
             f"none run yet with `{answer}` (they belong in its own folder, `{answer}`)")
    return (f"Baselines: {where}. This folder holds only runs of `{answer}` with the policy "
            f"trained with `{policy}`; the headline and the breakdowns pair its dynakrag run "
            f"with `{answer}`'s baselines.\n")


def paired_markdown(pt: pd.DataFrame, base: str) -> str:
    """A ``paired_table`` (``base`` minus each run) as Markdown, the interval in one column
    ("-" for a pair without common questions), each verdict read alone (:func:`pair_word`)."""
    pt = pt.assign(interval=["-" if n == 0 else f"[{lo:+.3f}, {hi:+.3f}]"
                             for n, lo, hi in zip(pt.n, pt.lo, pt.hi)],
                   verdict=pt.verdict.map(pair_word))
    return markdown_table(pt[["run", "status", "metric", "n", base, "other", "diff", "interval",
                              "p_value", "verdict"]])


def check_set_section(root: Path) -> str | None:
    """Runs on training questions no run, policy or diagnosis had read (``diagnostics/
    check-set/<dataset>/<generator>/<run>``, ``evaluate --split train --offset``): their
    table, each controller run paired with the other runs (:func:`check_set_pairs`), and the
    commands; None before any."""
    base = root / "diagnostics" / "check-set"
    s = load_summaries(base)
    if not len(s):
        return None
    pairs = check_set_pairs(base, metrics=("f1", "em", "support_recall"))
    parts = ["## Check set: questions never read before\n",
             "The evaluation split has informed many decisions, so its differences may "
             "overstate. These runs re-check the finished setups once, on training-split "
             "questions that no policy was trained on and no earlier run or diagnosis read "
             "(the `--offset` and `--limit` in each command); a run with the compressor uses a "
             "sentence selector fitted on earlier training questions only "
             "(`python -m dynakrag_lab.studies.selector --train-limit`). Same metrics, "
             "pairing and exploratory verdicts as above "
             "(each controller run minus each run, paired bootstrap 95 % interval, 10,000 "
             "resamples):\n"]
    for (dataset, generator), mine in s.groupby(["dataset", "generator"]):
        parts.append(f"### {dataset}, generator `{generator}`\n")
        parts.append(markdown_table(results_table(s, dataset, generator)) + "\n")
        here = pairs[(pairs.dataset == dataset) & (pairs.reader == generator)]
        for ctl, pt in here.groupby("base", sort=False):
            parts.append(f"`{ctl}` minus each run:\n")
            parts.append(paired_markdown(pt.rename(columns={"base_mean": ctl}), ctl) + "\n")
        ctl = next(iter(here.base), None)
        if ctl:  # per question type: where the answer stage wins or loses
            bt = breakdown_table(dataset, generator, base=ctl, root=base)
            parts.append(f"Per question type (`diff`: `{ctl}` minus the run, F1; groups "
                         f"under {MIN_GROUP_N} questions are too few to read):\n")
            parts.append("\n".join(breakdown_rows(bt)) + "\n")
        parts.append("Commands:\n")
        parts += [f"- `{row.run}`: `{row.command}`" for _, row in mine.iterrows()]
        parts.append("")
    return "\n".join(parts)


def policies_section(s: pd.DataFrame, root: Path | None = None) -> str:
    """The saved policies, and any run whose recorded policy is no longer the saved file
    (retrained since the run) or is not there at all (being retrained, or deleted)."""
    root = root or RESULTS
    pol = sorted((root / "policies").glob("*.joblib"))
    notes: dict[tuple[str, str], list[str]] = {}
    for r in s.itertuples():
        used = run_policy(r.dataset, r.generator, r.run, root / "experiments")
        if used and used["file"] != "same":
            notes.setdefault((Path(used["path"]).name, used["file"]), []).append(
                f"`{r.dataset}/{r.generator}/{r.run}`")
    if not pol and not notes:
        return ""
    lines = ["## Policies\n"] + [f"- `policies/{p.name}`" for p in pol]
    for (name, state), runs in sorted(notes.items()):
        lines.append(f"- `policies/{name}`: "
                     + ("not present now" if state == "missing" else
                        "retrained since these runs (their recorded digest differs from the "
                        "file's): their results are the earlier policy's")
                     + "; used by " + ", ".join(runs))
    return "\n".join(lines) + "\n"


def dataset_section(s: pd.DataFrame, dataset: str, generator: str, root: Path) -> list[str]:
    """The parts of one dataset x generator: its table, the runs missing from it, the paired
    differences of dynakrag against each run, the diagnostics and the commands."""
    exp = root / "experiments"
    parts = [f"## {dataset}, generator `{generator}`\n",
             markdown_table(results_table(s, dataset, generator)) + "\n"]
    mine = s[(s.dataset == dataset) & (s.generator == generator)]
    transfer = transfer_folder(generator)
    # the runs that belong here without a summary: named, so that a deleted or not yet
    # started run (a re-run in progress) is not simply absent from the table. A transfer
    # folder is for the transferred controller run only; its baselines are not missing.
    expected = TRANSFER_RUNS if transfer else GRID_METHODS + ABLATIONS
    absent = {r: run_status(dataset, generator, r, exp)["status"]
              for r in expected if r not in set(mine.run)}
    if absent:
        parts.append("Not in the table: " + "; ".join(
            f"`{r}` ({st})" for r, st in absent.items()) + ".\n")
    if transfer:
        parts.append(baselines_note(s, dataset, *transfer))
    if "dynakrag" in set(mine.run):
        pt = paired_table(dataset, generator, root=exp)
        if len(pt):
            parts.append("Paired differences, dynakrag minus each run (per question; "
                         "paired bootstrap 95 % interval, 10,000 resamples; sign-flip "
                         "permutation p), on the questions both runs answered (n); "
                         "`status` is the other run's. The verdict, of dynakrag against the "
                         "run, is exploratory and reads each pair on its own (no Holm "
                         f"adjustment, no equivalence test): {BETTER} or {WORSE} where the "
                         f"interval excludes 0 and p < .05, else {INCONCLUSIVE}; a run that "
                         "cannot be paired yet says why:\n")
            parts.append(paired_markdown(pt, "dynakrag") + "\n")
    parts += ["Diagnostics:\n", diagnostics_table(mine, root) + "\n", "Commands:\n"]
    parts += [f"- `{row.run}`: `{row.command}`" for _, row in mine.iterrows()]
    return parts + [""]


def retrieval_section(root: Path) -> list[str]:
    """Support recall at k of one-shot retrieval, from ``retrieval/sr-*.json``; [] without."""
    sr = sorted((root / "retrieval").glob("sr-*.json"))
    if not sr:
        return []
    parts = ["## One-shot retrieval (question as query), support recall at k\n",
             "| dataset | questions | documents | SR@3 | SR@6 | SR@12 |\n|---|---|---|---|---|---|"]
    for p in sr:
        d = json.loads(p.read_text())
        parts.append(f"| {d['dataset']} | {d['n']} | {d['documents']} | {d['SR@3']:.3f} | "
                     f"{d['SR@6']:.3f} | {d['SR@12']:.3f} |")
    return parts + ["\nCommand: `python -m dynakrag_lite retrieval-eval --data <dataset> "
                    "--data-dir ../shared/data --k 3,6,12` (all-MiniLM-L6-v2, FAISS flat IP, "
                    "pooled corpus of the file).\n"]
