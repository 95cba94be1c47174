"""A chapter's demo shows something happen: in each committed quick-mode result table that
compares methods or settings, at least two of them score above zero and they do not all score
the same (issue 43).

Chapter 11 once compared five baselines on four embedded questions with a reader that answered
none of them, so every F1 was 0.00 but one and no method could be seen to work or to differ;
chapter 9 once ran its schedules on four embedded questions and one of them scored F1 0.00.
The committed outputs are read as JSON (nothing is executed). :data:`DEMOS` names, per result
table, the chapter, a text its cell's source contains, how the table is laid out and which
metric is checked; that cell's ``text/plain`` output is parsed:

* ``columns``: a pandas frame with one column per method or setting and one row per question
  (or per dataset), the values of each column its scores (``scores.pivot(...)``);
* ``rows``: a pandas frame with one row per method or setting and metrics as columns (a frame
  of means); the ``metric`` column is checked;
* ``lines``: printed lines, one per method or setting, each ``label ... METRIC value``.

A demo that still fails is listed with ``strict=True`` xfail and the reason: when it is fixed
the test passes unexpectedly and fails the run, so the mark goes with the fix.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"
NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")


@dataclass(frozen=True)
class Demo:
    chapter: str
    marker: str  # a text the source of the result cell contains (in one code cell only)
    layout: str  # "columns", "rows" or "lines" (module docstring)
    metric: str = ""  # the column ("rows") or the printed name ("lines") checked
    known_failure: str = ""  # why it still fails: an xfail(strict) reason

    @property
    def id(self) -> str:
        return f"{self.chapter}:{self.metric or 'table'}:{self.marker[:24]}"


DEMOS = (
    # SR@k of one search, per dataset (rows) and k (columns): more documents, more support
    Demo("02_dense_retrieval", "for k in (1, 3, 6, 12, 20) if k <= max_k}", "columns"),
    # the policy at three veto thresholds; then with the CheapFirst chooser of Exercise 9.3
    Demo("09_controller", "stop_settings = pd.DataFrame(", "rows", "F1"),
    Demo("09_controller", "cheap_first = table(", "rows", "F1"),
    # answering from fixed evidence: the documents, then three compressions
    Demo("10_compression", 'agg = runs.groupby("mode")', "rows", "F1"),
    # five strategies on the same questions: per question, then their means
    Demo("11_baselines", 'values="f1"', "columns"),
    Demo("11_baselines", 'mean = scores.groupby("method")', "rows", "f1"),
    # Fixed-K at K = 3, 6 and 12 (Exercise 11.1)
    Demo("11_baselines", "by_k = pd.DataFrame(", "rows", "F1"),
    # the explorer's live slice: DynaKRAG (the committed policy) against uniform-valid on
    # chapter 9's held-out HotpotQA questions
    Demo("15_explorer", "# The numbers behind the prose below.", "lines", "F1"),
)


def _text(v) -> str:
    return "".join(v) if isinstance(v, list) else str(v or "")


def result_output(nb: dict, marker: str) -> str:
    """The ``text/plain`` (or printed) output of the one code cell whose source contains
    ``marker``: the last ``text/plain`` value it displays, else its printed text."""
    found = [c for c in nb["cells"] if c["cell_type"] == "code" and marker in _text(c["source"])]
    assert len(found) == 1, f"{len(found)} code cells contain {marker!r}"
    plain = [_text((o.get("data") or {}).get("text/plain")) for o in found[0].get("outputs", [])]
    plain = [p for p in plain if p and not p.startswith("<")]  # not "<Figure ...>" reprs
    if plain:
        return plain[-1]
    printed = "".join(_text(o.get("text")) for o in found[0].get("outputs", [])
                      if o.get("output_type") == "stream" and o.get("name") == "stdout")
    if printed:
        return printed
    raise AssertionError(f"the cell containing {marker!r} has no committed output: execute "
                         "the chapter (python data_scripts/execute_chapters.py NN)")


def parse_frame(text: str) -> tuple[list[str], list[tuple[str, list[float]]]]:
    """(column names, [(row label, values)]) of a pandas frame's plain text. The header is
    the first line (the columns' own name, if any, first); lines without a numeric value per
    column (the index's name) are skipped; a row label may hold spaces. Every column must be
    numeric, and the frame must not be wrapped (pandas marks wrapped frames with ``\\``)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert lines and not any(ln.rstrip().endswith("\\") for ln in lines), \
        f"not one unwrapped frame:\n{text}"
    header, body = lines[0].split(), lines[1:]
    # the header holds a name for the columns when no row has a label beside len(header) values
    n = len(header)
    if not any(len(ln.split()) > n and all(NUMBER.match(v) for v in ln.split()[-n:])
               for ln in body):
        n -= 1
    rows = []
    for ln in body:
        tokens = ln.split()
        if len(tokens) <= n:  # the index's name
            continue
        values = tokens[-n:]
        assert all(NUMBER.match(v) for v in values), f"row {ln!r} does not fit {header[-n:]}"
        rows.append((" ".join(tokens[:-n]), [float(v) for v in values]))
    assert rows, f"no rows in:\n{text}"
    return header[-n:], rows


def parse_lines(text: str, metric: str) -> dict[str, list[float]]:
    """label -> [value] of printed lines ``label: ... METRIC value`` (the label ends at a colon
    or at two spaces); lines without the metric are skipped."""
    found: dict[str, list[float]] = {}
    pattern = re.compile(rf"(?<!\w){re.escape(metric)}[ =:]+(-?\d+(?:\.\d+)?)")
    for ln in text.splitlines():
        m = pattern.search(ln)
        if m:
            label = re.split(r":|\s{2,}", ln.strip(), maxsplit=1)[0]
            found.setdefault(label, []).append(float(m.group(1)))
    return found


def scores_of(text: str, layout: str, metric: str = "") -> dict[str, list[float]]:
    """method or setting -> its scores, from a result output laid out as ``layout``."""
    if layout == "lines":
        return parse_lines(text, metric)
    columns, rows = parse_frame(text)
    if layout == "columns":
        return {c: [values[i] for _, values in rows] for i, c in enumerate(columns)}
    assert layout == "rows", f"unknown layout {layout!r}"
    assert metric in columns, f"no column {metric!r} in {columns}"
    i = columns.index(metric)
    return {label: [values[i]] for label, values in rows}


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


@pytest.mark.parametrize("demo", [
    pytest.param(d, id=d.id, marks=[pytest.mark.xfail(strict=True, reason=d.known_failure)]
                 if d.known_failure else []) for d in DEMOS])
def test_committed_quick_mode_result_table_shows_methods_working_and_differing(demo):
    nb = json.loads((BOOK / f"{demo.chapter}.ipynb").read_text(encoding="utf-8"))
    table = scores_of(result_output(nb, demo.marker), demo.layout, demo.metric)
    assert len(table) >= 2, f"{demo.chapter}: fewer than two methods in the table: {list(table)}"
    problems = demo_problems(table)
    assert not problems, f"{demo.chapter} (re-run its quick mode on questions it can answer):\n" \
        + "\n".join(problems)


def test_every_demo_marker_names_one_cell_of_its_chapter():
    """A marker that matches no cell (or two) after an edit is a demo no longer checked."""
    for d in DEMOS:
        nb = json.loads((BOOK / f"{d.chapter}.ipynb").read_text(encoding="utf-8"))
        n = sum(d.marker in _text(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
        assert n == 1, f"{d.id}: {n} code cells contain the marker"


def test_checker_flags_an_all_zero_table_and_one_where_methods_tie():
    zeros = ("method           fixed_k  ircot  oracle\nid\n"
             "q0      0.0    0.0     0.0\nq1      0.0    0.0     0.0\n")
    table = scores_of(zeros, "columns")
    assert table == {"fixed_k": [0.0, 0.0], "ircot": [0.0, 0.0], "oracle": [0.0, 0.0]}
    assert len(demo_problems(table)) == 2  # zero, and a tie
    tie = scores_of("method  a  b\nid\nq0  1.0  0.0\nq1  0.0  1.0\n", "columns")
    assert demo_problems(tie) == [
        "every method has the same mean ({'a': 0.5, 'b': 0.5}): none can be seen to differ"]
    good = scores_of("method  a  b\nid\nq0  1.0  0.0\nq1  0.55  1.0\n", "columns")
    assert demo_problems(good) == []
    one = scores_of("method  a  b  c\nid\nq0  0.0  0.0  1.0\nq1  0.0  0.0  0.0\n", "columns")
    assert demo_problems(one) == ["only ['c'] scores above zero: two methods cannot be compared"]


def test_checker_reads_methods_as_rows_and_printed_lines():
    # a frame of means, one row per setting (labels with spaces, an index name line)
    means = ("                  F1    SR  tokens\nsetting\n"
             "tau=-1          0.58  0.83  1275.0\nfact table      0.00  0.75   320.5\n")
    assert scores_of(means, "rows", "F1") == {"tau=-1": [0.58], "fact table": [0.0]}
    assert scores_of(means, "rows", "SR") == {"tau=-1": [0.83], "fact table": [0.75]}
    assert demo_problems(scores_of(means, "rows", "F1")) == [
        "only ['tau=-1'] scores above zero: two methods cannot be compared"]
    # no names for the columns or the index (SR@k per dataset)
    no_names = "        SR@1   SR@3\nlibrary  0.424  0.585\nhotpotqa  0.400  0.775\n"
    assert scores_of(no_names, "columns") == {"SR@1": [0.424, 0.4], "SR@3": [0.585, 0.775]}
    with pytest.raises(AssertionError, match="no column"):
        scores_of(means, "rows", "EM")
    wrapped = "   a  \\\nx  1.0\n\n   b\nx  2.0\n"
    with pytest.raises(AssertionError, match="unwrapped"):
        scores_of(wrapped, "columns")
    printed = ("dynakrag  SR 1.00  EM 0.33  F1 0.33  steps 5.7\n"
               "          actions: {'retrieve_more': 3}\n"
               "uniform   SR 1.00  EM 0.00  F1 0.00  steps 6.0\n"
               "K = 12: SR 0.92, tokens 1,345.17, F1 0.59\n")
    assert scores_of(printed, "lines", "F1") == {"dynakrag": [0.33], "uniform": [0.0],
                                                 "K = 12": [0.59]}
    assert demo_problems(scores_of(printed, "lines", "SR")) == []
    assert demo_problems(scores_of(printed.replace("0.92", "1.00"), "lines", "SR")) == [
        "every method has the same mean ({'dynakrag': 1.0, 'uniform': 1.0, 'K = 12': 1.0}): "
        "none can be seen to differ"]
