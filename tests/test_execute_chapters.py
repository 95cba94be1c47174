"""data_scripts/execute_chapters.py: what a failed chapter reports."""
from helpers import load_script


def test_execute_chapters_reports_the_cells_exception_not_nbclients_preamble():
    from nbclient.exceptions import CellExecutionError
    ec = load_script("execute_chapters")
    err = CellExecutionError("An error occurred while executing the following cell:\n"
                             "------------------\nimport dynakrag_lite\n------------------\n",
                             "ModuleNotFoundError", "No module named 'dynakrag_lite'")
    assert ec.failure_text(err) == "ModuleNotFoundError: No module named 'dynakrag_lite'"
    assert ec.failure_text(TimeoutError("cell timed out\nafter 1800 s")) == (
        "TimeoutError: cell timed out after 1800 s")
