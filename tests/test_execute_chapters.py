"""data_scripts/execute_chapters.py: what a failed chapter reports, and --time's report."""
import json
import sqlite3
from pathlib import Path

import nbformat
import pytest

from helpers import load_script

ec = load_script("execute_chapters")


def test_execute_chapters_reports_the_cells_exception_not_nbclients_preamble():
    from nbclient.exceptions import CellExecutionError
    err = CellExecutionError("An error occurred while executing the following cell:\n"
                             "------------------\nimport dynakrag_lite\n------------------\n",
                             "ModuleNotFoundError", "No module named 'dynakrag_lite'")
    assert ec.failure_text(err) == "ModuleNotFoundError: No module named 'dynakrag_lite'"
    assert ec.failure_text(TimeoutError("cell timed out\nafter 1800 s")) == (
        "TimeoutError: cell timed out after 1800 s")


def _nb(*cells: tuple[str, str]) -> dict:
    return {"cells": [{"cell_type": t, "source": [s], "metadata": {}} for t, s in cells]}


def test_words_count_markdown_only_and_roles_are_found():
    nb = _nb(("markdown", "# Title\nTwo words {glue:text}`x` here."),
             ("code", "print('not counted at all')"))
    assert ec.markdown_words(nb) == 7  # Title Two words glue text x here
    assert ec.glue_roles(nb) == 1
    assert ec.glue_roles(_nb(("code", "'{glue:text}`x`'"))) == 0  # only prose counts


def test_cache_rows_of_a_missing_file_an_empty_file_and_a_cache(tmp_path):
    assert ec.cache_rows(tmp_path / "absent.sqlite") == 0
    db = tmp_path / "c.sqlite"
    sqlite3.connect(db).close()
    assert ec.cache_rows(db) == 0
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE calls (key TEXT)")
        c.executemany("INSERT INTO calls VALUES (?)", [("a",), ("b",)])
    assert ec.cache_rows(db) == 2


@pytest.fixture
def tiny_book(tmp_path, monkeypatch) -> Path:
    book = tmp_path / "book"
    book.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Tiny\nOne cell."),
                                         nbformat.v4.new_code_cell("x = 1 + 1")])
    nbformat.write(nb, book / "01_tiny.ipynb")
    bad = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("raise ValueError('no')")])
    nbformat.write(bad, book / "02_broken.ipynb")
    monkeypatch.setattr(ec, "BOOK", book)
    (book / "_llm_cache.sqlite").touch()
    monkeypatch.setattr(ec, "BOOK_CACHE", book / "_llm_cache.sqlite")
    return book


def test_a_sweep_reports_each_chapter_and_a_failure_without_writing_the_chapters(
        tiny_book, tmp_path):
    before = {p.name: p.read_bytes() for p in tiny_book.glob("*.ipynb")}
    out = tmp_path / "ec.json"
    chapters = ec.select_chapters([], tiny_book)
    assert ec.time_chapters(chapters, "recorded", out, tiny_book / "_llm_cache.sqlite",
                            tiny_book) == 1  # one chapter failed
    report = json.loads(out.read_text())
    ok = report["chapters"]["01_tiny"]["recorded"]
    broken = report["chapters"]["02_broken"]["recorded"]
    assert ok["ok"] and ok["model_calls"] == 0 and ok["code_cells"] == 1 and ok["seconds"] > 0
    assert not broken["ok"] and "ValueError: no" in broken["error"]
    assert {p.name: p.read_bytes() for p in tiny_book.glob("*.ipynb")} == before
    # a second mode is merged beside the first, not over it
    assert ec.time_chapters(ec.select_chapters(["01"], tiny_book), "empty", out,
                            book=tiny_book) == 0
    assert set(json.loads(out.read_text())["chapters"]["01_tiny"]) == {"recorded", "empty"}
