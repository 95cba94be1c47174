"""data_scripts/chapter_times.py: per-chapter quick-mode times, counted and reported honestly."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import nbformat
import pytest

from helpers import load_script

times = load_script("chapter_times")


def _nb(*cells: tuple[str, str]) -> dict:
    return {"cells": [{"cell_type": t, "source": [s], "metadata": {}} for t, s in cells]}


def test_words_count_markdown_only_and_roles_are_found():
    nb = _nb(("markdown", "# Title\nTwo words {glue:text}`x` here."),
             ("code", "print('not counted at all')"))
    assert times.markdown_words(nb) == 7  # Title Two words glue text x here
    assert times.glue_roles(nb) == 1
    assert times.glue_roles(_nb(("code", "'{glue:text}`x`'"))) == 0  # only prose counts


def test_cache_rows_of_a_missing_file_an_empty_file_and_a_cache(tmp_path):
    assert times.cache_rows(tmp_path / "absent.sqlite") == 0
    db = tmp_path / "c.sqlite"
    sqlite3.connect(db).close()
    assert times.cache_rows(db) == 0
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE calls (key TEXT)")
        c.executemany("INSERT INTO calls VALUES (?)", [("a",), ("b",)])
    assert times.cache_rows(db) == 2


@pytest.fixture
def tiny_book(tmp_path, monkeypatch) -> Path:
    book = tmp_path / "book"
    book.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Tiny\nOne cell."),
                                         nbformat.v4.new_code_cell("x = 1 + 1")])
    nbformat.write(nb, book / "01_tiny.ipynb")
    bad = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise ValueError('no')")])
    nbformat.write(bad, book / "02_broken.ipynb")
    monkeypatch.setattr(times, "BOOK", book)
    (book / "_llm_cache.sqlite").touch()
    monkeypatch.setattr(times, "BOOK_CACHE", book / "_llm_cache.sqlite")
    return book


def test_a_sweep_reports_each_chapter_and_a_failure_without_writing_the_chapters(
        tiny_book, tmp_path):
    before = {p.name: p.read_bytes() for p in tiny_book.glob("*.ipynb")}
    out = tmp_path / "times.json"
    assert times.main(["--cache", "recorded", "--out", str(out)]) == 1  # one chapter failed
    report = json.loads(out.read_text())
    ok = report["chapters"]["01_tiny"]["recorded"]
    broken = report["chapters"]["02_broken"]["recorded"]
    assert ok["ok"] and ok["model_calls"] == 0 and ok["code_cells"] == 1 and ok["seconds"] > 0
    assert not broken["ok"] and "ValueError: no" in broken["error"]
    assert {p.name: p.read_bytes() for p in tiny_book.glob("*.ipynb")} == before
    # a second mode is merged beside the first, not over it
    assert times.main(["--cache", "empty", "--out", str(out), "01"]) == 0  # 02 not run empty
    assert set(json.loads(out.read_text())["chapters"]["01_tiny"]) == {"recorded", "empty"}
