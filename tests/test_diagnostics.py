"""diagnostics.run_behaviour / summarise_runs: what a run's methods did, counted from
hand-made predictions rows whose answers are known."""
import json

import pytest

from dynakrag_lab.studies.diagnostics import run_behaviour, summarise_runs

DOCS = [{"id": "g1", "gold": True}, {"id": "d1", "gold": False}, {"id": "g2", "gold": True},
        {"id": "d2", "gold": False}]


def _row(qid, method, trace, **kw):
    return {"id": qid, "method": method, "docs": DOCS, "trace": trace, **kw}


def test_counts_acquisition_hits_verdicts_and_gaps_per_question():
    rows = [
        _row("q1", "dynakrag", [
            {"action": "retrieve_more", "added": ["g1", "d1"]},
            {"action": "sufficiency_check", "sufficient": False, "gap": "the birthplace"},
            {"action": "gap_query", "added": ["g2"]},
            {"action": "sufficiency_check", "sufficient": True}],
             compression={"n_valid": 3, "n_snippets": 4}),
        _row("q2", "dynakrag", [{"action": "gap_query", "added": ["d2"]}],
             compression={"n_valid": 1, "n_snippets": 4}),
        {"id": "q3", "error": "timeout"},  # not a question the method answered
    ]
    b = run_behaviour(rows)
    assert b["questions"] == 2
    assert b["actions_per_question"] == {"gap_query": 1.0, "retrieve_more": 0.5,
                                         "sufficiency_check": 1.0}
    assert b["added_gold_share"] == {"retrieve_more": 0.5, "gap_query": 0.5}
    assert b["actions_with_gold_hit"] == {"retrieve_more": 1.0, "gap_query": 0.5}
    assert b["sufficiency_verdicts"] == {"insufficient": 1, "sufficient": 1}
    assert b["gaps_written_per_question"] == 0.5
    assert b["snippet_validity"] == pytest.approx(4 / 8)
    assert "ircot_iterations_per_question" not in b


def test_ircot_iterations_and_self_ask_searches():
    ircot = [_row("q1", "ircot", [{"action": "retrieve"}, {"action": "cot_step"},
                                  {"action": "retrieve"}, {"action": "cot_step"}]),
             _row("q2", "ircot", [{"action": "retrieve"}, {"action": "cot_step"}])]
    assert run_behaviour(ircot)["ircot_iterations_per_question"] == 1.5
    sa = [_row("q1", "self_ask", [{"action": "retrieve"}, {"action": "follow_up"},
                                  {"action": "retrieve"}, {"action": "intermediate_answer"}])]
    b = run_behaviour(sa)
    assert b["self_ask_searches_per_question"] == 2.0
    assert b["self_ask_follow_ups_per_question"] == 1.0


def test_summarise_runs_reads_the_latest_row_of_each_question(tmp_path):
    d = tmp_path / "ircot"
    d.mkdir()
    rows = [{"id": "q1", "error": "boom"},
            _row("q1", "ircot", [{"action": "cot_step"}, {"action": "cot_step"}])]
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = summarise_runs(tmp_path)
    assert list(out) == ["ircot"] and out["ircot"]["questions"] == 1
    assert out["ircot"]["ircot_iterations_per_question"] == 2.0
    assert "action_gold_hits" in out["ircot"]


def test_snippet_validity_is_read_from_the_llm_compression_trace_note():
    rows = [_row("q1", "uniform", [
        {"action": "retrieve_more", "added": ["g1"]},
        {"action": "compress_answer_evidence",
         "note": "2 snippets (llm; 2/3 valid from docs [1, 2])"}]),
        _row("q2", "uniform", [{"action": "compress_answer_evidence",
                                "note": "4 snippets (llm; 1/4 valid from docs [1]); "
                                        "fallback_to_docs: too few valid snippets"}]),
        _row("q3", "dynakrag", [{"action": "compress_answer_evidence",
                                 "note": "3 snippets (extractive; 3/3 valid from docs [1])"}])]
    assert run_behaviour(rows)["snippet_validity"] == round(3 / 7, 3)


