"""Reader confidence as a stop signal (dynakrag_lab.studies.reader_stop): the rules stop where
they say, the stop label is "nothing better later", a parameter is chosen on the training grid
only, and a collection stopped mid-line resumes without losing or duplicating a row."""
import json

import numpy as np
import pytest

from dynakrag_lab.report.claims import StopGrid
from dynakrag_lab.studies import reader_stop as R
from dynakrag_lite.generators.base import Generation, OptionScores


def _grid(f1, lp, answers, tokens=None):
    f1 = np.asarray(f1, dtype=float)
    n, k = f1.shape
    ids = [f"q{i}" for i in range(n)]
    g = StopGrid("toy", ids, [""] * n, list(range(1, k + 1)), f1,
                 np.asarray(tokens if tokens is not None else np.tile(
                     np.arange(1, k + 1) * 100.0, (n, 1))), np.full(n, k))
    scores = {(q, j + 1): {"id": q, "k": j + 1, "prediction": answers[i][j],
                           "logprob": lp[i][j], "answer_tokens": 10, "reproduced": True}
              for i, q in enumerate(ids) for j in range(k)}
    return R.reader_grid(g, scores)


def test_stable_rule_stops_at_the_first_depth_whose_answer_repeats():
    rg = _grid([[0, 1, 1], [1, 1, 1], [0, 0, 1]], [[-1] * 3] * 3,
               [["a", "b", "b"], ["x", "The X", "y"], ["m", "n", "o"]])
    # "x" and "The X" are one answer after HotpotQA normalization
    assert R.stop_depths(rg, "stable").tolist() == [3, 2, 3]
    assert rg.changed.tolist() == [[False, True, False], [False, False, True],
                                   [False, True, True]]


def test_confident_rule_uses_the_threshold_and_always_stops_at_the_last_depth():
    rg = _grid([[0, 1, 1], [1, 0, 0]], [[-2, -0.5, -0.1], [-0.2, -3, -3]],
               [["a", "b", "c"], ["d", "e", "f"]])
    assert R.stop_depths(rg, "confident", -0.3).tolist() == [3, 1]
    assert R.stop_depths(rg, "confident", 0.0).tolist() == [3, 3]
    assert R.stop_depths(rg, "confident_or_stable", -0.3).tolist() == [3, 1]


def test_stop_label_marks_depths_with_nothing_better_later():
    rg = _grid([[0, 1, 0.5], [1, 0, 1], [0.2, 0.2, 0.2]], [[-1] * 3] * 3,
               [["a"] * 3] * 3)
    assert R.stop_label(rg).tolist() == [[0, 1, 1], [1, 0, 1], [1, 1, 1]]


def test_the_parameter_is_the_best_one_on_the_grid_it_is_chosen_on():
    # confidence above -0.3 marks the questions whose first answer is already right
    rg = _grid([[1, 1, 1], [0, 0, 1], [1, 0, 0], [0, 1, 1]],
               [[-0.1, -0.1, -0.1], [-1, -1, -1], [-0.2, -2, -2], [-0.9, -0.1, -0.1]],
               [["a"] * 3, ["b", "c", "d"], ["e", "f", "g"], ["h", "i", "i"]])
    tau = R.choose_parameter(rg, "confident")
    d = R.stop_depths(rg, "confident", tau)
    assert R.rule_f1(rg, d) == 1.0 and d.tolist() == [1, 3, 1, 2]
    # tokens: the stop depth's run plus one answer call (10 tokens) per earlier depth
    assert R.rule_tokens(rg, d) == pytest.approx(np.mean([100, 320, 100, 210]))


