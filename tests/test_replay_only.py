"""Replay-only mode ($DYNAKRAG_REPLAY_ONLY=1, evaluate --replay-only): a call missing from the
LLM call cache stops the run with an error naming the question, instead of generating."""
from __future__ import annotations

import json

import pytest

from dynakrag_lite.config import RunSettings
from dynakrag_lite.experiments import run as experiments
from dynakrag_lite.generators import CachedGenerator, CallCache, ReplayMissError
from helpers import ScriptedGenerator, require_model

MSGS = [{"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Documents:\n[1] Paris ...\nQuestion: Where was the "
                                    "founder of the label born?\nAnswer:"}]


def test_miss_raises_naming_the_question_and_never_generates(monkeypatch, tmp_path):
    inner = ScriptedGenerator()
    gen = CachedGenerator(inner, CallCache(tmp_path / "c.sqlite"))
    monkeypatch.setenv("DYNAKRAG_REPLAY_ONLY", "1")
    with pytest.raises(ReplayMissError, match="Question: Where was the founder of the label"):
        gen.generate(MSGS)
    assert inner.calls == [] and len(gen.cache) == 0


def test_hit_still_replays_in_replay_only_mode(monkeypatch, tmp_path):
    gen = CachedGenerator(ScriptedGenerator(), CallCache(tmp_path / "c.sqlite"))
    first = gen.generate(MSGS)  # recorded with the mode off
    monkeypatch.setenv("DYNAKRAG_REPLAY_ONLY", "true")
    again = gen.generate(MSGS)
    assert again.cached and again.text == first.text


@pytest.mark.parametrize("value", ["", "0", "no"])
def test_mode_off_generates_on_a_miss(monkeypatch, tmp_path, value):
    monkeypatch.setenv("DYNAKRAG_REPLAY_ONLY", value)
    gen = CachedGenerator(ScriptedGenerator(), CallCache(tmp_path / "c.sqlite"))
    assert not gen.generate(MSGS).cached


def test_option_scoring_miss_raises_in_replay_only_mode(monkeypatch, tmp_path):
    from dynakrag_lite.sufficiency import score_options

    class Scorer(ScriptedGenerator):
        def option_logprobs(self, msgs, options, mode):
            raise AssertionError("the model must not be asked")

    gen = CachedGenerator(Scorer(), CallCache(tmp_path / "c.sqlite"))
    monkeypatch.setenv("DYNAKRAG_REPLAY_ONLY", "1")
    with pytest.raises(ReplayMissError, match="option scoring"):
        score_options(gen, MSGS, ["Yes", "No"])


def test_a_replay_miss_stops_the_run_instead_of_writing_an_error_row(monkeypatch,
                                                                     library_questions):
    q = library_questions[0]

    def miss(*a, **k):
        raise ReplayMissError("replay-only: not in the call cache")

    monkeypatch.setattr(experiments, "run_method", miss)
    with pytest.raises(ReplayMissError, match=f"question {q.id}"):
        experiments._run_question(q, RunSettings(method="fixed_k", fixed_k=3, seed=0), None,
                                  None, None)


def test_evaluate_replay_only_flag_exits_with_the_question(capsys, tmp_path, monkeypatch):
    """An empty call cache (this test's own): the first question's first call misses, the
    CLI exits 2 naming it, and no error row is written."""
    require_model("smollm2-135m")
    from dynakrag_lite.experiments import cli
    monkeypatch.setenv("DYNAKRAG_REPLAY_ONLY", "0")  # the flag sets it: restored after the test
    out = tmp_path / "run"
    code = cli.main(["evaluate", "--data", "library", "--method", "fixed_k", "--fixed-k", "3",
                     "--generator", "smollm2-135m", "--limit", "2", "--out", str(out),
                     "--replay-only"])
    err = capsys.readouterr().err
    assert code == 2 and "replay-only" in err and "question " in err
    preds = out / "predictions.jsonl"
    rows = [json.loads(x) for x in preds.read_text().splitlines()] if preds.exists() else []
    assert not any("error" in r for r in rows)
