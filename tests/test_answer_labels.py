"""Answer labels for saved trajectories (dynakrag_lab.studies.answer_labels and
python -m dynakrag_lab.studies.answer_labels; their format, merge and training with them:
dynakrag_lab.studies.answer_labels.files): a replay along the chosen actions gives
collection's prefixes and answer F1s, resumably, one JSONL row per question.

No model runs here: the reader is a fake whose replies depend on the prompt (sufficiency
verdicts and rewrites hashed from it, so the rollouts depend on every reply; the answer right
exactly when the gold answer is in the shown documents, so F1 varies). The retriever is the
real dense one on the embedded library.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import dynakrag_lite.pipeline as pipeline_mod
from dynakrag_lite.config import ControlConfig, Environment
from dynakrag_lite.data.sources import load_dataset
from dynakrag_lite.experiments.cli import main as cli_main
from dynakrag_lite.features import STATE_FEATURE_NAMES
from dynakrag_lite.generators.base import Generation
from dynakrag_lite.policy import Policy
from dynakrag_lite.storage import sha256_file
from dynakrag_lite.training.files import load_training_data, save_training_data
from dynakrag_lite.trajectories import collect
from dynakrag_lab.studies.answer_labels.files import (AnswerLabelError, merge_answer_labels,
                                          read_label_file, row_truncated)
from dynakrag_lab.studies.answer_labels import (label_questions, make_header, plan_labels,
                                                with_answer_labels)
from dynakrag_lab.studies.diagnosis import stop_auc

from helpers import LAB_SCRIPTS, load_script


class Reader:
    """A fake reader: replies hashed from the prompt; the answer is the gold one when it is in
    the documents shown (and the hash allows), else a wrong one. Records every prompt."""
    spec = "scripted"
    model_id = "fake-reader"

    def __init__(self, questions) -> None:
        self.gold = {q.question: q.answers[0] for q in questions if q.answers}
        self.prompts: list[str] = []

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        text = "\n".join(m["content"] for m in messages)
        self.prompts.append(text)
        h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
        user = messages[-1]["content"]
        if "contain every fact" in user:
            reply = "SUFFICIENT" if h % 3 == 0 else f"INSUFFICIENT: founder {h % 997}"
        elif "new search query" in user:
            reply = f"label founded {h % 997}"
        elif "Snippets:" in user or "Facts:" in user:
            reply = f"- [1] fact {h % 997}"
        else:
            docs, _, rest = user.partition("\n\nQuestion: ")
            gold = self.gold.get(rest.split("\n", 1)[0], "")
            reply = f"Answer: {gold}" if gold and gold in docs and h % 4 else "Answer: nobody"
        return Generation(reply, len(text) // 4, len(reply.split()), 0.0)


def asked_about(reader: Reader, questions) -> set[str]:
    """The ids of the questions whose text is in a prompt the reader was asked."""
    return {q.id for q in questions if any(q.question in p for p in reader.prompts)}


def env_for(retriever, reader) -> Environment:
    return Environment(retriever, reader, ControlConfig(use_spacy=False, doc_chars=None))


HEADER = make_header("0" * 64, "python -m dynakrag_lite train --data library", "fake-reader")


@pytest.fixture(scope="module")
def world(library_questions, library_retriever, tmp_path_factory):
    """6 questions collected twice: without answer calls (saved and read back, as a file to
    label) and with them on every question (the reference)."""
    qs = library_questions[:6]
    folder = tmp_path_factory.mktemp("labels")
    bare = collect(qs, env_for(library_retriever, Reader(qs)), progress=False,
                   continuation="f1", answer_questions=0)
    save_training_data(bare, folder / "t.npz")
    full = collect(qs, env_for(library_retriever, Reader(qs)), progress=False,
                   continuation="f1")
    return qs, load_training_data(folder / "t.npz"), full


def label(world, retriever, path, qids=None, data=None, **kw):
    qs, saved, _ = world
    reader = Reader(qs)
    summary = label_questions(data or saved, {q.id: q for q in qs},
                              env_for(retriever, reader), path, kw.pop("header", HEADER),
                              qids if qids is not None else saved.questions, progress=False,
                              **kw)
    return reader, summary


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()[1:]]


def without_seconds(text: str) -> list[dict]:
    """A labels file's lines without the rows' timing, the one field a redo may change."""
    return [{k: v for k, v in json.loads(x).items() if k != "seconds"}
            for x in text.splitlines()]


def by_q(prefixes) -> dict[str, list]:
    out: dict[str, list] = {}
    for p in prefixes:
        out.setdefault(p.qid, []).append(p)
    return out


# -- (a) the replay is collection ---------------------------------------------------------------
def test_replay_reproduces_collection_s_prefixes_and_answer_f1s(world, library_retriever,
                                                                 tmp_path):
    qs, saved, full = world
    assert all(math.isnan(p.f1_now) for p in saved.prefixes)
    path = tmp_path / "labels.jsonl"
    reader, summary = label(world, library_retriever, path)
    assert summary["labelled"] == len(qs) and summary["not_reproduced"] == []
    got = rows(path)
    assert [r["qid"] for r in got] == saved.questions
    ref = by_q(full.prefixes)
    f1s = []
    for r in got:
        assert r["reproduced"] is True and r["mismatch"] is None and r["seconds"] >= 0
        ps = ref[r["qid"]]
        assert [x["step"] for x in r["prefixes"]] == [p.step for p in ps]
        for x, p in zip(r["prefixes"], ps):
            assert x["sr_now"] == p.sr_now and x["f1_now"] == p.f1_now
            assert x["answer_tokens"] == p.answer_tokens
            # what the replay saw is recorded too: the state as collection built it, the
            # ledger's tokens and the reader's answer (the fake one's, F1 from it)
            assert x["features"] == p.features.tolist() and x["tokens"] == p.tokens
            assert x["answer"] in ("nobody", *next(q.answers for q in qs if q.id == r["qid"]))
            f1s.append(x["f1_now"])
    assert 0.0 in f1s and 1.0 in f1s  # the fake reader's F1 varies
    # no counterfactual branch was run again: fewer calls than collection made
    collecting = Reader(qs)
    collect(qs, env_for(library_retriever, collecting), progress=False, continuation="f1")
    assert 0 < len(reader.prompts) < len(collecting.prompts)
    header = json.loads(path.read_text().splitlines()[0])
    assert header["kind"] == "answer_f1" and header["npz_sha256"] == "0" * 64


# -- (e) merging ---------------------------------------------------------------------------------
def test_with_answer_labels_fills_exactly_the_labelled_questions_with_collection_s_gains(
        world, library_retriever, tmp_path, capsys):
    qs, saved, full = world
    path = tmp_path / "labels.jsonl"
    chosen = saved.questions[1:4]
    label(world, library_retriever, path, qids=chosen)
    merged, counts = merge_answer_labels(saved, path)
    assert (counts["labelled"], counts["missing"], counts["not_reproduced"]) == (3, 3, 0)
    ref, got = by_q(full.prefixes), by_q(merged.prefixes)
    for qid in saved.questions:
        for p, r in zip(got[qid], ref[qid]):
            if qid in chosen:
                assert (p.f1_now, p.f1_end, p.gain, p.answer_tokens) == \
                    (r.f1_now, r.f1_end, r.gain, r.answer_tokens)
            else:
                assert math.isnan(p.f1_now) and math.isnan(p.gain)
    assert all(math.isnan(p.f1_now) for p in saved.prefixes)  # the input is not changed
    capsys.readouterr()
    again = with_answer_labels(saved, path)
    assert "labelled 3" in capsys.readouterr().err
    assert [p.gain for p in again.prefixes if p.qid in chosen] == \
        [p.gain for p in merged.prefixes if p.qid in chosen]
    # the stop AUC's F1 part now sees those questions
    assert stop_auc(merged, folds=2, rf={"n_estimators": 5})["f1"]["n_questions"] == 3
    with pytest.raises(AnswerLabelError, match="npz_sha256"):
        merge_answer_labels(saved, path, npz_sha256="f" * 64)


# -- (b) resume ----------------------------------------------------------------------------------
def test_a_resume_skips_finished_questions_and_asks_the_reader_nothing_for_them(
        world, library_retriever, tmp_path):
    qs, saved, _ = world
    path = tmp_path / "labels.jsonl"
    first, _ = label(world, library_retriever, path, qids=saved.questions[:2])
    assert asked_about(first, qs) == set(saved.questions[:2])
    before = path.read_bytes()
    assert plan_labels(saved, read_label_file(path).rows).todo == saved.questions[2:]
    second, summary = label(world, library_retriever, path)
    assert summary["skipped_in_file"] == 2 and summary["labelled"] == 4
    assert asked_about(second, qs) == set(saved.questions[2:])
    assert path.read_bytes().startswith(before)  # earlier lines never rewritten
    assert [r["qid"] for r in rows(path)] == saved.questions
    third, summary = label(world, library_retriever, path)
    assert summary["labelled"] == 0 and third.prompts == []


# -- (c) damaged files ---------------------------------------------------------------------------
def test_a_truncated_last_line_is_reported_and_its_question_redone(world, library_retriever,
                                                                  tmp_path, capsys):
    qs, saved, _ = world
    path = tmp_path / "labels.jsonl"
    label(world, library_retriever, path, qids=saved.questions[:3])
    good = path.read_bytes()
    path.write_bytes(good[:-25])  # killed while writing question 3's row (line 4)
    capsys.readouterr()
    reader, summary = label(world, library_retriever, path, qids=saved.questions[:3])
    err = capsys.readouterr().err
    assert f"{path}: line 4 is truncated or corrupt" in err and summary["dropped_line"]
    assert asked_about(reader, qs) == {saved.questions[2]}
    # the same row, written again (its wall-clock "seconds" may differ by a hundredth)
    assert without_seconds(path.read_text()) == without_seconds(good.decode())
    # a complete last row without its newline is kept (not redone) and the newline added
    path.write_bytes(good[:-1])
    reader, summary = label(world, library_retriever, path, qids=saved.questions[:4])
    assert asked_about(reader, qs) == {saved.questions[3]} and summary["dropped_line"] is None
    assert [r["qid"] for r in rows(path)] == saved.questions[:4]


def test_a_corrupt_line_before_the_last_is_an_error_naming_file_and_line(
        world, library_retriever, tmp_path):
    _, saved, _ = world
    path = tmp_path / "labels.jsonl"
    label(world, library_retriever, path, qids=saved.questions[:3])
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2][:40] + "\n"
    path.write_text("".join(lines))
    damaged = path.read_bytes()
    with pytest.raises(AnswerLabelError, match=f"{path}: line 3 is corrupt"):
        label(world, library_retriever, path)
    with pytest.raises(AnswerLabelError, match="line 3"):
        merge_answer_labels(saved, path)
    assert path.read_bytes() == damaged


# -- (d) another header --------------------------------------------------------------------------
@pytest.mark.parametrize("field, value", [("command", "python -m dynakrag_lite train --seed 1"),
                                          ("npz_sha256", "1" * 64),
                                          ("generator_model_id", "other-reader")])
def test_a_resume_under_another_header_is_refused_and_the_file_unchanged(
        world, library_retriever, tmp_path, field, value):
    _, saved, _ = world
    path = tmp_path / "labels.jsonl"
    label(world, library_retriever, path, qids=saved.questions[:1])
    before = path.read_bytes()
    with pytest.raises(AnswerLabelError) as e:
        label(world, library_retriever, path, header={**HEADER, field: value})
    msg = str(e.value)
    assert str(path) in msg and repr(field) in msg and repr(value) in msg \
        and repr(HEADER[field]) in msg
    assert path.read_bytes() == before


# -- (f) a replay that does not reproduce --------------------------------------------------------
def test_a_non_reproducing_question_is_flagged_not_raised_and_left_out(world, library_retriever,
                                                                       tmp_path):
    qs, saved, full = world
    tampered = copy.deepcopy(saved)
    victim = saved.questions[2]
    first = next(p for p in tampered.prefixes if p.qid == victim)
    first.features[STATE_FEATURE_NAMES.index("n_docs")] += 1
    path = tmp_path / "labels.jsonl"
    _, summary = label(world, library_retriever, path, data=tampered)
    assert [f["qid"] for f in summary["not_reproduced"]] == [victim]
    row = {r["qid"]: r for r in rows(path)}[victim]
    assert row["reproduced"] is False and row["prefixes"]  # labels kept, flagged
    assert row["mismatch"]["field"] == "features.n_docs" and row["mismatch"]["prefix"] == 0
    assert row["mismatch"]["npz"] == row["mismatch"]["replay"] + 1
    # a row written before the replay recorded its own states stays out
    old = path.with_name("old.jsonl")
    lines = path.read_text().splitlines()
    strip = [json.loads(x) for x in lines[1:]]
    for r in strip:
        for x in r["prefixes"]:
            del x["features"], x["tokens"], x["answer"]
    old.write_text("\n".join([lines[0]] + [json.dumps(r) for r in strip]) + "\n")
    merged, counts = merge_answer_labels(tampered, old)
    assert counts["labelled"] == len(qs) - 1 and counts["not_reproduced"] == 1
    assert counts["replayed"] == 0
    assert all(math.isnan(p.f1_now) for p in merged.prefixes if p.qid == victim)
    # with them, the question counts as the path the replay took (here collection's own,
    # the file's features having been tampered with), gains as collection sets them
    merged, counts = merge_answer_labels(tampered, path)
    assert counts["labelled"] == len(qs) - 1 and counts["replayed"] == 1
    assert counts["not_reproduced"] == 0
    got, ref = by_q(merged.prefixes)[victim], by_q(full.prefixes)[victim]
    assert [(p.step, p.sr_now, p.f1_now, p.tokens, p.gain, p.f1_end) for p in got] == \
        [(p.step, p.sr_now, p.f1_now, p.tokens, p.gain, p.f1_end) for p in ref]
    assert all((a.features == b.features).all() for a, b in zip(got, ref))
    assert [p.qid for p in merged.prefixes] == [p.qid for p in tampered.prefixes]  # in place
    merged, counts = merge_answer_labels(tampered, path, include_unreproduced=True)
    assert counts["labelled"] == len(qs)
    assert [p.f1_now for p in merged.prefixes if p.qid == victim] == \
        [p.f1_now for p in full.prefixes if p.qid == victim]


def test_other_sufficiency_verdicts_make_the_replay_diverge_and_are_flagged(
        world, library_retriever, tmp_path):
    """A reader whose probe always says SUFFICIENT: where the rollout took sufficiency_check,
    the replayed states differ from the file's (a real divergence, not a tampered file)."""
    qs, saved, _ = world

    class Credulous(Reader):
        def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
            if "contain every fact" in messages[-1]["content"]:
                return Generation("SUFFICIENT", 10, 1, 0.0)
            return super().generate(messages, max_tokens, stop)
    path = tmp_path / "labels.jsonl"
    summary = label_questions(saved, {q.id: q for q in qs},
                              env_for(library_retriever, Credulous(qs)), path, HEADER,
                              saved.questions, progress=False, max_unreproduced=0)
    probed = {s.qid for s in saved.samples if s.chosen and s.action == "sufficiency_check"}
    flagged = {f["qid"] for f in summary["not_reproduced"]}
    assert probed and flagged and flagged <= probed
    assert all(f["field"].startswith(("features.", "sr_now", "n_prefixes", "action", "step"))
               for f in summary["not_reproduced"])
    # the diverged replays count as their own paths, except one an invalid action cut short
    merged, counts = merge_answer_labels(saved, path)
    whole = {f["qid"] for f in summary["not_reproduced"] if f["field"] != "action"}
    assert counts["replayed"] == len(whole) and counts["not_reproduced"] == len(flagged - whole)
    got = {r["qid"]: r for r in rows(path)}
    for qid in whole:
        ps = by_q(merged.prefixes)[qid]
        assert [p.sr_now for p in ps] == [x["sr_now"] for x in got[qid]["prefixes"]]
        assert ps[-1].gain == 0.0 and all(p.f1_end == ps[-1].f1_now for p in ps)


