"""One test per validity rule of A(s) (paper Table 5 and our documented readings)."""
from dataclasses import replace

from dynakrag_lite.config import ControlConfig
from dynakrag_lite.state import (EvidenceState, Ledger, RankedEntry, RetrievedDoc, Sufficiency,
                                 initial_state)
from dynakrag_lite.validity import valid_actions

CFG = ControlConfig()


def doc(i: int, title: str | None = None) -> RetrievedDoc:
    return RetrievedDoc(f"d{i}", title or f"Title {i}", f"text {i}", 0.5, "retrieve_more", 0)


def ranking(n: int) -> tuple[RankedEntry, ...]:
    return tuple(RankedEntry(f"d{i}", f"Title {i}", "t", 1.0 - i / 100) for i in range(n))


def with_docs(n: int = 3, **kw) -> EvidenceState:
    s = initial_state("Who founded the label?")
    return replace(s, docs=tuple(doc(i) for i in range(n)), initial_ranking=ranking(20),
                   frontier=n, history=("retrieve_more",), **kw)


def test_initial_state_allows_only_retrieve_more():
    assert valid_actions(initial_state("q?"), CFG) == ("retrieve_more",)


def test_retrieve_more_needs_frontier_left():
    s = with_docs(3)
    assert "retrieve_more" in valid_actions(s, CFG)
    exhausted = replace(s, frontier=len(s.initial_ranking))
    assert "retrieve_more" not in valid_actions(exhausted, CFG)


def test_gap_query_needs_recorded_nonempty_gap():
    s = with_docs(3)
    assert "gap_query" not in valid_actions(s, CFG)
    assert "gap_query" not in valid_actions(replace(s, gap="   "), CFG)
    assert "gap_query" in valid_actions(replace(s, gap="founder of Velmora"), CFG)


def test_rewrite_query_needs_evidence():
    assert "rewrite_query" not in valid_actions(initial_state("q?"), CFG)
    assert "rewrite_query" in valid_actions(with_docs(1), CFG)


def test_bridge_expand_needs_unexpanded_candidate():
    s = with_docs(3)
    assert "bridge_entity_expand" not in valid_actions(s, CFG)
    s = replace(s, bridge_candidates=("Ada Quill",))
    assert "bridge_entity_expand" in valid_actions(s, CFG)
    s = replace(s, expanded_bridges=("Ada Quill",))
    assert "bridge_entity_expand" not in valid_actions(s, CFG)


def test_sufficiency_check_needs_evidence_and_is_not_repeated_on_unchanged_docs():
    s = with_docs(3)
    assert "sufficiency_check" in valid_actions(s, CFG)
    probed = replace(s, sufficiency=Sufficiency(False, "x", "raw", True, s.doc_ids))
    assert "sufficiency_check" not in valid_actions(probed, CFG)
    grown = replace(probed, docs=probed.docs + (doc(9),))
    assert "sufficiency_check" in valid_actions(grown, CFG)


def test_sufficiency_check_disabled_by_ablation_switch():
    assert "sufficiency_check" not in valid_actions(with_docs(3),
                                                    ControlConfig(use_sufficiency=False))


def test_stop_answer_needs_evidence_unless_nothing_else_is_valid():
    assert "stop_answer" not in valid_actions(initial_state("q?"), CFG)
    assert "stop_answer" in valid_actions(with_docs(1), CFG)
    # no docs, nothing else possible (empty ranking): stopping must stay possible
    stuck = replace(initial_state("q?"), initial_ranking=(), frontier=0)
    assert valid_actions(stuck, CFG) == ("stop_answer",)


def test_step_cap_leaves_only_stop():
    s = with_docs(3, gap="g", bridge_candidates=("B",))
    s = replace(s, history=("retrieve_more", "sufficiency_check", "gap_query", "gap_query"))
    assert valid_actions(s, CFG) == ("stop_answer",)


def test_document_cap_leaves_only_stop():
    assert valid_actions(with_docs(12), CFG) == ("stop_answer",)


def test_retrieval_cap_removes_all_retrieval_actions():
    s = with_docs(3, gap="g", bridge_candidates=("B",), ledger=Ledger(retrieval_calls=1))
    capped = valid_actions(s, ControlConfig(retrieval_cap=1))
    assert not {"retrieve_more", "gap_query", "rewrite_query",
                "bridge_entity_expand"} & set(capped)
    assert {"sufficiency_check", "stop_answer"} <= set(capped)
    assert "gap_query" in valid_actions(s, ControlConfig(retrieval_cap=2))


def test_compression_is_terminal_and_runs_once():
    s = with_docs(3)
    assert "compress_answer_evidence" not in valid_actions(s, CFG)
    stopped = replace(s, stopped=True, history=s.history + ("stop_answer",))
    assert valid_actions(stopped, CFG) == ("compress_answer_evidence",)
    done = replace(stopped, history=stopped.history + ("compress_answer_evidence",))
    assert valid_actions(done, CFG) == ()
    assert valid_actions(stopped, ControlConfig(use_compression=False)) == ()
