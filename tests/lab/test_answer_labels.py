"""The answer-labels reader (dynakrag_lab.report.answer_labels): a labels file's rows merged
into saved trajectories give exactly the answer F1s and gains that collecting with every
answer call gives; a damaged, cut or foreign file is handled as its format says; and the
control diagnosis matches labels files to trajectories by sha256 and studies the labelled
questions.

No model runs here: the reader is a fake whose replies are hashed from the prompt (the answer
right only when the gold answer is in the shown documents, so F1 varies). The labels files are
written from a collection with every answer call, as the replay that produced the committed
labels wrote them (its code: git tag lab-answer-labels-study).
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

import dynakrag_lite.pipeline as pipeline_mod
from dynakrag_lite.config import ControlConfig, Environment
from dynakrag_lite.data.sources import load_dataset
from dynakrag_lite.experiments.cli import main as cli_main
from dynakrag_lite.generators.base import Generation
from dynakrag_lite.storage import sha256_file
from dynakrag_lite.training.files import load_training_data, save_training_data
from dynakrag_lite.trajectories import collect
from dynakrag_lab.report.answer_labels import (KIND, AnswerLabelError, merge_answer_labels,
                                               read_label_file, row_truncated)
from dynakrag_lab.studies.diagnosis import __main__ as diagnosis_cli
from dynakrag_lab.studies.diagnosis import stop_auc


class Reader:
    """A fake reader: replies hashed from the prompt; the answer is the gold one when it is in
    the documents shown (and the hash allows), else a wrong one."""
    spec = "scripted"
    model_id = "fake-reader"

    def __init__(self, questions) -> None:
        self.gold = {q.question: q.answers[0] for q in questions if q.answers}

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        text = "\n".join(m["content"] for m in messages)
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


def header(npz_sha256: str = "0" * 64) -> dict:
    return {"answer_labels": 1, "kind": KIND, "npz_sha256": npz_sha256,
            "command": "python -m dynakrag_lite train --data library",
            "generator_model_id": "fake-reader"}


def label_row(qid: str, prefixes, **kw) -> dict:
    """A reproduced question's row, its F1s those of ``prefixes`` (a full collection's)."""
    return {"qid": qid, "reproduced": True, "truncated": 0, "mismatch": None, "seconds": 0.5,
            "prefixes": [{"step": p.step, "sr_now": p.sr_now, "f1_now": p.f1_now,
                          "answer_tokens": p.answer_tokens} for p in prefixes], **kw}


def write_labels(path: Path, head: dict, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in [head, *rows]))
    return path


def by_q(prefixes) -> dict[str, list]:
    out: dict[str, list] = {}
    for p in prefixes:
        out.setdefault(p.qid, []).append(p)
    return out


@pytest.fixture(scope="module")
def world(library_questions, library_retriever, tmp_path_factory):
    """6 questions collected twice: without answer calls (saved and read back, the file to
    label) and with them on every question (the reference the labels are written from)."""
    qs = library_questions[:6]

    def env() -> Environment:
        return Environment(library_retriever, Reader(qs),
                           ControlConfig(use_spacy=False, doc_chars=None))
    folder = tmp_path_factory.mktemp("labels")
    bare = collect(qs, env(), progress=False, continuation="f1", answer_questions=0)
    save_training_data(bare, folder / "t.npz")
    full = collect(qs, env(), progress=False, continuation="f1")
    return load_training_data(folder / "t.npz"), full


def test_merge_fills_exactly_the_labelled_questions_with_collection_s_gains(world, tmp_path):
    saved, full = world
    ref = by_q(full.prefixes)
    chosen = saved.questions[1:4]
    path = write_labels(tmp_path / "l.jsonl", header(),
                        [label_row(q, ref[q]) for q in chosen])
    merged, counts = merge_answer_labels(saved, path)
    assert (counts["labelled"], counts["missing"], counts["not_reproduced"]) == (3, 3, 0)
    got = by_q(merged.prefixes)
    for qid in saved.questions:
        for p, r in zip(got[qid], ref[qid]):
            if qid in chosen:
                assert (p.f1_now, p.f1_end, p.gain, p.answer_tokens) == \
                    (r.f1_now, r.f1_end, r.gain, r.answer_tokens)
            else:
                assert math.isnan(p.f1_now) and math.isnan(p.gain)
    assert all(math.isnan(p.f1_now) for p in saved.prefixes)  # the input is not changed
    assert {p.f1_now for p in merged.prefixes if p.qid in chosen} != {0.0}  # F1 varies
    # the stop AUC's F1 part now sees those questions
    assert stop_auc(merged, folds=2, rf={"n_estimators": 5})["f1"]["n_questions"] == 3
    with pytest.raises(AnswerLabelError, match="npz_sha256"):
        merge_answer_labels(saved, path, npz_sha256="f" * 64)


def test_labels_of_other_trajectories_or_kind_are_refused(world, tmp_path):
    saved, full = world
    ref = by_q(full.prefixes)
    q = saved.questions[0]
    path = write_labels(tmp_path / "l.jsonl", header(), [label_row(q, ref[q][:-1])])
    with pytest.raises(AnswerLabelError, match="not those of the data"):
        merge_answer_labels(saved, path)
    write_labels(path, {**header(), "kind": "other"}, [])
    with pytest.raises(AnswerLabelError, match="'kind'"):
        merge_answer_labels(saved, path)
    with pytest.raises(AnswerLabelError, match="no answer labels"):
        merge_answer_labels(saved, tmp_path / "missing.jsonl")


def test_a_truncated_last_line_is_ignored_and_a_corrupt_earlier_one_names_file_and_line(
        world, tmp_path):
    saved, full = world
    ref = by_q(full.prefixes)
    path = write_labels(tmp_path / "l.jsonl", header(),
                        [label_row(q, ref[q]) for q in saved.questions[:3]])
    good = path.read_bytes()
    path.write_bytes(good[:-25])  # a killed run: question 3's row half written (line 4)
    lf = read_label_file(path)
    assert f"{path}: line 4 is truncated or corrupt" in lf.dropped
    assert set(lf.rows) == set(saved.questions[:2])
    assert merge_answer_labels(saved, path)[1]["labelled"] == 2
    lines = good.decode().splitlines(keepends=True)
    lines[2] = lines[2][:40] + "\n"
    path.write_text("".join(lines))
    with pytest.raises(AnswerLabelError, match=f"{path}: line 3 is corrupt"):
        merge_answer_labels(saved, path)


def test_the_latest_row_wins_and_a_cut_row_is_no_label(world, tmp_path):
    saved, full = world
    ref = by_q(full.prefixes)
    rows = [label_row(q, ref[q]) for q in saved.questions]
    first = rows[0]["qid"]
    path = write_labels(tmp_path / "l.jsonl", header(), [*rows, {**rows[0], "truncated": 2}])
    lf = read_label_file(path)
    assert row_truncated(lf.rows[first]) == 2 and first not in lf.done
    _, counts = merge_answer_labels(saved, path)
    assert (counts["labelled"], counts["truncated"]) == (len(rows) - 1, 1)
    # rows written before the field existed are labels; a count that is not one is corrupt
    old = [{k: v for k, v in r.items() if k != "truncated"} for r in rows]
    write_labels(path, header(), old)
    merged, counts = merge_answer_labels(saved, path)
    assert (counts["labelled"], counts["truncated"]) == (len(rows), 0)
    assert [p.f1_now for p in merged.prefixes] == [p.f1_now for p in full.prefixes]
    write_labels(path, header(), [{**old[0], "truncated": True}, *old[1:]])
    with pytest.raises(AnswerLabelError, match="line 2 is corrupt.*'truncated' must be a count"):
        merge_answer_labels(saved, path)


def test_a_non_reproduced_row_without_states_is_left_out(world, tmp_path):
    saved, full = world
    ref = by_q(full.prefixes)
    q = saved.questions[0]
    row = label_row(q, ref[q], reproduced=False, mismatch={"step": 0, "field": "sr_now"})
    merged, counts = merge_answer_labels(saved, write_labels(tmp_path / "l.jsonl", header(),
                                                             [row]))
    assert (counts["labelled"], counts["not_reproduced"], counts["replayed"]) == (0, 1, 0)
    assert all(math.isnan(p.f1_now) for p in merged.prefixes)


# -- the control diagnosis with labels, on a real train --save-data run ------------------------
TRAIN = ["train", "--data", "library", "--generator", "scripted", "--n-eval", "10",
         "--limit", "6", "--trees", "10", "--min-leaf", "2", "--tune-folds", "0",
         "--sufficiency-signal", "learned", "--calibration-questions", "4"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A train run with answer calls on its first 2 questions (--save-data), and the same run
    with answer calls on all (the reference)."""
    folder = tmp_path_factory.mktemp("trained")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline_mod, "make_generator",
                   lambda spec, cache=True, **kw: Reader(load_dataset("library")))
        for name, n in (("t", "2"), ("ref", "0")):
            assert cli_main([*TRAIN, "--continuation-questions", n, "--out",
                             str(folder / f"{name}.joblib"), "--save-data",
                             str(folder / f"{name}.npz")]) == 0
    return folder


