"""The writer of results/README.md (python -m dynakrag_lab.readme) reads what runs recorded: its
rates leave out rows replayed from the LLM cache, its headline and breakdowns pair runs as
stated, and its Speed section renders each benchmark file's figures from whatever keys the
file has; the selector study's command line refuses to reuse another split's numbers."""
import json

import pytest

from dynakrag_lite.experiments.artifacts import RESULTS
from dynakrag_lab.readme import __main__ as readme_main
from dynakrag_lab.readme import plan, speed
from dynakrag_lab.readme import runs as run_tables
from dynakrag_lab.studies.diagnosis.report import control_diagnosis_section
from dynakrag_lab.studies.selector import __main__ as selector_cli


def _run(folder, rows, summary=None):
    folder.mkdir(parents=True)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))


def _row(qid, f1, sr=0.5, seconds=5.0, **kw):
    return {"id": qid, "method": "fixed_k", "f1": f1, "em": float(f1 == 1.0),
            "support_recall": sr, "seconds": seconds, "docs": [], "trace": [], **kw}


def test_seconds_per_question_leaves_out_replayed_and_failed_rows(tmp_path):
    _run(tmp_path / "ircot", [_row("q1", 1.0, seconds=40.0), _row("q2", 0.0, seconds=20.0),
                              _row("q3", 0.0, seconds=0.05),
                              {"id": "q4", "error": "boom", "seconds": 99.0}])
    assert plan.seconds_per_question(tmp_path) == {"ircot": (30.0, 2)}
    assert plan.hours_recorded(tmp_path) == pytest.approx(60.05 / 3600)


def test_breakdown_section_one_table_per_dataset_with_flags(tmp_path, monkeypatch):
    from dynakrag_lab.report.results import load_summaries
    monkeypatch.setattr(run_tables, "RESULTS", tmp_path)
    exp = tmp_path / "experiments"
    summary = {"n": 12, "f1": 0.5}
    rows = [_row(f"q{i}", 1.0, type="bridge") for i in range(12)] + \
        [_row("c1", 0.0, type="comparison"), _row("u1", 1.0)]
    _run(exp / "hotpotqa" / "g" / "dynakrag", rows, summary)
    worse = [dict(r, f1=0.5, em=0.0) if r.get("type") == "bridge" else r for r in rows]
    _run(exp / "hotpotqa" / "g" / "fixed_k3", worse, summary)
    _run(exp / "musique" / "g" / "fixed_k3",
         [_row("m1", 0.0, type="2hop"), _row("m2", 1.0, type="4hop3")], summary)
    text = run_tables.breakdown_section(load_summaries(exp))
    assert text.startswith("## Breakdowns per question type and hop count")
    assert "### hotpotqa, generator `g`" in text and "### musique, generator `g`" in text
    lines = text.splitlines()
    bridge = next(ln for ln in lines if ln.startswith("| bridge | fixed_k3 |"))
    assert "| 12 | 0.000 | 0.500 |" in bridge and "| +0.500 | [+0.500, +0.500] |" in bridge
    assert bridge.endswith("| better |")  # a pair read on its own, in the four words
    assert next(ln for ln in lines if ln.startswith("| comparison | fixed_k3 |")) \
        .endswith("| too few to read |")
    assert any(ln.startswith("| untyped | dynakrag | 1 |") for ln in lines)
    # no dynakrag run for musique: said so, and the hop counts still broken down
    mus = text[text.index("### musique"):]
    assert "No dynakrag run yet" in mus
    assert "| 2-hop | fixed_k3 | 1 |" in mus and "| 4-hop | fixed_k3 | 1 |" in mus


def _headline(tmp_path, monkeypatch, runs: dict) -> str:
    """headline_section over hotpotqa runs {name: (f1, number of questions)} of one generator
    (questions q0..q11), plus ``musique`` runs given under keys "musique/<run>"."""
    from dynakrag_lab.report.results import load_summaries
    monkeypatch.setattr(run_tables, "RESULTS", tmp_path)
    exp = tmp_path / "experiments"
    for key, (f1, n) in runs.items():
        ds, run = key.split("/") if "/" in key else ("hotpotqa", key)
        _run(exp / ds / "g" / run, [_row(f"q{i}", f1) for i in range(n)], {"n": n, "f1": f1})
    return run_tables.headline_section(load_summaries(exp))


