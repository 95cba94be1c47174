"""The embedded fictional library: deterministic, well-formed, and genuinely multi-hop."""
from __future__ import annotations

import re
from collections import Counter

import pytest

from dynakrag_lite.data.sources import load_dataset, load_questions, write_questions
from dynakrag_lite.data.library import build_library, library_corpus_note

# The test's own notion of "content word" (independent of the library's internal check).
STOP = set("""a an the of in on at to for by and or is was were are be does did do which what
who where when how that it its as with from into than""".split())


def words(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP}


@pytest.fixture(scope="module")
def lib():
    return build_library()


def test_same_seed_gives_identical_library():
    assert build_library(40, seed=3) == build_library(40, seed=3)


def test_different_seeds_give_different_libraries():
    a, b = build_library(20, seed=0), build_library(20, seed=1)
    assert [q.question for q in a] != [q.question for q in b]


def test_default_size_and_dataset_name(lib):
    assert len(lib) == 60 and all(q.dataset == "library" for q in lib)
    assert load_dataset("library") == lib


def test_ids_and_paragraph_titles_are_unique_across_library(lib):
    assert len({q.id for q in lib}) == len(lib)
    titles = [p.title for q in lib for p in q.paragraphs]
    assert len(titles) == len(set(titles))


def test_all_types_present_in_roughly_40_30_30_mix(lib):
    c = Counter(q.type for q in lib)
    assert set(c) == {"bridge", "comparison", "compositional"}
    assert c["bridge"] == 24 and c["comparison"] == 18 and c["compositional"] == 18
    hops = Counter(len(q.supporting_titles) for q in lib if q.type == "compositional")
    assert set(hops) == {3, 4}
    assert {"yes", "no"} <= {q.answers[0] for q in lib if q.type == "comparison"}
    assert any(q.answers[0] not in ("yes", "no") for q in lib if q.type == "comparison")
    assert {q.type for q in build_library(3)} == {"bridge", "comparison", "compositional"}


def test_every_question_has_8_to_10_paragraphs_and_2_to_4_supporting(lib):
    for q in lib:
        assert 8 <= len(q.paragraphs) <= 10, q.id
        assert 2 <= len(q.supporting_titles) <= 4, q.id
        for p in q.paragraphs:
            assert 2 <= len(re.findall(r"[.!?](?:\s|$)", p.text)) <= 4, (q.id, p.text)


def test_answer_appears_in_a_supporting_paragraph_or_is_yes_no(lib):
    for q in lib:
        if q.answers[0] in ("yes", "no"):
            assert q.type == "comparison"
            continue
        support = " ".join(p.text for p in q.paragraphs if p.is_supporting).lower()
        assert q.answers[0].lower() in support, q.id


def test_comparison_answer_is_one_of_the_compared_names(lib):
    for q in lib:
        if q.type == "comparison" and q.answers[0] not in ("yes", "no"):
            assert any(a in q.question for a in q.answers), q.id


def test_bridge_second_hop_shares_no_content_word_with_question(lib):
    """The design property: one-shot retrieval from the question cannot match hop 2."""
    bridges = [q for q in lib if q.type == "bridge"]
    assert bridges
    for q in bridges:
        sup = [p for p in q.paragraphs if p.is_supporting]
        assert len(sup) == 2
        ans = q.answers[0].lower()
        (hop2,) = [p for p in sup if ans in p.text.lower()]
        (hop1,) = [p for p in sup if p is not hop2]
        qw = words(q.question)
        assert not qw & words(hop2.text), (q.question, hop2.text)
        assert qw & words(hop1.text), (q.question, hop1.text)   # hop 1 is findable
        assert hop2.title in hop1.text                         # the bridge entity links them
        assert ans not in hop1.text.lower()


def test_distractors_share_surface_words_with_the_question(lib):
    """Retrieval is non-trivial: most questions have a distractor overlapping the question."""
    overlapping = sum(
        any(not p.is_supporting and words(q.question) & words(p.title + " " + p.text)
            for p in q.paragraphs) for q in lib)
    assert overlapping >= 0.9 * len(lib)


def test_library_round_trips_through_jsonl(tmp_path, lib):
    assert load_questions(write_questions(lib, tmp_path / "lib.jsonl")) == lib


def test_corpus_note_describes_the_library_it_builds(lib):
    """The note's claims, parsed from its text, hold for the built library: every question type
    it lists (``name`` (~P%)) exists with a share within 5 points of P, and no type is left out;
    its "~A-B candidate paragraphs" bounds the paragraph counts; its 3- and 4-hop claim holds."""
    note = library_corpus_note()
    shares = {t: int(p) for t, p in re.findall(r"``(\w+)`` \(~(\d+)%\)", note)}
    counts = Counter(q.type for q in lib)
    assert set(shares) == set(counts)
    for qtype, pct in shares.items():
        assert abs(100 * counts[qtype] / len(lib) - pct) <= 5, qtype
    lo, hi = map(int, re.search(r"~(\d+)-(\d+) candidate\s+paragraphs", note).groups())
    assert all(lo <= len(q.paragraphs) <= hi for q in lib)
    assert "3-hop and 4-hop" in note
    assert {len(q.supporting_titles) for q in lib if q.type == "compositional"} == {3, 4}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_design_properties_hold_for_other_seeds(seed):
    other = build_library(60, seed)
    test_ids_and_paragraph_titles_are_unique_across_library(other)
    test_every_question_has_8_to_10_paragraphs_and_2_to_4_supporting(other)
    test_answer_appears_in_a_supporting_paragraph_or_is_yes_no(other)
    test_bridge_second_hop_shares_no_content_word_with_question(other)
