"""The command-line contract: JSON on stdout, errors on stderr with exit code 2, resumable
evaluation with predictions.jsonl and summary.json, train -> evaluate round trip."""
import json

import pytest

from dynakrag_lite.config import RunSettings
from dynakrag_lite.generators.cache import CallCache
from dynakrag_lite.experiments.cli import build_parser, main
from dynakrag_lite.experiments.run import SUMMARY_KEYS
from helpers import require_model


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_retrieval_eval_prints_support_recall_as_json(capsys):
    code, out, _ = run_cli(capsys, "retrieval-eval", "--data", "library", "--k", "3,12")
    res = json.loads(out.strip().splitlines()[-1])
    assert code == 0 and res["n"] == 60 and 0 < res["SR@3"] <= res["SR@12"] <= 1


def test_bad_data_file_gives_one_line_error_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "1", "question": "q?"}\n')
    code, out, err = run_cli(capsys, "retrieval-eval", "--data", str(bad))
    assert code == 2 and out == ""
    assert "bad.jsonl, line 1, field 'answers'" in err


def test_unknown_generator_spec_is_a_clear_error(capsys):
    code, _, err = run_cli(capsys, "generate", "--generator", "gpt-17", "--prompt", "hi")
    assert code == 2 and "unknown generator spec" in err


@pytest.mark.parametrize("command, own", [
    ("train", {"out": "p.joblib", "split": "train"}), ("evaluate", {"method": "uniform"})])
def test_run_settings_defaults_are_the_flags_defaults(command, own):
    """The one settings object of a run (RunSettings.from_args) holds the command line's
    defaults, and RunSettings' own defaults are the same (a Python caller gets what the
    command line runs)."""
    args = build_parser().parse_args([command, "--data", "library", "--generator", "g",
                                      *[x for k, v in own.items() if k != "split"
                                        for x in (f"--{k}", v)]])
    assert RunSettings.from_args(args) == RunSettings(data="library", generator="g", **own)