def test_reader_grid_leaves_out_questions_not_scored_at_every_depth():
    rg = _grid([[1, 1], [0, 1]], [[-1, -1], [-1, -1]], [["a", "a"], ["b", "c"]])
    scores = {(q, k): {"prediction": "a", "logprob": -1.0, "answer_tokens": 1,
                       "reproduced": True} for q in ("q0", "q1") for k in (1, 2)}
    del scores[("q1", 2)]
    assert R.reader_grid(rg.grid, scores).grid.ids == ["q0"]
    with pytest.raises(ValueError, match="no question scored at every depth"):
        R.reader_grid(rg.grid, {})


class _Reader:
    """A generator double: the reply is the prompt's last evidence line's title, its
    log-probability -0.5 a token."""
    def __init__(self):
        self.calls = 0

    def generate(self, messages, max_tokens=None):
        self.calls += 1
        text = messages[-1]["content"].split("Evidence:\n")[1].split(":")[0]
        return Generation(text=text, prompt_tokens=50, completion_tokens=2)

    def option_logprobs(self, messages, options, mode="auto"):
        return OptionScores({o: -1.0 for o in options}, 50, 0.0, False, "sequence",
                            {o: 2 for o in options})


def test_collect_scores_each_depth_once_and_resumes_after_a_torn_line(tmp_path):
    rows = {k: [{"id": f"q{i}", "question": "Who?", "prediction": f"T{i}{k}",
                 "snippets": [f"T{i}{k}: s"], "docs": []} for i in range(2)] for k in (1, 2)}
    out = tmp_path / "s.jsonl"
    reader = _Reader()
    got = R.collect(rows, reader, lambda r: [], out, 600)
    assert len(got) == 4 and reader.calls == 4
    assert all(r["reproduced"] and r["logprob"] == -0.5 for r in got.values())
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:3]) + "\n" + lines[3][:15])  # killed mid-line
    again = R.collect(rows, reader, lambda r: [], out, 600)
    assert reader.calls == 5 and len(again) == 4
    assert [json.loads(x)["k"] for x in out.read_text().splitlines()] == [1, 2, 1, 2]


def test_a_damaged_line_inside_the_file_is_an_error_naming_it(tmp_path):
    out = tmp_path / "s.jsonl"
    out.write_text('{"id": "q", "k": 1}\nnot json\n{"id": "q", "k": 2}\n')
    with pytest.raises(ValueError, match=r"s\.jsonl:2"):
        R.read_scores(out)


def test_rule_report_chooses_on_training_and_reads_the_evaluation_grid_once():
    train = _grid([[1, 1, 1], [0, 0, 1], [1, 0, 0], [0, 1, 1]] * 3,
                  [[-0.1, -0.1, -0.1], [-1, -1, -1], [-0.2, -2, -2], [-0.9, -0.1, -0.1]] * 3,
                  [["a"] * 3, ["b", "c", "d"], ["e", "f", "g"], ["h", "i", "i"]] * 3)
    rep = R.rule_report(train, train, n_shuffles=200)
    assert set(rep["rules"]) == set(R.RULES) and rep["eval_n"] == 12
    assert rep["rules"]["confident"]["f1"] == 1.0  # the oracle-like toy: every stop right
    assert rep["rules"]["confident"]["p_value"] < 0.05
    frame = R.report_frame({"toy": rep})
    assert list(frame["stop"])[0].startswith("learned stop") and len(frame) == 1 + len(R.RULES)


def test_power_curve_sees_a_perfect_signal_and_loses_power_as_noise_grows():
    # a grid where the right depth differs by question: a stop that knows it gains a lot
    f1 = [[1, 1, 1], [0, 1, 1], [0, 0, 1], [1, 0, 0]] * 5
    rg = _grid(f1, [[-1] * 3] * 20, [["a"] * 3] * 20)
    curve = R.power_curve(rg, n=60, sigmas=(0, 5), sims=20, n_shuffles=200)
    perfect, noisy = curve
    assert perfect["auc"] == 1.0 and perfect["power"] == 1.0 and perfect["gain"] > .2
    assert noisy["auc"] < .7 and noisy["power"] < perfect["power"]
    assert noisy["gain"] < perfect["gain"]
