"""data_scripts/execute_chapters.py: what a failed chapter reports, and --time's report."""
import json
import sqlite3
import threading
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


def test_a_cells_traceback_is_kept_without_its_ansi_colours():
    from nbclient.exceptions import CellExecutionError
    err = CellExecutionError("An error occurred while executing the following cell:\n---\n"
                             "f()\n---\n\n\x1b[0;31mValueError\x1b[0m: \x1b[1;32mno\x1b[0m",
                             "ValueError", "no")
    err.cell_index = 4
    assert ec.failure_record(err) == {
        "error": "ValueError: no", "cell_index": 4,
        "traceback": "An error occurred while executing the following cell:\n---\nf()\n---\n\n"
                     "ValueError: no"}


def _nb(*cells: tuple[str, str]) -> dict:
    return {"cells": [{"cell_type": t, "source": [s], "metadata": {}} for t, s in cells]}


def test_words_count_markdown_only_and_roles_are_found():
    nb = _nb(("markdown", "# Title\nTwo words {glue:text}`x` here."),
             ("code", "print('not counted at all')"))
    assert ec.markdown_words(nb) == 7  # Title Two words glue text x here
    assert ec.glue_roles(nb) == 1
    assert ec.glue_roles(_nb(("code", "'{glue:text}`x`'"))) == 0  # only prose counts


def test_cache_rows_of_a_missing_file_an_empty_file_and_a_cache(tmp_path):
    assert ec.cache_rows(tmp_path / "absent.sqlite") is None
    assert not (tmp_path / "absent.sqlite").exists()  # counting creates no file
    db = tmp_path / "c.sqlite"
    sqlite3.connect(db).close()
    assert ec.cache_rows(db) == 0
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE calls (key TEXT)")
        c.executemany("INSERT INTO calls VALUES (?)", [("a",), ("b",)])
    assert ec.cache_rows(db) == 2


def test_chapters_are_named_by_file_stem_or_number_in_the_order_named_each_once(tmp_path):
    for stem in ("01_a", "05_b", "11_c", "11b_d", "12_e", "notes"):  # notes: no number
        (tmp_path / f"{stem}.ipynb").touch()

    def named(*args: str) -> list[str]:
        return [p.stem for p in ec.resolve_chapters(list(args), tmp_path)]

    assert named("12", "05,11b_d.ipynb", "11_c", "12_e", "1") == [
        "12_e", "05_b", "11b_d", "11_c", "01_a"]
    assert named("11") == ["11_c"]  # 11b is a number of its own
    assert named() == ["01_a", "05_b", "11_c", "11b_d", "12_e"]
    with pytest.raises(ValueError, match=r"no chapter numbered or named '13', 'b' in "):
        ec.resolve_chapters(["13,b", "05"], tmp_path)
    with pytest.raises(ValueError, match="no chapter named in '', ' , '"):
        ec.resolve_chapters(["", " , "], tmp_path)


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
    chapters = ec.resolve_chapters([], tiny_book)
    assert ec.time_chapters(chapters, "recorded", out, tiny_book / "_llm_cache.sqlite",
                            tiny_book) == 1  # one chapter failed
    report = json.loads(out.read_text())
    ok = report["chapters"]["01_tiny"]["recorded"]
    broken = report["chapters"]["02_broken"]["recorded"]
    assert ok["ok"] and ok["model_calls"] == 0 and ok["code_cells"] == 1 and ok["seconds"] > 0
    assert not broken["ok"] and "ValueError: no" in broken["error"]
    assert broken["cell_index"] == 0 and "raise ValueError('no')" in broken["traceback"]
    assert "\x1b[" not in broken["traceback"] and "kernel_exit_status" not in broken
    assert {p.name: p.read_bytes() for p in tiny_book.glob("*.ipynb")} == before
    # a second mode is merged beside the first, not over it
    assert ec.time_chapters(ec.resolve_chapters(["01"], tiny_book), "empty", out,
                            book=tiny_book) == 0
    assert set(json.loads(out.read_text())["chapters"]["01_tiny"]) == {"recorded", "empty"}


