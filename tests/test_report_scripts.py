"""The report scripts read what runs recorded: diagnostic_table.py finds a generator's own and
policy-transfer run folders, pairs two generators' rows by question, and carries each run's
cost; results_readme.py's rates leave out rows replayed from the LLM cache."""
import json

import pytest

from helpers import load_script

dt = load_script("diagnostic_table")
rr = load_script("results_readme")


def _run(folder, rows, summary=None):
    folder.mkdir(parents=True)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))


def _row(qid, f1, sr=0.5, seconds=5.0, **kw):
    return {"id": qid, "method": "fixed_k", "f1": f1, "em": float(f1 == 1.0),
            "support_recall": sr, "seconds": seconds, "docs": [], "trace": [], **kw}


def test_run_folders_are_the_generators_own_and_its_policy_transfer_folders(tmp_path):
    for name in ("gen-a", "gen-a-policy-gen-b", "gen-ab", "gen-b"):
        (tmp_path / "ds" / name).mkdir(parents=True)
    assert [p.name for p in dt.run_folders("ds", "gen-a", tmp_path)] == \
        ["gen-a", "gen-a-policy-gen-b"]


def test_generator_pairs_pair_rows_by_question_and_subtract(tmp_path):
    _run(tmp_path / "ds" / "big" / "fixed_k3",
         [_row("q1", 1.0), _row("q2", 0.5), _row("q3", 0.0), {"id": "q4", "error": "x"}])
    _run(tmp_path / "ds" / "small" / "fixed_k3",
         [_row("q2", 0.0), _row("q1", 0.5), _row("q4", 1.0)])
    rows = dt.generator_pairs("ds", "big", "small", tmp_path)
    f1 = next(r for r in rows if r["metric"] == "f1")
    # q1 and q2 are paired; q3 has no partner, q4 failed for the big generator
    assert f1["n"] == 2 and f1["diff"] == pytest.approx(0.5) and f1["big"] == 0.75


def test_runs_part_carries_cost_and_the_policy_generator(tmp_path, monkeypatch):
    monkeypatch.setattr(dt, "ROOT", tmp_path)
    summary = {"n": 2, "f1": 0.4, "support_recall": 0.5, "tokens_mean": 400.0,
               "llm_calls_mean": 1.0, "retrieval_calls_mean": 1.0, "seconds_mean": 6.0,
               "run": {"complete": False}}
    _run(tmp_path / "ds" / "g-policy-h" / "dynakrag", [_row("q1", 0.4)], summary)
    out = dt.runs_part("ds", "g", tmp_path)
    assert out["cost"]["dynakrag"]["complete"] is False
    assert out["cost"]["dynakrag"]["policy_generator"] == "h"
    assert out["dynakrag"]["policy_generator"] == "h" and out["dynakrag"]["questions"] == 1


def test_seconds_per_question_leaves_out_replayed_and_failed_rows(tmp_path):
    _run(tmp_path / "ircot", [_row("q1", 1.0, seconds=40.0), _row("q2", 0.0, seconds=20.0),
                              _row("q3", 0.0, seconds=0.05),
                              {"id": "q4", "error": "boom", "seconds": 99.0}])
    assert rr.seconds_per_question(tmp_path) == {"ircot": (30.0, 2)}
    assert rr.hours_recorded(tmp_path) == pytest.approx(60.05 / 3600)


def test_breakdown_section_one_table_per_dataset_with_flags(tmp_path, monkeypatch):
    from dynakrag_lite.results import load_summaries
    monkeypatch.setattr(rr, "ROOT", tmp_path)
    exp = tmp_path / "experiments"
    summary = {"n": 12, "f1": 0.5}
    rows = [_row(f"q{i}", 1.0, type="bridge") for i in range(12)] + \
        [_row("c1", 0.0, type="comparison"), _row("u1", 1.0)]
    _run(exp / "hotpotqa" / "g" / "dynakrag", rows, summary)
    worse = [dict(r, f1=0.5, em=0.0) if r.get("type") == "bridge" else r for r in rows]
    _run(exp / "hotpotqa" / "g" / "fixed_k3", worse, summary)
    _run(exp / "musique" / "g" / "fixed_k3",
         [_row("m1", 0.0, type="2hop"), _row("m2", 1.0, type="4hop3")], summary)
    text = rr.breakdown_section(load_summaries(exp))
    assert text.startswith("## Breakdowns per question type and hop count")
    assert "### hotpotqa, generator `g`" in text and "### musique, generator `g`" in text
    lines = text.splitlines()
    bridge = next(ln for ln in lines if ln.startswith("| bridge | fixed_k3 |"))
    assert "| 12 | 0.000 | 0.500 |" in bridge and "| +0.500 | [+0.500, +0.500] |" in bridge
    assert bridge.endswith("| A better |")
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
    from dynakrag_lite.results import load_summaries
    monkeypatch.setattr(rr, "ROOT", tmp_path)
    exp = tmp_path / "experiments"
    for key, (f1, n) in runs.items():
        ds, run = key.split("/") if "/" in key else ("hotpotqa", key)
        _run(exp / ds / "g" / run, [_row(f"q{i}", f1) for i in range(n)], {"n": n, "f1": f1})
    return rr.headline_section(load_summaries(exp))


def test_headline_pairs_dynakrag_with_the_baseline_of_highest_f1(tmp_path, monkeypatch):
    # the oracle and ablations are never "the best baseline", however high their F1
    text = _headline(tmp_path, monkeypatch, {
        "dynakrag": (1.0, 12), "fixed_k3": (0.5, 12), "ircot": (0.75, 12),
        "oracle": (1.0, 12), "dynakrag-cap1": (1.0, 12), "musique/fixed_k3": (0.0, 1)})
    row = next(ln for ln in text.splitlines() if ln.startswith("| hotpotqa |"))
    assert "| 12 | `ircot` | 1.000 / 0.750 | +0.250 [+0.250, +0.250]" in row
    assert row.endswith("| dynakrag better |")
    mus = next(ln for ln in text.splitlines() if ln.startswith("| musique |"))
    assert "not run yet: dynakrag" in mus


def test_headline_ignores_a_baseline_run_on_fewer_questions(tmp_path, monkeypatch):
    text = _headline(tmp_path, monkeypatch, {"dynakrag": (0.5, 12), "fixed_k3": (0.25, 12),
                                              "uniform": (1.0, 3)})
    row = next(ln for ln in text.splitlines()
               if ln.startswith("| hotpotqa |"))
    assert "| 12 | `fixed_k3` |" in row
