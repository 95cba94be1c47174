"""The normalized loader: good records load, every defect names file, line and field."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynakrag_lite.data.schema import DataError, Paragraph, Question
from dynakrag_lite.data.sources import load_questions, split_questions, write_questions


def record(qid: str = "q1", **overrides) -> dict:
    rec = {"id": qid, "dataset": "custom", "question": "Who founded Velmora Records?",
           "answers": ["Orlen Vasko"], "type": "bridge",
           "paragraphs": [{"title": "Velmora Records", "is_supporting": True,
                           "text": "Velmora Records was founded by Orlen Vasko."},
                          {"title": "Kaviss", "text": "Kaviss is a river.",
                           "is_supporting": False}]}
    rec.update(overrides)
    return rec


def write_lines(path: Path, lines: list) -> Path:
    with open(path, "wb") as fh:
        for ln in lines:
            fh.write(ln if isinstance(ln, bytes) else (json.dumps(ln) + "\n").encode())
    return path


def assert_located(err: DataError, path: Path, line: int, field: str | None) -> None:
    msg = str(err)
    assert str(path) in msg and f"line {line}" in msg
    assert err.line == line
    if field:
        assert f"'{field}'" in msg and err.field == field


def test_good_record_loads_into_question(tmp_path):
    p = write_lines(tmp_path / "ok.jsonl", [record()])
    (q,) = load_questions(p)
    assert q.id == "q1" and q.answers == ("Orlen Vasko",) and q.type == "bridge"
    assert q.supporting_titles == ["Velmora Records"]
    assert q.paragraphs[1] == Paragraph("Kaviss", "Kaviss is a river.", False)


def test_malformed_json_line_names_file_and_line(tmp_path):
    p = write_lines(tmp_path / "bad.jsonl", [record("a"), b'{"id": "b", "question": \n'])
    with pytest.raises(DataError) as ei:
        load_questions(p)
    assert_located(ei.value, p, 2, None)
    assert "malformed JSON" in str(ei.value)


@pytest.mark.parametrize("field", ["id", "question", "answers", "paragraphs"])
def test_missing_field_names_file_line_and_field(tmp_path, field):
    rec = record()
    del rec[field]
    p = write_lines(tmp_path / "missing.jsonl", [record("x"), rec])
    with pytest.raises(DataError) as ei:
        load_questions(p)
    assert_located(ei.value, p, 2, field)
    assert "missing" in str(ei.value)


def test_missing_paragraph_text_names_nested_field(tmp_path):
    rec = record()
    del rec["paragraphs"][1]["text"]
    p = write_lines(tmp_path / "nested.jsonl", [rec])
    with pytest.raises(DataError) as ei:
        load_questions(p)
    assert_located(ei.value, p, 1, "paragraphs[1].text")


def test_empty_question_is_rejected_with_location(tmp_path):
    p = write_lines(tmp_path / "empty.jsonl", [record(question="   ")])
    with pytest.raises(DataError) as ei:
        load_questions(p)
    assert_located(ei.value, p, 1, "question")


def test_record_without_supporting_paragraph_is_rejected(tmp_path):
    rec = record()
    rec["paragraphs"][0]["is_supporting"] = False
    p = write_lines(tmp_path / "nosup.jsonl", [rec])
    with pytest.raises(DataError) as ei:
        load_questions(p)
    assert_located(ei.value, p, 1, "paragraphs")
    assert "no supporting paragraph" in str(ei.value)


def test_non_utf8_bytes_are_rejected_with_line(tmp_path):
    good = (json.dumps(record("a")) + "\n").encode()
    bad = (json.dumps(record("b")) + "\n").encode().replace(b"Kaviss", b"Kav\xffss")
    p = write_lines(tmp_path / "latin.jsonl", [good, bad])
    with pytest.raises(DataError) as ei:
        load_questions(p)
    assert_located(ei.value, p, 2, None)
    assert "UTF-8" in str(ei.value)


def test_duplicate_id_is_rejected_naming_both_lines(tmp_path):
    p = write_lines(tmp_path / "dup.jsonl", [record("same"), record("other"), record("same")])
    with pytest.raises(DataError) as ei:
        load_questions(p)
    assert_located(ei.value, p, 3, "id")
    assert "duplicate" in str(ei.value) and "line 1" in str(ei.value)


def test_blank_lines_are_skipped_and_limit_is_honoured(tmp_path):
    p = write_lines(tmp_path / "blank.jsonl", [record("a"), b"\n", record("b"), record("c")])
    assert [q.id for q in load_questions(p)] == ["a", "b", "c"]
    assert [q.id for q in load_questions(p, limit=2)] == ["a", "b"]


def test_missing_file_and_empty_file_raise_data_error(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_questions(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="no records"):
        load_questions(tmp_path / "empty.jsonl")


def test_write_questions_round_trips_and_leaves_no_temp_file(tmp_path):
    qs = [Question("q1", "custom", "Which is longer, the Ostrel or the Kaviss?", ("Ostrel",),
                   "comparison", (Paragraph("Ostrel River", "The Ostrel is 400 km long.", True),
                                  Paragraph("Kaviss River", "The Kaviss runs 90 km. Ünïcode ✓",
                                            True))),
          Question("q2", "custom", "Yes or no?", ("yes", "y"), None,
                   (Paragraph("T", "text", True),))]
    out = write_questions(qs, tmp_path / "sub" / "rt.jsonl")
    assert load_questions(out) == qs
    assert [p.name for p in out.parent.iterdir()] == ["rt.jsonl"]


def test_real_shared_hotpotqa_subset_loads_with_limit(shared_data_dir):
    # shared_data_dir skips on a machine without the benchmarks, and fails under CI.
    qs = load_questions(shared_data_dir / "hotpotqa.jsonl", limit=25)
    assert len(qs) == 25
    assert all(q.dataset == "hotpotqa" and q.answers and q.supporting_titles for q in qs)
    assert len({q.id for q in qs}) == 25


def test_split_questions_is_disjoint_covering_and_deterministic():
    from dynakrag_lite.data.library import build_library
    qs = build_library(30, seed=1)
    train, evals = split_questions(qs, 10, seed=7)
    assert len(evals) == 10 and len(train) == 20
    assert not {q.id for q in train} & {q.id for q in evals}
    assert {q.id for q in train} | {q.id for q in evals} == {q.id for q in qs}
    assert split_questions(qs, 10, seed=7) == (train, evals)
    assert split_questions(qs, 10, seed=8)[1] != evals
