"""--offset: measuring on training questions a policy was not trained on. The slice is the
one asked for, an impossible offset is a clear error, and an IRCoT run on the training split
never shows one of its own questions as a demonstration."""
import json

from dynakrag_lite.experiments.cli import main
from helpers import require_model


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_offset_skips_the_first_questions_of_the_split(capsys):
    code, out, _ = _run(capsys, "retrieval-eval", "--data", "library", "--split", "all",
                        "--offset", "50", "--k", "3")
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["n"] == 10
    code, out, _ = _run(capsys, "retrieval-eval", "--data", "library", "--split", "all",
                        "--offset", "50", "--limit", "4", "--k", "3")
    assert code == 0 and json.loads(out.strip().splitlines()[-1])["n"] == 4


def test_offset_past_the_split_is_refused_with_its_size(capsys):
    code, out, err = _run(capsys, "retrieval-eval", "--data", "library", "--split", "all",
                          "--offset", "60", "--k", "3")
    assert code == 2 and out == ""
    assert "--offset 60" in err and "60 questions" in err


def test_ircot_on_the_training_split_draws_demonstrations_from_the_other_questions(
        tmp_path, capsys, private_cache):
    require_model("smollm2-135m")
    out_dir = tmp_path / "ircot"
    code, _, err = _run(capsys, "evaluate", "--data", "library", "--split", "train",
                        "--n-eval", "20", "--offset", "3", "--limit", "1", "--method", "ircot",
                        "--generator", "smollm2-135m", "--doc-chars", "200",
                        "--out", str(out_dir))
    assert code == 0, err
    row = json.loads((out_dir / "predictions.jsonl").read_text().splitlines()[0])
    demos = json.loads((out_dir / "summary.json").read_text())["ircot_demos"]
    assert demos and row["id"] not in demos