def test_non_reproduced_questions_in_a_row_stop_the_run(world, library_retriever, tmp_path):
    _, saved, _ = world
    tampered = copy.deepcopy(saved)
    for p in tampered.prefixes:
        p.sr_now = p.sr_now + 0.5
    path = tmp_path / "labels.jsonl"
    with pytest.raises(AnswerLabelError, match="last 2 questions did not reproduce"):
        label(world, library_retriever, path, data=tampered, max_unreproduced=2)
    assert [r["reproduced"] for r in rows(path)] == [False, False]  # kept, flagged
    assert rows(path)[0]["mismatch"]["field"] == "sr_now"


# -- (g) generations cut by the time limit; the latest row wins ----------------------------------
class Cutting(Reader):
    """Its first answer call about question ``qid`` comes back cut by the time limit (the text
    decoded so far, ``truncated``), as a paused or slow process's does."""

    def __init__(self, questions, qid: str) -> None:
        super().__init__(questions)
        self.victim = next(q.question for q in questions if q.id == qid)
        self.cut = 0

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        g = super().generate(messages, max_tokens, stop)
        if not self.cut and g.text.startswith("Answer:") and \
                f"Question: {self.victim}" in messages[-1]["content"]:
            self.cut += 1
            return replace(g, text=g.text[:8], truncated=True)
        return g