def test_headline_pairs_dynakrag_with_the_baseline_of_highest_f1(tmp_path, monkeypatch):
    # the oracle and ablations are never "the best baseline", however high their F1
    text = _headline(tmp_path, monkeypatch, {
        "dynakrag": (1.0, 12), "fixed_k3": (0.5, 12), "ircot": (0.75, 12),
        "oracle": (1.0, 12), "dynakrag-cap1": (1.0, 12), "musique/fixed_k3": (0.0, 1)})
    row = next(ln for ln in text.splitlines() if ln.startswith("| hotpotqa |"))
    assert "| `dynakrag` | 12 | `ircot` | 1.000 / 0.750 | +0.250 [+0.250, +0.250]" in row
    assert row.endswith("| better (Holm p <.001, detectable .000) |")
    mus = next(ln for ln in text.splitlines() if ln.startswith("| musique |"))
    assert "not run yet: dynakrag" in mus


def test_headline_ignores_a_baseline_run_on_fewer_questions(tmp_path, monkeypatch):
    text = _headline(tmp_path, monkeypatch, {"dynakrag": (0.5, 12), "fixed_k3": (0.25, 12),
                                              "uniform": (1.0, 3)})
    row = next(ln for ln in text.splitlines()
               if ln.startswith("| hotpotqa |"))
    assert "| 12 | `fixed_k3` |" in row


def test_headline_adds_a_row_for_the_gain_rule_run_where_it_exists(tmp_path, monkeypatch):
    text = _headline(tmp_path, monkeypatch, {
        "dynakrag": (0.5, 12), "dynakrag-gain": (1.0, 12), "fixed_k6": (0.75, 12),
        "musique/dynakrag": (0.5, 4), "musique/fixed_k3": (0.5, 4)})
    rows = [ln for ln in text.splitlines() if ln.startswith("| hotpotqa |")]
    assert len(rows) == 2
    assert "| `dynakrag` | 12 | `fixed_k6` | 0.500 / 0.750 | -0.250" in rows[0]
    assert rows[0].endswith("| worse (Holm p <.001, detectable .000) |")
    assert "| `dynakrag-gain` | 12 | `fixed_k6` | 1.000 / 0.750 | +0.250" in rows[1]
    assert rows[1].endswith("| better (Holm p <.001, detectable .000) |")
    # no gain run on musique: one row only
    assert sum(ln.startswith("| musique |") for ln in text.splitlines()) == 1


def _status_run(folder, ids, f1, n_expected=None, policy=None):
    """A run folder with a summary that records how many questions were requested."""
    rows = [_row(q, f1) for q in ids]
    summary = {"n": len(rows), "f1": f1, "method": "x",
               "run": {"command": "x", "n_expected": n_expected or len(rows),
                       "complete": n_expected in (None, len(rows))}}
    if policy:
        summary["policy"] = policy
    _run(folder, rows, summary)


def test_headline_labels_partial_runs_and_pairs_them_on_common_questions(tmp_path, monkeypatch):
    from dynakrag_lab.report.results import load_summaries
    monkeypatch.setattr(run_tables, "RESULTS", tmp_path)
    exp = tmp_path / "experiments" / "hotpotqa" / "g"
    _status_run(exp / "dynakrag", [f"q{i}" for i in range(12)], 1.0, n_expected=15)
    # fixed_k3 being extended: 10 old questions and 2 new ones dynakrag has not reached
    _status_run(exp / "fixed_k3", [f"q{i}" for i in range(10)] + ["n1", "n2"], 0.5,
                n_expected=15)
    text = run_tables.headline_section(load_summaries(tmp_path / "experiments"))
    row = next(ln for ln in text.splitlines() if ln.startswith("| hotpotqa |"))
    assert "| `dynakrag` (partial: 12 of 15) | 10 | `fixed_k3` (partial: 12 of 15) |" in row
    assert "partial: k of N" in text  # the rule is stated above the table


def test_headline_keeps_a_row_for_a_dataset_whose_controller_is_missing_or_unpaired(
        tmp_path, monkeypatch):
    from dynakrag_lab.report.results import load_summaries
    monkeypatch.setattr(run_tables, "RESULTS", tmp_path)
    exp = tmp_path / "experiments"
    _status_run(exp / "hotpotqa" / "g" / "fixed_k3", ["q0", "q1"], 0.5)  # dynakrag deleted
    # musique: the re-run has only reached questions no baseline has yet
    _status_run(exp / "musique" / "g" / "dynakrag", ["n1"], 1.0, n_expected=3)
    _status_run(exp / "musique" / "g" / "fixed_k6", ["q0", "q1"], 0.5)
    text = run_tables.headline_section(load_summaries(exp))
    lines = text.splitlines()
    assert next(ln for ln in lines if ln.startswith("| hotpotqa |")).endswith(
        "| not run yet: dynakrag |")
    mus = next(ln for ln in lines if ln.startswith("| musique |"))
    assert "`dynakrag` (partial: 1 of 3)" in mus and "not paired: no common questions yet" in mus


