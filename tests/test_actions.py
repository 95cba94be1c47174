"""The seven actions as real operations on the state (real retriever over the library)."""
from dataclasses import replace

import pytest

from dynakrag_lite.actions import apply_action, compress_answer_evidence, answer
from dynakrag_lite.config import ControlConfig, Environment
from dynakrag_lite.data.corpus import normalize_title
from dynakrag_lite.state import initial_state

from helpers import ScriptedGenerator


@pytest.fixture()
def env(library_retriever):
    return Environment(library_retriever, ScriptedGenerator(), ControlConfig())


@pytest.fixture()
def q(library_questions):
    return next(x for x in library_questions if x.type == "bridge")


def test_first_retrieve_more_builds_initial_ranking_and_adds_top3(env, q):
    s = apply_action(initial_state(q.question), "retrieve_more", env)
    assert len(s.docs) == 3 and len(s.initial_ranking) == env.config.ranking_depth
    assert s.doc_ids == tuple(e.id for e in s.initial_ranking[:3])
    assert s.frontier == 3 and s.ledger.retrieval_calls == 1
    assert all(d.source == "retrieve_more" for d in s.docs)


def test_retrieve_more_advances_frontier_without_repeats(env, q):
    s = initial_state(q.question)
    for _ in range(3):
        s = apply_action(s, "retrieve_more", env)
    assert len(s.docs) == 9 and len(set(s.doc_ids)) == 9
    assert len({normalize_title(t) for t in s.titles}) == 9
    assert s.doc_ids == tuple(e.id for e in s.initial_ranking[:9])


def test_retrieval_never_exceeds_max_docs(library_retriever, q):
    env = Environment(library_retriever, ScriptedGenerator(), ControlConfig(max_docs=5))
    s = initial_state(q.question)
    s = apply_action(apply_action(s, "retrieve_more", env), "retrieve_more", env)
    assert len(s.docs) == 5


def test_sufficiency_check_records_verdict_and_gap(env, q):
    s = apply_action(apply_action(initial_state(q.question), "retrieve_more", env),
                     "sufficiency_check", env)
    assert s.sufficiency is not None and not s.sufficiency.sufficient
    assert s.gap == "birthplace of the founder"
    assert s.sufficiency.doc_ids == s.doc_ids and s.ledger.llm_calls == 1
    assert s.ledger.prompt_tokens > 0


def test_sufficient_verdict_clears_gap(library_retriever, q):
    env = Environment(library_retriever, ScriptedGenerator(sufficiency="SUFFICIENT"))
    s = apply_action(initial_state(q.question), "retrieve_more", env)
    s = apply_action(replace(s, gap="old gap"), "sufficiency_check", env)
    assert s.sufficiency.sufficient and s.gap == ""


def test_gap_query_searches_with_gap_text_and_adds_unseen_docs(env, q):
    s = apply_action(apply_action(initial_state(q.question), "retrieve_more", env),
                     "sufficiency_check", env)
    s2 = apply_action(s, "gap_query", env)
    assert s2.query == s.gap and len(s2.docs) == 6
    assert not set(s2.doc_ids[3:]) & set(s.doc_ids)
    assert all(d.source == "gap_query" for d in s2.docs[3:])


def test_rewrite_query_uses_generator_query_then_searches(env, q):
    s = apply_action(initial_state(q.question), "retrieve_more", env)
    s2 = apply_action(s, "rewrite_query", env)
    assert s2.query == "founder of the label" and s2.ledger.llm_calls == 1
    assert s2.ledger.retrieval_calls == 2 and len(s2.docs) == 6


def test_bridge_expand_searches_first_candidate_and_marks_it(env, q):
    s = apply_action(initial_state(q.question), "retrieve_more", env)
    assert s.bridge_candidates, "retrieved library docs name entities outside the question"
    entity = s.unexpanded_bridges[0]
    s2 = apply_action(s, "bridge_entity_expand", env)
    assert s2.query == entity and entity in s2.expanded_bridges
    assert entity not in s2.unexpanded_bridges


def test_stop_answer_ends_acquisition(env, q):
    s = apply_action(apply_action(initial_state(q.question), "retrieve_more", env),
                     "stop_answer", env)
    assert s.stopped and s.history[-1] == "stop_answer"


def test_compression_then_answer_from_snippets(env, q):
    s = apply_action(initial_state(q.question), "retrieve_more", env)
    s = apply_action(s, "stop_answer", env)
    # Snippets that quote the first two documents survive validation, in document order.
    first = [d.text.split(". ")[0] for d in s.docs[:2]]
    quoting = Environment(env.retriever, ScriptedGenerator(
        compress=f"- [1] {first[0]}\n- [2] {first[1]}"), env.config)
    s, comp = compress_answer_evidence(s, quoting)
    assert not comp.fallback_to_docs
    assert [x.doc_index for x in comp.valid_snippets] == [0, 1]
    assert comp.snippets[0].startswith(s.docs[0].title + ": ")
    s, pred, _ = answer(s, quoting, comp.snippets)
    assert pred == "Paris" and s.ledger.llm_calls == 2


def test_compression_snippets_that_quote_no_document_fall_back_to_the_documents(env, q):
    s = apply_action(initial_state(q.question), "retrieve_more", env)
    s, comp = compress_answer_evidence(apply_action(s, "stop_answer", env), env)
    assert comp.fallback_to_docs and comp.snippets == ()  # "a fact" / "b" quote nothing


def test_malformed_replies_fall_back_without_crashing(library_retriever, q):
    env = Environment(library_retriever, ScriptedGenerator(
        sufficiency="??", rewrite="", compress="", answer=""))
    s = apply_action(initial_state(q.question), "retrieve_more", env)
    s = apply_action(s, "sufficiency_check", env)
    assert not s.sufficiency.parsed and s.gap == ""  # fallback: insufficient, no gap
    before = s
    s = apply_action(s, "rewrite_query", env)
    # fallback for an empty rewrite: the question plus the best unexpanded bridge entity
    assert s.query == f"{q.question} {before.unexpanded_bridges[0]}"
    s, comp = compress_answer_evidence(apply_action(s, "stop_answer", env), env)
    assert comp.snippets == ()
    _, pred, _ = answer(s, env, comp.snippets)  # no snippets: answers from the documents
    assert pred == ""


def test_unknown_action_is_rejected(env, q):
    with pytest.raises(ValueError):
        apply_action(initial_state(q.question), "dance", env)
