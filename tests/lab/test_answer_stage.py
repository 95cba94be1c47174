"""The answer-stage rule (full documents up to K, snippets above) measured from a run and its
no-compression twin: which row answers, the curve, the choice of K, and the script's report."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynakrag_lab.studies.answer_stage import choose_full_up_to, rule_curve, rule_rows, same_walk

from dynakrag_lab.studies.answer_stage import __main__ as stage_cli
from dynakrag_lab.studies.answer_stage import answer_stage_section


def row(qid: str, n_docs: int, f1: float, tokens: int, docs: tuple[str, ...] | None = None
        ) -> dict:
    docs = docs if docs is not None else tuple(f"{qid}-d{i}" for i in range(n_docs))
    return {"id": qid, "question": "?", "prediction": "x", "em": float(f1 == 1.0), "f1": f1,
            "support_recall": 1.0, "n_docs": n_docs, "tokens": tokens,
            "docs": [{"id": d} for d in docs]}


# Small states: the documents answer better; large states: the snippets do.
SNIPPETS = [row("a", 3, 0.0, 500), row("b", 4, 0.5, 600), row("c", 9, 1.0, 700),
            row("d", 12, 1.0, 800)]
FULL = [row("a", 3, 1.0, 900), row("b", 4, 1.0, 1000), row("c", 9, 0.0, 2000),
        row("d", 12, 0.5, 2500)]


def test_rule_answers_from_documents_up_to_k_and_from_snippets_above():
    pairs, differing = same_walk(SNIPPETS, FULL)
    assert differing == 0
    rows = rule_rows(pairs, 4)
    assert [r["answer_from"] for r in rows] == ["documents", "documents", "snippets", "snippets"]
    assert [r["f1"] for r in rows] == [1.0, 1.0, 1.0, 1.0]
    assert [r["tokens"] for r in rows] == [900, 1000, 700, 800]


def test_questions_walked_differently_are_left_out_and_counted():
    full = FULL[:3] + [row("d", 12, 0.5, 2500, docs=("other",) * 12)]
    pairs, differing = same_walk(SNIPPETS, full)
    assert differing == 1 and [s["id"] for s, _ in pairs] == ["a", "b", "c"]


def test_curve_ends_are_the_two_answer_modes_and_k_is_the_best_f1():
    pairs, _ = same_walk(SNIPPETS, FULL)
    curve = rule_curve(pairs)
    first, last = curve.iloc[0], curve.iloc[-1]
    assert first.k == 0 and first.share_full == 0 and first.vs_snippets == 0
    assert first.f1 == pytest.approx(0.625)
    assert last.k == 12 and last.share_full == 1 and last.vs_full == 0
    assert last.f1 == pytest.approx(0.625)
    k = choose_full_up_to(curve)
    assert 4 <= k <= 8  # every K from 4 to 8 gives F1 1.0; ties go to fewer tokens
    assert curve.set_index("k").loc[k, "f1"] == pytest.approx(1.0)
    assert k == 4


def test_choose_refuses_an_empty_curve():
    with pytest.raises(ValueError, match="no paired questions"):
        choose_full_up_to(rule_curve([]))


def write(root: Path, run: str, rows: list[dict]) -> None:
    d = root / "hotpotqa" / "g" / run
    d.mkdir(parents=True)
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_script_chooses_on_one_root_and_reads_the_other_against_every_run(tmp_path, capsys):
    train, check = tmp_path / "train", tmp_path / "check"
    write(train, "dynakrag", SNIPPETS)
    write(train, "dynakrag-no_compression", FULL)
    write(check, "dynakrag", SNIPPETS)
    write(check, "dynakrag-no_compression", FULL)
    write(check, "fixed_k3", [row(q, 3, 0.5, 400) for q in "abcd"])
    out = tmp_path / "report.json"
    assert stage_cli.main(["--dataset", "hotpotqa", "--reader", "g", "--choose-on", str(train),
                          "--check", str(check), "--out", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["choose_on"]["k"] == 4 and rep["choose_on"]["n"] == 4
    (chk,) = rep["checks"]
    assert chk["run"] == "dynakrag" and chk["share_full"] == 0.5 and chk["f1"] == 1.0
    against = {a["other"]: a for a in chk["against"]}
    assert set(against) == {"dynakrag (snippets)", "dynakrag (documents)", "fixed_k3"}
    assert against["fixed_k3"]["f1"]["diff"] == pytest.approx(0.5)
    assert against["fixed_k3"]["status"] == "completeness not recorded"  # its folder: no summary
    assert against["dynakrag (snippets)"]["status"] == ""
    assert against["fixed_k3"]["tokens"]["diff"] == pytest.approx(850 - 400)
    md = out.with_suffix(".md").read_text()
    assert "| 4 **(chosen)** |" in md and "fixed_k3" in md
    assert "python -m dynakrag_lab.studies.answer_stage" in rep["command"]


def test_script_names_the_missing_twin(tmp_path):
    write(tmp_path, "dynakrag", SNIPPETS)
    with pytest.raises(SystemExit, match="dynakrag-no_compression"):
        stage_cli.main(["--reader", "g", "--choose-on", str(tmp_path)])


def test_results_readme_shows_every_answer_stage_report(tmp_path):
    train = tmp_path / "diagnostics" / "answer-stage"
    write(train, "dynakrag", SNIPPETS)
    write(train, "dynakrag-no_compression", FULL)
    assert answer_stage_section(tmp_path) is None  # no report yet: no section
    stage_cli.main(["--reader", "g", "--choose-on", str(train)])
    text = answer_stage_section(tmp_path)
    assert text.startswith("## Answer stage")
    assert "### Answer stage" in text and "#### K chosen" in text
    assert "| 4 **(chosen)** |" in text


def test_read_once_rows_draw_as_a_forest_and_the_curve_marks_the_chosen_k(tmp_path):
    from dynakrag_lab.studies.answer_stage import curve_figure, read_once_markdown, read_once_pairs
    from dynakrag_lab.report.plots import paired_forest_figure

    train, check = tmp_path / "train", tmp_path / "experiments"
    for root in (train, check):
        write(root, "dynakrag", SNIPPETS)
        write(root, "dynakrag-no_compression", FULL)
    out = tmp_path / "r.json"
    stage_cli.main(["--reader", "g", "--choose-on", str(train), "--check", str(check),
                    "--out", str(out)])
    rep = json.loads(out.read_text())
    rows = read_once_pairs(rep)
    assert set(rows.label) == {"eval split: dynakrag rule - dynakrag (snippets)",
                               "eval split: dynakrag rule - dynakrag (documents)"}
    assert set(rows.metric) == {"f1", "tokens"} and len(rows) == 4
    fig = paired_forest_figure(rows, label="label", metrics={"f1": "F1", "tokens": "tokens"})
    assert len(fig.axes) == 2
    curve = curve_figure(rep)
    ax = curve.axes[0]
    (chosen,) = [a for a in ax.get_lines() if a.get_gid() == "chosen"]
    assert chosen.get_xdata()[0] == rep["choose_on"]["k"] == 4
    text = read_once_markdown(rep)
    assert text.startswith("* eval split, `dynakrag` with K = 4 (n = 4, 50% from the documents)")
    assert "`dynakrag (snippets)` +0.375" in text
    assert read_once_markdown({**rep, "checks": []}) == "* Not read anywhere yet."
