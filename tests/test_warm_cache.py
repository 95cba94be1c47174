"""data_scripts/warm_cache.py: a second process fills the LLM call cache for the questions a
long ``evaluate`` or ``train`` run reaches later, and the run then takes them from the cache.

No model runs here: ``make_generator`` is replaced by a fake reader behind the real call cache
(one SQLite file per phase, so each phase's live calls are counted on its own fake). Replies
are a hash of the prompt, so predictions differ between questions and a wrong prompt shows.
Every live call is attributed to the one evaluated (or training) question whose text it
contains. The retriever is the real dense one on the embedded library.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import dynakrag_lite.pipeline as pipeline_mod
from dynakrag_lite.experiments.cli import command_args, main
from dynakrag_lite.data.sources import load_dataset, split_questions
from dynakrag_lite.experiments.folder import read_predictions
from dynakrag_lite.generators import CachedGenerator, CallCache, Generation

from helpers import load_script, untimed

EVAL = ["evaluate", "--data", "library", "--generator", "scripted", "--limit", "6"]
N, START = 6, 3  # the run's 6 questions; questions 3.. are warmed
TRAIN = ["train", "--data", "library", "--generator", "scripted", "--n-eval", "10",
         "--limit", "6", "--trees", "10", "--min-leaf", "2", "--tune-folds", "0",
         "--sufficiency-signal", "learned", "--calibration-questions", "4",
         "--continuation-questions", "4"]


class FakeReader:
    """Replies by prompt kind, the content a hash of the whole prompt; records every prompt
    it is asked (the call cache asks it only on a miss)."""
    spec = "scripted"
    model_id = "fake-reader"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        text = "\n".join(m["content"] for m in messages)
        self.prompts.append(text)
        h = hashlib.sha256(text.encode()).hexdigest()
        user = messages[-1]["content"]
        if "contain every fact" in user:
            reply = "SUFFICIENT" if int(h, 16) % 3 == 0 else f"INSUFFICIENT: founder {h[:4]}"
        elif "new search query" in user:
            reply = f"label founded {h[:4]}"
        elif "Snippets:" in user or "Facts:" in user:
            reply = f"- [1] fact {h[:4]}\n- [2] fact {h[4:8]}"
        elif int(h, 16) % 2:
            reply = f"So the answer is: {h[:6]}."
        else:
            reply = f"The label {h[:6]} was founded in Paris."
        return Generation(reply, len(text) // 4, len(reply.split()), 0.0)


class Backend:
    """Stands in for ``make_generator``: the current fake behind the call cache file of the
    current phase."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.fake, self.cache = FakeReader(), folder / "unused.sqlite"

    def use(self, cache: str) -> FakeReader:
        """A fresh fake (its own call count) on the cache file ``cache``."""
        self.fake, self.cache = FakeReader(), self.folder / f"{cache}.sqlite"
        return self.fake

    def __call__(self, spec, cache=True, **kwargs):
        return CachedGenerator(self.fake, CallCache(self.cache))


@pytest.fixture
def backend(monkeypatch, tmp_path) -> Backend:
    b = Backend(tmp_path)
    monkeypatch.setattr(pipeline_mod, "make_generator", b)
    return b


@pytest.fixture(scope="module")
def warm():
    return load_script("warm_cache")


def by_question(prompts: list[str], questions: list[tuple[str, str]]) -> dict[str, set[str]]:
    """{question id: the prompts of its calls}; every call belongs to exactly one of
    ``questions`` (id, text)."""
    out: dict[str, set[str]] = {qid: set() for qid, _ in questions}
    for p in prompts:
        owners = [qid for qid, text in questions if text in p]
        assert len(owners) == 1, f"a call of {len(owners)} questions: {p[:300]}"
        out[owners[0]].add(p)
    return out


def rows(folder: Path) -> list[dict]:
    return read_predictions(folder / "predictions.jsonl")


def fingerprint(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())["fingerprint"]


# -- evaluate ----------------------------------------------------------------------------
# uniform: random valid actions, seeded per question and step. ircot on training questions
# 17..22: its demonstrations come from the rest of the training split, drawn for the whole
# list; a setup built for questions 20..22 alone (e.g. the run's command with --offset 20)
# would draw others there, and every prompt would differ.
@pytest.mark.parametrize("method, split, forward", [
    ("uniform", [], False), ("ircot", ["--split", "train", "--offset", "17"], True)])
