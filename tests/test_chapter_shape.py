"""The chapters keep the shape a reader can follow (issue 25's rules, checked on the committed
notebooks):

* at most :data:`MAX_VISIBLE_CODE` non-blank code lines a reader sees (cells without a
  ``hide-input`` / ``hide-cell`` / ``remove-input`` / ``remove-cell`` tag), not counting the
  ``parameters`` cell: result reading belongs in the library, not in the chapter;
* the ``parameters`` cell (the chapter's knobs, ``name: type = value`` lines only) is visible:
  exercises ask the reader to edit it (the book style note, section 6);
* no output longer than :data:`MAX_OUTPUT_CHARS` characters as shown (stream text; HTML
  with its tags, styles and collapsed ``<details>`` removed; else markdown or plain text):
  long lists go to collapsed cells or to files;
* every "Exercise N.M" has a "Solution N.M" in a collapsed (``:class: dropdown``) block;
* one idea per chapter: at most :data:`MAX_WORDS` words of markdown (``\\w+`` tokens, counted
  by ``data_scripts/execute_chapters.py``'s ``markdown_words``, the count its ``--time``
  report records) in every chapter but the appendices (``*_appendix_*``), which hold what
  the chapters leave out;
* at least :data:`MIN_CHAPTERS_WITH_SOURCE` chapters show library source
  (``dynakrag_lite.show.show_source`` or ``literalinclude`` with ``:pyobject:``);
* no code cell line longer than :data:`MAX_CODE_LINE` characters (hidden cells too: a reader
  who expands one, or opens the notebook, reads it the same way).

The rendered page (fit of code and tables in the column, what a page opens with) is measured
by ``data_scripts/page_check.py`` in headless Chromium; its committed report is checked at the
end of this file.
"""
from __future__ import annotations

import ast
import html
import json
import re
from pathlib import Path

import pytest

from helpers import load_script

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((REPO / "book").glob("*.ipynb"))
MAX_VISIBLE_CODE = 120
MAX_OUTPUT_CHARS = 4000
MIN_CHAPTERS_WITH_SOURCE = 10
MAX_WORDS = 2000
MAX_CODE_LINE = 92
HIDDEN = {"hide-input", "hide-cell", "remove-input", "remove-cell"}
# the one word count of the project (also in chapter-times.json)
markdown_words = load_script("execute_chapters").markdown_words
NOT_APPENDICES = [p for p in CHAPTERS if "_appendix_" not in p.stem]


def _text(v) -> str:
    return "".join(v) if isinstance(v, list) else str(v)


def visible_code_lines(nb: dict) -> int:
    """Non-blank source lines of the code cells a reader sees expanded, the knobs aside."""
    return sum(sum(1 for line in _text(c["source"]).splitlines() if line.strip())
               for c in nb["cells"] if c["cell_type"] == "code"
               and not (HIDDEN | {"parameters"}) & set(c.get("metadata", {}).get("tags", [])))


def parameters_cells(nb: dict) -> list[list[str]]:
    """The tags of every ``parameters`` cell."""
    return [c.get("metadata", {}).get("tags", []) for c in nb["cells"]
            if c["cell_type"] == "code" and "parameters" in c.get("metadata", {}).get("tags", [])]


def _summary_only(details: re.Match) -> str:
    summary = re.search(r"<summary.*?</summary>", details.group(1), re.S)
    return summary.group(0) if summary else ""


def shown_text(output: dict) -> str:
    """An output's text as a reader sees it: HTML without tags, styles, scripts and the
    contents of closed ``<details>`` (a collapsed list is not in the reader's way)."""
    if output.get("output_type") == "stream":
        return _text(output.get("text", ""))
    data = output.get("data") or {}
    if "text/html" in data:
        h = _text(data["text/html"])
        h = re.sub(r"<(style|script)\b.*?</\1>", "", h, flags=re.S | re.I)
        # closed details (not `<details open>`): drop everything but the summary line
        h = re.sub(r"<details(?![^>]*\bopen\b)[^>]*>(.*?)</details>", _summary_only, h,
                   flags=re.S | re.I)
        return html.unescape(re.sub(r"<[^>]+>", "", h))
    for kind in ("text/markdown", "text/plain"):
        if kind in data:
            return _text(data[kind])
    return ""