def test_control_diagnosis_matches_labels_files_to_trajectories_by_sha256(trained, tmp_path):
    labels = write_labels(tmp_path / "l.jsonl", header(sha256_file(trained / "t.npz")), [])
    npzs = [trained / "t.npz", trained / "ref.npz"]
    assert diagnosis_cli.labels_for(npzs, [labels]) == {trained / "t.npz": labels}
    other = write_labels(tmp_path / "o.jsonl", header("2" * 64), [])
    with pytest.raises(ValueError, match="not among --trajectories"):
        diagnosis_cli.labels_for(npzs, [other])


def test_control_diagnosis_stop_section_studies_the_labelled_questions(trained, tmp_path):
    saved, ref = load_training_data(trained / "t.npz"), load_training_data(trained / "ref.npz")
    full = by_q(ref.prefixes)
    todo = [q for q, ps in by_q(saved.prefixes).items() if any(math.isnan(p.f1_now) for p in ps)]
    labels = write_labels(tmp_path / "l.jsonl", header(sha256_file(trained / "t.npz")),
                          [label_row(q, full[q]) for q in todo])
    out = tmp_path / "d.json"
    assert diagnosis_cli.main(["--trajectories", str(trained / "t.npz"), "--answer-labels",
                               str(labels), "--sections", "stop", "--folds", "2", "--boot",
                               "50", "--out", str(out)]) == 0
    assert not out.exists()  # only section 9 ran: sections 1-7 are left as they were
    rep = json.loads((tmp_path / "d-stop.json").read_text())
    (key, r), = rep["results"].items()
    assert r["answer_labels"]["labelled"] == len(todo) == 4
    assert r["stop_targets"]["n_questions"] == 6  # 2 answered in collection + 4 labelled
    assert set(r["stop_targets"]["targets"]) == {f"{t}/own" for t in
                                                  ("sr", "f1", "f1_best", "f1_now")}
    assert "section 9" in (tmp_path / "d-stop.md").read_text()
