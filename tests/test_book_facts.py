"""What the chapters' prose says about the project is true of the project (issue 43).

Every page of the book (the chapters' markdown cells, and the markdown pages such as
``book/notation.md``) is read as text; nothing is executed or imported. Four classes of fact:

(a) **Every project name in inline code exists.** A dotted name under ``dynakrag_lite`` or
    ``dynakrag_lab`` resolves to a module file on disk, and what follows the module (a function,
    a class, a constant, ``Class.method``) is defined there (read with :mod:`ast`, so the check
    imports nothing). A path into the repository (``results/...``, ``data_scripts/...``,
    ``tests/...``, any ``*.py``) exists; ``<placeholder>`` parts match any name. Output paths
    (the argument of ``--out``) are not checked, nor names outside the project (``runs/``,
    ``../shared/data``).
(b) **Every chapter the prose points to is in** ``book/_toc.yml``: ``{doc}`` targets, and
    "chapter N" / "chapters N-M" by the number a chapter's file name starts with; and every
    ``{eq}`` / ``{ref}`` target is a label some page defines (``:label:``, ``$$ (label)``,
    ``(label)=``), so ``jupyter-book build -n`` finds no dangling reference there.
(c) **No tokens-per-second figure in prose but the measured ones**: a number (or a glue role)
    before ``tok/s``, ``tokens/s`` or ``tokens per second`` must equal a rate recorded in
    ``results/benchmarks/llama_builds.json``; a glued rate cannot be checked and is refused.
(d) **No** ``{glue:`` **role** outside :data:`GLUE_ALLOWED`, the chapters not yet converted to
    printed or code-made numbers (book-style note, section 2).

Each checker is also run on a planted bad example, so a pass on the book is not vacuous.
"""
from __future__ import annotations

import ast
import json
import os
import re
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from test_book_glue import _mask_fences, cells, load

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"
TOC = BOOK / "_toc.yml"
LLAMA_BUILDS = REPO / "results" / "benchmarks" / "llama_builds.json"
PACKAGES = ("dynakrag_lite", "dynakrag_lab")
# top-level folders whose files the prose may name by path
PROJECT_DIRS = ("results", "data_scripts", "dynakrag_lite", "dynakrag_lab", "tests",
                "benchmarks", "book")
# bare file names in prose that are not files of this repository
NON_PROJECT_FILES: frozenset[str] = frozenset()

# Chapters that still quote numbers through {glue:...} roles. This list must only shrink: a
# chapter converted to printed output or code-made markdown leaves it (the test below fails
# until it does), and no chapter joins it.
GLUE_ALLOWED = frozenset({
})


# -- the pages ------------------------------------------------------------------------------
def nested_items(node):
    """Every (key, value) of the dicts nested anywhere in parsed YAML/JSON, in document order."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from nested_items(value)
    elif isinstance(node, list):
        for item in node:
            yield from nested_items(item)


@lru_cache(maxsize=1)
def toc_files() -> tuple[str, ...]:
    """The pages of the table of contents, as paths relative to the repository without suffix."""
    toc = yaml.safe_load(TOC.read_text(encoding="utf-8"))
    return tuple(v for k, v in nested_items(toc) if k in ("root", "file") and isinstance(v, str))


def page_path(entry: str) -> Path:
    for suffix in (".ipynb", ".md"):
        if (REPO / (entry + suffix)).exists():
            return REPO / (entry + suffix)
    raise FileNotFoundError(f"{TOC}: no .ipynb or .md for {entry!r}")


PAGES = [page_path(e) for e in toc_files()]
IDS = [p.stem for p in PAGES]


def markdown_of(path: Path) -> list[tuple[int, str]]:
    """(cell index, markdown) of a page: a notebook's markdown cells and its figure captions
    (myst-nb cell metadata, rendered as prose under the figure), or a .md page whole."""
    if path.suffix == ".ipynb":
        nb = load(path)
        captions = [(i, c["metadata"]["mystnb"]["figure"]["caption"])
                    for i, c in enumerate(nb["cells"])
                    if "caption" in c.get("metadata", {}).get("mystnb", {}).get("figure", {})]
        return sorted(cells(nb, "markdown") + captions)
    return [(0, path.read_text(encoding="utf-8"))]


def chapter_numbers() -> dict[str, str]:
    """'11b' -> 'book/11b_walkthrough': the number a page's file name starts with."""
    out = {}
    for entry in toc_files():
        m = re.match(r"(\d+[a-z]?)_", Path(entry).name)
        if m:
            out[m.group(1).lstrip("0") or "0"] = entry
    return out


