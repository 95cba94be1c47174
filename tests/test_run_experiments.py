"""data_scripts/run_experiments.py: the provenance helpers of its table sidecars."""
import hashlib
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from dynakrag_lite.generators import models
from helpers import CI_MODELS, require_model

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


@pytest.mark.parametrize("name", CI_MODELS)
def test_model_hash_is_the_sha256_of_the_installed_gguf(rx, name):
    """Checked against hashlib over the real file, not against the registry it reads."""
    require_model(name, llama=False)
    h = hashlib.sha256()
    with open(models.gguf_path(name), "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    assert rx.model_hash(name) == h.hexdigest()


def test_model_hash_is_none_for_specs_without_a_bundled_file(rx):
    assert rx.model_hash("openai:gpt-4o-mini@http://x") is None
    assert rx.model_hash("hf:Qwen/Qwen2.5-7B-Instruct") is None


def test_data_hash_is_the_sha256_of_the_dataset_file(rx, tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    body = b'{"id": "q1"}\n{"id": "q2"}\n'
    (data / "hotpotqa.jsonl").write_bytes(body)
    monkeypatch.setenv("DYNAKRAG_DATA_DIR", str(data))
    assert rx.data_hash("hotpotqa") == hashlib.sha256(body).hexdigest()
    assert rx.data_hash("musique") is None  # no file: no hash, no crash
    lib = rx.data_hash("library")  # generated, not read: stable across calls
    assert re.fullmatch(r"[0-9a-f]{64}", lib) and lib == rx.data_hash("library")


def test_results_hash_tracks_content_and_relative_paths(rx, tmp_path):
    empty = rx.results_hash(tmp_path / "a")
    assert empty == hashlib.sha256().hexdigest()  # nothing hashed
    d = tmp_path / "a" / "hotpotqa" / "g" / "dynakrag"
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"f1": 0.5}))
    one = rx.results_hash(tmp_path / "a")
    (d / "summary.json").write_text(json.dumps({"f1": 0.6}))
    two = rx.results_hash(tmp_path / "a")
    assert len({empty, one, two}) == 3
    # The same tree elsewhere hashes the same (paths are taken relative to the root) ...
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert rx.results_hash(tmp_path / "b") == two
    # ... and the same content under another run name does not.
    run_dir = tmp_path / "b" / "hotpotqa" / "g"
    (run_dir / "dynakrag").rename(run_dir / "ircot")
    assert rx.results_hash(tmp_path / "b") != two


def test_unknown_chapter_is_rejected(rx):
    with pytest.raises(SystemExit):
        rx.main(["--chapters", "99"])
