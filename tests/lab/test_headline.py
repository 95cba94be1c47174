"""The book's reading of the results (dynakrag_lab.report.headline, .records): the headline
table and its sentences, stop profiles, the continuation controller's comparisons, the paired
view and the records settings come from; on small synthetic run folders, so every phrase is
checked against numbers we chose."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dynakrag_lab.report import appendix as ap
from dynakrag_lab.report import headline as h
from dynakrag_lab.report.records import (command_options, diagnosis_table, horizon_report,
                                         horizon_table, lambda_effect, run_record, stop_report,
                                         stop_targets_table)


def row(qid: str, f1: float, *, sr: float = 0.5, tokens: float = 100.0, docs=("a", "b", "c"),
        stop: str = "max_steps", retrievals: int = 1) -> dict:
    return {"id": qid, "question": "?", "prediction": "x", "em": f1, "f1": f1,
            "support_recall": sr, "all_support": 0.0, "n_docs": len(docs), "tokens": tokens,
            "llm_calls": 1, "retrieval_calls": retrievals, "seconds": 1.0,
            "docs": [{"id": d} for d in docs], "stop_reason": stop,
            "trace": [{"action": "retrieve_more"}, {"action": "stop_answer", "note": ""}]}


def write(root: Path, run: str, rows: list[dict], expected: int | None = None,
          dataset: str = "hotpotqa", reader: str = "g", command: str = "") -> None:
    d = root / dataset / reader / run
    d.mkdir(parents=True)
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    n = len(rows)
    expected = n if expected is None else expected
    summary = {"method": run, "dataset": dataset, "generator": reader, "n": n,
               "f1": sum(r["f1"] for r in rows) / n,
               "policy": {"path": "results/policies/p.joblib", "n_train": 300},
               "fingerprint": {"policy": {"lam": 0.0, "veto_threshold": 0.05}},
               "run": {"command": command or f"python -m dynakrag_lite evaluate --n-eval 150 "
                                             f"--method {run}",
                       "n_expected": expected, "complete": n == expected}}
    (d / "summary.json").write_text(json.dumps(summary))


N = 30


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    # dynakrag better than fixed_k3 on every question, tied with uniform (the best baseline)
    write(tmp_path, "dynakrag", [row(f"q{i}", 0.6, sr=0.8, tokens=300, stop="stop_answer_chosen")
                                 for i in range(N)])
    write(tmp_path, "fixed_k3", [row(f"q{i}", 0.2) for i in range(N)])
    write(tmp_path, "uniform", [row(f"q{i}", 0.6 + (0.1 if i % 2 else -0.1), sr=0.9,
                                    tokens=600, docs=("x", "y")) for i in range(N)])
    write(tmp_path, "oracle", [row(f"q{i}", 0.9, sr=1.0) for i in range(N)])
    # a second reader with a partial continuation run and its schedule
    write(tmp_path, "dynakrag", [row(f"q{i}", 0.3) for i in range(N)], reader="big")
    write(tmp_path, "fixed_k3", [row(f"q{i}", 0.3) for i in range(N)], reader="big")
    write(tmp_path, h.CONTINUATION, [row(f"q{i}", 0.5, tokens=500, stop="stop_answer_chosen"
                                         if i < 5 else "max_steps") for i in range(10)],
          expected=N, reader="big")
    write(tmp_path, h.ALWAYS_CONTINUE, [row(f"q{i}", 0.5, tokens=1000) for i in range(N)],
          reader="big")
    # a transfer folder is not a reader
    write(tmp_path, "dynakrag", [row("q0", 0.1)], reader="g-policy-big")
    return tmp_path


def test_headline_pairs_each_controller_with_its_best_baseline(tree: Path):
    t = h.headline_table(tree).set_index(["reader", "run"])
    assert list(h.readers(tree)) == [("hotpotqa", "big"), ("hotpotqa", "g")]
    small = t.loc[("g", "dynakrag")]
    assert small.baseline == "uniform" and small.n == N  # highest F1, not the oracle
    assert small.f1_diff == pytest.approx(0.0) and small.outcome == "inconclusive at this n"
    assert small.sr_diff == pytest.approx(-0.1) and small.sr_hi < 0
    assert small.token_ratio == pytest.approx(0.5)
    cont = t.loc[("big", h.CONTINUATION)]
    assert cont.status == f"partial: 10 of {N}" and cont.n == 10
    assert cont.baseline == "fixed_k3" and cont.outcome == "better"


def test_a_reader_without_dynakrag_gets_a_not_run_row(tmp_path: Path):
    write(tmp_path, "fixed_k3", [row("q0", 0.2)])
    t = h.headline_table(tmp_path)
    assert list(t.outcome) == ["not compared"] and t.verdict.iloc[0] == "dynakrag not run yet"


def test_stop_profile_counts_one_retrieval_stops_caps_and_fixed_k3_documents(tree: Path):
    p = h.stop_profile("hotpotqa", "g", "dynakrag", tree)
    assert (p["after_one_retrieval"], p["at_step_cap"]) == (N, 0)
    assert p["same_docs_as_fixed_k3"] == N == p["paired_with_fixed_k3"]
    text = h.profile_sentence(p)
    assert f"after one retrieval on {N} of {N}" in text and "*is* Fixed-K(3)" in text
    big = h.stop_profile("hotpotqa", "big", "dynakrag", tree)
    assert big["at_step_cap"] == N and big["after_one_retrieval"] == 0


def test_continuation_table_pairs_with_uniform_and_always_continue(tree: Path):
    c = h.continuation_table(tree).set_index("vs")
    assert c.loc["uniform", "vs_n"] == 0 and c.loc["uniform", "verdict"] == "not run yet"
    stop4 = c.loc[h.ALWAYS_CONTINUE]
    assert stop4.vs_n == 10 and stop4.f1_diff == pytest.approx(0.0)
    assert stop4.token_ratio == pytest.approx(0.5) and stop4.early_stop == pytest.approx(0.5)
    text = " ".join(h.continuation_sentences(h.continuation_table(tree)))
    assert "stopping before the cap on 50% of them: so the stop differs" in text
    assert "against `uniform`: not compared (not run yet)" in text


def test_paired_view_words_each_verdict_in_the_four_words(tree: Path):
    pt = h.paired_table("hotpotqa", "g", base="dynakrag", runs=["fixed_k3", "uniform", "oracle"],
                        metrics=("f1",), root=tree)
    words = h.paired_view(pt).set_index("run")["dynakrag against run"]
    assert words.to_dict() == {"fixed_k3": "better", "uniform": "inconclusive at this n",
                               "oracle": "worse"}


def test_run_record_reads_the_split_and_policy_settings(tree: Path):
    r = run_record("hotpotqa", "g", "dynakrag", tree)
    assert (r["n"], r["n_eval"], r["n_train"], r["tau"], r["lam"]) == (N, 150, 300, 0.05, 0.0)
    assert command_options("x --n-eval 150 --no-compression --out d") == {
        "--n-eval": "150", "--no-compression": True, "--out": "d"}


def test_lambda_effect_calls_an_early_share_change_inert():
    grid = pd.DataFrame({"lam": [0, 1e-5, 1e-3], "veto_threshold": [.05] * 3,
                         "f1": [.39] * 3, "sr": [.69] * 3, "tokens": [494.7] * 3,
                         "early": [.9875, .9875, 1.0]})
    e = lambda_effect(grid, 0.05)
    assert (e["n_lams"], e["n_outcomes"]) == (3, 1)
    assert "λ is inert" in e["sentence"] and "98.8% to 100.0%" in e["sentence"]
    grid.loc[2, "f1"] = .30
    assert "λ moved the stops" in lambda_effect(grid, 0.05)["sentence"]


def test_headroom_reads_the_oracle_margin_against_the_interval_width(tree: Path):
    t = ap.headroom_table(tree, reader="g")
    assert list(t.dataset) == ["hotpotqa"] and t.n.iloc[0] == N
    r = t.iloc[0]
    assert r.upper == pytest.approx(0.3) and r.upper_lo > 0  # oracle .9 against uniform's .6
    assert r.run == pytest.approx(0.0) and r.run_lo < 0 < r.run_hi
    assert r.half_width == pytest.approx((r.run_hi - r.run_lo) / 2) and r.half_width > 0
    # the big reader has neither uniform nor oracle: no row
    assert ap.headroom_table(tree, reader="big").empty
    # a partial oracle run leaves its dataset out
    write(tree, "oracle", [row(f"q{i}", 0.9) for i in range(5)], expected=N, dataset="musique")
    write(tree, "uniform", [row(f"q{i}", 0.5) for i in range(N)], dataset="musique")
    write(tree, "dynakrag", [row(f"q{i}", 0.5) for i in range(N)], dataset="musique")
    assert list(ap.headroom_table(tree, reader="g").dataset) == ["hotpotqa"]


def test_diagnosis_table_reads_every_dataset_and_reader():
    one = {"n_questions": 300, "choice": {
        "lambdas": {"0": {"n_states": 900, "gain_chosen": .04, "gain_uniform": .06,
                          "gain_best": .14, "regret": .10, "regret_uniform": .08,
                          "actions": {"sufficiency_check": {"chosen": .75,
                                                            "strictly_best": 0.0}}}},
        "retrieve_more": {"gain_chosen": .08, "regret": .05},
        "forest_acquisitions_only": {"gain_chosen": .09}},
        "stop": {"auc": {"f1": {"auc": .5}, "sr": {"auc": .75},
                         "sr_model_f1_event": {"auc": .69}}}}
    t = diagnosis_table({"results": {"hotpotqa/qwen2.5-coder-0.5b": one,
                                     "2wikimultihopqa-qwen2.5-coder-1.5b": one}})
    assert list(t.dataset) == ["hotpotqa", "2wikimultihopqa"]
    assert list(t.reader) == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
    assert t.loc[0, "probe chosen"] == .75 and t.loc[0, "AUC sr on F1"] == .69


def test_horizon_table_has_one_row_per_dataset_and_chooser_with_its_interval(tmp_path):
    def chooser(v, lo, hi, probe=0.0):
        return {"value": v, "minus_uniform": v - .10, "ci_minus_uniform": [lo, hi],
                "share_sufficiency_check": probe}
    one = {"horizon": {"choosers": {
        "horizon_forest": chooser(.13, .01, .05, .02),
        "horizon_forest_acquisitions_only": chooser(.12, -.01, .05),
        "onestep_forest": chooser(.07, -.06, -.01, .8), "retrieve_more": chooser(.11, -.02, .04)}}}
    report = {"results": {"hotpotqa/qwen2.5-coder-1.5b": one, "musique/qwen2.5-coder-1.5b": one}}
    t = horizon_table(report)
    assert t.index.names == ["dataset", "chooser"] and len(t) == 8
    assert t.index.get_level_values("dataset").unique().tolist() == ["hotpotqa", "musique"]
    r = t.loc[("musique", "one-step forest")]
    assert (r["lo"], r["hi"], r["picks probe"]) == (-.06, -.01, .8)
    assert r["minus uniform"] == pytest.approx(-.03)
    assert all(t.dtypes == float)  # numeric columns, so .round() applies in the chapter
    assert horizon_report(tmp_path) is None
    (tmp_path / "diagnostics").mkdir()
    (tmp_path / "diagnostics" / "control-diagnosis-horizon.json").write_text(json.dumps(report))
    assert horizon_report(tmp_path) == report


def test_stop_targets_table_reads_each_target_and_its_operating_point(tmp_path):
    op = {"stop_early": .5, "f1": .47, "token_ratio": .6, "minus_end": .02,
          "minus_end_ci": [-.01, .05], "minus_random": .01, "minus_random_ci": [-.02, .04]}
    st = {"n_questions": 200, "targets": {"f1/own": {"over_random": .004, "operating_point": op},
                                          "sr/pooled": {"over_random": -.01,
                                                        "operating_point": None}}}
    report = {"results": {"hotpotqa/big": {"stop_targets": st},
                          "musique/small": {"stop_targets": st},
                          "2wiki/big": {"stop_targets": {"n_questions": 3, "skipped": "few"}}}}
    t = stop_targets_table(report, reader="big")
    assert list(zip(t.dataset, t.target, t.training)) == [("hotpotqa", "f1", "own"),
                                                          ("hotpotqa", "sr", "pooled")]
    assert (t.loc[0, "always lo"], t.loc[0, "random hi"]) == (-.01, .04)
    assert pd.isna(t.loc[1, "F1"])  # no threshold stops 20-80 % of questions early
    assert len(stop_targets_table(report)) == 4
    assert stop_report(tmp_path) is None


def test_check_set_pairs_each_controller_once_with_every_other_run(tmp_path: Path):
    assert h.check_set_pairs(tmp_path).empty  # no check-set run yet
    write(tmp_path, "dynakrag", [row(f"c{i}", 0.6) for i in range(N)])
    write(tmp_path, "dynakrag-no_compression", [row(f"c{i}", 0.5) for i in range(N)])
    write(tmp_path, "uniform", [row(f"c{i}", 0.4) for i in range(N - 10)], expected=N)
    t = h.check_set_pairs(tmp_path, metrics=("f1",)).set_index("label")
    # the compressed controller against both, the uncompressed one against uniform only
    assert sorted(t.index) == ["dynakrag - dynakrag-no_compression", "dynakrag - uniform",
                               "dynakrag-no_compression - uniform"]
    assert t.loc["dynakrag - uniform", "n"] == N - 10  # paired on the questions both answered
    assert t.loc["dynakrag - uniform", "base_mean"] == pytest.approx(0.6)
    assert t.loc["dynakrag-no_compression - uniform", "diff"] == pytest.approx(0.1)
    assert set(t.reader) == {"g"} and set(t.base) == {"dynakrag", "dynakrag-no_compression"}


def test_check_set_markdown_says_each_verdict_with_its_interval_and_partial_runs(tmp_path):
    assert "No controller run" in h.check_set_markdown(h.check_set_pairs(tmp_path))
    write(tmp_path, "dynakrag", [row(f"c{i}", 0.6) for i in range(N)])
    write(tmp_path, "uniform", [row(f"c{i}", 0.6) for i in range(N - 10)], expected=N)
    text = h.check_set_markdown(h.check_set_pairs(tmp_path))
    assert text == ("* hotpotqa / `g`: `dynakrag` minus `uniform`: F1 inconclusive at this "
                    "n, +0.000 [+0.000, +0.000], n = 20 (`uniform` partial: 20 of 30)")
