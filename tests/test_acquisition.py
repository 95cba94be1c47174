"""Evidence acquisition: rewrite parsing, rejection and fallback; bridge titles reaching the
actions."""
from dataclasses import replace

from dynakrag_lite.actions import (RewriteInfo, apply_action, check_rewrite, rewrite_fallback,
                                   rewrite_query_detailed)
from dynakrag_lite.config import ControlConfig, Environment
from dynakrag_lite.prompts import parse_query
from dynakrag_lite.state import RetrievedDoc, initial_state

from helpers import ScriptedGenerator

SIGMUND = RetrievedDoc("d1", "Sigmund Jähn", "Sigmund Werner Paul Jähn (born 13 February 1937) "
                       "is a former German cosmonaut who in 1978 became the first German to "
                       "fly in space.", 0.7, "retrieve_more", 0)
FUGLESANG = RetrievedDoc("d2", "Christer Fuglesang", "Arne Christer Fuglesang (born March 18, "
                         "1957) is a Swedish physicist and an ESA astronaut.", 0.6,
                         "retrieve_more", 0)
QUESTION = "Which person went into space at a later date, Sigmund Jähn or Christer Fuglesang?"


# -- parse_query ------------------------------------------------------------------------
def test_parse_query_drops_title_text_copy_of_a_document():
    reply = "[1] Sigmund Jähn: Sigmund Werner Paul Jähn (born 13 February 1937) is a"
    assert parse_query(reply, "FALLBACK", titles=["Sigmund Jähn"]) == "FALLBACK"
    # without titles, a marker-led "X: text" line is a copy too
    assert parse_query(reply, "FALLBACK") == "FALLBACK"


def test_parse_query_strips_markers_labels_and_search_phrasing():
    assert parse_query("[2] WLMO-LP", "F") == "WLMO-LP"
    assert parse_query("Query: [3] Ulrich Walter birth date", "F") == "Ulrich Walter birth date"
    assert parse_query('Search for "Johnny Lee Clary" in the documents.', "F") == \
        "Johnny Lee Clary"
    assert parse_query("[1]", "F") == "F"


def test_parse_query_takes_the_next_line_after_a_copy():
    reply = ("[1] Sigmund Jähn: Sigmund Werner Paul Jähn was a cosmonaut\n"
             "Christer Fuglesang flight")
    assert parse_query(reply, "F", titles=["Sigmund Jähn"]) == "Christer Fuglesang flight"


def test_parse_query_keeps_a_real_query_with_a_colon():
    assert parse_query("Interkosmos: launch dates", "F", titles=["Sigmund Jähn"]) == \
        "Interkosmos: launch dates"


# -- check_rewrite ----------------------------------------------------------------------
def test_check_rewrite_rejects_repeat_of_question():
    q = "The 1974 Texas Tech Raiders football team represented what public research university?"
    echo = "The 1974 Texas Tech Raiders football team represented the university"
    assert check_rewrite(echo, q, []) == "repeats_question"
    assert check_rewrite("Texas Tech Raiders football team", q, []) == "repeats_question"
    assert check_rewrite("Texas Tech University location Lubbock", q, []) == ""


def test_check_rewrite_rejects_document_copy_but_not_an_entity_name():
    copy = "former German cosmonaut who in 1978 became the first German to fly"
    assert check_rewrite(copy, QUESTION, [SIGMUND]) == "copies_doc"
    assert check_rewrite("Interkosmos programme cosmonauts", QUESTION, [SIGMUND]) == ""
    assert check_rewrite("   ", QUESTION, [SIGMUND]) == "empty"


# -- the action and its fallback --------------------------------------------------------
class FakeRetriever:
    """Returns fixed docs; records the queries it was asked. No corpus: the bridge finder's
    corpus-title rules are off."""
    corpus = None

    def __init__(self, docs):
        self.docs, self.queries = docs, []

    def search(self, query, k, exclude=()):
        self.queries.append(query)
        from dynakrag_lite.retriever import Hit
        out = [d for d in self.docs if d.id not in set(exclude)]
        return [Hit(d, 0.5, i) for i, d in enumerate(out[:k])]


def _state(**kw):
    s = replace(initial_state(QUESTION), docs=(SIGMUND, FUGLESANG), history=("retrieve_more",))
    return replace(s, **kw)


def test_rejected_rewrite_uses_bridge_fallback_and_says_so():
    from dynakrag_lite.data.corpus import Document
    extra = Document("d3", "Interkosmos", "Interkosmos was a Soviet space programme.")
    r = FakeRetriever([extra])
    env = Environment(r, ScriptedGenerator(rewrite="[1] Sigmund Jähn: Sigmund Werner Paul "
                                           "Jähn (born 13 February 1937) is a"))
    s = _state(bridge_candidates=("Interkosmos",))
    new, info = rewrite_query_detailed(s, env)
    assert info.rejected == "empty" and info.fallback == "bridge:Interkosmos"
    assert new.query == f"{QUESTION} Interkosmos" and r.queries == [new.query]
    assert "fallback:bridge:Interkosmos" in info.note
    assert new.history[-1] == "rewrite_query" and new.ledger.llm_calls == 1
    assert new.doc_ids[-1] == "d3" and new.docs[-1].source == "rewrite_query"


def test_rewrite_fallback_title_then_question():
    s = _state(docs=(replace(SIGMUND, step=0), replace(FUGLESANG, step=2, title="ESA")))
    assert rewrite_fallback(s) == (f"{QUESTION} ESA", "title:ESA")
    # titles the question already names are not new information: the question alone
    assert rewrite_fallback(_state()) == (QUESTION, "question")


def test_copying_rewrite_is_rejected_and_accepted_one_is_searched():
    r = FakeRetriever([])
    copy = "is a former German cosmonaut who in 1978 became the first German to fly in space"
    env = Environment(r, ScriptedGenerator(rewrite=copy))
    _, info = rewrite_query_detailed(_state(bridge_candidates=("Interkosmos",)), env)
    assert info.rejected == "copies_doc" and info.parsed == copy
    env = Environment(r, ScriptedGenerator(rewrite="Query: Interkosmos crew launch year"))
    new, info = rewrite_query_detailed(_state(), env)
    assert info == RewriteInfo("Interkosmos crew launch year", "Interkosmos crew launch year")
    assert new.query == "Interkosmos crew launch year" and info.note == ""


def test_bridge_candidates_in_state_use_the_corpus_titles(library_retriever, library_questions):
    """_after_retrieval passes the retriever corpus' titles: a library person who has a page
    is a candidate, and ranked before entities that have none."""
    from dynakrag_lite.bridge import corpus_title_keys
    from dynakrag_lite.data.corpus import normalize_title
    q = next(x for x in library_questions if x.type == "bridge")
    env = Environment(library_retriever, ScriptedGenerator(), ControlConfig())
    s = apply_action(initial_state(q.question), "retrieve_more", env)
    keys = corpus_title_keys(library_retriever.corpus)
    assert s.bridge_candidates
    assert normalize_title(s.bridge_candidates[0]) in keys
