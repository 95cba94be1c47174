"""data_scripts/run_experiments.py: the provenance helpers of its table sidecars."""
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "data_scripts" / "run_experiments.py"


@pytest.fixture(scope="module")
def rx():
    spec = importlib.util.spec_from_file_location("run_experiments", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_chapters_exist(rx):
    for name in rx.CHAPTERS.values():
        assert (rx.BOOK / f"{name}.ipynb").exists()


def test_hashes(rx, tmp_path):
    assert rx.model_hash("smollm2-135m").startswith("b179c952")
    assert rx.model_hash("openai:gpt-4o-mini@http://x") is None
    lib = rx.data_hash("library")
    assert len(lib) == 64 and lib == rx.data_hash("library")
    empty = rx.results_hash(tmp_path)
    d = tmp_path / "hotpotqa" / "g" / "dynakrag"
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"f1": 0.5}))
    one = rx.results_hash(tmp_path)
    (d / "summary.json").write_text(json.dumps({"f1": 0.6}))
    assert len({empty, one, rx.results_hash(tmp_path)}) == 3


def test_unknown_chapter_is_rejected(rx):
    with pytest.raises(SystemExit):
        rx.main(["--chapters", "99"])