def long_outputs(nb: dict, limit: int = MAX_OUTPUT_CHARS) -> list[tuple[int, int]]:
    """(cell index, characters) of every output longer than ``limit`` as shown."""
    return [(i, len(shown_text(o))) for i, c in enumerate(nb["cells"])
            if c["cell_type"] == "code" for o in c.get("outputs", [])
            if len(shown_text(o)) > limit]


EXERCISE = re.compile(r"\{admonition\}\s+Exercise\s+(\w+\.\d+)")
SOLUTION = re.compile(r"\{admonition\}\s+Solution\s+(\w+\.\d+)\s*\n:class:\s*dropdown")


def long_code_lines(nb: dict, limit: int = MAX_CODE_LINE) -> list[tuple[int, int, str]]:
    """(cell index, line number from 1, line) of every code cell line over ``limit``."""
    return [(i, n, line) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            for n, line in enumerate(_text(c["source"]).splitlines(), 1) if len(line) > limit]


def exercises_without_solution(nb: dict) -> list[str]:
    md = "\n".join(_text(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    return sorted(set(EXERCISE.findall(md)) - set(SOLUTION.findall(md)))


def shows_source(nb: dict) -> bool:
    src = "\n".join(_text(c["source"]) for c in nb["cells"])
    return bool(re.search(r"\bshow_source\(|:pyobject:", src))


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_shows_at_most_120_code_lines(path):
    n = visible_code_lines(_load(path))
    assert n <= MAX_VISIBLE_CODE, (f"{path.name}: {n} visible code lines; move result "
                                   "reading into the library or collapse setup cells")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_has_one_visible_parameters_cell(path):
    tags = parameters_cells(_load(path))
    assert len(tags) == 1, f"{path.name}: {len(tags)} parameters cells"
    assert not HIDDEN & set(tags[0]), f"{path.name}: the parameters cell is hidden ({tags[0]})"
    # knobs only (``name: type = value``): it is left out of the visible-code count above
    cell = next(c for c in _load(path)["cells"] if c["cell_type"] == "code"
                and "parameters" in c.get("metadata", {}).get("tags", []))
    other = [type(n).__name__ for n in ast.parse(_text(cell["source"])).body
             if not isinstance(n, ast.AnnAssign)]
    assert not other, f"{path.name}: the parameters cell holds more than knobs ({other})"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_output_is_longer_than_4000_characters(path):
    found = long_outputs(_load(path))
    assert not found, f"{path.name}: outputs over {MAX_OUTPUT_CHARS} characters (cell, n): {found}"


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_no_code_line_is_longer_than_92_characters(path):
    found = long_code_lines(_load(path))
    assert not found, (f"{path.name}: {len(found)} code lines over {MAX_CODE_LINE} characters; "
                       "rewrap them:\n" + "\n".join(f"  cell {i}, line {n} ({len(line)}): {line}"
                                                    for i, n, line in found))


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_exercise_has_a_collapsed_solution(path):
    nb = _load(path)
    assert EXERCISE.findall("\n".join(_text(c["source"]) for c in nb["cells"])), \
        f"{path.name} has no exercise"
    missing = exercises_without_solution(nb)
    assert not missing, f"{path.name}: exercises without a dropdown solution: {missing}"


def test_at_least_10_chapters_show_library_source():
    showing = [p.stem for p in CHAPTERS if shows_source(_load(p))]
    assert len(showing) >= MIN_CHAPTERS_WITH_SOURCE, showing


def test_the_appendices_are_the_97_to_99_chapters_only():
    assert sorted(p.stem[:2] for p in CHAPTERS if p not in NOT_APPENDICES) == ["97", "98", "99"]


@pytest.mark.parametrize("path", NOT_APPENDICES, ids=[p.stem for p in NOT_APPENDICES])
def test_chapter_teaches_one_idea_in_at_most_2000_words(path):
    n = markdown_words(_load(path))
    assert n <= MAX_WORDS, (f"{path.stem}: {n:,} words of markdown, over {MAX_WORDS:,}: one idea "
                            "per chapter; tighten the prose or move the rest to an appendix "
                            "(97_appendix_method_details)")


# -- the checks themselves, on made-up notebooks -------------------------------------------
def _nb(cells):
    return {"cells": cells}


def _code(src, tags=(), outputs=()):
    return {"cell_type": "code", "source": src, "metadata": {"tags": list(tags)},
            "outputs": list(outputs)}


def _md(src):
    return {"cell_type": "markdown", "source": src, "metadata": {}}


def test_hidden_cells_and_blank_lines_are_not_counted():
    nb = _nb([_code("a = 1\n\nb = 2\n"), _code("x\ny\nz", tags=["hide-input"]),
              _code("q", tags=["remove-cell"])])
    assert visible_code_lines(nb) == 2


def test_collapsed_details_and_markup_do_not_count_but_open_details_do():
    body = "x" * 5000
    closed = {"output_type": "display_data",
              "data": {"text/html": f"<div style='a'><details><summary>list</summary>{body}"
                                    "</details></div>", "text/plain": body}}
    opened = {"output_type": "display_data",
              "data": {"text/html": f"<details open><summary>v</summary>{body}</details>"}}
    stream = {"output_type": "stream", "name": "stdout", "text": body}
    assert shown_text(closed) == "list"
    assert long_outputs(_nb([_code("", outputs=[closed])])) == []
    assert long_outputs(_nb([_code("", outputs=[opened, stream])])) == [(0, 5001), (0, 5000)]


def test_words_are_counted_in_markdown_cells_only():
    nb = _nb([_md("# Two words\n\nOne idea, $v(s,a)$."), _code("many words in code"),
              _md(["split ", "across lines"])])
    assert markdown_words(nb) == 2 + 5 + 3


def test_a_code_line_over_92_characters_is_named_by_cell_and_line():
    long = "x = " + "1" * 89  # 93 characters
    nb = _nb([_md("m" * 200), _code("a = 1\n" + "y = " + "2" * 88),
              _code(["b = 2\n", long + "\n", "c = 3"], tags=["hide-input"])])
    assert long_code_lines(nb) == [(2, 2, long)]


def test_an_exercise_needs_a_dropdown_solution_with_its_number():
    ex = _md("`````{admonition} Exercise 3.1 (try)\ntext\n`````\n"
             "`````{admonition} Exercise 3.2\ntext\n`````")
    sol_open = _md("`````{admonition} Solution 3.1\nanswer\n`````")
    sol = _md("`````{admonition} Solution 3.2\n:class: dropdown\nanswer\n`````")
    assert exercises_without_solution(_nb([ex, sol_open, sol])) == ["3.1"]


# -- the rendered pages ----------------------------------------------------------------------
PAGE_REPORT = REPO / "results" / "diagnostics" / "page-check.json"


def test_the_committed_page_check_covers_every_chapter_and_found_no_problem():
    report = json.loads(PAGE_REPORT.read_text(encoding="utf-8"))
    assert set(report["pages"]) == {p.stem for p in CHAPTERS}
    bad = {k: v["problems"] for k, v in report["pages"].items() if v["problems"]}
    assert not bad, bad
    assert all(v["opening"]["kind"] != "code cell" for v in report["pages"].values())
    assert "The table" in report["pages"]["12_results"]["toc"]


def test_the_page_check_flags_a_figure_wider_than_the_column_and_a_raw_glue_role():
    page_check = load_script("page_check")
    fine = {"opening": {"kind": "p"}, "column_px": 752, "wide_images": [], "raw_glue": []}
    assert page_check.problems(fine) == []
    wide = dict(fine, wide_images=[{"src": "fig.png", "width_px": 1090}])
    glued = dict(fine, raw_glue=["{glue:text}`c12_f1:.3f`"])
    assert "wider than the 752 px column" in page_check.problems(wide)[0]
    assert "raw glue role" in page_check.problems(glued)[0]


def test_the_committed_page_check_measured_figures_and_glue_on_every_page():
    report = json.loads(PAGE_REPORT.read_text(encoding="utf-8"))
    missing = [p for p, r in report["pages"].items() if "wide_images" not in r or "raw_glue" not in r]
    assert not missing, f"page-check.json predates the figure and glue checks: {missing}"