def test_a_row_with_a_cut_generation_is_no_label_and_the_next_run_redoes_it(
        world, library_retriever, tmp_path, capsys):
    qs, saved, full = world
    path = tmp_path / "labels.jsonl"
    victim = next(q for q in saved.questions if by_q(saved.prefixes).get(q))
    cutting = Cutting(qs, victim)
    capsys.readouterr()
    summary = label_questions(saved, {q.id: q for q in qs}, env_for(library_retriever, cutting),
                              path, HEADER, saved.questions, progress=False)
    assert cutting.cut == 1 and summary["truncated"] == [victim]
    assert f"question {victim}: 1 generation(s) hit the time limit" in capsys.readouterr().err
    got = {r["qid"]: r for r in rows(path)}
    assert {q: r["truncated"] for q, r in got.items()} == \
        {q: int(q == victim) for q in saved.questions}
    assert got[victim]["reproduced"] is True  # an answer changes no state: only the F1 is cut
    merged, counts = merge_answer_labels(saved, path)
    assert (counts["labelled"], counts["truncated"], counts["missing"]) == (len(qs) - 1, 1, 0)
    assert all(math.isnan(p.f1_now) for p in merged.prefixes if p.qid == victim)
    lf = read_label_file(path)
    assert lf.done == set(saved.questions) - {victim}
    plan = plan_labels(saved, lf.rows)
    assert (plan.todo, plan.redo_truncated, plan.in_label_file) == ([victim], 1, len(qs) - 1)
    # the next run redoes it: a new row, appended; it wins in the plan and the merge
    before = path.read_bytes()
    reader, summary = label(world, library_retriever, path)
    assert asked_about(reader, qs) == {victim}
    assert (summary["labelled"], summary["truncated"]) == (1, [])
    assert path.read_bytes().startswith(before)
    assert [r["qid"] for r in rows(path)] == saved.questions + [victim]
    lf = read_label_file(path)
    assert lf.rows[victim]["truncated"] == 0 and lf.lines[victim] == len(qs) + 2
    assert plan_labels(saved, lf.rows).todo == []
    merged, counts = merge_answer_labels(saved, path)
    assert (counts["labelled"], counts["truncated"]) == (len(qs), 0)
    assert [p.f1_now for p in merged.prefixes if p.qid == victim] == \
        [p.f1_now for p in by_q(full.prefixes)[victim]]