def test_policy_with_a_method_that_has_no_controller_is_refused(capsys, tmp_path):
    code, out, err = run_cli(capsys, "evaluate", "--data", "library", "--method", "fixed_k",
                             "--policy", str(tmp_path / "p.joblib"), "--generator",
                             "smollm2-135m", "--out", str(tmp_path / "o"))
    assert code == 2 and out == "" and "--policy is for dynakrag, uniform and oracle" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv", [
    ["upgrade-data", "--help"],  # the format-1 training-file migration is gone
    ["train", "--data", "library", "--generator", "smollm2-135m", "--out", "p.joblib",
     "--from-data", "t.npz", "--signal-from", "p0.joblib"],
])
def test_the_format_1_migration_is_gone(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert ("invalid choice: 'upgrade-data'" in err
            or "unrecognized arguments: --signal-from" in err)


@pytest.mark.parametrize("extra, says", [
    ([], "--compressor extractive needs --selector"),
    (["--selector", "no/such.joblib"], "--selector no/such.joblib: no such file"),
])
def test_extractive_compressor_without_a_selector_file_is_refused(capsys, tmp_path, extra,
                                                                  says):
    code, out, err = run_cli(capsys, "evaluate", "--data", "library", "--method", "dynakrag",
                             "--generator", "smollm2-135m", "--compressor", "extractive",
                             "--out", str(tmp_path / "o"), *extra)
    assert code == 2 and out == "" and says in err
    assert not (tmp_path / "o").exists()


def test_a_negative_answer_docs_up_to_is_refused(capsys, tmp_path):
    code, out, err = run_cli(capsys, "evaluate", "--data", "library", "--method", "dynakrag",
                             "--generator", "smollm2-135m", "--answer-docs-up-to", "-1",
                             "--out", str(tmp_path / "o"))
    assert code == 2 and out == "" and "--answer-docs-up-to -1: a number of documents" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_train_then_evaluate_writes_resumable_predictions_and_summary(tmp_path, capsys,
                                                                       private_cache):
    """Runs the real model: the autouse fixture gives this test an empty LLM call cache, so
    nothing is replayed from a user's cache and a broken backend fails here."""
    require_model("smollm2-135m")
    pol = tmp_path / "library-smollm2.joblib"
    code, out, _ = run_cli(capsys, "train", "--data", "library", "--generator", "smollm2-135m",
                           "--out", str(pol), "--limit", "2", "--trees", "20",
                           "--doc-chars", "200")
    assert code == 0 and pol.exists() and json.loads(out.splitlines()[-1])["samples"] > 0
    with CallCache(private_cache / "llm_calls.sqlite") as calls:
        assert len(calls) > 0  # the model really ran, into this test's own (fresh) cache
    out_dir = tmp_path / "eval"
    args = ["evaluate", "--data", "library", "--method", "dynakrag", "--policy", str(pol),
            "--generator", "smollm2-135m", "--limit", "2", "--out", str(out_dir),
            "--doc-chars", "200"]
    assert run_cli(capsys, *args)[0] == 0
    pred_path = out_dir / "predictions.jsonl"
    lines = pred_path.read_text().splitlines()
    assert len(lines) == 2
    row = json.loads(lines[0])
    for key in ("id", "prediction", "answers", "em", "f1", "support_recall", "docs", "tokens",
                "llm_calls", "retrieval_calls", "seconds", "trace"):
        assert key in row
    assert row["llm_calls"] > 0 and row["tokens"] > 0
    assert all("valid" in t and "scores" in t for t in row["trace"])
    summary = json.loads((out_dir / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(summary) and summary["n"] == 2
    first, second = (json.loads(x) for x in lines)

    # Resume after a clean finish: both questions are done, nothing is redone or appended.
    assert run_cli(capsys, *args)[0] == 0
    assert pred_path.read_text().splitlines() == lines

    # A run killed while writing question 2: its line is only half on disk. Resuming cuts the
    # torn line, keeps question 1 byte for byte, and answers question 2 again.
    pred_path.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    assert run_cli(capsys, *args)[0] == 0
    redone = pred_path.read_text().splitlines()
    assert len(redone) == 2 and redone[0] == lines[0]
    again = json.loads(redone[1])
    assert again["id"] == second["id"] != first["id"]
    assert again["prediction"] == second["prediction"]  # greedy decoding: same answer
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["n"] == 2 and summary["run"]["complete"]


def test_selector_trained_on_an_evaluated_question_is_refused(capsys, tmp_path,
                                                               library_retriever):
    """The extractive compressor reads gold sentences through its selector: a selector fitted
    on a question of the evaluation split would leak it, so evaluate refuses before any row."""
    from dynakrag_lab.studies.selector import train_sentence_selector
    from dynakrag_lite.pipeline import build_setup
    setup = build_setup("library", generator=None, show_progress=False)
    leaked = setup.eval[0]
    sel = train_sentence_selector([*setup.train[:4], leaked], library_retriever, k_docs=6,
                                  model="logreg", use_embeddings=False)
    path = sel.save(tmp_path / "sel.joblib")
    code, out, err = run_cli(capsys, "evaluate", "--data", "library", "--method", "fixed_k",
                             "--generator", "smollm2-135m", "--compressor", "extractive",
                             "--selector", str(path), "--limit", "1",
                             "--out", str(tmp_path / "o"))
    assert code == 2 and out == ""
    assert "1 evaluation question(s) were among its training questions" in err
    assert repr(leaked.id) in err
    assert not (tmp_path / "o").exists()


def test_unseen_by_selector_leaves_out_exactly_the_selectors_fit_questions(tmp_path,
                                                                           library_retriever):
    """--unseen-by-selector: a run on the training split takes the questions the sentence
    selector never read, in split order, then --offset and --limit; the folder records it."""
    from dynakrag_lab.studies.selector import train_sentence_selector
    from dynakrag_lite.config import RunSettings
    from dynakrag_lite.experiments.selection import selection_of
    from dynakrag_lite.pipeline import build_setup, run_setup
    setup = build_setup("library", generator=None, show_progress=False)
    fit = setup.train[1:5]
    path = train_sentence_selector(fit, library_retriever, k_docs=6, model="logreg",
                                   use_embeddings=False).save(tmp_path / "sel.joblib")
    s = RunSettings(data="library", split="train", compressor="extractive",
                    selector=str(path), unseen_by_selector=True, offset=1, limit=3)
    _, qs = run_setup(s)
    unseen = [q.id for q in setup.train if q not in fit]
    assert [q.id for q in qs] == unseen[1:4]
    assert selection_of(s)["unseen_by_selector"] is True
    assert "unseen_by_selector" not in selection_of(RunSettings())  # old folders still match


def test_unseen_by_selector_is_refused_without_a_selector_and_by_train(capsys, tmp_path):
    code, _, err = run_cli(capsys, "retrieval-eval", "--data", "library",
                           "--unseen-by-selector", "--k", "3")
    assert code == 2 and "--unseen-by-selector needs" in err
    code, _, err = run_cli(capsys, "train", "--data", "library", "--generator",
                           "smollm2-135m", "--unseen-by-selector",
                           "--out", str(tmp_path / "p.joblib"))
    assert code == 2 and "--unseen-by-selector is for evaluate" in err


def test_user_errors_imports_nothing_when_called(monkeypatch):
    """The user-error classes are imported once with the module, not on every call; and
    importing the module alone (a fresh interpreter) meets no import cycle."""
    import builtins
    import subprocess
    import sys
    from dynakrag_lite.experiments.cli import user_errors
    from dynakrag_lite.data.schema import DataError
    from dynakrag_lite.generators.base import GeneratorError
    from dynakrag_lite.generators.models import ModelError
    from dynakrag_lite.policy import PolicyError
    from dynakrag_lite.storage import LockedError
    imported, real_import = [], builtins.__import__

    def spy(name, *args, **kwargs):
        imported.append(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", spy)
    errors = user_errors()
    monkeypatch.undo()
    assert imported == []
    assert {DataError, PolicyError, GeneratorError, ModelError, LockedError} <= set(errors)
    subprocess.run([sys.executable, "-c", "import dynakrag_lite.experiments.cli"], check=True)