def test_readme_of_a_results_folder_mid_rerun(tmp_path):
    """The whole README over a folder in the middle of a re-run: a started run (empty
    predictions, no summary), a partial one, a deleted ablation, a policy being retrained."""
    exp = tmp_path / "experiments" / "hotpotqa" / "g"
    used = {"path": "results/policies/hotpotqa-g-gain_stop.joblib", "sha256": "0" * 64}
    _status_run(exp / "dynakrag", ["q0", "q1", "q2"], 1.0, n_expected=6)
    _status_run(exp / "fixed_k3", ["q0", "q1", "q2", "q3", "q4"], 0.5, n_expected=6)
    _status_run(exp / "dynakrag-gain_lam0", ["q0"], 1.0, policy=used)  # its policy: gone
    (exp / "dynakrag-cap2").mkdir()
    (exp / "dynakrag-cap2" / "predictions.jsonl").write_text("")
    assert readme_main.main(["--results", str(tmp_path)]) == 0
    text = (tmp_path / "README.md").read_text()
    assert "| fixed_k3 | 5 | partial: 5 of 6 |" in text
    pair = next(ln for ln in text.splitlines() if ln.startswith("| fixed_k3 | partial: 5 of 6 |"
                                                                " f1 |"))
    assert "| f1 | 3 |" in pair  # paired on the 3 questions both answered
    assert "| dynakrag-cap2 | started, nothing answered yet | f1 | 0 |" in text
    assert "`dynakrag-no_compression` (not run yet)" in text
    assert "`dynakrag-cap2` (started, nothing answered yet)" in text
    assert ("`policies/hotpotqa-g-gain_stop.joblib`: not present now; used by "
            "`hotpotqa/g/dynakrag-gain_lam0`") in text
    assert "these projections are lower bounds" in text  # uniform, oracle ... not measured
    for old in ("A better", "A worse", "no measurable difference", "verdict (F1)"):
        assert old not in text  # every table reads its pairs in the four words


# -- Speed section: one renderer per results/benchmarks/*.json --------------------------------
def _rows(text: str, first_cell: str) -> list[list[str]]:
    """The cells of the markdown table rows whose first cell is ``first_cell``."""
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in text.splitlines()
            if ln.startswith(f"| {first_cell} |")]


def test_bench_header_names_date_cpu_load_averages_and_command():
    line = speed.bench_header({"date": "2026-12-01T01:00:00+00:00", "cpu_model": "EPYC", "cpus": 2,
                            "command": "python benchmarks/x.py --n 5",
                            "machine": {"loadavg_start": [0.5, 1, 1.25],
                                        "loadavg_end": [2, 2, 2]}})
    assert "2026-12-01T01:00:00+00:00" in line and "EPYC (2 CPUs)" in line
    assert "0.50/1.00/1.25 at start, 2.00/2.00/2.00 at end" in line
    assert "`python benchmarks/x.py --n 5`" in line
    # controller.json's names (machine.loadavg_before/after), llama_builds' top-level ones
    assert "1.00/1.00/1.00 at start" in speed.bench_header(
        {"machine": {"loadavg_before": [1, 1, 1]}})
    assert "3.00/3.00/3.00 at end" in speed.bench_header({"loadavg_end": [3, 3, 3], "cpu": "X"})
    bare = speed.bench_header({})
    assert "load average not recorded" in bare and "command not recorded" in bare


def _method(wall, llm, n=2):
    return {"totals": {"questions": n, "errors": 0, "wall_seconds": wall, "llm_seconds": llm,
                       "reused_fraction": 0.25,
                       "per_question": {"live_calls": 2.0, "prompt_tokens_sent": 800.0,
                                        "prompt_tokens_evaluated": 600.0,
                                        "completion_tokens": 10.0, "llm_seconds": llm / n,
                                        "wall_seconds": wall / n}}}


def test_prefix_reuse_states_the_wall_over_llm_target_per_method():
    text = speed.prefix_reuse_section({"methods": {"fast": _method(10.5, 10.0),
                                                "slow": _method(12.0, 10.0)}})
    (fast,), (slow,) = _rows(text, "`fast`"), _rows(text, "`slow`")
    assert fast[1:11] == ["2", "0", "2.0", "800", "600", "0.250", "10.0", "5.00", "5.25",
                          "1.050"] and fast[11] == "met"
    assert slow[10:12] == ["1.200", "not met"]
    assert "met by 1 of 2 methods" in text


