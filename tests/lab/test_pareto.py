"""The cost/quality figure's numbers (dynakrag_lab.report.pareto): which runs are points, their
kinds, intervals, and the operating point against the always-continue schedule."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dynakrag_lab.report.pareto import (OPERATING_POINT, SCHEDULES, pareto_figure, pareto_points,
                                        pareto_summary, records_json)


def write_run(root: Path, run: str, f1: list[float], tokens: float, stop_note: str = "") -> None:
    folder = root / "hotpotqa" / "g" / run
    folder.mkdir(parents=True)
    trace = [{"action": "retrieve_more"}, {"action": "stop_answer",
                                            "note": stop_note or "max_steps"}]
    rows = [{"id": f"q{i}", "question": "?", "prediction": "x", "em": 0.0, "f1": v,
             "support_recall": 0.5, "all_support": 0.0, "n_docs": 3, "tokens": tokens,
             "llm_calls": 1, "retrieval_calls": 1, "seconds": 1.0, "trace": trace}
            for i, v in enumerate(f1)]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    write_run(tmp_path, "fixed_k3", [0.2, 0.4, 0.6, 0.8], 400)
    for k, f in zip((1, 2, 3, 4), (0.3, 0.45, 0.5, 0.5)):
        write_run(tmp_path, f"dynakrag-cont-stop{k}", [f] * 4, 400 * k)
    write_run(tmp_path, OPERATING_POINT, [0.5, 0.5, 0.5, 0.4], 1000, stop_note="policy")
    return tmp_path


def test_points_know_baselines_schedules_and_the_operating_point(tree: Path):
    pts = pareto_points("hotpotqa", "g", tree).set_index("run")
    assert set(pts.index) == {"fixed_k3", OPERATING_POINT, *SCHEDULES}
    assert pts.loc["fixed_k3", "kind"] == "baseline"
    assert pts.loc[SCHEDULES[2], "kind"] == "schedule" and pts.loc[SCHEDULES[2], "k"] == 3
    assert pts.loc[OPERATING_POINT, "kind"] == "operating point"
    base = pts.loc["fixed_k3"]
    assert base["f1"] == pytest.approx(0.5) and base["f1_lo"] <= base["f1"] <= base["f1_hi"]
    assert base["f1_hi"] - base["f1_lo"] > 0.1  # a real interval from four spread values
    # the operating point stopped by choice on every question; the schedules at a cap
    assert pts.loc[OPERATING_POINT, "early_stop"] == 1.0
    assert pts.loc[SCHEDULES[0], "early_stop"] == 0.0


def test_summary_compares_the_operating_point_with_always_continue(tree: Path):
    s = pareto_summary(pareto_points("hotpotqa", "g", tree))
    assert s["vs_always_continue"]["f1_diff"] == pytest.approx(0.475 - 0.5)
    assert s["vs_always_continue"]["token_ratio"] == pytest.approx(1000 / 1600)


def test_the_figure_draws_points_and_schedule_line(tree: Path):
    fig = pareto_figure(pareto_points("hotpotqa", "g", tree))
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    line = next(l for l in ax.lines if l.get_label() == "stop after k acquisitions")
    assert np.allclose(line.get_xdata(), [400, 800, 1200, 1600])


def test_pareto_figure_json_writes_a_missing_value_as_null():
    rows = records_json(pd.DataFrame({"run": ["uniform"], "k": [float("nan")],
                                      "f1": [0.1234567]}))
    assert rows == [{"run": "uniform", "k": None, "f1": 0.123457}]
    json.dumps(rows, allow_nan=False)  # strict JSON: raises on a NaN
