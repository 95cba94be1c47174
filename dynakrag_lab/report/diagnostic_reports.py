"""The reports of the studies that left the diagnosis appendix, one markdown file each under
``results/diagnostics/``, written from the committed runs by :func:`write_reports`
(``python -m dynakrag_lab.report.diagnostic_reports``; ``--live`` also reruns the small
retrieval-cap sweep, replaying the recorded model calls).
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd

from dynakrag_lite.config import ControlConfig
from dynakrag_lite.controller import run_controller
from dynakrag_lite.data.corpus import gold_titles
from dynakrag_lite.metrics import em_f1, support_recall
from dynakrag_lite.pipeline import build_setup
from dynakrag_lite.policy import Policy, train_policy
from dynakrag_lite.trajectories import collect

from . import appendix as ap
from .comparison import NO_DIFFERENCE
from .headline import (GRID, check_set_markdown, check_set_pairs, headline_table, paired_view,
                       profile_sentence, stop_profile)
from .paper import DATASETS
from .records import (lambda_effect, policy_path, policy_record, run_record,
                      stop_rule_reports, sweep_sentence)
from .pair_words import read_pairs, words_sentence
from .results import locate, paired_table, transfer_paired_table
from .verdicts import INCONCLUSIVE, pair_word

SMALL, BIG = "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"
NOTE = ("*Exploratory; written by `dynakrag_lab.report.diagnostic_reports` from the committed "
        "runs, moved out of the diagnosis appendix. Each pair is read on its own: better or "
        "worse where its paired 95 % interval excludes 0 and p < .05, unadjusted for the other "
        "comparisons, otherwise inconclusive at this n (no equivalence test).*\n\n")


def _plain(text: str) -> str:
    """``text`` with the raw token of an inconclusive pair (tables print
    :func:`~.comparison.verdict`'s tokens) in the four words (:func:`~.verdicts.pair_word`)."""
    return text.replace(NO_DIFFERENCE, pair_word(NO_DIFFERENCE))


def lambda_report(results: Path, dataset: str = "hotpotqa", reader: str = SMALL) -> str:
    pf = policy_path(dataset, reader, root=results)
    tuned, grid = policy_record(pf), pd.DataFrame(Policy.load(pf).meta["tuning"]["grid"])
    exp, w2 = results / "experiments", "2wikimultihopqa"
    gain = paired_table(w2, reader, base="dynakrag-gain", metrics=("f1", "support_recall"),
                        runs=["dynakrag", "fixed_k3", "fixed_k6", "oracle"], root=exp)
    return (f"# The λ knob and the stop rules\n\n{NOTE}The policy `{pf.name}` uses the "
            f"{tuned['stop_rule']} stop rule at τ = {tuned['tau']:g} ({tuned['n_train']} "
            f"training questions); along its grid at that τ, "
            f"{lambda_effect(grid, tuned['tau'])['sentence']}.\n\nBoth stop rules, "
            "cross-validated on the training trajectories (`dynakrag_lab/scripts/stop_rule.py`):"
            "\n\n" + "\n".join(f"* {sweep_sentence(r, d)}." for d, r in
                               stop_rule_reports(results, reader).items())
            + f"\n\n## The gain rule on {w2}'s evaluation split\n\n`dynakrag-gain` minus each "
            "run, paired per question:\n\n" + _plain(paired_view(gain, base="dynakrag-gain")
                                                    .drop(columns=["run status"]).to_markdown())
            + "\n\n" + "\n".join(f"* {profile_sentence(stop_profile(w2, reader, r, exp))}."
                                 for r in ("dynakrag", "dynakrag-gain")) + "\n")


def transfer_report(results: Path) -> str:
    found = [transfer_paired_table(d, root=results / "experiments",
                                   metrics=("f1", "support_recall")) for d in DATASETS]
    pairs = pd.concat([t for t in found if len(t)], ignore_index=True)
    return _plain(f"# Generator transfer\n\n{NOTE}A policy trained with one reader, run with "
                  "the other (`--policy-generator`), F1 paired per question:\n\n"
                  f"{ap.transfer_markdown(pairs)}\n\nWhat limits F1, read from the reverse "
                  f"transfer:\n\n{ap.reader_limit_markdown(pairs, SMALL, BIG)}\n")


def check_set_report(results: Path) -> str:
    pairs = check_set_pairs(results / "diagnostics" / "check-set")
    return _plain(f"# The check set: questions never read\n\n{NOTE}Each controller run minus "
                  "every other run on training-split questions past every training question "
                  f"(commands in `results/README.md`):\n\n{check_set_markdown(pairs)}\n")


def answer_stage_report(results: Path, dataset: str = "hotpotqa", reader: str = BIG) -> str:
    stage = json.loads((results / "diagnostics" / "answer-stage" /
                        f"{dataset}-{reader}.json").read_text())
    return _plain(f"# When to answer from the full documents\n\n{NOTE}Answer from the full "
                  f"documents on states of at most K documents, from the snippets above; K = "
                  f"{stage['choose_on']['k']}, chosen on {stage['choose_on']['n']} training "
                  f"questions past the check set:\n\n{ap.answer_stage_markdown(stage)}\n")


def not_found_report(results: Path) -> str:
    exp = results / "experiments"
    head = headline_table(exp)
    done = head[(head.n > 0) & (head.status == "complete") & (head.baseline_status == "complete")]
    sizes = {d: policy_record(p)["n_train"] for d in DATASETS
             if (p := policy_path(d, SMALL, root=results))}
    versus = read_pairs([(d, g, "dynakrag", "uniform") for d in DATASETS for g in (SMALL, BIG)],
                        exp)
    records = {d: run_record(d, SMALL, "dynakrag", exp) for d in DATASETS}
    return (f"# What the reproduction did not find\n\n{NOTE}* A controller better or worse than "
            f"the best baseline of its dataset and reader: {(done.outcome != INCONCLUSIVE).sum()}"
            f" of the {len(done)} complete comparisons.\n* Learned action choice against "
            f"uniform-valid (four words, Holm over datasets): {words_sentence(versus)}\n* "
            "Training size: the policies were trained on "
            + ", ".join(f"{n} ({ap.LABELS[d]})" for d, n in sizes.items())
            + " questions; the paper trains on 1,000 per dataset.\n* The oracle as a bound: "
            + ap.oracle_markdown(ap.headroom_table(exp, BIG)) + "\n\nNot re-implemented: S2G-RAG,"
            " CoRAG, Adaptive-RAG, CRAG and the paper's BGE-large Wikipedia index.\n\n## What to"
            " run next\n\nThe same grid with a larger reader on the same splits:\n\n```sh\n"
            + "\n".join(ap.next_commands(records, GRID, "hf:Qwen/Qwen2.5-7B-Instruct", sizes))
            + "\n```\n")


def cap_sweep_report(results: Path, n_questions: int = 4, n_train: int = 4, seed: int = 13
                     ) -> str:
    """A policy trained on a few library questions, rerun at retrieval caps 1, 2, 3 and none
    (model calls replayed from the cache ``DYNAKRAG_LLM_CACHE`` names)."""
    live = build_setup("library", generator=SMALL, show_progress=False,
                       config=ControlConfig.for_dataset("library", compressor="extractive"),
                       selector=results / "selectors" / "hotpotqa-sentence-selector.joblib")
    Policy.load(policy_path("hotpotqa", SMALL, root=results)).configure(live.env)
    policy = train_policy(collect(live.train[:n_train], live.env, seed=seed, progress=False),
                          n_estimators=60, seed=seed, n_jobs=1)
    rows = []
    for cap in (1, 2, 3, None):
        env = replace(live.env, config=replace(live.env.config, retrieval_cap=cap))
        for q in live.eval[:n_questions]:
            s = run_controller(q.question, env, policy, q.id)
            rows.append({"cap": "none" if cap is None else cap, "retrieval_calls":
                         s.state.ledger.retrieval_calls, "docs": len(s.state.docs),
                         "tokens": s.state.ledger.tokens,
                         "SR": support_recall(s.state.titles, gold_titles(q)),
                         "F1": em_f1(s.prediction, q.answers)[1]})
    table = pd.DataFrame(rows).groupby("cap", sort=False).mean().round(2)
    return (f"# A live retrieval-cap sweep\n\n{NOTE}{n_questions} held-out library questions, "
            f"a policy trained on {n_train}: means per cap (a demonstration, not evidence).\n\n"
            f"{table.to_markdown()}\n")


REPORTS = {"lambda-and-stop-rules": lambda_report, "generator-transfer": transfer_report,
           "check-set": check_set_report, "answer-stage": answer_stage_report,
           "not-found": not_found_report, "retrieval-cap-sweep": cap_sweep_report}


def write_reports(results: str | Path = "results", live: bool = False) -> list[Path]:
    """Write ``results/diagnostics/<study>.md`` for every study of :data:`REPORTS` (the
    retrieval-cap sweep only when ``live``)."""
    root, out = locate(results), []
    for name, make in REPORTS.items():
        if live or make is not cap_sweep_report:
            out.append(root / "diagnostics" / f"{name}.md")
            out[-1].write_text(make(root), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dynakrag_lab.report.diagnostic_reports",
                                     description=write_reports.__doc__)
    parser.add_argument("--results", default="results", help="the results folder")
    parser.add_argument("--live", action="store_true", help="also rerun the retrieval-cap "
                        "sweep (a small live run, replaying the recorded model calls)")
    args = parser.parse_args(argv)
    print("\n".join(map(str, write_reports(args.results, live=args.live))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