def test_snippet_validity_and_drop_reasons_are_read_from_the_structured_record_first():
    """A step with a ``compression`` record is read from it, not from its note (the two
    disagree here on purpose); a step without one (committed rows) falls back to the note."""
    new = {"action": "compress_answer_evidence",
           "note": "2 snippets (llm; 9/9 valid from docs [1, 2])",  # ignored: record wins
           "compression": {"method": "llm", "n_parsed": 4, "n_valid": 1,
                           "dropped": {"template": 2, "too_short": 0, "no_match": 1,
                                       "duplicate": 0},
                           "fallback_to_docs": True, "fallback_reason": "1 valid < 2"}}
    old = {"action": "compress_answer_evidence",
           "note": "2 snippets (llm; 2/3 valid from docs [1, 2])"}
    extractive = {"action": "compress_answer_evidence",
                  "note": "3 snippets (extractive; 3/3 valid from docs [1])",
                  "compression": {"method": "extractive", "n_parsed": 3, "n_valid": 3,
                                  "dropped": {}}}
    rows = [_row("q1", "uniform", [new]), _row("q2", "uniform", [old]),
            _row("q3", "dynakrag", [extractive])]
    b = run_behaviour(rows)
    assert b["snippet_validity"] == round((1 + 2) / (4 + 3), 3)
    # drop reasons come only from the structured record (the old note has none)
    assert b["snippet_drop_reasons"] == {"duplicate": 0, "no_match": 1, "template": 2,
                                         "too_short": 0}
    only_old = run_behaviour([_row("q2", "uniform", [old])])
    assert only_old["snippet_validity"] == round(2 / 3, 3)
    assert "snippet_drop_reasons" not in only_old


def test_compression_trace_record_survives_json_and_matches_the_note():
    """What finish() writes for a compression step: Compression.stats in the StepTrace,
    through predictions.jsonl (json round trip) back to the same counts as the note says."""
    from dynakrag_lite.compression import build_compression
    from dynakrag_lite.controller import StepTrace
    from dynakrag_lab.studies.diagnostics import _compression_from_trace
    from dynakrag_lite.state import RetrievedDoc
    docs = [RetrievedDoc("a", "A", "The bridge was opened in 1932 by the mayor of the town.",
                         0.9, "retrieve_more", 0),
            RetrievedDoc("b", "B", "The mayor was born in Lyon and studied law in Paris.",
                         0.8, "retrieve_more", 0)]
    parsed = ["[1] The bridge was opened in 1932 by the mayor",
              "[2] The mayor was born in Lyon and studied law",
              "[2] snippet", "[1] a b", "[2] The moon is made of green cheese entirely",
              "[1] The bridge was opened in 1932 by the mayor"]
    comp = build_compression(parsed, "raw", None, docs)
    step = StepTrace(step=3, action="compress_answer_evidence",
                     valid=("compress_answer_evidence",), scores={}, added=(),
                     note=comp.note, compression=comp.stats)
    back = json.loads(json.dumps(step.to_json()))
    assert back["compression"] == {"method": "llm", "n_parsed": 6, "n_valid": 2,
                                   "dropped": {"template": 1, "too_short": 1, "no_match": 1,
                                               "duplicate": 1},
                                   "fallback_to_docs": False, "fallback_reason": ""}
    structured = _compression_from_trace([back])
    del back["compression"]  # what an old row holds: the note alone
    from_note = _compression_from_trace([back])
    assert from_note == {"n_valid": 2, "n_parsed": 6}
    assert {k: structured[k] for k in from_note} == from_note
    # a step without a record (every other action) serialises as before
    assert "compression" not in StepTrace(0, "retrieve_more", (), {}, ()).to_json()