def test_prefix_reuse_micro_table_per_call_kind_and_savings_per_token():
    text = speed.prefix_reuse_section({"micro": {
        "docs_per_prompt": 6, "max_tokens": 1,
        "kinds": {"rewrite_same_docs": {"n": 3, "seconds_median": 0.5727,
                                        "prompt_tokens_median": 602, "reused_median": 562,
                                        "evaluated_median": 40}},
        "savings": {"seconds_saved_per_reused_token_pair": 0.0130485,
                    "seconds_per_evaluated_token_fit": 0.0130363,
                    "rewrite_same_over_other_seconds": 0.0554}}})
    assert _rows(text, "`rewrite_same_docs`") == [["`rewrite_same_docs`", "3", "0.573", "602",
                                                   "562", "40"]]
    assert "0.0130 s per evaluated prompt token" in text and "0.055 of the time" in text
    assert "Per method" not in text  # no methods part in the file: no table


def test_index_section_one_row_per_factory_with_mib_recall_and_mmap_figures():
    text = speed.index_section({"n": 1000, "dim": 8, "k": 10, "indexes": [
        {"factory": "IVF4,SQ8", "build_seconds": 2.04, "index_bytes": 3 * 2**20,
         "build_peak_rss_mb": 40.4, "search_rss_mb": 5.0, "query_ms": 0.2264,
         "query_ms_single": 0.3367, "recall@10": 0.9754, "mmap_load_seconds": 0.005,
         "mmap_load_rss_mb": 2.8, "mmap_search_rss_mb": 4.0, "mmap_query_ms": 0.238,
         "mmap_query_ms_single": 0.3123, "mmap_same_results": True},
        {"factory": "HNSW8", "build_seconds": 1.0}]})  # an older file's shorter row
    assert _rows(text, "`IVF4,SQ8`") == [["`IVF4,SQ8`", "2.0", "3.0", "40", "5",
                                          "0.226 / 0.337", "0.975", "0.005", "2.8 / 4",
                                          "0.238 / 0.312", "yes"]]
    hnsw = _rows(text, "`HNSW8`")[0]
    assert hnsw[1] == "1.0" and set(hnsw[2:]) <= {"-", "- / -"}
    assert "1,000 vectors" in text


def _parallel_run(config, rnd, wall):
    return {"config": config, "round": rnd, "processes": 2 if config == "2x1" else 1,
            "threads_each": 1 if config == "2x1" else 2, "questions_x_methods": 6, "errors": 0,
            "loop_wall_seconds": wall, "per_hour": 3600 * 6 / wall, "llm_seconds": wall - 1,
            "spawn_to_exit_seconds": wall + 20}


def test_parallel_section_not_measured_partial_and_with_verdict():
    assert "Not measured yet" in speed.parallel_section(None)
    partial = speed.parallel_section({"settings": {"rounds": 1}, "runs": [_parallel_run("1x2", 0,
                                                                                      120.0)]})
    assert _rows(partial, "0") == [["0", "`1x2`", "1 x 2", "6", "0", "120.0", "180.0", "119.0",
                                    "140.0"]]
    assert "No verdict yet" in partial
    done = speed.parallel_section({
        "runs": [_parallel_run("1x2", 0, 120.0), _parallel_run("2x1", 0, 80.0)],
        "summary": {"faster": "2x1", "speedup_2x1_over_1x2": 1.5,
                    "f1_agreement": {"pairs": 6, "same_f1": 5}}})
    assert len(_rows(done, "0")) == 2
    assert "Verdict: `2x1` is faster" in done and "1.500" in done and "5 of 6" in done


def test_controller_section_compares_decision_ms_with_the_target():
    text = speed.controller_section({"verdict": {"target_ms": 2.0, "by_predictor": {
        "library (FlatForest)": {"median_ms_by_size": {"3": 0.306, "12": 0.3743}},
        "sklearn n_jobs=1": {"median_ms_by_size": {"3": 46.4688, "12": 47.3772}}}}})
    assert _rows(text, "`library (FlatForest)`") == [
        ["`library (FlatForest)`", "0.306", "0.374", "0.374", "yes"]]
    assert _rows(text, "`sklearn n_jobs=1`")[0][-1] == "no"
    # a file without the verdict: the per-size "decision: ..." timings
    old = speed.controller_section({"sizes": {"6": {"timings": {
        "decision: valid_actions + choose [library (FlatForest)]": {"median_ms": 2.5},
        "state_features": {"median_ms": 0.04}}}}})
    assert _rows(old, "`library (FlatForest)`") == [
        ["`library (FlatForest)`", "2.500", "2.500", "no"]]


