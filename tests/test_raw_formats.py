"""Official raw formats (HotpotQA, 2WikiMultiHopQA, MuSiQue) convert to the normalized schema."""
from __future__ import annotations

import copy
import json
import logging
from pathlib import Path

import pytest

from dynakrag_lite.data.schema import DataError
from dynakrag_lite.data.sources import load_questions
from dynakrag_lite.data.raw_formats import convert_raw_record, detect_format, load_raw, read_raw

HOTPOT = {
    "_id": "5a8b57f25542995d1e6f1371", "type": "comparison", "level": "medium",
    "question": "Which river is longer, the Ostrel or the Kaviss?", "answer": "Ostrel",
    "context": [["Ostrel River", ["The Ostrel River is a river.", " It is 412 km long."]],
                ["Lake Dorn", ["Lake Dorn is a lake."]],
                ["Kaviss River", ["The Kaviss River", " runs 90 km."]]],
    "supporting_facts": [["Ostrel River", 1], ["Kaviss River", 1]],
}
WIKI2 = {
    "_id": "8813f87c0bdd11eba7f7acde48001122", "type": "compositional",
    "question": "Who is the mother of the director of film Lanterns?",
    "context": [["Lanterns", ["Lanterns is a 1990 film.", "It was directed by Orlen Vasko."]],
                ["Orlen Vasko", ["Orlen Vasko is a director.", "His mother is Tamra Vasko."]],
                ["Kaviss", ["Kaviss is a town."]]],
    "supporting_facts": [["Lanterns", 1], ["Orlen Vasko", 1]],
    "evidences": [["Lanterns", "director", "Orlen Vasko"],
                  ["Orlen Vasko", "mother", "Tamra Vasko"]],
    "answer": "Tamra Vasko",
}
MUSIQUE = {
    "id": "2hop__1_2", "question": "Where did the founder of Velmora Records die?",
    "answer": "Drellwick", "answer_aliases": ["Drellwick Town", "Drellwick"],
    "answerable": True,
    "paragraphs": [{"idx": 0, "title": "Velmora Records", "is_supporting": True,
                    "paragraph_text": "Velmora Records was founded by Orlen Vasko."},
                   {"idx": 1, "title": "Orlen Vasko", "is_supporting": True,
                    "paragraph_text": "Orlen Vasko died in Drellwick. "},
                   {"idx": 2, "title": "Kaviss", "is_supporting": False,
                    "paragraph_text": "Kaviss is a town."}],
    "question_decomposition": [{"id": 1, "question": "Velmora Records >> founded by",
                                "answer": "Orlen Vasko", "paragraph_support_idx": 0},
                               {"id": 2, "question": "#1 >> place of death",
                                "answer": "Drellwick", "paragraph_support_idx": 1}],
}


def test_hotpotqa_record_converts_with_space_carrying_sentences_joined():
    q = convert_raw_record(HOTPOT, "h.json", 1)
    assert (q.id, q.dataset, q.type, q.answers) == (HOTPOT["_id"], "hotpotqa", "comparison",
                                                   ("Ostrel",))
    assert q.paragraphs[0].text == "The Ostrel River is a river. It is 412 km long."
    assert q.paragraphs[2].text == "The Kaviss River runs 90 km."
    assert q.supporting_titles == ["Ostrel River", "Kaviss River"]


def test_2wiki_record_converts_with_sentences_joined_by_space():
    q = convert_raw_record(WIKI2, "w.json", 1)
    assert (q.dataset, q.type, q.answers) == ("2wikimultihopqa", "compositional",
                                             ("Tamra Vasko",))
    assert q.paragraphs[1].text == "Orlen Vasko is a director. His mother is Tamra Vasko."
    assert q.supporting_titles == ["Lanterns", "Orlen Vasko"]


def test_musique_record_converts_with_aliases_deduplicated_and_hop_type():
    q = convert_raw_record(MUSIQUE, "m.jsonl", 3)
    assert (q.id, q.dataset, q.type) == ("2hop__1_2", "musique", "2hop")
    assert q.answers == ("Drellwick", "Drellwick Town")
    assert q.paragraphs[1].text == "Orlen Vasko died in Drellwick."
    assert q.supporting_titles == ["Velmora Records", "Orlen Vasko"]


def test_answer_aliases_are_appended_for_context_formats_too():
    rec = dict(WIKI2, answer_aliases=["T. Vasko"])
    assert convert_raw_record(rec, "w.json", 1).answers == ("Tamra Vasko", "T. Vasko")


def test_format_is_detected_from_keys():
    assert detect_format(HOTPOT) == "hotpotqa"
    assert detect_format(WIKI2) == "2wikimultihopqa"
    assert detect_format(MUSIQUE) == "musique"
    no_level = {k: v for k, v in HOTPOT.items() if k != "level"}
    assert detect_format(no_level) == "hotpotqa"
    assert detect_format({"question": "x"}) is None