def test_the_latest_row_of_a_question_wins_even_when_it_is_the_cut_one(
        world, library_retriever, tmp_path):
    """A good row followed by a cut one: the question is not done (plan, resume) and has no
    label (merge); the earlier row is not used."""
    qs, saved, _ = world
    path = tmp_path / "labels.jsonl"
    label(world, library_retriever, path)
    first = rows(path)[0]
    with path.open("a") as fh:
        fh.write(json.dumps({**first, "truncated": 2}) + "\n")
    lf = read_label_file(path)
    assert row_truncated(lf.rows[first["qid"]]) == 2 and first["qid"] not in lf.done
    assert plan_labels(saved, lf.rows).todo == [first["qid"]]
    _, counts = merge_answer_labels(saved, path)
    assert (counts["labelled"], counts["truncated"]) == (len(qs) - 1, 1)
    reader, summary = label(world, library_retriever, path)
    assert asked_about(reader, qs) == {first["qid"]} and summary["skipped_in_file"] == len(qs) - 1


def test_rows_written_before_truncated_existed_are_labels(world, library_retriever, tmp_path):
    qs, saved, full = world
    path = tmp_path / "labels.jsonl"
    label(world, library_retriever, path)
    lines = path.read_text().splitlines()
    old = [lines[0]] + [json.dumps({k: v for k, v in json.loads(x).items() if k != "truncated"})
                        for x in lines[1:]]
    path.write_text("\n".join(old) + "\n")
    lf = read_label_file(path)
    assert lf.done == set(saved.questions) and "truncated" not in lf.rows[saved.questions[0]]
    assert plan_labels(saved, lf.rows).todo == []
    reader, summary = label(world, library_retriever, path)
    assert reader.prompts == [] and summary["labelled"] == 0
    merged, counts = merge_answer_labels(saved, path)
    assert (counts["labelled"], counts["truncated"]) == (len(qs), 0)
    assert [p.f1_now for p in merged.prefixes] == [p.f1_now for p in full.prefixes]
    # a count that is not one is a corrupt line
    bad = json.loads(old[1])
    path.write_text("\n".join([old[0], json.dumps({**bad, "truncated": True}), *old[2:]]) + "\n")
    with pytest.raises(AnswerLabelError, match="line 2 is corrupt.*'truncated' must be a count"):
        merge_answer_labels(saved, path)