def test_generator_and_llama_build_tables_give_tokens_per_second():
    gen = speed.generators_section({"results": [
        {"backend": "llama.cpp", "model": "m", "prompt_tokens": 440, "prompt_tok_s": 23.56,
         "decode_tok_s": 8.78, "load_s": 2.03}],
        "skipped": [{"backend": "transformers", "model": "big", "reason": "RAM"}]})
    assert _rows(gen, "llama.cpp") == [["llama.cpp", "`m`", "440", "23.6", "8.8", "2.0"]]
    assert "skipped transformers `big`: RAM" in gen
    builds = speed.llama_builds_section({"builds": {
        "portable": {"results": {"m": {"prompt_tok_s": 41.6, "decode_tok_s": 16.5}}},
        "native": {"runs": False, "error": "illegal instruction"}}})
    assert "| model | portable | native |" in builds
    assert _rows(builds, "`m`") == [["`m`", "41.6 / 16.5", "- / -"]]
    assert "`native` did not run: illegal instruction" in builds
    agree = speed.llama_builds_section({"builds": {}, "agreement": {"m": {
        "reference": "portable", "prompts": 12, "avx512": {"identical": 11},
        "other": {"error": "exit 1"}}}})
    assert "- `m`, `avx512`: 11 of 12 greedy replies identical to `portable`'s" in agree
    assert "- `m`, `other`: not compared: exit 1" in agree


@pytest.mark.parametrize("render", list(speed.BENCH_RENDERERS.values()))
@pytest.mark.parametrize("d", [
    {}, {"methods": {"x": {}}, "micro": {"kinds": {"k": {}}, "savings": {}}},
    {"indexes": [{}, "not a row"], "runs": [{}], "summary": {"faster": "2x1"}},
    {"verdict": {"by_predictor": {"p": {}}}, "sizes": {"3": {}}, "builds": {"b": {}},
     "results": [{}], "settings": {}, "machine": {"loadavg_start": "busy"}}])
def test_every_renderer_survives_files_with_missing_keys(render, d):
    text = render(d)
    assert text.startswith("### ") and "`benchmarks/" in text.splitlines()[0]


def test_speed_section_notes_unreadable_missing_and_unknown_files(tmp_path):
    (tmp_path / "index.json").write_text('{"indexes": [')  # cut short while being written
    (tmp_path / "other.json").write_text("{}")
    text = speed.speed_section(tmp_path)
    assert text.startswith("## Speed\n")
    assert "`benchmarks/index.json`: unreadable" in text
    assert "parallel.json`)\n\nNot measured yet" in text
    assert "- `benchmarks/other.json` (see the file" in text
    assert "controller.json" not in text  # absent files other than parallel.json: omitted


def test_speed_section_renders_the_committed_benchmark_files():
    bench = RESULTS / "benchmarks"
    present = [n for n in speed.BENCH_RENDERERS if (bench / n).exists()]
    assert present, "no benchmark file under results/benchmarks"
    text = speed.speed_section(bench)
    assert "not rendered" not in text and "unreadable" not in text
    for name in present:
        assert f"(`benchmarks/{name}`)" in text
        d = json.loads((bench / name).read_text())
        if d.get("date"):
            assert d["date"] in text
    if "prefix_reuse.json" in present:
        d = json.loads((bench / "prefix_reuse.json").read_text())
        for m in d.get("methods", {}):
            (row,) = _rows(text, f"`{m}`")
            assert row[11] in ("met", "not met")
    if "index.json" in present:
        d = json.loads((bench / "index.json").read_text())
        for r in d["indexes"]:
            assert len(_rows(text, f"`{r['factory']}`")) == 1


def test_compression_report_refuses_to_reuse_numbers_of_another_split_or_selector():
    split = {"train_questions": 674, "fit": 400, "dev": 100, "measure": 174,
             "eval_split_untouched": 150}
    meta = {"train_ids": ["a", "b"], "n_questions": 2, "n_sentences": 50, "n_positive": 3}
    prev = {"split": dict(split), "selector": {"n_questions": 2, "n_sentences": 50,
                                              "n_positive": 3}}
    assert selector_cli.reuse_problem(prev, split, meta, ["a", "b"]) is None
    assert "fit part" in selector_cli.reuse_problem(prev, split, meta, ["a", "c"])
    old_split = {**split, "train_questions": 724, "measure": 224, "eval_split_untouched": 100}
    assert "another split" in selector_cli.reuse_problem({**prev, "split": old_split}, split, meta,
                                               ["a", "b"])
    other = {**prev, "selector": {**prev["selector"], "n_sentences": 49}}
    assert "n_sentences" in selector_cli.reuse_problem(other, split, meta, ["a", "b"])