def test_json_list_file_loads_via_load_raw_and_load_questions(tmp_path):
    p = tmp_path / "hotpot_dev.json"
    second = dict(HOTPOT, _id="second")
    p.write_text(json.dumps([HOTPOT, second]))
    assert [q.id for q in load_raw(p)] == [HOTPOT["_id"], "second"]
    assert [q.id for q in load_questions(p, limit=1)] == [HOTPOT["_id"]]


def test_unanswerable_musique_records_are_skipped_and_counted(tmp_path, caplog):
    p = tmp_path / "musique_full_dev.jsonl"
    unans = dict(MUSIQUE, id="2hop__9_9", answerable=False)
    p.write_text("\n".join(json.dumps(r) for r in (MUSIQUE, unans)) + "\n")
    assert convert_raw_record(unans, p, 2) is None
    with caplog.at_level(logging.WARNING):
        report = read_raw(p)
    assert [q.id for q in report.questions] == ["2hop__1_2"]
    assert (report.n_records, report.n_unanswerable, report.skipped_ids) == (2, 1,
                                                                            ["2hop__9_9"])
    assert "skipped 1 unanswerable" in caplog.text
    # The normalized loader accepts raw MuSiQue JSONL lines too, with the same skip.
    assert [q.id for q in load_questions(p)] == ["2hop__1_2"]


def _located(err: DataError, path, line: int, field: str | None) -> None:
    assert str(path) in str(err) and f"line {line}" in str(err) and err.line == line
    if field:
        assert err.field == field and f"'{field}'" in str(err)


@pytest.mark.parametrize("mutate, field", [
    (lambda r: r.pop("answer"), "answer"),
    (lambda r: r.update(question=""), "question"),
    (lambda r: r.update(supporting_facts=[["Nowhere", 0]]), "supporting_facts"),
    (lambda r: r.update(supporting_facts=[]), "supporting_facts"),
    (lambda r: r.update(supporting_facts=[["Ostrel River"]]), "supporting_facts[0]"),
    (lambda r: r["context"].__setitem__(1, ["Lake Dorn", "not a list"]), "context[1][1]"),
    (lambda r: r.update(context="oops"), "context"),
])
def test_hotpotqa_defects_raise_with_record_index_and_field(tmp_path, mutate, field):
    bad = copy.deepcopy(HOTPOT)
    bad["_id"] = "bad"
    mutate(bad)
    p = tmp_path / "hotpot.json"
    p.write_text(json.dumps([HOTPOT, bad]))
    with pytest.raises(DataError) as ei:
        load_raw(p)
    _located(ei.value, p, 2, field)


@pytest.mark.parametrize("mutate, field", [
    (lambda r: r["paragraphs"][1].pop("paragraph_text"), "paragraphs[1].paragraph_text"),
    (lambda r: [p.update(is_supporting=False) for p in r["paragraphs"]], "paragraphs"),
    (lambda r: r.update(answerable="yes"), "answerable"),
    (lambda r: r.update(answer_aliases="Drellwick"), "answer_aliases"),
])
def test_musique_defects_raise_with_line_and_field(tmp_path, mutate, field):
    bad = copy.deepcopy(MUSIQUE)
    bad["id"] = "bad"
    mutate(bad)
    p = tmp_path / "musique.jsonl"
    p.write_text(json.dumps(MUSIQUE) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(DataError) as ei:
        read_raw(p)
    _located(ei.value, p, 2, field)


def test_duplicate_ids_and_malformed_json_list_are_located(tmp_path):
    p = tmp_path / "dup.json"
    p.write_text(json.dumps([WIKI2, WIKI2]))
    with pytest.raises(DataError) as ei:
        load_raw(p)
    _located(ei.value, p, 2, "id")
    p.write_text('[\n{"_id": "a",\n')
    with pytest.raises(DataError, match="malformed JSON"):
        load_raw(p)
    p.write_text(json.dumps({"data": []}))
    with pytest.raises(DataError, match="expected a JSON list"):
        load_raw(p)


def test_unknown_record_shape_is_rejected():
    with pytest.raises(DataError, match="unknown record format"):
        convert_raw_record({"question": "q", "answer": "a"}, "x.json", 4)


def test_prepare_data_script_normalizes_a_local_raw_file(tmp_path, monkeypatch):
    import importlib.util
    import sys
    script = Path(__file__).resolve().parents[1] / "data_scripts" / "prepare_data.py"
    spec = importlib.util.spec_from_file_location("prepare_data", script)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "prepare_data", mod)  # dataclasses look it up there
    spec.loader.exec_module(mod)
    raw = tmp_path / "w.json"
    raw.write_text(json.dumps([WIKI2, dict(WIKI2, _id="two")]))
    assert mod.main(["--dataset", "2wikimultihopqa", "--raw", str(raw), "--out",
                     str(tmp_path / "out"), "--limit", "1"]) == 0
    out = load_questions(tmp_path / "out" / "2wikimultihopqa.jsonl")
    assert [q.id for q in out] == [WIKI2["_id"]]
    # Declaring the wrong dataset for a file is an input error, not a silent mislabel.
    assert mod.main(["--dataset", "hotpotqa", "--raw", str(raw), "--out",
                     str(tmp_path / "out2")]) == 1