# -- (a) project names in inline code -------------------------------------------------------
ROLE_OR_CODE = re.compile(r"(\{[\w:-]+\})?(`+)((?:(?!\2).|\n(?!\s*\n))+?)\2")


def inline_code(src: str) -> list[str]:
    """The inline code spans of prose (code fences and roles such as {doc}`x` left out)."""
    return [m.group(3) for m in ROLE_OR_CODE.finditer(_mask_fences(src)) if not m.group(1)]


def named_paths(span: str) -> list[str]:
    """The project names one code span mentions: dotted module names and repository paths."""
    out, skip = [], False
    for raw in span.split():
        tok = raw.strip("()[],;:'\"").rstrip(".")
        if skip or not tok:
            skip = False
            continue
        if tok in ("--out", "-o"):
            skip = True  # an output the command writes, not a file that must exist
            continue
        dotted = re.fullmatch(r"(?:%s)(?:\.\w+)*" % "|".join(PACKAGES), tok)
        if dotted or tok.endswith(".py") or tok.split("/")[0] in PROJECT_DIRS and "/" in tok:
            out.append(tok)
    return out


def _defined_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names[n.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


def dotted_problem(name: str, root: Path = REPO) -> str | None:
    """Why ``pkg.module.attr[.attr]`` does not exist on disk under ``root``; None if it does."""
    parts = name.split(".")
    module, i = None, 0
    for j in range(1, len(parts) + 1):
        base = root.joinpath(*parts[:j])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                module, i = candidate, j
    if module is None:
        return f"no module {parts[0]!r}"
    rest = parts[i:]
    if not rest:
        return None
    scope = _defined_names(ast.parse(module.read_text(encoding="utf-8")).body)
    for k, attr in enumerate(rest):
        if attr not in scope:
            where = ".".join(parts[:i + k])
            return f"{where} ({module.relative_to(root)}) defines no {attr!r}"
        node = scope[attr]
        if not isinstance(node, ast.ClassDef):
            return None  # an attribute of a function or a value: not followed further
        scope = _defined_names(node.body)
    return None


def _somewhere(name: str, root: Path) -> bool:
    """Whether a file of that name is in the repository (hidden and build folders skipped)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_build")) and d != "runs"]
        if name in files:
            return True
    return False


def path_problem(path: str, root: Path = REPO) -> str | None:
    """Why a repository path named in prose does not exist; None if it does."""
    if "/" not in path:  # a bare file name: anywhere in the repository
        if path in NON_PROJECT_FILES or _somewhere(path, root):
            return None
        return f"no file named {path!r} in the repository"
    if re.fullmatch(r"(?:%s)(?:\.\w+)*" % "|".join(PACKAGES), path):
        return dotted_problem(path, root)
    pattern = re.sub(r"<[^<>/]*>", "*", path.rstrip("/"))
    if any(ch in pattern for ch in "*?["):
        return None if next(root.glob(pattern), None) is not None else f"nothing matches {path!r}"
    return None if (root / pattern).exists() else f"{path!r} does not exist"


def missing_names(src: str, root: Path = REPO) -> list[str]:
    problems = []
    for span in inline_code(src):
        for name in named_paths(span):
            why = (dotted_problem(name, root) if "/" not in name and not name.endswith(".py")
                   else path_problem(name, root))
            if why:
                problems.append(f"`{name}`: {why}")
    return problems


# -- (b) chapter references -----------------------------------------------------------------
DOC_ROLE = re.compile(r"\{doc\}`(?:[^`<]*<)?([^`<>]+?)>?`")
CHAPTER_WORD = re.compile(r"\bchapters?\s+(\d+[a-z]?)(?:\s*(?:-|–|to|and)\s*(\d+[a-z]?))?",
                          re.I)


def doc_target(target: str, page: Path) -> str:
    """A {doc} target as a table-of-contents entry (relative to the repository, no suffix)."""
    target = target.strip()
    resolved = (REPO / target.lstrip("/")) if target.startswith("/") else (page.parent / target)
    rel = resolved.resolve().relative_to(REPO.resolve())
    return (rel.with_suffix("") if rel.suffix in (".ipynb", ".md") else rel).as_posix()


def bad_chapter_references(src: str, page: Path, entries=None, numbers=None) -> list[str]:
    entries = set(toc_files()) if entries is None else set(entries)
    numbers = chapter_numbers() if numbers is None else numbers
    problems = []
    for m in DOC_ROLE.finditer(src):
        if doc_target(m.group(1), page) not in entries:
            problems.append(f"{{doc}}`{m.group(1)}` is not a page of {TOC.name}")
    prose = _mask_fences(src)
    for m in CHAPTER_WORD.finditer(prose):
        for n in filter(None, m.groups()):
            if (n.lower().lstrip("0") or "0") not in numbers:
                problems.append(f"{m.group(0)!r}: there is no chapter {n} in {TOC.name}")
    return problems


LABEL_ROLE = re.compile(r"\{(eq|ref)\}`(?:[^`<]*<)?([^`<>]+?)>?`")
EQ_LABEL = re.compile(r"^:label:\s*(\S+)|\$\$\s*\((\S+?)\)", re.M)
REF_LABEL = re.compile(r"^\(([\w-]+)\)=\s*$", re.M)


@lru_cache(maxsize=1)
def book_labels() -> dict[str, frozenset[str]]:
    """The equation labels and section targets the book's pages define."""
    eqs: set[str] = set()
    refs: set[str] = set()
    for path in PAGES:
        for _, src in markdown_of(path):
            eqs |= {a or b for a, b in EQ_LABEL.findall(src)}
            refs |= set(REF_LABEL.findall(src))
    return {"eq": frozenset(eqs), "ref": frozenset(refs)}


def dangling_labels(src: str, labels: dict[str, frozenset[str]] | None = None) -> list[str]:
    labels = book_labels() if labels is None else labels
    return [f"{{{kind}}}`{name}` names no label of the book"
            for kind, name in LABEL_ROLE.findall(src) if name.strip() not in labels[kind]]


# -- (c) tokens per second ------------------------------------------------------------------
RATE = re.compile(r"(\{glue(?::[\w-]*)?\}`[^`]+`|(?<![\w.])\d+(?:\.\d+)?)\s*"
                  r"(?:tok/s|tokens?/s\b|tokens? (?:per|a|each) second)", re.I)


@lru_cache(maxsize=1)
def measured_rates() -> frozenset[float]:
    """Every prompt/decoding rate (``*_tok_s``) recorded in llama_builds.json."""
    builds = json.loads(LLAMA_BUILDS.read_text(encoding="utf-8"))
    return frozenset(float(v) for k, v in nested_items(builds)
                     if k.endswith("tok_s") and isinstance(v, (int, float)))


def unmeasured_rates(src: str, rates: frozenset[float] | None = None) -> list[str]:
    rates = measured_rates() if rates is None else rates
    problems = []
    for m in RATE.finditer(src):
        figure = m.group(1)
        if figure.startswith("{glue"):
            problems.append(f"{m.group(0)!r}: a glued rate (name the file that records it)")
            continue
        decimals = len(figure.split(".")[1]) if "." in figure else 0
        if not any(round(r, decimals) == float(figure) for r in rates):
            problems.append(f"{m.group(0)!r}: not a rate of {LLAMA_BUILDS.relative_to(REPO)}")
    return problems


# -- (d) glue roles -------------------------------------------------------------------------
GLUE = re.compile(r"\{glue(?::[\w-]*)?\}")


def has_glue(path: Path) -> bool:
    return any(GLUE.search(src) for _, src in markdown_of(path))


# -- the book -------------------------------------------------------------------------------
def test_the_table_of_contents_lists_the_chapters_and_the_notation_page():
    assert len(PAGES) >= 15 and BOOK / "notation.md" in PAGES
    assert {"12", "98", "99"} <= set(chapter_numbers())


# (a)-(c): each checker reads one markdown cell of one page and returns its problems
FACT_CHECKS = {
    "named-modules-and-files-exist": lambda src, page: missing_names(src),
    "chapters-are-in-the-toc": bad_chapter_references,
    "cited-labels-are-defined": lambda src, page: dangling_labels(src),
    "rates-are-measured": lambda src, page: unmeasured_rates(src),
}


@pytest.mark.parametrize("check", FACT_CHECKS, ids=list(FACT_CHECKS))
@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_the_prose_states_only_facts_of_the_project(path, check):
    problems = [f"{path.name} markdown cell {i}: {p}" for i, src in markdown_of(path)
                for p in FACT_CHECKS[check](src, path)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", PAGES, ids=IDS)
def test_no_glue_role_outside_the_chapters_not_yet_converted(path):
    if path.stem in GLUE_ALLOWED:
        assert has_glue(path), (f"{path.name} has no {{glue:}} role any more: remove it from "
                                "GLUE_ALLOWED (the list only shrinks)")
    else:
        assert not has_glue(path), (f"{path.name} quotes numbers through {{glue:}} roles: print "
                                    "them in an output, or in markdown a code cell makes")


def test_the_glue_allow_list_names_only_pages_of_the_book():
    assert GLUE_ALLOWED <= set(IDS), GLUE_ALLOWED - set(IDS)


# -- the checkers on planted bad examples ---------------------------------------------------
def test_names_checker_finds_a_missing_module_attribute_and_file():
    src = ("Use `dynakrag_lite.controller.run_controller` and `dynakrag_lite.policy.Policy.choose`;"
           " read `results/README.md` and `results/experiments/<dataset>/<generator>/`.\n"
           "Run `python data_scripts/main_experiment.py --out results/new/x.json` or "
           "`python -m dynakrag_lite evaluate`.\n\n```python\nimport dynakrag_lite.nowhere\n```\n"
           "See {doc}`experiments/gone.py`.")
    assert missing_names(src) == []
    bad = ("`dynakrag_lite.explorer` draws it; `dynakrag_lite.policy.Policy.nope`, "
           "`dynakrag_lab.report.results.no_such`, `experiments/results.py`, "
           "`results/benchmarks/missing.json` and `results/policies/<d>-nomodel.joblib`.")
    problems = missing_names(bad)
    assert len(problems) == 6, problems
    assert "defines no 'explorer'" in problems[0] and "defines no 'nope'" in problems[1]
    assert "no_such" in problems[2] and "experiments/results.py" in problems[3]


def test_chapter_checker_finds_a_missing_chapter_and_doc_target():
    page = BOOK / "99_appendix_paper_setting.ipynb"
    good = "As {doc}`12_results` and {doc}`the preface <00_preface>` show (chapters 7-9, chapter 11b)."
    assert bad_chapter_references(good, page) == []
    bad = ("the runs of chapters 12-13, {doc}`13_transfer` and {doc}`the map </book/missing>`; "
           "chapter 14 too.")
    problems = bad_chapter_references(bad, page)
    assert len(problems) == 4, problems
    assert "13_transfer" in problems[0] and "missing" in problems[1]
    assert "chapter 13" in problems[2] and "chapter 14" in problems[3]


def test_label_checker_finds_an_undefined_equation_or_section():
    labels = book_labels()
    assert {"eq-selection", "eq-veto", "eq-sr-at-k"} <= labels["eq"]
    assert "sec-continuation-targets" in labels["ref"]
    good = "Rule {eq}`eq-selection`, targets {ref}`the list <sec-continuation-targets>`."
    assert dangling_labels(good) == []
    bad = "See {eq}`eq-gone`, {ref}`sec-gone` and {ref}`that section <sec-missing>`."
    assert len(dangling_labels(bad)) == 3


def test_rate_checker_allows_only_recorded_rates():
    rates = frozenset({34.5, 17.0, 22.2})
    assert unmeasured_rates("decoding 34.5 tok/s, then 17 tokens/s and 22.2 tokens per second",
                            rates) == []
    bad = ("it decoded 4.1 tok/s and 1.3 tokens per second, or "
           "{glue:text}`c00_decode_q05:.1f` tokens per second.")
    problems = unmeasured_rates(bad, rates)
    assert len(problems) == 3, problems
    assert "4.1" in problems[0] and "1.3" in problems[1] and "glued" in problems[2]
    assert measured_rates(), f"{LLAMA_BUILDS} records no rate"


def test_glue_detector_sees_roles_and_directives():
    assert GLUE.search("F1 {glue:text}`k:.2f`") and GLUE.search("{glue}`k`")
    assert GLUE.search("```{glue:figure} k\n```")
    assert not GLUE.search("a glue call in `glue('k', 1)`")