def test_compression_train_limit_keeps_later_training_questions_unread():
    train, fit, dev, measure = selector_cli.split_parts(list(range(50)), 20, 5, train_limit=33)
    assert sorted(train) == list(range(33)) and sorted(fit + dev + measure) == list(range(33))
    assert len(fit) == 20 and len(dev) == 5 and not set(fit) & set(dev)
    # without a limit the whole split is cut, as before the option existed
    assert sorted(selector_cli.split_parts(list(range(50)), 20, 5)[0]) == list(range(50))
    with pytest.raises(SystemExit, match="taken number 33"):
        selector_cli.split_parts(list(range(50)), 30, 3, train_limit=33)


def test_headline_reads_a_transferred_policy_against_its_readers_baselines(tmp_path,
                                                                          monkeypatch):
    from dynakrag_lab.report.results import load_summaries
    monkeypatch.setattr(run_tables, "RESULTS", tmp_path)
    exp = tmp_path / "experiments" / "hotpotqa"
    for gen, run, f1, n in (("big", "fixed_k3", 0.25, 12), ("big", "fixed_k6", 0.5, 12),
                            ("small", "dynakrag", 0.0, 12), ("small", "fixed_k3", 0.0, 12),
                            ("big-policy-small", "dynakrag", 1.0, 8)):
        _run(exp / gen / run, [_row(f"q{i}", f1) for i in range(n)], {"n": n, "f1": f1})
    text = run_tables.headline_section(load_summaries(tmp_path / "experiments"))
    row = next(ln for ln in text.splitlines() if ln.startswith("| hotpotqa | big-policy-small |"))
    # paired on the 8 common questions with the reader's best baseline, not with the other
    # folder's or the policy generator's runs, and never "not run yet: baselines"
    assert "| 8 | `big/fixed_k6` |" in row and "| 1.000 / 0.500 | +0.500" in row
    assert " | better (Holm p " in row
    # the reader's own folder has no dynakrag: said so in its own row
    assert "| hotpotqa | big | `dynakrag` | 0 |" in text


def test_a_transfer_rows_best_baseline_is_the_highest_f1_of_all_baselines_uniform_included(
        tmp_path, monkeypatch):
    from dynakrag_lab.report.names import BASELINES
    from dynakrag_lab.report.results import load_summaries
    monkeypatch.setattr(run_tables, "RESULTS", tmp_path)
    exp = tmp_path / "experiments" / "hotpotqa"
    f1 = {"fixed_k3": 0.25, "fixed_k6": 0.375, "ircot": 0.5, "self_ask": 0.125,
          "uniform": 0.75}
    assert set(f1) == set(BASELINES)  # every baseline a reader's own headline considers
    for run, score in {**f1, "dynakrag": 0.0}.items():
        _run(exp / "big" / run, [_row(f"q{i}", score) for i in range(12)], {"n": 12, "f1": score})
    _run(exp / "big-policy-small" / "dynakrag", [_row(f"q{i}", 1.0) for i in range(12)],
         {"n": 12, "f1": 1.0})
    lines = run_tables.headline_section(load_summaries(tmp_path / "experiments")).splitlines()
    own = next(ln for ln in lines if ln.startswith("| hotpotqa | big | `dynakrag` |"))
    moved = next(ln for ln in lines if ln.startswith("| hotpotqa | big-policy-small |"))
    assert "| `uniform` | 0.000 / 0.750 |" in own
    assert "| 12 | `big/uniform` | 1.000 / 0.750 | +0.250" in moved  # not big/ircot (0.500)


def test_headline_reads_f1_in_four_words_with_holm_over_the_datasets_of_one_generator_and_run(
        tmp_path, monkeypatch):
    from dynakrag_lab.report.results import load_summaries
    monkeypatch.setattr(run_tables, "RESULTS", tmp_path)
    exp = tmp_path / "experiments"
    # one question in three gained on each dataset of g and of h: p about .2 each
    for ds, gen in (("hotpotqa", "g"), ("musique", "g"), ("hotpotqa", "h")):
        _run(exp / ds / gen / "dynakrag", [_row(f"q{i}", float(i % 3 == 0)) for i in range(9)],
             {"n": 9, "f1": 1 / 3})
        _run(exp / ds / gen / "fixed_k3", [_row(f"q{i}", 0.0) for i in range(9)],
             {"n": 9, "f1": 0.0})
    text = run_tables.headline_section(load_summaries(exp))
    assert "Exploratory" in text and "equivalent within ±.03" in text  # the words, stated

    def read(prefix: str) -> tuple[float, float, str]:
        cells = next(ln for ln in text.splitlines() if ln.startswith(prefix)).split(" | ")
        raw = float(cells[6].rsplit(", ", 1)[1])
        word, holm_p = cells[-1].split(" (Holm p ")
        return raw, float(holm_p.split(",")[0]), word

    for prefix, family in (("| hotpotqa | g |", 2), ("| musique | g |", 2),
                           ("| hotpotqa | h |", 1)):
        raw, holm_p, word = read(prefix)
        assert word == "inconclusive at this n"
        assert holm_p == pytest.approx(min(1.0, family * raw), abs=0.011)


