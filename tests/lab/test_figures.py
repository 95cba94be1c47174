"""The book's concept figures (dynakrag_lab.report.figures): each returns a Figure holding the
labelled elements it promises, computed from the library's definitions (no model, no
retriever). The result plots are tests/test_plots.py."""
from dataclasses import fields, replace

import matplotlib
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text

from dynakrag_lab.report import figures as F
from dynakrag_lite.config import ControlConfig
from dynakrag_lite.state import (ACTIONS, EvidenceState, RankedEntry, RetrievedDoc,
                                 initial_state)
from dynakrag_lite.trajectories import Sample, TrainingData
from dynakrag_lite.validity import valid_actions

matplotlib.use("Agg")


def texts(fig: Figure) -> list[str]:
    """Every string drawn in the figure (texts, tick labels, titles)."""
    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def joined(fig: Figure) -> str:
    return "\n".join(texts(fig))


def render(fig: Figure) -> None:
    fig.canvas.draw()  # layout and mathtext must render without error


def test_control_loop_names_every_action_and_every_part():
    fig = F.control_loop_figure()
    assert isinstance(fig, Figure)
    render(fig)
    strings = texts(fig)
    for a in ACTIONS:
        assert a in strings, a  # one text per action in the action list
    body = joined(fig)
    for part in ("validity layer", "value model", "cost model", "continuation model",
                 "evidence state", "compress_answer_evidence → answer"):
        assert part in body, part
    assert "veto" in body and "argmax" in body


def test_action_kinds_cover_the_three_groups():
    kinds = {F.action_kind(a) for a in ACTIONS}
    assert kinds == {"acquisition", "control", "terminal"}
    assert F.action_kind("compress_answer_evidence") == "terminal"
    assert F.action_kind("gap_query") == "acquisition"
    assert F.action_kind("stop_answer") == "control"


def test_evidence_state_schematic_lists_every_field_and_the_gold_exclusion():
    fig = F.evidence_state_figure()
    assert isinstance(fig, Figure)
    render(fig)
    strings = texts(fig)
    for f in fields(EvidenceState):
        assert f.name in strings, f.name
    body = joined(fig)
    for never in F.NEVER_IN_STATE:
        assert never in body
    assert "frontier = 3" in body


def test_evidence_state_with_a_concrete_state_shows_its_values_and_frontier():
    ranking = tuple(RankedEntry(f"d{i}", f"Doc {i}", "t", 1 - i / 100) for i in range(20))
    docs = tuple(RetrievedDoc(f"d{i}", f"Doc {i}", "t", 0.9, "retrieve_more", 0)
                 for i in range(3))
    extra = RetrievedDoc("x1", "Orlen Vasko", "t", 0.5, "bridge_entity_expand", 1)
    s = replace(initial_state("Where was the founder of Velmora Records born?", "q1"),
                docs=docs + (extra,), initial_ranking=ranking, frontier=3,
                history=("retrieve_more", "bridge_entity_expand"),
                bridge_candidates=("Orlen Vasko",), expanded_bridges=("Orlen Vasko",))
    fig = F.evidence_state_figure(s, gold=["Doc 0", "Orlen Vasko"])
    render(fig)
    body = joined(fig)
    assert "Velmora Records" in body
    assert "frontier = 3" in body
    assert "20 ranked entries" in body
    assert "retrieve_more, bridge_entity_expand" in body
    assert "docs from other actions" in body
    assert body.count("★") >= 2  # one gold in the ranking, one among the other docs


def test_summarize_field_handles_every_field_type():
    s = initial_state("q?")
    for f in fields(EvidenceState):
        assert isinstance(F.summarize_field(f.name, getattr(s, f.name)), str)


def _samples() -> list[Sample]:
    import numpy as np
    rows = [(0, "retrieve_more", 0.5, True),
            (1, "retrieve_more", 0.0, False), (1, "bridge_entity_expand", 0.5, True),
            (1, "sufficiency_check", 0.0, False), (1, "stop_answer", 0.5, False),
            (2, "stop_answer", 1.0, False)]
    return [Sample("q1", t, a, np.zeros(2), v, 0.0, 3 * t, chosen=c) for t, a, v, c in rows] + \
        [Sample("q2", 0, "retrieve_more", np.zeros(2), 1.0, 0.0, 0, chosen=True)]


