"""The diagnosis appendix (book/98_appendix_diagnosis.ipynb) and its readings
(dynakrag_lab.report.appendix): each reading on small synthetic tables, the committed runs'
reading of learned choice against chance, and the notebook's shape (no glue, computed prose)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from dynakrag_lab.report import appendix as ap
from dynakrag_lab.report.comparison import A_BETTER, A_WORSE, NO_DIFFERENCE

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "book" / "98_appendix_diagnosis.ipynb"
RESULTS = REPO / "results" / "experiments"


# -- multiple comparisons -----------------------------------------------------------------------
def test_holm_adjusts_step_down_and_keeps_the_input_order():
    assert ap.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert ap.holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert ap.holm([0.04, 0.01, 0.03]) == pytest.approx([0.06, 0.03, 0.06])  # monotone
    assert ap.holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert ap.holm([]) == []


def test_the_oracle_is_called_no_upper_bound_where_the_controller_exceeds_it():
    head = pd.DataFrame([
        {"dataset": "hotpotqa", "n": 150, "upper": 0.049, "upper_lo": 0.010, "upper_hi": 0.092,
         "run": 0.012, "run_lo": -0.032, "run_hi": 0.055, "half_width": 0.044},
        {"dataset": "2wikimultihopqa", "n": 150, "upper": 0.039, "upper_lo": -0.008,
         "upper_hi": 0.087, "run": 0.052, "run_lo": 0.005, "run_hi": 0.102, "half_width": 0.049}])
    text = ap.oracle_markdown(head)
    assert "leaves 0 on 1 of 2 datasets" in text
    assert "on 2Wiki the controller's margin is larger than the oracle's" in text
    assert "not an upper bound" in text
    assert "bounds" not in text


def test_stop_profiles_read_per_reader():
    prof = pd.DataFrame([
        {"dataset": "hotpotqa", "reader": "m-0.5b", "n": 150, "after_one_retrieval": 135,
         "at_step_cap": 4, "same_docs_as_fixed_k3": 135, "retrieval_calls": 1.11, "docs": 3.3},
        {"dataset": "musique", "reader": "m-0.5b", "n": 100, "after_one_retrieval": 55,
         "at_step_cap": 0, "same_docs_as_fixed_k3": 54, "retrieval_calls": 1.5, "docs": 4.0},
        {"dataset": "hotpotqa", "reader": "m-1.5b", "n": 150, "after_one_retrieval": 0,
         "at_step_cap": 150, "same_docs_as_fixed_k3": 0, "retrieval_calls": 2.2, "docs": 6.6}])
    view = ap.stop_profile_view(prof)
    assert list(view.reader) == ["0.5b", "0.5b", "1.5b"]
    assert list(view.dataset) == ["HotpotQA", "MuSiQue", "HotpotQA"]
    text = ap.stop_markdown(prof)
    assert "with `m-0.5b` the controller read exactly Fixed-K(3)'s documents on 189 of 250" in text
    assert "ran to the step cap on 150 (100%)" in text


def test_best_stop_target_per_dataset():
    t = pd.DataFrame([
        {"dataset": "hotpotqa", "target": "sr", "training": "own", "over random": 0.004,
         "stop early": 0.79, "F1": 0.379, "token ratio": 0.55, "minus random": 0.031,
         "random lo": -0.009, "random hi": 0.075},
        {"dataset": "hotpotqa", "target": "sr", "training": "pooled", "over random": 0.013,
         "stop early": 0.78, "F1": 0.36, "token ratio": 0.65, "minus random": 0.02,
         "random lo": 0.001, "random hi": 0.04}])
    best = ap.best_stop_targets(t)
    assert best.target.tolist() == ["sr/pooled"]
    assert best["minus random [95% CI]"].iloc[0] == "+0.020 [+0.001, +0.040]"
    report = {"results": {"hotpotqa/r": {"stop_targets": {
        "targets": {}, "positive_rate": {"f1": 0.06}}}}}
    text = ap.stop_targets_markdown(t, report, "r")
    assert "at 6% to 6% of the decision prefixes" in text
    assert ("better than a random stop at equal tokens (interval above 0) on 1 of 1 datasets "
            "(HotpotQA)") in text


def test_diagnosis_findings_count_rows():
    t = pd.DataFrame([{"probe chosen": 0.75, "probe best": 0.0, "gain forest": 0.04,
                       "gain uniform": 0.06, "gain w/o probe": 0.09, "AUC f1": 0.51,
                       "AUC sr on F1": 0.69},
                      {"probe chosen": 0.61, "probe best": 0.0, "gain forest": 0.08,
                       "gain uniform": 0.07, "gain w/o probe": 0.05, "AUC f1": 0.7,
                       "AUC sr on F1": 0.6}])
    text = ap.diagnosis_findings(t)
    assert "at 61% to 75% of the held-out decisions" in text
    assert "less support than a uniform pick in 1 of 2 rows" in text
    assert "more support than uniform in 1 of 2 rows" in text
    assert "AUC of 0.51 to 0.70" in text and "worse than chance" not in text
    assert "never strictly the best action" in text and "no more than 0%" not in text
    t.loc[0, "AUC f1"], t.loc[1, "probe best"] = 0.25, 0.02
    text = ap.diagnosis_findings(t)
    assert "below it, on 1 of 2 rows, it is worse than chance" in text
    assert "at no more than 2% of them" in text


def _transfer(metric, other_gen, diff, lo, hi, v):
    return {"dataset": "hotpotqa", "generator": "s-policy-b", "answer_generator": "s",
            "policy_generator": "b", "comparison": "x", "other_generator": other_gen,
            "other_run": "dynakrag", "metric": metric, "n": 150, "transferred": 0.3,
            "other": 0.3, "diff": diff, "lo": lo, "hi": hi, "p_value": 0.5, "wins": 1,
            "losses": 1, "verdict": v, "transferred_status": "complete", "status": "complete"}


def test_transfer_readings_name_each_pair_and_the_reader_limit():
    pairs = pd.DataFrame([_transfer("f1", "b", -0.11, -0.19, -0.04, A_WORSE),
                          _transfer("f1", "s", 0.03, -0.01, 0.07, NO_DIFFERENCE),
                          _transfer("support_recall", "b", -0.01, -0.03, 0.02, NO_DIFFERENCE),
                          _transfer("support_recall", "s", 0.14, 0.10, 0.17, A_BETTER)])
    text = ap.transfer_markdown(pairs)
    assert text.startswith("* HotpotQA, the s reader with the b policy (n = 150)")
    assert "against its native reader (b/dynakrag) worse, -0.110 [-0.190, -0.040]" in text
    assert "against the reader's own policy (s/dynakrag) inconclusive at this n" in text
    limit = ap.reader_limit_markdown(pairs, "s", "b")
    assert limit.startswith("* HotpotQA: fits a reader limit")
    assert "F1 -0.110 (transferred run worse)" in limit and "nan" not in limit
    assert "No reverse transfer" in ap.reader_limit_markdown(pairs, "b", "s")
    assert "No transferred run" in ap.transfer_markdown(pairs.assign(n=0))


def test_answer_stage_reads_both_answer_modes_per_root():
    def diff(d, v=NO_DIFFERENCE):
        return {"diff": d, "lo": d - 0.03, "hi": d + 0.03, "verdict": v}
    report = {"checks": [{"root": "results/experiments", "run": "dynakrag", "n": 150,
                          "share_full": 0.81, "f1": 0.461,
                          "against": [{"other": "dynakrag (snippets)", "f1": diff(-0.004)},
                                      {"other": "dynakrag (documents)", "f1": diff(0.0)},
                                      {"other": "fixed_k3", "f1": diff(0.075, A_BETTER)}]}]}
    text = ap.answer_stage_markdown(report)
    assert text.startswith("* evaluation split, `dynakrag` (n = 150, 81% answered")
    assert "minus always snippets -0.004 [-0.034, +0.026] (inconclusive at this n)" in text
    assert "fixed_k3" not in text
    assert "not been read" in ap.answer_stage_markdown({"checks": []})


def test_probe_cost_and_next_commands():
    cm = SimpleNamespace(coef={"sufficiency_check": (613.0, 0.0)}, retrieval_tokens=164.9)
    assert ap.probe_cost(cm) == {"probe": 613.0, "retrieval": 164.9, "n_docs": 6}
    lines = ap.next_commands({"hotpotqa": {"n_eval": 150, "n_train": 300}},
                             ["dynakrag", "uniform"], "hf:x", {"hotpotqa": 250})
    assert lines[0] == 'READER="hf:x"'
    assert "--n-eval 150 --train-limit 250 --eval-limit 150 --runs dynakrag,uniform" in lines[1]
    assert any("--policy-generator" in ln for ln in lines)


# -- the committed runs -------------------------------------------------------------------------
# -- the notebook -------------------------------------------------------------------------------
def _cells():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    return nb["cells"]


def _src(c) -> str:
    return "".join(c["source"]) if isinstance(c["source"], list) else c["source"]


def test_the_appendix_has_no_glue_and_no_tracker_words():
    cells = _cells()
    text = "\n".join(_src(c) for c in cells)
    assert "{glue" not in text and "glue(" not in text
    assert not re.search(r"\bissue\s*\d", text, re.I)
    outputs = json.dumps([c.get("outputs", []) for c in cells])
    assert "{glue" not in outputs


def test_the_appendix_has_a_title_parameters_three_exercises_and_captioned_figures():
    cells = _cells()
    assert _src(cells[0]).startswith("# Appendix: diagnosing the learned controller")
    params = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(params) == 1 and "results_root: str" in _src(params[0])
    md = "\n".join(_src(c) for c in cells if c["cell_type"] == "markdown")
    assert md.index("## Other studies") < md.index("## Summary") < md.index("## Exercises")
    kinds = re.findall(r"Exercise 98\.\d \((predict|modify|extend)", md)
    assert kinds == ["predict", "modify", "extend"]
    figures = [c["metadata"]["mystnb"]["figure"] for c in cells
               if "mystnb" in c.get("metadata", {})]
    assert len(figures) >= 4 and all(f["caption"] and f["name"] for f in figures)
    assert "cheapest action" not in md.replace("not the cheapest action", "")


def _sections(md: str) -> list[tuple[str, str]]:
    parts = re.split(r"^## (.+)$", md, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def test_each_kept_section_opens_with_the_reading_it_supports():
    md = "\n".join(_src(c) for c in _cells() if c["cell_type"] == "markdown")
    kept = [(t, b) for t, b in _sections(md) if t not in ("Other studies", "Summary",
                                                          "Exercises")]
    assert len(kept) >= 5
    for title, body in kept:
        assert re.match(r"\s*\*Supports reading [123]\*", body), title


def test_the_appendix_states_results_in_the_four_words_only():
    cells = _cells()
    text = "\n".join(_src(c) for c in cells) + json.dumps([c.get("outputs", []) for c in cells])
    for banned in ("ties chance", "A better", "A worse", "no measurable difference",
                   "no more than 0%", " ties ", "matches"):
        assert banned not in text, banned
    md = "\n".join(_src(c) for c in cells if c["cell_type"] == "markdown")
    assert len(md.split()) <= 3000
    for path in re.findall(r"`(results/diagnostics/[\w.-]+\.md)`", md):
        assert (REPO / path).exists(), path


def test_no_figure_of_the_appendix_is_over_900_pixels_tall():
    import base64
    import io

    from PIL import Image
    heights = [Image.open(io.BytesIO(base64.b64decode(o["data"]["image/png"]))).size[1]
               for c in _cells() for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert heights and max(heights) <= 900, heights