def test_headline_says_why_a_transferred_run_is_not_paired_yet(tmp_path, monkeypatch):
    from dynakrag_lab.report.results import load_summaries
    monkeypatch.setattr(run_tables, "RESULTS", tmp_path)
    exp = tmp_path / "experiments" / "hotpotqa"
    _run(exp / "big-policy-small" / "dynakrag", [_row("q0", 1.0)], {"n": 1, "f1": 1.0})
    text = run_tables.headline_section(load_summaries(tmp_path / "experiments"))
    row = next(ln for ln in text.splitlines() if ln.startswith("| hotpotqa | big-policy-small |"))
    assert "| 0 |" in row and "not paired: not run yet" in row


# -- transfer folders <A>-policy-<P>: only controller runs, baselines in A's own folder -------
def _section(text: str, title: str) -> str:
    """The text of the README section headed ``title`` up to the next heading of its level."""
    start = text.index(title)
    end = text.find("\n" + title.split(" ", 1)[0] + " ", start + len(title))
    return text[start:] if end == -1 else text[start:end]


def test_transfer_folder_section_points_to_the_answer_generators_baselines(tmp_path):
    exp = tmp_path / "experiments" / "hotpotqa"
    for run in ("fixed_k3", "fixed_k6"):
        _status_run(exp / "big" / run, ["q0", "q1"], 0.5)
    _status_run(exp / "big-policy-small" / "dynakrag", ["q0", "q1"], 1.0)
    assert readme_main.main(["--results", str(tmp_path)]) == 0
    sec = _section((tmp_path / "README.md").read_text(),
                   "## hotpotqa, generator `big-policy-small`")
    assert "Baselines: see `big`" in sec
    # the baselines are not "not run yet" here: they are in big's folder, and the transferred
    # controller run is there, so nothing that belongs in this folder is missing
    assert "Not in the table" not in sec and "not run yet" not in sec


def test_transfer_folder_lists_as_missing_only_the_transferred_controller_run(tmp_path):
    exp = tmp_path / "experiments" / "hotpotqa"
    _status_run(exp / "big-policy-small" / "dynakrag-gain", ["q0"], 1.0)  # no dynakrag yet
    assert readme_main.main(["--results", str(tmp_path)]) == 0
    sec = _section((tmp_path / "README.md").read_text(),
                   "## hotpotqa, generator `big-policy-small`")
    assert "Not in the table: `dynakrag` (not run yet).\n" in sec
    for baseline in ("fixed_k3", "fixed_k6", "ircot", "uniform", "oracle", "dynakrag-cap1"):
        assert f"`{baseline}` (not run yet)" not in sec
    # big has no run at all: the line says so instead of pointing to a section that is not there
    assert "Baselines: none run yet with `big`" in sec


def _transfer_breakdown(tmp_path, runs: dict) -> str:
    """breakdown_section over hotpotqa runs {"<generator>/<run>": (F1, questions)}: bridge
    questions q0.. with that F1 (EM 1 where F1 is 1, support recall .5)."""
    from dynakrag_lab.report.results import load_summaries
    exp = tmp_path / "experiments"
    for key, (f1, n) in runs.items():
        rows = [_row(f"q{i}", f1, type="bridge") for i in range(n)]
        _run(exp / "hotpotqa" / key, rows, {"n": n, "f1": f1})
    return run_tables.breakdown_section(load_summaries(exp), tmp_path)


def test_breakdown_pairs_a_transferred_run_with_the_answer_generators_best_baseline(tmp_path):
    text = _transfer_breakdown(tmp_path, {
        "big/fixed_k3": (0.25, 12), "big/fixed_k6": (0.5, 12), "small/dynakrag": (0.0, 12),
        "big-policy-small/dynakrag": (1.0, 12)})
    sec = _section(text, "### hotpotqa, generator `big-policy-small`")
    assert "No dynakrag run yet" not in sec
    assert "`big/fixed_k6`" in sec  # the baseline it is paired with is named
    lines = sec.splitlines()
    row = next(ln for ln in lines if ln.startswith("| bridge | big/fixed_k6 |"))
    # the headline's best baseline (highest F1), paired per question across the two folders
    assert "| 12 | 0.000 | 0.500 | 0.500 | 12 | +0.500 | [+0.500, +0.500] |" in row
    assert row.endswith("| better |")
    assert any(ln.startswith("| bridge | dynakrag | 12 | 1.000 | 1.000 |") for ln in lines)
    assert not any(ln.startswith("| bridge | big/fixed_k3 |") for ln in lines)


