"""Shared fixtures: a private cache for every test, the embedded library, its pooled corpus and
a real dense retriever (loaded once per session), and the real benchmark folder when present.

Cache isolation. The library keeps everything it persists under one root (cache.py
``default_cache_path``: ``$DYNAKRAG_CACHE_DIR/llm_calls.sqlite`` unless
``$DYNAKRAG_LLM_CACHE`` names a file; models.py ``cache_root``/``models_dir``; retriever.py
``indexes/`` and ``embedders/``), defaulting to ``~/.cache/dynakrag_lite``. Every test gets
its own ``$DYNAKRAG_CACHE_DIR`` in pytest's temp folder and no ``$DYNAKRAG_LLM_CACHE``, so no
test replays a user's recorded LLM calls (a broken backend fails instead of being hidden by a
cache hit) and nothing is written under $HOME. Subprocesses inherit the environment.

Only verified build products are shared (``models/``, ``embedders/`` and ``indexes/`` of each
private cache are symlinks to one folder): they are sha256-verified build products of installed
packages, and assembling the 0.5B/1.5B GGUF files or the mpnet embedder takes seconds to
minutes. That folder is ``<repo>/.cache/test-assets`` (git-ignored, outside $HOME, kept
between runs), or ``$DYNAKRAG_TEST_ASSETS`` when set.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import in_ci

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
# Verified, content-addressed build products only. Indexes are keyed by corpus hash and
# embedder and checked against the size/sha256 in their meta.json at load, so sharing them is
# safe; without it every session re-encodes the 8,071 HotpotQA paragraphs (minutes of CPU).
SHARED_SUBDIRS = ("models", "embedders", "indexes")


def shared_assets_dir() -> Path:
    env = os.environ.get("DYNAKRAG_TEST_ASSETS")
    return Path(env).expanduser() if env else REPO / ".cache" / "test-assets"


def make_private_cache(root: Path) -> Path:
    """An empty cache root whose models/ and embedders/ point at the shared assets."""
    root.mkdir(parents=True, exist_ok=True)
    shared = shared_assets_dir()
    for name in SHARED_SUBDIRS:
        (shared / name).mkdir(parents=True, exist_ok=True)
        link = root / name
        if not link.exists():
            try:
                link.symlink_to(shared / name, target_is_directory=True)
            except OSError:  # no symlinks here (some Windows setups): assemble per test
                pass
    return root


def _isolate(mp: pytest.MonkeyPatch, root: Path, mpl_dir: Path) -> None:
    mp.setenv("DYNAKRAG_CACHE_DIR", str(root))
    mp.delenv("DYNAKRAG_LLM_CACHE", raising=False)
    mp.delenv("DYNAKRAG_EMBED_CACHE", raising=False)  # embeddings.sqlite in the private root
    mp.delenv("DYNAKRAG_ENTITY_CACHE", raising=False)  # entities.sqlite likewise
    mp.setenv("MPLCONFIGDIR", str(mpl_dir))  # matplotlib's font cache, else under $HOME


@pytest.fixture(scope="session", autouse=True)
def session_cache(tmp_path_factory):
    """The cache root of session- and module-scoped fixtures (set up before any test's own)."""
    root = make_private_cache(tmp_path_factory.mktemp("session-cache"))
    mpl = shared_assets_dir() / "matplotlib"
    mpl.mkdir(parents=True, exist_ok=True)
    mp = pytest.MonkeyPatch()
    _isolate(mp, root, mpl)
    yield root
    mp.undo()


@pytest.fixture(autouse=True)
def private_cache(session_cache, tmp_path_factory, monkeypatch) -> Path:
    """This test's own cache root: LLM call cache, indexes, sidecars (models/ shared)."""
    root = make_private_cache(tmp_path_factory.mktemp("cache"))
    _isolate(monkeypatch, root, shared_assets_dir() / "matplotlib")
    return root


@pytest.fixture(scope="session")
def library_questions():
    from dynakrag_lite.data.library import build_library
    return build_library()


@pytest.fixture(scope="session")
def library_corpus(library_questions):
    from dynakrag_lite.data.corpus import Corpus
    return Corpus.from_questions(library_questions, name="library")


@pytest.fixture(scope="session")
def library_retriever(library_corpus, tmp_path_factory):
    from dynakrag_lite.retriever import DenseRetriever
    return DenseRetriever(library_corpus, index_dir=tmp_path_factory.mktemp("index"),
                          show_progress=False)


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    from dynakrag_lite.data.sources import data_dir
    d = data_dir()
    if d is None or not (Path(d) / "hotpotqa.jsonl").exists():
        if in_ci():  # CI must exercise the real benchmarks, never skip them
            pytest.fail("CI without the benchmark folder: set DYNAKRAG_DATA_DIR")
        pytest.skip("benchmark folder not found (set DYNAKRAG_DATA_DIR)")
    return Path(d)