def test_warmed_questions_are_replayed_by_the_run_with_the_same_predictions(
        backend, warm, tmp_path, capsys, method, split, forward):
    run = [*EVAL, "--method", method, *split]
    # The reference: the run without warming, on its own cache.
    cold = backend.use("cold")
    assert main([*run, "--out", str(tmp_path / "cold")]) == 0
    reference = rows(tmp_path / "cold")
    questions = [(r["id"], r["question"]) for r in reference]
    assert len(questions) == N and not any("error" in r for r in reference)
    cold_calls = by_question(cold.prompts, questions)
    assert all(cold_calls.values())
    head, tail = [i for i, _ in questions[:START]], [i for i, _ in questions[START:]]

    # The warming process, given the run's command as recorded.
    out, scratch = tmp_path / "run", tmp_path / "scratch"
    warmer = backend.use("shared")
    capsys.readouterr()
    assert warm.main(["evaluate", "--start", str(START), *(["--forward"] if forward else []),
                      "--scratch", str(scratch), "--", "python", "-m", "dynakrag_lite", *run,
                      "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["warmed"] == len(tail) and report["already_done"] == 0
    assert not out.exists()  # never the run's folder
    warmed = by_question(warmer.prompts, questions)
    assert [i for i in warmed if warmed[i]] == tail
    for i in tail:  # the very calls the run makes for these questions, no more, no fewer
        assert warmed[i] == cold_calls[i]
    assert [r["id"] for r in rows(scratch)] == (tail if forward else tail[::-1])

    # The run, on the warmed cache: no model call for questions 3.., the same predictions.
    canonical = backend.use("shared")
    assert main([*run, "--out", str(out)]) == 0
    live = by_question(canonical.prompts, questions)
    assert all(not live[i] for i in tail)
    assert all(live[i] == cold_calls[i] for i in head)
    got = rows(out)
    assert [untimed(r) for r in got] == [untimed(r) for r in reference]
    same = {r["id"]: untimed(r) for r in got}
    assert all(untimed(r) == same[r["id"]] for r in rows(scratch))
    assert fingerprint(scratch) == fingerprint(out)
    recorded = json.loads((scratch / "run.json").read_text())["command"]
    assert recorded.startswith("python data_scripts/warm_cache.py evaluate --start 3")


def test_questions_the_run_has_written_are_skipped_and_another_setup_is_refused(
        backend, warm, tmp_path, capsys):
    run = [*EVAL, "--method", "uniform"]
    out, scratch = tmp_path / "run", tmp_path / "scratch"
    backend.use("a")
    # The run has written its first 4 questions (same setup: --limit is not part of it).
    assert main([*run, "--limit", "4", "--out", str(out)]) == 0  # the last --limit counts
    done = [r["id"] for r in rows(out)]
    fake = backend.use("empty")
    capsys.readouterr()
    assert warm.main(["evaluate", "--start", "2", "--scratch", str(scratch), "--", *run,
                      "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["warmed"] == 2 and report["already_done"] == 2
    warmed = [r["id"] for r in rows(scratch)]
    assert len(warmed) == 2 and not set(warmed) & set(done)
    asked = by_question(fake.prompts, [(r["id"], r["question"]) for r in rows(scratch)])
    assert all(asked.values())
    assert len(rows(out)) == 4  # the run's folder untouched

    # The run's folder records another setup (another seed): warming it is refused.
    fake = backend.use("empty2")
    capsys.readouterr()
    assert warm.main(["evaluate", "--start", "2", "--scratch", str(tmp_path / "s2"), "--",
                      *run, "--seed", "14", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "another setup" in err and "seed" in err
    assert fake.prompts == [] and not (tmp_path / "s2").exists()


def test_a_run_folder_of_another_question_list_is_refused_as_a_resume_would_be(
        backend, warm, tmp_path, capsys):
    """The run's folder was started on another split (another --split-seed): the same check
    as the run's resume refuses it, before any call, and neither folder is touched."""
    run = [*EVAL, "--method", "uniform"]
    out, scratch = tmp_path / "run", tmp_path / "scratch"
    backend.use("a")
    assert main([*run, "--limit", "2", "--split-seed", "1", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".lock"}
    fake = backend.use("empty")
    capsys.readouterr()
    assert warm.main(["evaluate", "--start", "2", "--scratch", str(scratch), "--", *run,
                      "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "another question list" in err and str(out / "run.json") in err
    assert "selection.split_seed (--split-seed): recorded 1, this command 0" in err
    assert fake.prompts == [] and not scratch.exists()
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".lock"} == before


@pytest.mark.parametrize("spelling", ["same", "other_spelling", "default_out"])
def test_scratch_folder_that_is_the_run_folder_is_refused(backend, warm, tmp_path, capsys,
                                                          monkeypatch, spelling):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    if spelling == "default_out":  # evaluate's default --out: runs/<dataset>-<method>
        out = tmp_path / "runs" / "library-uniform"
        scratch, out_args = "runs/library-uniform", []
    else:
        scratch = str(out) if spelling == "same" else str(tmp_path / "x" / ".." / "run") + "/"
        out_args = ["--out", str(out)]
    out.mkdir(parents=True)
    (out / "predictions.jsonl").write_text("")
    fake = backend.use("c")
    code = warm.main(["evaluate", "--start", "1", "--scratch", scratch, "--",
                      *EVAL, "--method", "uniform", *out_args])
    err = capsys.readouterr().err
    assert code == 2 and "is the run's --out folder" in err
    assert fake.prompts == []
    assert [p.name for p in out.iterdir()] == ["predictions.jsonl"]
    assert not (tmp_path / "runs" / "warm-cache").exists()


def test_start_outside_the_list_and_a_replay_only_run_are_refused(backend, warm, capsys,
                                                                  tmp_path):
    backend.use("d")
    assert warm.main(["evaluate", "--start", "6", "--scratch", str(tmp_path / "s"), "--",
                      *EVAL, "--method", "uniform"]) == 2
    assert "--start 6: the run has 6 questions" in capsys.readouterr().err
    assert warm.main(["evaluate", "--start", "1", "--", *EVAL, "--method", "uniform",
                      "--replay-only"]) == 2
    assert "nothing to warm" in capsys.readouterr().err


def test_the_run_command_is_read_as_recorded_or_bare():
    tail = ["--data", "library", "--method", "uniform"]
    for cmd in (["python", "-m", "dynakrag_lite", "evaluate", *tail], ["evaluate", *tail],
                tail):
        assert command_args("evaluate", cmd) == ["evaluate", *tail]
    with pytest.raises(ValueError, match="is 'train', not 'evaluate'"):
        command_args("evaluate", ["python", "-m", "dynakrag_lite", "train", *tail])


def test_default_scratch_folder_is_named_after_the_run_folder(warm, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert warm.default_scratch(Path("results/experiments/hotpotqa/m/ircot")) == \
        Path("runs/warm-cache/results-experiments-hotpotqa-m-ircot")
    assert warm.default_scratch(tmp_path / "runs" / "x") == Path("runs/warm-cache/runs-x")
    assert warm.default_scratch(Path("runs/hotpotqa-ircot")) != Path("runs/hotpotqa-ircot")


# -- train (what data_scripts/warm_training_cache.py did) --------------------------------
def test_train_mode_warms_the_training_questions_the_run_reaches_later(backend, warm,
                                                                      tmp_path, capsys):
    """Questions 2.. of the training list; 2 and 3 are within --continuation-questions 4
    (answer calls), 4 and 5 are not: the warming process must make exactly the run's calls."""
    train_qs = split_questions(load_dataset("library"), 10, 0)[0][:6]
    questions = [(q.id, q.question) for q in train_qs]
    cold = backend.use("cold")
    assert main([*TRAIN, "--out", str(tmp_path / "cold.joblib")]) == 0
    cold_calls = by_question(cold.prompts, questions)
    assert all(cold_calls.values())
    # answer calls (the reader's prompt: no probe, rewrite or compression) only on 0..3
    answers = {i for i, ps in cold_calls.items()
               if any("contain every fact" not in p and "new search query" not in p
                      and "Snippets:" not in p and "Facts:" not in p for p in ps)}
    assert answers == {i for i, _ in questions[:4]}

    warmer = backend.use("shared")
    capsys.readouterr()
    assert warm.main(["train", "--start", "2", "--", *TRAIN[1:],
                      "--out", str(tmp_path / "unused.joblib")]) == 0
    assert "warmed question 5" in capsys.readouterr().out
    assert not (tmp_path / "unused.joblib").exists()  # nothing but cache entries
    warmed = by_question(warmer.prompts, questions)
    assert [i for i in warmed if warmed[i]] == [i for i, _ in questions[2:]]
    for i, _ in questions[2:]:
        assert warmed[i] == cold_calls[i]

    canonical = backend.use("shared")
    assert main([*TRAIN, "--out", str(tmp_path / "run.joblib")]) == 0
    live = by_question(canonical.prompts, questions)
    assert [i for i in live if live[i]] == [i for i, _ in questions[:2]]


def test_train_mode_refuses_a_from_data_run(warm, capsys, tmp_path):
    assert warm.main(["train", "--start", "0", "--", *TRAIN,
                      "--from-data", str(tmp_path / "t.npz"), "--out", "p.joblib"]) == 2
    assert "nothing to warm" in capsys.readouterr().err