def test_breakdown_says_why_a_transferred_run_has_no_paired_difference(tmp_path):
    text = _transfer_breakdown(tmp_path, {"big-policy-small/dynakrag": (1.0, 12)})
    sec = _section(text, "### hotpotqa, generator `big-policy-small`")
    assert "No dynakrag run yet" not in sec  # there is one
    assert "baselines of `big`" in sec and "not run yet" in sec
    assert any(ln.startswith("| bridge | dynakrag | 12 |") for ln in sec.splitlines())


def test_breakdown_of_a_folder_holding_only_dynakrag_does_not_call_it_missing(tmp_path):
    text = _transfer_breakdown(tmp_path, {"g/dynakrag": (1.0, 12)})
    sec = _section(text, "### hotpotqa, generator `g`")
    assert "No dynakrag run yet" not in sec
    assert "No other run" in sec


def test_control_diagnosis_section_words_each_reports_numbers_per_file(tmp_path):
    assert control_diagnosis_section(tmp_path) is None  # nothing measured: no section
    d = tmp_path / "diagnostics"
    d.mkdir()
    key = "hotpotqa/qwen2.5-coder-1.5b"
    for name, cmd in (("control-diagnosis", "python a"), ("control-diagnosis-horizon", "python b"),
                      ("control-diagnosis-stop", "python c")):
        real = json.loads((RESULTS / "diagnostics" / f"{name}.json").read_text())["results"][key]
        real = {**real, "verdict": "stored prose", **{k: {**v, "verdict": "stored prose"}
                                                      for k, v in real.items()
                                                      if k in ("horizon", "stop_targets")}}
        results = {key: real, **({"musique/g": {"stop_targets": {"skipped": "too few"}}}
                                 if name.endswith("stop") else {})}
        (d / f"{name}.json").write_text(json.dumps({"command": cmd, "results": results}))
    text = control_diagnosis_section(tmp_path)
    assert "`diagnostics/control-diagnosis.json` (command: `python a`)" in text
    assert "stored prose" not in text  # worded again from the numbers, never the stored text
    assert f"- **{key}**: Signal lost in: labels (sufficiency_check's level label is picked" in text
    assert "Choice" not in text  # only the last sentence of the main diagnosis
    assert "[-0.016, +0.032]): inconclusive at this n against uniform offline" in text
    assert "[-0.000, +0.042] over random: inconclusive at this n." in text
    assert "- **musique/g**: too few" in text


def test_check_set_section_pairs_dynakrag_on_the_never_read_questions(tmp_path):
    assert run_tables.check_set_section(tmp_path) is None  # no check-set run: no section
    chk = tmp_path / "diagnostics" / "check-set" / "hotpotqa" / "g"
    _status_run(chk / "dynakrag", ["c0", "c1", "c2", "c3"], 1.0)
    _status_run(chk / "uniform", ["c0", "c1", "c2"], 0.5, n_expected=4)
    assert readme_main.main(["--results", str(tmp_path)]) == 0
    sec = _section((tmp_path / "README.md").read_text(),
                   "## Check set: questions never read before")
    assert "### hotpotqa, generator `g`" in sec
    pair = next(ln for ln in sec.splitlines() if ln.startswith("| uniform | partial: 3 of 4 |"
                                                               " f1 |"))
    assert "| f1 | 3 |" in pair  # paired on the questions both answered
    assert "- `dynakrag`: `" in sec and "`dynakrag` minus each run" in sec
    # and per question type, paired with the same controller run
    assert "Per question type (`diff`: `dynakrag` minus the run" in sec
    assert any(ln.startswith("| ") and "| uniform | 3 |" in ln for ln in sec.splitlines())
    # without dynakrag (its compressor cannot run there), its no-compression variant pairs
    (chk / "dynakrag").rename(chk / "dynakrag-no_compression")
    assert readme_main.main(["--results", str(tmp_path)]) == 0
    sec = _section((tmp_path / "README.md").read_text(),
                   "## Check set: questions never read before")
    assert "`dynakrag-no_compression` minus each run" in sec
    assert any(ln.startswith("| uniform | partial: 3 of 4 | f1 | 3 |") for ln in sec.splitlines())
