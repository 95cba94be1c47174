"""The command-line contract: JSON on stdout, errors on stderr with exit code 2, resumable
evaluation with predictions.jsonl and summary.json, train -> evaluate round trip."""
import json

import pytest

from dynakrag_lite.cli import main
from dynakrag_lite.experiments import SUMMARY_KEYS


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


@pytest.mark.slow
def test_train_then_evaluate_writes_resumable_predictions_and_summary(tmp_path, capsys):
    pol = tmp_path / "library-smollm2.joblib"
    code, out, _ = run_cli(capsys, "train", "--data", "library", "--generator", "smollm2-135m",
                           "--out", str(pol), "--limit", "2", "--trees", "20",
                           "--doc-chars", "200")
    assert code == 0 and pol.exists() and json.loads(out.splitlines()[-1])["samples"] > 0
    out_dir = tmp_path / "eval"
    args = ["evaluate", "--data", "library", "--method", "dynakrag", "--policy", str(pol),
            "--generator", "smollm2-135m", "--limit", "2", "--out", str(out_dir),
            "--doc-chars", "200"]
    assert run_cli(capsys, *args)[0] == 0
    lines = (out_dir / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 2
    row = json.loads(lines[0])
    for key in ("id", "prediction", "answers", "em", "f1", "support_recall", "docs", "tokens",
                "llm_calls", "retrieval_calls", "seconds", "trace"):
        assert key in row
    assert all("valid" in t and "scores" in t for t in row["trace"])
    summary = json.loads((out_dir / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(summary) and summary["n"] == 2
    # a torn last line (a run killed mid-write) is dropped and that question redone
    with open(out_dir / "predictions.jsonl", "a") as fh:
        fh.write('{"id": "half')
    assert run_cli(capsys, *args)[0] == 0
    assert (out_dir / "predictions.jsonl").read_text().splitlines() == lines