def _cleanup_kernel(km: object) -> None:
    if km is None:  # nbclient's `assert self.km is not None` (pytest would rewrite an assert)
        raise AssertionError


def test_a_failure_outside_the_cells_keeps_its_python_traceback(tiny_book, tmp_path, monkeypatch):
    monkeypatch.setattr(ec, "run_notebook", lambda nb, book=None: _cleanup_kernel(None))
    out = tmp_path / "times.json"
    assert ec.time_chapters(ec.resolve_chapters(["01"], tiny_book), "empty", out,
                            book=tiny_book) == 1
    entry = json.loads(out.read_text())["chapters"]["01_tiny"]["empty"]
    assert not entry["ok"] and entry["error"] == "AssertionError:"
    tb = entry["traceback"]
    assert tb.startswith("Traceback (most recent call last)") and tb.endswith("AssertionError\n")
    assert "in _cleanup_kernel" in tb and "raise AssertionError" in tb


def test_a_kernel_that_died_is_reported_with_its_exit_status(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")])
    with pytest.raises(ec.DeadKernelError) as e:
        ec.run_notebook(nb, tmp_path)
    record = ec.failure_record(e.value)
    assert record["kernel_exit_status"] == -9 and record["error"] == "DeadKernelError: Kernel died"


def test_a_sigterm_during_a_chapter_stops_the_run_instead_of_failing_the_chapter(tmp_path):
    # nbclient catches SIGTERM only in the main thread: elsewhere it would end pytest
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("not in the main thread")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os, signal, time; os.kill(os.getppid(), signal.SIGTERM); time.sleep(30)")])
    with pytest.raises(KeyboardInterrupt, match="SIGINT or SIGTERM") as e:
        ec.run_notebook(nb, tmp_path)
    assert isinstance(e.value.__cause__, AssertionError)  # what nbclient raised


def test_damaged_times_report_is_named_before_any_chapter_runs(tiny_book, tmp_path):
    out = tmp_path / "chapter-times.json"
    out.write_text('{"chapters": {"01_tiny": ')  # a sweep's file cut short by hand
    with pytest.raises(ValueError, match=r"chapter-times\.json: not JSON"):
        ec.time_chapters(ec.resolve_chapters(["01"], tiny_book), "empty", out, book=tiny_book)
    out.write_text('{"chapters": []}')
    with pytest.raises(ValueError, match=r"chapter-times\.json: not a chapter-times report"):
        ec.read_times(out)


@pytest.fixture
def ran(tiny_book, monkeypatch) -> list:
    """What main would run: ("in place", chapters) or ("time", mode, chapters), nothing run."""
    calls: list = []
    monkeypatch.setattr(ec, "kernel_environment", lambda: None)
    monkeypatch.setattr(ec, "execute_in_place", lambda ch: calls.append(
        ("in place", [p.stem for p in ch])) or 0)
    monkeypatch.setattr(ec, "time_chapters", lambda ch, mode: calls.append(
        ("time", mode, [p.stem for p in ch])) or 0)
    return calls


def test_command_line_takes_chapters_and_time_anywhere(ran):
    assert ec.main(["01", "02_broken"]) == 0
    assert ec.main([]) == 0
    assert ec.main(["--time", "empty", "1"]) == 0  # a number without its zero
    assert ec.main(["02", "--time", "recorded", "01"]) == 0
    assert ran == [("in place", ["01_tiny", "02_broken"]), ("in place", ["01_tiny", "02_broken"]),
                   ("time", "empty", ["01_tiny"]), ("time", "recorded", ["02_broken", "01_tiny"])]


@pytest.mark.parametrize("argv, said", [
    (["--time", "live"], "invalid choice: 'live'"), (["--time"], "expected one argument"),
    (["07"], "no chapter numbered or named '07'"), (["-x"], "unrecognized arguments: -x")])
def test_command_line_refuses_what_it_cannot_run_and_runs_nothing(ran, argv, said, capsys):
    with pytest.raises(SystemExit) as e:
        ec.main(argv)
    assert e.value.code == 2 and said in capsys.readouterr().err
    assert ran == []
