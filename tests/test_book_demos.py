"""A chapter's demo shows something happen: in its committed quick-mode result table at least
two methods score above zero, and the methods do not all score the same (issue 43).

Chapter 11 once compared five baselines on four embedded questions with a reader that answered
none of them, so every F1 was 0.00 but one and no method could be seen to work or to differ.
The committed outputs are read as JSON (nothing is executed): :data:`DEMO_TABLES` names, per
chapter, a text its result cell's source contains; that cell's ``text/plain`` output, a
pandas table of questions by methods, is parsed and checked.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"
# chapter -> a text the source of its result-table cell contains
DEMO_TABLES = {"11_baselines": 'values="f1"'}


def _text(v) -> str:
    return "".join(v) if isinstance(v, list) else str(v or "")


def result_table(nb: dict, marker: str) -> str:
    """The ``text/plain`` output of the one code cell whose source contains ``marker``."""
    found = [c for c in nb["cells"] if c["cell_type"] == "code" and marker in _text(c["source"])]
    assert len(found) == 1, f"{len(found)} code cells contain {marker!r}"
    for out in found[0].get("outputs", []):
        plain = (out.get("data") or {}).get("text/plain")
        if plain:
            return _text(plain)
    raise AssertionError(f"the cell containing {marker!r} has no committed table output")


def parse_table(text: str) -> dict[str, list[float]]:
    """column -> values of a pandas frame's plain text (first line: the column names after the
    columns' name; second line: the index name; then one row per line, index first)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    columns = lines[0].split()[1:]
    table: dict[str, list[float]] = {c: [] for c in columns}
    for ln in lines[2:]:
        values = ln.split()[1:]
        assert len(values) == len(columns), f"row {ln!r} does not fit columns {columns}"
        for c, v in zip(columns, values):
            table[c].append(float(v))
    return table


def demo_problems(table: dict[str, list[float]]) -> list[str]:
    problems = []
    values = [v for col in table.values() for v in col]
    if not values or all(v == 0 for v in values):
        problems.append("every score is zero: no method can be seen to work")
    else:
        working = [c for c, col in table.items() if any(v > 0 for v in col)]
        if len(working) < 2:
            problems.append(f"only {working} scores above zero: two methods cannot be compared")
    means = {c: sum(col) / len(col) for c, col in table.items() if col}
    if len(set(means.values())) < 2:
        problems.append(f"every method has the same mean ({means}): none can be seen to differ")
    return problems


@pytest.mark.parametrize("chapter", sorted(DEMO_TABLES))
def test_committed_quick_mode_result_table_shows_methods_working_and_differing(chapter):
    nb = json.loads((BOOK / f"{chapter}.ipynb").read_text(encoding="utf-8"))
    table = parse_table(result_table(nb, DEMO_TABLES[chapter]))
    assert len(table) >= 2, f"{chapter}: fewer than two methods in the table: {list(table)}"
    problems = demo_problems(table)
    assert not problems, f"{chapter} (re-run its quick mode on questions it can answer):\n" \
        + "\n".join(problems)


def test_checker_flags_an_all_zero_table_and_one_where_methods_tie():
    zeros = ("method           fixed_k  ircot  oracle\nid\n"
             "q0      0.0    0.0     0.0\nq1      0.0    0.0     0.0\n")
    table = parse_table(zeros)
    assert table == {"fixed_k": [0.0, 0.0], "ircot": [0.0, 0.0], "oracle": [0.0, 0.0]}
    assert len(demo_problems(table)) == 2  # zero, and a tie
    tie = parse_table("method  a  b\nid\nq0  1.0  0.0\nq1  0.0  1.0\n")
    assert demo_problems(tie) == [
        "every method has the same mean ({'a': 0.5, 'b': 0.5}): none can be seen to differ"]
    good = parse_table("method  a  b\nid\nq0  1.0  0.0\nq1  0.55  1.0\n")
    assert demo_problems(good) == []
    one = parse_table("method  a  b  c\nid\nq0  0.0  0.0  1.0\nq1  0.0  0.0  0.0\n")
    assert demo_problems(one) == ["only ['c'] scores above zero: two methods cannot be compared"]