@pytest.mark.parametrize("kind", ["samples", "training_data", "frame"])
def test_branching_tree_draws_one_box_per_labelled_pair(kind):
    samples = _samples()
    data = {"samples": samples, "training_data": TrainingData(samples, [], ["q1", "q2"]),
            "frame": TrainingData(samples).to_frame()}[kind]
    fig = F.branching_tree_figure(data)  # first question only
    assert isinstance(fig, Figure)
    render(fig)
    strings = texts(fig)
    q1 = [s for s in samples if s.qid == "q1"]
    action_texts = [t for t in strings if t in ACTIONS]
    assert len(action_texts) == len(q1)
    for t in (0, 1, 2):
        assert f"$s_{{{t}}}$" in strings
    assert sum("(taken)" in t for t in strings) == sum(s.chosen for s in q1)
    assert any(t.startswith("v = 0.50") for t in strings)
    assert "SR 1.00" in strings  # SR(s_2) read from its stop_answer label


def test_branching_tree_selects_a_question_and_rejects_empty_input():
    fig = F.branching_tree_figure(_samples(), qid="q2")
    assert [t for t in texts(fig) if t in ACTIONS] == ["retrieve_more"]
    with pytest.raises(ValueError):
        F.branching_tree_figure([])


def test_validity_cases_follow_the_rules_they_are_named_after():
    cases = {label: (s, cfg) for label, s, cfg in F.validity_cases()}
    def A(label):
        s, cfg = cases[label]
        return valid_actions(s, cfg)
    assert A("$s_0$: question only") == ("retrieve_more",)
    assert "bridge_entity_expand" in A("+ bridge candidate")
    assert "sufficiency_check" not in A("probed: sufficient")
    assert "gap_query" in A("probed: gap written")
    assert "sufficiency_check" in A("new docs since probe")
    assert "retrieve_more" not in A("ranking exhausted")
    assert not {"retrieve_more", "gap_query", "bridge_entity_expand", "rewrite_query"} & \
        set(A("retrieval cap 1 spent"))
    assert "sufficiency_check" not in A("sufficiency disabled")
    assert A("4 steps (cap)") == ("stop_answer",)
    assert A("document cap (max_docs=9)") == ("stop_answer",)
    assert A("after stop_answer") == ("compress_answer_evidence",)
    assert A("after compression") == ()


def test_validity_grid_matches_valid_actions_cell_by_cell():
    cases = F.validity_cases()
    fig = F.validity_grid_figure(cases)
    assert isinstance(fig, Figure)
    render(fig)
    strings = texts(fig)
    for a in ACTIONS:
        assert a in strings  # row labels
    for label, _, _ in cases:
        assert label in strings  # column labels
    matrix = F.validity_matrix(cases)
    n_valid = sum(map(sum, matrix))
    assert strings.count("✓") == n_valid
    for j, (_, s, cfg) in enumerate(cases):
        assert {a for i, a in enumerate(ACTIONS) if matrix[i][j]} == set(valid_actions(s, cfg))


def test_validity_grid_uses_the_default_config_for_two_tuples():
    s = initial_state("q?")
    assert F.validity_matrix([("s0", s)]) == [[a == "retrieve_more"] for a in ACTIONS]
    capped = ControlConfig(retrieval_cap=0)
    assert F.validity_matrix([("s0", s)], cfg=capped) == [[a == "stop_answer"] for a in ACTIONS]
    with pytest.raises(ValueError):
        F.validity_grid_figure([])


def test_validity_grid_accepts_a_modified_rule():
    def no_probe(state, cfg):
        return tuple(a for a in valid_actions(state, cfg) if a != "sufficiency_check")
    cases = F.validity_cases()
    fig = F.validity_grid_figure(cases, rule=no_probe)
    row = ACTIONS.index("sufficiency_check")
    assert not any(F.validity_matrix(cases, rule=no_probe)[row])
    assert texts(fig).count("✓") == sum(map(sum, F.validity_matrix(cases, rule=no_probe)))
