"""Shared fixtures: the embedded library, its pooled corpus and a real dense retriever
(loaded once per session), and the real benchmark folder when it is present."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def library_questions():
    from dynakrag_lite.library import build_library
    return build_library()


@pytest.fixture(scope="session")
def library_corpus(library_questions):
    from dynakrag_lite.corpus import Corpus
    return Corpus.from_questions(library_questions, name="library")


@pytest.fixture(scope="session")
def library_retriever(library_corpus, tmp_path_factory):
    from dynakrag_lite.retriever import DenseRetriever
    return DenseRetriever(library_corpus, index_dir=tmp_path_factory.mktemp("index"),
                          show_progress=False)


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    from dynakrag_lite.data import data_dir
    d = data_dir()
    if d is None or not (Path(d) / "hotpotqa.jsonl").exists():
        if os.environ.get("CI"):  # CI must exercise the real benchmarks, never skip them
            pytest.fail("CI without the benchmark folder: set DYNAKRAG_DATA_DIR")
        pytest.skip("benchmark folder not found (set DYNAKRAG_DATA_DIR)")
    return Path(d)
