"""dynakrag_lab.report.results: reading summaries/predictions back, and the paper's numbers."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from dynakrag_lite.experiments.run import SUMMARY_KEYS
from dynakrag_lab.report.results import (SUMMARY_COLUMNS, load_predictions, load_summaries,
                                         load_summary)
from dynakrag_lab.report.paper import paper_table, side_by_side


def _write_run(root, dataset, generator, run, f1, tokens, method="dynakrag", n=2):
    d = root / dataset / generator / run
    d.mkdir(parents=True)
    summary = {"method": method, "dataset": dataset, "generator": generator, "n": n,
               "em": f1 / 2, "f1": f1, "support_recall": 0.5, "all_support_rate": 0.25,
               "docs_mean": 6.0, "tokens_mean": tokens, "llm_calls_mean": 3.0,
               "retrieval_calls_mean": 2.0, "seconds_mean": 1.5,
               "run": {"command": f"python -m dynakrag_lite evaluate --method {method}"}}
    (d / "summary.json").write_text(json.dumps(summary))
    rows = [{"id": f"q{i}", "f1": f1, "em": 0.0, "tokens": tokens} for i in range(n)]
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def test_empty_root_gives_empty_frame_with_columns(tmp_path):
    df = load_summaries(tmp_path / "nothing-here")
    assert df.empty
    assert tuple(df.columns) == SUMMARY_COLUMNS
    for k in SUMMARY_KEYS:
        assert k in df.columns


def test_one_row_per_summary_ids_from_folders(tmp_path):
    _write_run(tmp_path, "hotpotqa", "qwen2.5-coder-0.5b", "dynakrag", 0.4, 900.0)
    _write_run(tmp_path, "hotpotqa", "qwen2.5-coder-0.5b", "dynakrag-cap1", 0.3, 700.0)
    _write_run(tmp_path, "musique", "smollm2-135m", "fixed_k", 0.1, 500.0, method="fixed_k")
    df = load_summaries(tmp_path)
    assert len(df) == 3
    assert set(df.run) == {"dynakrag", "dynakrag-cap1", "fixed_k"}
    cap1 = df[df.run == "dynakrag-cap1"].iloc[0]
    assert cap1.method == "dynakrag" and cap1.dataset == "hotpotqa"
    assert cap1.f1 == pytest.approx(0.3)
    assert cap1.command.startswith("python -m dynakrag_lite")
    assert df.f1.dtype.kind == "f"
    assert not any(str(tmp_path) in p for p in df.path)  # relative paths only


def test_unreadable_summary_is_skipped(tmp_path):
    _write_run(tmp_path, "hotpotqa", "g", "dynakrag", 0.4, 900.0)
    bad = tmp_path / "hotpotqa" / "g" / "fixed_k"
    bad.mkdir(parents=True)
    (bad / "summary.json").write_text("{not json")
    with pytest.warns(UserWarning):
        df = load_summaries(tmp_path)
    assert list(df.run) == ["dynakrag"]


def test_load_predictions_and_summary(tmp_path):
    _write_run(tmp_path, "2wikimultihopqa", "g", "ircot", 0.2, 300.0, method="ircot", n=3)
    preds = load_predictions("2wikimultihopqa", "g", "ircot", root=tmp_path)
    assert len(preds) == 3 and list(preds.id) == ["q0", "q1", "q2"]
    assert load_summary("2wikimultihopqa", "g", "ircot", root=tmp_path)["method"] == "ircot"
    with pytest.raises(FileNotFoundError):
        load_predictions("2wikimultihopqa", "g", "oracle", root=tmp_path)


def test_paper_main_table_is_complete_and_internally_consistent():
    """Facts any correct transcription of Table 1 satisfies, whatever its numbers: one row per
    method and dataset, scores are fractions, and EM <= F1 (an exact match scores F1 = 1, so
    mean EM can never exceed mean F1)."""
    t = paper_table()
    assert not t.duplicated(["method", "dataset"]).any()
    assert t.groupby("method").dataset.apply(set).eq({"hotpotqa", "2wikimultihopqa",
                                                      "musique"}).all()
    assert ((0 < t.em) & (t.em <= t.f1) & (t.f1 < 1)).all()
    assert (t.tokens_mean > 0).all() and (t.tokens_mean == t.tokens_mean.round()).all()
    assert "arXiv:2607.06507" in t.attrs["source"]


def test_paper_runs_name_runs_this_project_produces():
    """Every run name the paper tables point at is a run our experiment script writes (the
    named runs of results/configs/base.toml), and its methods are ones experiments.evaluate
    accepts."""
    from dynakrag_lite.experiments.configs import Config
    from dynakrag_lite.methods import METHODS
    base = Config.load(Path(__file__).resolve().parents[2] / "results/configs/base.toml")
    main = paper_table()
    assert set(main.run.dropna()) <= set(METHODS)
    assert set(main[main.run.notna()].method) == {"DynaKRAG", "Fixed-K", "IRCoT",
                                                  "Self-Ask+Search"}
    assert set(paper_table("ablations").run) <= set(base.runs)
    for run in set(main.run.dropna()) | set(paper_table("ablations").run):
        assert base.settings(run)[0]["method"] in METHODS
    with pytest.raises(ValueError):
        paper_table("nope")


def test_paper_tables_agree_with_each_other():
    """The paper reports the full DynaKRAG F1 three times (Table 1, the ablation table's
    'full' row, the transfer table's Qwen row); the three transcriptions must agree, and the
    transfer table holds one Qwen and one GPT-4o-mini row per dataset."""
    main = paper_table().query("method == 'DynaKRAG'").set_index("dataset").f1
    abl = paper_table("ablations").query("run == 'dynakrag'").set_index("dataset").f1
    tr = paper_table("transfer")
    qwen = tr[tr.generator == "Qwen2.5-7B-Instruct"].set_index("dataset").f1
    assert main.to_dict() == abl.to_dict() == qwen.to_dict()
    assert sorted(tr.generator.value_counts().to_dict().items()) == [
        ("GPT-4o-mini", 3), ("Qwen2.5-7B-Instruct", 3)]
    assert (tr.policy_generator == "Qwen2.5-7B-Instruct").all()
    f1 = paper_table("ablations").f1
    assert ((0 < f1) & (f1 < 1)).all()


def test_side_by_side_joins_paper_row(tmp_path):
    _write_run(tmp_path, "hotpotqa", "g", "dynakrag", 0.4, 900.0)
    _write_run(tmp_path, "hotpotqa", "g", "oracle", 0.5, 800.0, method="oracle")
    sb = side_by_side(load_summaries(tmp_path), "hotpotqa")
    assert list(sb.run) == ["dynakrag", "oracle"]
    paper = paper_table().query("run == 'dynakrag' and dataset == 'hotpotqa'")
    assert sb.loc[0, "paper_f1"] == paper.f1.item()
    assert pd.isna(sb.loc[1, "paper_f1"])


def test_find_policies_and_transfer_runs(tmp_path):
    from dynakrag_lab.report.results import find_policies, transfer_runs
    pol = tmp_path / "policies"
    pol.mkdir()
    (pol / "hotpotqa-qwen2.5-coder-0.5b.joblib").write_bytes(b"x")
    (pol / "musique-smollm2-135m.joblib").write_bytes(b"x")
    # a variant sorts before its main policy ("-" < "."): it must not be taken for it
    (pol / "hotpotqa-qwen2.5-coder-0.5b-gain_stop.joblib").write_bytes(b"x")
    assert [p.name for p in find_policies("hotpotqa", pol)] == [
        "hotpotqa-qwen2.5-coder-0.5b.joblib"]
    assert [p.name for p in find_policies("hotpotqa", pol, variants=True)] == [
        "hotpotqa-qwen2.5-coder-0.5b-gain_stop.joblib", "hotpotqa-qwen2.5-coder-0.5b.joblib"]
    assert len(find_policies(root=pol)) == 2
    assert find_policies(root=tmp_path / "none") == []
    _write_run(tmp_path / "exp", "hotpotqa", "qwen2.5-coder-0.5b", "dynakrag", 0.4, 900.0)
    _write_run(tmp_path / "exp", "hotpotqa", "smollm2-135m-policy-qwen2.5-coder-0.5b",
               "dynakrag", 0.2, 800.0)
    t = transfer_runs(load_summaries(tmp_path / "exp")).set_index("generator")
    row = t.loc["smollm2-135m-policy-qwen2.5-coder-0.5b"]
    assert row.answer_generator == "smollm2-135m"
    assert row.policy_generator == "qwen2.5-coder-0.5b" and row.transferred
    assert not t.loc["qwen2.5-coder-0.5b"].transferred
    assert transfer_runs(load_summaries(tmp_path / "none")).empty


def test_trace_table_from_steptraces_and_dicts():
    from dynakrag_lite.controller import StepTrace
    from dynakrag_lab.report.results import trace_table
    steps = [StepTrace(0, "retrieve_more", ("retrieve_more",),
                       {"retrieve_more": {"value": 0.4, "continue_gain": 0.1}}, ("d1", "d2")),
             StepTrace(1, "gap_query", ("gap_query", "stop_answer"),
                       {"gap_query": {"value": 0.2}, "stop_answer": {"value": 0.5,
                                                                     "vetoed": 1.0}}, ())]
    t = trace_table(steps)
    assert list(t.action) == ["retrieve_more", "gap_query"]
    assert t.loc[0, "added"] == 2 and t.loc[0, "continue_gain"] == 0.1
    assert t.loc[1, "vetoed"] and t.loc[1, "stop_value"] == 0.5 and t.loc[1, "n_valid"] == 2
    assert trace_table([s.to_json() for s in steps]).equals(t)
    assert trace_table([]).empty


def _write_rows(root, run, rows):
    d = root / "hotpotqa" / "g" / run
    d.mkdir(parents=True)
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_paired_table_pairs_dynakrag_with_each_run_by_question():
    from dynakrag_lab.report.results import paired_table
    import tempfile
    root = Path(tempfile.mkdtemp())
    base = [{"id": f"q{i}", "f1": 1.0, "em": 1.0, "support_recall": 1.0} for i in range(6)]
    # fixed_k3 is worse by exactly .5 F1 on every question, in another order, one retried
    # question (error row then success): the latest row counts.
    other = [{"id": f"q{i}", "f1": 0.5, "em": 1.0, "support_recall": 1.0}
             for i in reversed(range(6))]
    other.insert(0, {"id": "q2", "error": "timeout"})
    _write_rows(root, "dynakrag", base)
    _write_rows(root, "fixed_k3", other)
    _write_rows(root, "ircot", base[:4])  # 4 questions only
    t = paired_table("hotpotqa", "g", root=root)
    assert list(t.run.unique()) == ["fixed_k3", "ircot"]  # RUN_ORDER
    f1 = t[(t.run == "fixed_k3") & (t.metric == "f1")].iloc[0]
    assert f1.n == 6 and f1["diff"] == pytest.approx(0.5)
    assert (f1.lo, f1.hi) == (pytest.approx(0.5), pytest.approx(0.5))
    assert f1.verdict == "A better" and f1.wins == 6
    em = t[(t.run == "fixed_k3") & (t.metric == "em")].iloc[0]
    assert em.verdict == "no measurable difference" and em.p_value == 1.0
    assert t[(t.run == "ircot")].n.tolist() == [4, 4, 4]


# -- breakdowns per question type and hop count -------------------------------------------
def test_question_group_maps_types_and_folds_musique_hop_shapes():
    from dynakrag_lab.report.breakdown import UNTYPED, question_group
    assert question_group({"type": "bridge"}, "hotpotqa") == "bridge"
    assert question_group({"type": None}, "hotpotqa") == UNTYPED  # records without a type
    assert question_group({}, "hotpotqa") == UNTYPED
    assert question_group({"type": "bridge_comparison"}, "2wikimultihopqa") == \
        "bridge_comparison"
    assert question_group({"type": "inference"}, "2wikimultihopqa") == "inference"
    assert [question_group({"type": t}, "musique") for t in
            ("2hop", "3hop1", "3hop2", "4hop1", "4hop3")] == \
        ["2-hop", "3-hop", "3-hop", "4-hop", "4-hop"]


def _musique_rows(f1_2hop, f1_3hop, n2=12, n3=4):
    rows = [{"id": f"a{i}", "type": "2hop", "f1": f1_2hop, "em": float(f1_2hop == 1.0),
             "support_recall": 0.5} for i in range(n2)]
    rows += [{"id": f"b{i}", "type": f"3hop{1 + i % 2}", "f1": f1_3hop, "em": 0.0,
              "support_recall": 1.0} for i in range(n3)]
    return rows


def test_breakdown_table_per_group_with_paired_difference_and_flags(tmp_path):
    from dynakrag_lab.report.breakdown import breakdown_table

    def write(run, rows):
        d = tmp_path / "musique" / "g" / run
        d.mkdir(parents=True)
        (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    write("dynakrag", _musique_rows(1.0, 0.5))
    # fixed_k3: .25 F1 below dynakrag on every 2-hop question, equal on 3-hop; one question
    # failed (error row), so it is left out of its group and of the pairing
    k3 = _musique_rows(0.75, 0.5)
    k3[0] = {"id": "a0", "error": "timeout"}
    write("fixed_k3", k3)
    write("ircot", _musique_rows(0.5, 0.5, n2=5, n3=0))  # a run still going: 5 questions
    t = breakdown_table("musique", "g", root=tmp_path)
    assert list(t.run) == ["fixed_k3", "fixed_k3", "ircot", "dynakrag", "dynakrag"]
    row = {(r.run, r.group): r for r in t.itertuples(index=False)}

    base2 = row[("dynakrag", "2-hop")]
    assert (base2.n, base2.f1, base2.em, base2.support_recall) == (12, 1.0, 1.0, 0.5)
    assert pd.isna(base2.n_paired) and pd.isna(base2.diff)
    assert not base2.too_few

    k2 = row[("fixed_k3", "2-hop")]
    assert k2.n == 11 and k2.n_paired == 11 and not k2.too_few
    assert k2.f1 == pytest.approx(0.75)
    assert k2.diff == pytest.approx(0.25)
    assert (k2.lo, k2.hi) == (pytest.approx(0.25), pytest.approx(0.25))
    assert k2.p_value < 0.05 and k2.verdict == "A better"

    # four 3-hop questions: reported, flagged, not read
    k3row = row[("fixed_k3", "3-hop")]
    assert k3row.n == 4 and k3row.n_paired == 4 and k3row.diff == pytest.approx(0.0)
    assert k3row.too_few and k3row.verdict == "too few to read"
    assert row[("dynakrag", "3-hop")].too_few

    # a partial run is compared on the questions it has
    ir = row[("ircot", "2-hop")]
    assert ir.n == 5 and ir.n_paired == 5 and ir.diff == pytest.approx(0.5)
    assert ir.too_few and ir.verdict == "too few to read"
    assert ("ircot", "3-hop") not in row

    # dynakrag is the base even when not among the listed runs
    only = breakdown_table("musique", "g", runs=["fixed_k3"], root=tmp_path)
    assert list(only.run.unique()) == ["fixed_k3"] and only.n_paired.tolist() == [11, 4]
    # without a dynakrag run: the per-group numbers, no paired columns filled
    t2 = breakdown_table("musique", "g", runs=["fixed_k3"], root=tmp_path, base="absent")
    assert list(t2.group) == ["2-hop", "3-hop"] and t2.n_paired.isna().all()


def test_breakdown_table_keeps_a_named_run_without_answers_as_a_row(tmp_path):
    """A chapter naming a run that was deleted for a re-run (or has just started) gets a row
    saying so, as ablation_table does, instead of FileNotFoundError."""
    from dynakrag_lab.report.results import NOT_RUN, STARTED
    from dynakrag_lab.report.breakdown import breakdown_table
    d = tmp_path / "musique" / "g"
    for run, rows in (("dynakrag", _musique_rows(1.0, 0.5)),
                      ("fixed_k3", _musique_rows(0.75, 0.5)), ("uniform", [])):
        (d / run).mkdir(parents=True)
        (d / run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = breakdown_table("musique", "g", runs=["fixed_k3", "ircot", "uniform"], root=tmp_path)
    assert list(t.run) == ["fixed_k3", "fixed_k3", "ircot", "uniform"]
    missing = t[t.run.isin(["ircot", "uniform"])].set_index("run")
    assert missing.verdict.to_dict() == {"ircot": NOT_RUN, "uniform": STARTED}
    assert (missing.n == 0).all() and missing.group.isna().all() and missing.f1.isna().all()
    assert missing.too_few.all() and missing.n_paired.isna().all()
    assert t[t.run == "fixed_k3"].n_paired.tolist() == [12, 4]  # the others are unaffected
    # a named base that was never run: per-group numbers, nothing paired, no exception
    t2 = breakdown_table("musique", "g", runs=["fixed_k3"], root=tmp_path, base="oracle")
    assert t2.n_paired.isna().all() and (t2.verdict == "").all()
    # found by folder (no runs given): a started run still has no row, as before
    assert "uniform" not in set(breakdown_table("musique", "g", root=tmp_path).run)


# -- intermediate states: runs deleted for a re-run, just started, or extended in place --------
def _run_folder(root, run, rows, n_expected=None, dataset="hotpotqa", generator="g"):
    """A run folder as experiments.evaluate leaves it: predictions, and (once a question is
    done) a summary whose run block says how many questions were requested."""
    d = root / dataset / generator / run
    d.mkdir(parents=True)
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if rows:
        n = len([r for r in rows if not r.get("error")])
        expected = n if n_expected is None else n_expected
        summary = {"method": run.split("-")[0], "dataset": dataset, "generator": generator,
                   "n": n, "f1": sum(r["f1"] for r in rows) / len(rows),
                   "run": {"command": "x", "n_expected": expected, "complete": n == expected}}
        (d / "summary.json").write_text(json.dumps(summary))
    return d


def _q(qid, f1):
    return {"id": qid, "f1": f1, "em": f1, "support_recall": f1, "tokens": 100.0}


def test_status_label_names_every_state_a_run_can_be_in():
    from dynakrag_lab.report.results import (COMPLETE, NOT_RUN, STARTED, UNRECORDED, is_partial,
                                             status_label)
    assert status_label(150, 150, True) == COMPLETE
    assert status_label(120, 150, False) == "partial: 120 of 150"
    assert is_partial(status_label(120, 150, False)) and not is_partial(COMPLETE)
    assert status_label(3, None, False) == "partial: 3 answered"
    assert status_label(100, None, None) == UNRECORDED  # a summary older than the flag
    assert status_label(0, 150, False) == STARTED
    assert status_label(None) == NOT_RUN


def test_load_summaries_labels_a_partial_run(tmp_path):
    _run_folder(tmp_path, "fixed_k3", [_q(f"q{i}", 0.5) for i in range(3)], n_expected=5)
    _run_folder(tmp_path, "dynakrag", [_q(f"q{i}", 0.5) for i in range(5)])
    s = load_summaries(tmp_path).set_index("run")
    assert s.loc["fixed_k3", "status"] == "partial: 3 of 5"
    assert s.loc["fixed_k3", "n_expected"] == 5 and not s.loc["fixed_k3", "complete"]
    assert s.loc["dynakrag", "status"] == "complete"


def test_paired_table_pairs_a_partial_baseline_on_the_common_questions_only(tmp_path):
    from dynakrag_lab.report.results import paired_table
    _run_folder(tmp_path, "dynakrag", [_q(f"q{i}", 1.0) for i in range(6)])
    # fixed_k3 being extended to 8 questions: 4 of the old ones so far, plus a new question
    # dynakrag has not reached (F1 0, so a mean over all of fixed_k3's rows would differ)
    _run_folder(tmp_path, "fixed_k3", [_q(f"q{i}", 0.5) for i in range(4)] + [_q("new", 0.0)],
                n_expected=8)
    t = paired_table("hotpotqa", "g", runs=["fixed_k3"], root=tmp_path)
    f1 = t[t.metric == "f1"].iloc[0]
    assert f1.n == 4  # the questions both answered, reported
    assert f1.other == pytest.approx(0.5) and f1["diff"] == pytest.approx(0.5)
    assert f1.status == "partial: 5 of 8"


def test_paired_table_reports_a_run_it_cannot_pair_instead_of_raising(tmp_path):
    from dynakrag_lab.report.results import NO_COMMON, NOT_RUN, STARTED, paired_table
    _run_folder(tmp_path, "dynakrag", [_q(f"q{i}", 1.0) for i in range(3)], n_expected=6)
    _run_folder(tmp_path, "dynakrag-cap2", [])  # started: an empty predictions file
    _run_folder(tmp_path, "uniform", [_q("new1", 0.5)], n_expected=6)  # no common question
    t = paired_table("hotpotqa", "g", runs=["dynakrag-cap2", "dynakrag-no_compression",
                                            "uniform"], root=tmp_path)
    assert len(t) == 9 and (t.n == 0).all() and t["diff"].isna().all()
    by_run = t.groupby("run").verdict.first()
    assert by_run["dynakrag-no_compression"] == NOT_RUN  # no folder: a deleted ablation
    assert by_run["dynakrag-cap2"] == STARTED
    assert by_run["uniform"] == NO_COMMON
    # the base itself missing: every row says so
    t = paired_table("hotpotqa", "g", base="oracle", runs=["uniform"], root=tmp_path)
    assert set(t.verdict) == {f"oracle {NOT_RUN}"} and (t.n == 0).all()


def test_ablation_table_keeps_a_missing_ablation_as_a_not_run_row(tmp_path):
    from dynakrag_lab.report.paper import ABLATION_RUNS, ablation_table
    from dynakrag_lab.report.results import NOT_RUN
    _run_folder(tmp_path, "dynakrag", [_q(f"q{i}", 0.5) for i in range(4)])
    _run_folder(tmp_path, "dynakrag-cap1", [_q("q0", 0.25)], n_expected=4)
    _run_folder(tmp_path, "dynakrag-cap2", [_q("q0", 0.25)], dataset="musique")
    t = ablation_table(load_summaries(tmp_path), "hotpotqa", "g").set_index("run")
    assert list(t.index) == list(ABLATION_RUNS)  # every ablation, in the paper's order
    assert t.loc["dynakrag", "status"] == "complete" and t.loc["dynakrag", "n"] == 4
    assert t.loc["dynakrag-cap1", "status"] == "partial: 1 of 4"
    row = t.loc["dynakrag-no_compression"]  # never run on hotpotqa
    assert row.status == NOT_RUN and row.n == 0 and pd.isna(row.f1)
    assert row.variant == "no compression" and row.paper_f1 == pytest.approx(0.5826)
    assert t.loc["dynakrag-cap2", "status"] == NOT_RUN  # a run of another dataset is not this


def test_run_policy_says_when_the_saved_policy_is_not_the_one_a_run_used(tmp_path):
    from dynakrag_lab.report.results import run_policy
    from dynakrag_lite.storage import sha256_file
    exp, pol = tmp_path / "experiments", tmp_path / "policies"
    pol.mkdir()
    (pol / "hotpotqa-g.joblib").write_bytes(b"old policy")
    for run, name in (("dynakrag", "hotpotqa-g.joblib"), ("dynakrag-gain", "hotpotqa-g-x.joblib")):
        d = _run_folder(exp, run, [_q("q0", 1.0)])
        s = json.loads((d / "summary.json").read_text())
        s["policy"] = {"path": f"results/policies/{name}", "n_train": 3,
                       "sha256": sha256_file(pol / "hotpotqa-g.joblib")}
        (d / "summary.json").write_text(json.dumps(s))
    _run_folder(exp, "fixed_k3", [_q("q0", 1.0)])
    assert run_policy("hotpotqa", "g", "dynakrag", exp)["file"] == "same"
    assert run_policy("hotpotqa", "g", "dynakrag-gain", exp)["file"] == "missing"
    assert run_policy("hotpotqa", "g", "fixed_k3", exp) is None  # a baseline: no policy
    (pol / "hotpotqa-g.joblib").write_bytes(b"retrained policy")
    assert run_policy("hotpotqa", "g", "dynakrag", exp)["file"] == "changed"


def test_run_status_reads_an_unchanged_predictions_file_once_and_a_changed_one_again(
        tmp_path, monkeypatch):
    """Status is memoized on the predictions file's (path, mtime_ns, size): table after table
    of a chapter does not parse it again, but a line appended by a running experiment is
    seen at the next call."""
    from dynakrag_lab.report import results
    from dynakrag_lite.experiments.folder import read_predictions
    from dynakrag_lab.report.results import run_status
    d = _run_folder(tmp_path, "fixed_k3", [_q(f"q{i}", 0.5) for i in range(3)], n_expected=5)
    reads = []

    def counting(path):
        reads.append(path)
        return read_predictions(path)
    monkeypatch.setattr(results, "read_predictions", counting)
    assert run_status("hotpotqa", "g", "fixed_k3", tmp_path)["status"] == "partial: 3 of 5"
    assert run_status("hotpotqa", "g", "fixed_k3", tmp_path)["answered"] == 3
    assert len(reads) == 1
    with open(d / "predictions.jsonl", "a") as fh:
        fh.write(json.dumps(_q("q3", 0.5)) + "\n")
    assert run_status("hotpotqa", "g", "fixed_k3", tmp_path)["status"] == "partial: 4 of 5"
    assert len(reads) == 2


def test_breakdown_table_pairs_a_run_named_generator_slash_run_from_another_folder(tmp_path):
    """A transferred run (its folder <A>-policy-<P>) is broken down against a baseline of the
    answer generator's own folder, named "<A>/<run>", paired per question across folders."""
    from dynakrag_lab.report.breakdown import breakdown_table
    for folder, f1 in (("big-policy-small/dynakrag", 1.0), ("big/fixed_k3", 0.75)):
        d = tmp_path / "musique" / folder
        d.mkdir(parents=True)
        (d / "predictions.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in _musique_rows(f1, 0.5)))
    t = breakdown_table("musique", "big-policy-small", runs=["dynakrag", "big/fixed_k3"],
                        root=tmp_path)
    row = {(r.run, r.group): r for r in t.itertuples(index=False)}
    k2 = row[("big/fixed_k3", "2-hop")]
    assert k2.n == 12 and k2.n_paired == 12 and k2.diff == pytest.approx(0.25)
    assert k2.verdict == "A better"
    assert pd.isna(row[("dynakrag", "2-hop")].n_paired)  # the transferred run is the base