# -- the script, on a real train --save-data run -------------------------------------------------
TRAIN = ["train", "--data", "library", "--generator", "scripted", "--n-eval", "10",
         "--limit", "6", "--trees", "10", "--min-leaf", "2", "--tune-folds", "0",
         "--sufficiency-signal", "learned", "--calibration-questions", "4"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A train run with answer calls on its first 2 questions (--save-data), and the same run
    with answer calls on all (the reference)."""
    folder = tmp_path_factory.mktemp("trained")
    readers: list[Reader] = []

    def make(spec, cache=True, **kw):
        readers.append(Reader(load_dataset("library")))
        return readers[-1]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline_mod, "make_generator", make)
        for name, n in (("t", "2"), ("ref", "0")):
            assert cli_main([*TRAIN, "--continuation-questions", n, "--out",
                             str(folder / f"{name}.joblib"), "--save-data",
                             str(folder / f"{name}.npz")]) == 0
    return folder


@pytest.fixture
def reader_factory(monkeypatch):
    made: list[Reader] = []

    def make(spec, cache=True, **kw):
        made.append(Reader(load_dataset("library")))
        return made[-1]
    monkeypatch.setattr(pipeline_mod, "make_generator", make)
    return made


def last_json(text: str) -> dict:
    return json.loads([x for x in text.splitlines() if x.startswith("{")][-1])


def test_script_labels_a_saved_run_as_collecting_with_every_answer_call_would(
        trained, reader_factory, tmp_path, capsys):
    script = load_script("answer_labels", folder=LAB_SCRIPTS)
    npz, out = trained / "t.npz", tmp_path / "t.answer-f1.jsonl"
    capsys.readouterr()
    assert script.main([str(npz), "--out", str(out), "--dry-run"]) == 0
    plan = last_json(capsys.readouterr().out)
    assert (plan["to_label"], plan["skipped_labelled_in_npz"]) == (4, 2)
    assert not out.exists() and reader_factory == []  # no model, no file
    assert script.main([str(npz), "--out", str(out), "--stop", "4", "--no-progress"]) == 0
    assert last_json(capsys.readouterr().out)["labelled"] == 2
    # resumed with the command from the policy: the rest only
    assert script.main([str(npz), "--out", str(out), "--no-progress", "--policy",
                        str(trained / "t.joblib")]) == 0
    report = last_json(capsys.readouterr().out)
    assert report["labelled"] == 2 and report["n_not_reproduced"] == 0
    header = json.loads(out.read_text().splitlines()[0])
    assert header["npz_sha256"] == sha256_file(npz) and header["generator_model_id"] == \
        "fake-reader" and "--continuation-questions 2" in header["command"]
    saved, ref = load_training_data(npz), load_training_data(trained / "ref.npz")
    merged = with_answer_labels(saved, out, npz_sha256=sha256_file(npz))
    assert [(p.qid, p.step) for p in merged.prefixes] == [(p.qid, p.step) for p in ref.prefixes]
    for p, r in zip(merged.prefixes, ref.prefixes):
        assert (p.f1_now, p.f1_end, p.gain) == (r.f1_now, r.f1_end, r.gain)
        assert np.array_equal(p.features, r.features)
    # --no-only-missing: the 2 answered questions too, whose F1s must agree with the file's
    assert script.main([str(npz), "--out", str(out), "--no-progress", "--no-only-missing"]) == 0
    assert last_json(capsys.readouterr().out)["labelled"] == 2
    _, counts = merge_answer_labels(saved, out)
    assert (counts["already_labelled"], counts["agree"], counts["disagree"]) == (2, 2, 0)


def test_script_redo_appends_a_row_for_a_finished_question_and_the_merge_uses_it(
        trained, reader_factory, tmp_path, capsys):
    script = load_script("answer_labels", folder=LAB_SCRIPTS)
    npz, out = trained / "t.npz", tmp_path / "l.jsonl"
    assert script.main([str(npz), "--out", str(out), "--no-progress"]) == 0
    saved, ref = load_training_data(npz), load_training_data(trained / "ref.npz")
    # its first row as written before "truncated" existed, with a wrong (say cut) answer's F1s
    lines = out.read_text().splitlines()
    first = json.loads(lines[1])
    qid = first["qid"]
    old = {k: v for k, v in first.items() if k != "truncated"}
    old["prefixes"] = [{**x, "f1_now": 0.25} for x in old["prefixes"]]
    out.write_text("\n".join([lines[0], json.dumps(old), *lines[2:]]) + "\n")
    merged, counts = merge_answer_labels(saved, out)  # an old row is kept as a label
    assert (counts["labelled"], counts["truncated"]) == (4, 0)
    assert {p.f1_now for p in merged.prefixes if p.qid == qid} == {0.25}
    before = out.read_bytes()
    capsys.readouterr()
    assert script.main([str(npz), "--out", str(out), "--dry-run", "--redo", qid]) == 0
    plan = last_json(capsys.readouterr().out)
    assert (plan["to_label"], plan["redo_requested"]) == (1, 1)
    # --stop 0: only the questions given to --redo
    assert script.main([str(npz), "--out", str(out), "--no-progress", "--stop", "0",
                        "--redo", qid]) == 0
    report = last_json(capsys.readouterr().out)
    assert (report["labelled"], report["redo_requested"], report["n_truncated"]) == (1, 1, 0)
    assert out.read_bytes().startswith(before)  # appended
    assert [r["qid"] for r in rows(out)][-1] == qid and len(rows(out)) == 5
    merged, counts = merge_answer_labels(saved, out)  # the new row wins
    assert (counts["labelled"], counts["truncated"]) == (4, 0)
    assert [p.f1_now for p in merged.prefixes if p.qid == qid] == \
        [p.f1_now for p in ref.prefixes if p.qid == qid]
    assert script.main([str(npz), "--out", str(out), "--dry-run", "--redo", "nope"]) == 2
    assert "--redo nope: not a question" in capsys.readouterr().err


def test_script_redo_unreproduced_relabels_old_non_reproduced_rows_only(
        trained, reader_factory, tmp_path, capsys):
    script = load_script("answer_labels", folder=LAB_SCRIPTS)
    npz, out = trained / "t.npz", tmp_path / "u.jsonl"
    assert script.main([str(npz), "--out", str(out), "--no-progress"]) == 0
    lines = out.read_text().splitlines()
    old = json.loads(lines[1])  # as an older run wrote a non-reproduced row
    old["reproduced"] = False
    old["mismatch"] = {"prefix": 0, "step": 1, "field": "sr_now", "npz": 0.5, "replay": 0.0}
    old["prefixes"] = [{k: v for k, v in x.items() if k not in ("features", "tokens", "answer")}
                       for x in old["prefixes"]]
    new = json.loads(lines[2])  # a non-reproduced row that recorded its states: not redone
    new["reproduced"] = False
    out.write_text("\n".join([lines[0], json.dumps(old), json.dumps(new), *lines[3:]]) + "\n")
    capsys.readouterr()
    assert script.main([str(npz), "--out", str(out), "--dry-run", "--stop", "0",
                        "--redo-unreproduced"]) == 0
    plan = last_json(capsys.readouterr().out)
    assert (plan["to_label"], plan["redo_requested"]) == (1, 1)
    assert script.main([str(npz), "--out", str(out), "--no-progress", "--stop", "0",
                        "--redo-unreproduced"]) == 0
    assert last_json(capsys.readouterr().out)["labelled"] == 1
    assert rows(out)[-1]["qid"] == old["qid"] and "features" in rows(out)[-1]["prefixes"][0]


def test_script_refuses_a_command_of_another_setup(trained, reader_factory, tmp_path, capsys):
    script = load_script("answer_labels", folder=LAB_SCRIPTS)
    cmd = load_training_data(trained / "t.npz").run["command"] + " --seed 14"
    out = tmp_path / "x.jsonl"
    capsys.readouterr()
    assert script.main([str(trained / "t.npz"), "--out", str(out), "--command", cmd]) == 2
    err = capsys.readouterr().err
    assert "another setup" in err and "seed" in err and not out.exists()


def test_train_from_data_merges_the_labels_and_records_them_in_the_policy(
        trained, reader_factory, tmp_path, capsys):
    script = load_script("answer_labels", folder=LAB_SCRIPTS)
    trainer = load_script("train_with_labels", folder=LAB_SCRIPTS)
    npz, labels = trained / "t.npz", tmp_path / "l.jsonl"
    assert script.main([str(npz), "--out", str(labels), "--no-progress"]) == 0
    base = [*TRAIN, "--continuation-questions", "2", "--from-data", str(npz)]
    assert cli_main([*base, "--out", str(tmp_path / "plain.joblib")]) == 0
    assert trainer.main(["--answer-labels", str(labels), *base[1:],
                         "--out", str(tmp_path / "lab.joblib")]) == 0
    plain, lab = Policy.load(tmp_path / "plain.joblib"), Policy.load(tmp_path / "lab.joblib")
    assert plain.meta["n_continuation_questions"] == 2
    assert lab.meta["n_continuation_questions"] == 6
    # with the labels, --continuation-questions need not repeat the collection's (moot);
    # without them it must (it says which questions carry F1)
    assert cli_main([*TRAIN, "--from-data", str(npz), "--out", str(tmp_path / "x0.joblib")]) == 2
    assert "continuation_questions" in capsys.readouterr().err
    assert trainer.main([*TRAIN[1:], "--from-data", str(npz), "--answer-labels", str(labels),
                         "--out", str(tmp_path / "lab0.joblib")]) == 0
    assert Policy.load(tmp_path / "lab0.joblib").meta["n_continuation_questions"] == 6
    rec = lab.meta["answer_labels"]
    assert rec["sha256"] == sha256_file(labels) and rec["file"].endswith("l.jsonl")
    assert (rec["labelled"], rec["missing"], rec["not_reproduced"]) == (4, 0, 0)
    assert rec["command"].startswith("python -m dynakrag_lab.studies.answer_labels.train "
                                     "--answer-labels")
    assert "--answer-labels" not in lab.meta["command"]  # the train part alone
    capsys.readouterr()
    assert trainer.main([*TRAIN[1:], "--answer-labels", str(labels),
                         "--out", str(tmp_path / "x.joblib")]) == 2
    assert "needs --from-data" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # not a flag of train itself
        cli_main([*TRAIN, "--from-data", str(npz), "--answer-labels", str(labels),
                  "--out", str(tmp_path / "x.joblib")])


def test_control_diagnosis_matches_labels_files_to_trajectories_by_sha256(trained, tmp_path):
    diag = load_script("control_diagnosis", folder=LAB_SCRIPTS)
    labels = tmp_path / "l.jsonl"
    header = make_header(sha256_file(trained / "t.npz"), "cmd", "fake-reader")
    labels.write_text(json.dumps(header) + "\n")
    npzs = [trained / "t.npz", trained / "ref.npz"]
    assert diag.labels_for(npzs, [labels]) == {trained / "t.npz": labels}
    other = tmp_path / "o.jsonl"
    other.write_text(json.dumps({**header, "npz_sha256": "2" * 64}) + "\n")
    with pytest.raises(ValueError, match="not among --trajectories"):
        diag.labels_for(npzs, [other])


def test_control_diagnosis_stop_section_studies_the_labelled_questions(
        trained, reader_factory, tmp_path):
    labels = tmp_path / "l.jsonl"
    script = load_script("answer_labels", folder=LAB_SCRIPTS)
    assert script.main([str(trained / "t.npz"), "--out", str(labels), "--no-progress"]) == 0
    diag = load_script("control_diagnosis", folder=LAB_SCRIPTS)
    out = tmp_path / "d.json"
    assert diag.main(["--trajectories", str(trained / "t.npz"), "--answer-labels", str(labels),
                      "--sections", "stop", "--folds", "2", "--boot", "50",
                      "--out", str(out)]) == 0
    assert not out.exists()  # only section 9 ran: sections 1-7 are left as they were
    rep = json.loads((tmp_path / "d-stop.json").read_text())
    (key, r), = rep["results"].items()
    assert r["stop_targets"]["n_questions"] == 6  # 2 answered in collection + 4 labelled
    assert set(r["stop_targets"]["targets"]) == {f"{t}/own" for t in
                                                  ("sr", "f1", "f1_best", "f1_now")}
    assert "section 9" in (tmp_path / "d-stop.md").read_text()
