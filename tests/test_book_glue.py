"""The numbers the book's prose cites come from outputs, not from the author's keyboard.

The chapters quote computed values through myst-nb glue: a code cell calls
``glue("c12_dynakrag_f1", value)`` and a markdown cell writes ``{glue:text}`c12_dynakrag_f1:.3f```.
Every ``book/*.ipynb`` is read as JSON (nothing is executed) and checked for three things.

(a) **Every glue reference names a key a code cell of the same notebook glues.** Keys are read
    from the code cells' ``glue(...)`` calls with :mod:`ast`. A literal key counts as is. An
    f-string key (``glue(f"c12_{run}_{key}", ...)``) is expanded statically when every name in
    it is bound by enclosing ``for`` loops over literal collections (a tuple/list/dict literal,
    a name assigned such a literal in the notebook, or ``.items()/.keys()/.values()`` of one;
    in ``for key, gen in (("src", generator), ...)`` ``key`` is known, ``gen`` is not).
    Anything else is a *dynamic* key; a reference that only a dynamic key could produce is
    accepted only when it matches that key's shape (the f-string's literal parts around
    ``[A-Za-z0-9_]+``) **and** a committed output of the notebook carries it.

(b) **Every referenced key has a committed output carrying it**, when the notebook has
    committed outputs at all: myst-nb stores a glued value as a ``display_data`` output with
    ``metadata.scrapbook.name == key`` and data under ``application/papermill.record/...``.
    The stored value must not be ``nan``/``None``: a reader would see that, not a number.

(c) **Markdown prose hard-codes no measured number.** In every chapter's markdown cells a
    decimal (``.342``, ``0.27``, ``34.2 %``, ``-0.03``, ``1,234.5``) is a violation unless

    * it is not prose the reader sees as text: inside ``$...$``/``$$...$$`` math, inline code
      (which includes every ``{role}`...``` content, so glue roles), a code fence (a fence
      without a directive, or a ``{code}``, ``{code-block}``, ``{code-cell}``,
      ``{sourcecode}`` or ``{math}`` directive; the *body* of other directives such as
      admonitions is prose and is scanned), a directive option line (``:class: dropdown``),
      an HTML comment, a URL or a Markdown link target;
    * it is part of a name: glued to a letter or a dot (``Qwen2.5``, ``0.5B``, ``v1.2.3``),
      a hyphenated model name (``Llama-3.1-8B``) or an identifier after a colon
      (``arXiv:2607.06507``);
    * it is a reference label right after one of the words Section, Table, Figure, Fig.,
      Eq., Equation, Chapter, Algorithm, Exercise, Appendix or § (``exercise 7.3``);
    * its **sentence attributes it to a source**: the sentence contains the word ``paper``
      (``paper's``), ``Wu et al`` or a ``{cite}`` role (``{cite:p}``, ``{cite:t}``, ...);
    * it is a **default setting named as such**: the word ``default`` occurs in the same
      sentence within 40 characters of it (``0.05 by default``, ``our default (0.05)``);
    * its sentence is part of **the stated result**: one of the three sentences
      :func:`dynakrag_lab.report.claims.claim_sentences` computes from the committed runs
      (README, the preface and the results chapter state them as plain prose, readable
      without the book build; ``tests/test_claims.py`` fails when they go stale).

    Integers (counts, budgets, ``40%``) are not flagged. A number that is neither measured nor
    a setting but a definition (one of two gold documents is 0.5) belongs in math: ``$1/2$``.
    Sentences are split at ``.!?`` followed by whitespace and a capital (or markup) letter;
    paragraphs, list items, table rows and headings are separate units.

The checkers are tested on small synthetic cells too, so a pass on the chapters is not vacuous.
"""
from __future__ import annotations

import ast
import itertools
import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest

from dynakrag_lab.report.claims import claim_sentences, headline_claims

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((REPO / "book").glob("*.ipynb"))
IDS = [p.stem for p in CHAPTERS]


# -- reading notebooks ----------------------------------------------------------------------
def _text(v) -> str:
    return "".join(v) if isinstance(v, list) else str(v or "")


@lru_cache(maxsize=None)
def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def cells(nb: dict, kind: str) -> list[tuple[int, str]]:
    """(index, source) of the cells of one kind, indices counted over all cells."""
    return [(i, _text(c.get("source"))) for i, c in enumerate(nb.get("cells", []))
            if c.get("cell_type") == kind]


# -- (a) references and glue calls ---------------------------------------------------------
# {glue}`k`, {glue:}`k`, {glue:text}`k:.2f`, {glue:any}`k`, ...: the key ends at the first ':'.
GLUE_ROLE = re.compile(r"\{glue(?::[\w-]*)?\}`([^`]+)`")
# ```{glue:figure} k / :::{glue:math} k
GLUE_DIRECTIVE = re.compile(r"^\s*(?:`{3,}|~{3,}|:{3,})\{glue(?::[\w-]*)?\}\s+(\S+)", re.M)


def references(nb: dict) -> list[tuple[int, str]]:
    """(markdown cell index, key) of every glue role or directive."""
    refs = []
    for i, src in cells(nb, "markdown"):
        for m in itertools.chain(GLUE_ROLE.finditer(src), GLUE_DIRECTIVE.finditer(src)):
            refs.append((i, m.group(1).split(":", 1)[0].strip()))
    return refs


@dataclass
class GlueCalls:
    """What the code cells glue: keys known statically, and the shapes of the others."""
    static: set[str] = field(default_factory=set)
    dynamic: list[tuple[int, re.Pattern, str]] = field(default_factory=list)  # cell, shape, code
    unparsable: list[int] = field(default_factory=list)  # cells that call glue but do not parse

    def dynamic_match(self, key: str) -> list[str]:
        return [code for _, shape, code in self.dynamic if shape.fullmatch(key)]


_UNKNOWN = object()  # a loop variable whose values cannot be known without running the code


def _python(src: str) -> str:
    """The cell as plain Python: IPython line magics and shell escapes become ``pass``."""
    if src.lstrip().startswith("%%"):
        return ""  # a cell magic: not Python
    return "\n".join(re.sub(r"^(\s*)[%!].*$", r"\1pass", line) for line in src.splitlines())


def _literal_names(trees: list[ast.AST]) -> dict[str, object]:
    """NAME -> value for every ``NAME = <literal>`` of the notebook (ambiguous: unknown)."""
    out: dict[str, object] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name):
                name = node.targets[0].id
                try:
                    value = ast.literal_eval(node.value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    value = _UNKNOWN  # computed: a loop over it binds nothing
                out[name] = value if out.get(name, value) == value else _UNKNOWN
    return out


def _iterate(node: ast.AST, names: dict[str, object]) -> list | None:
    """The items a ``for`` loop walks, when they are literal; else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("items", "keys", "values") and not node.args:
        base = _iterate_value(node.func.value, names)
        return list(getattr(base, node.func.attr)()) if isinstance(base, dict) else None
    value = _iterate_value(node, names)
    if isinstance(value, (tuple, list, set, frozenset, dict, str)):
        return list(value)
    return None


def _iterate_value(node: ast.AST, names: dict[str, object]) -> object:
    """A literal's value, with unknown parts (names of computed values) left _UNKNOWN, so
    ``(("src", generator), ("tgt", target))`` still binds the literal half."""
    if isinstance(node, ast.Name):
        return names.get(node.id, _UNKNOWN)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [_iterate_value(e, names) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict):
        keys = [_iterate_value(k, names) if k is not None else _UNKNOWN for k in node.keys]
        if any(k is _UNKNOWN or not isinstance(k, (str, int, float, bool, tuple))
               for k in keys):
            return _UNKNOWN
        return dict(zip(keys, (_iterate_value(v, names) for v in node.values)))
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNKNOWN


def _bind(target: ast.AST, item: object) -> dict[str, object] | None:
    if isinstance(target, ast.Name):
        return {target.id: item}
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(item, (tuple, list)) \
            and len(item) == len(target.elts):
        out: dict[str, object] = {}
        for t, v in zip(target.elts, item):
            part = _bind(t, v)
            if part is None:
                return None
            out.update(part)
        return out
    return None


def _target_names(target: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def _key_node(call: ast.Call) -> ast.AST | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == "name"), None)


def _expand_fstring(node: ast.JoinedStr, envs: list[dict[str, object]]) -> set[str] | None:
    keys = set()
    for env in envs:
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name) \
                    and v.conversion == -1 and v.format_spec is None \
                    and env.get(v.value.id, _UNKNOWN) is not _UNKNOWN:
                parts.append(str(env[v.value.id]))
            else:
                return None
        keys.add("".join(parts))
    return keys


def _shape(node: ast.AST) -> re.Pattern:
    """A regex for the keys an unresolved key expression can make (f-string: its literal
    parts kept; anything else: any key)."""
    if isinstance(node, ast.JoinedStr):
        return re.compile("".join(re.escape(str(v.value)) if isinstance(v, ast.Constant)
                                  else r"[A-Za-z0-9_]+" for v in node.values))
    return re.compile(r"[A-Za-z0-9_]+")


def glue_calls(nb: dict) -> GlueCalls:
    found = GlueCalls()
    parsed: list[tuple[int, ast.AST]] = []
    for i, src in cells(nb, "code"):
        try:
            parsed.append((i, ast.parse(_python(src))))
        except SyntaxError:
            if "glue(" in src:
                found.unparsable.append(i)
    names = _literal_names([t for _, t in parsed])

    def visit(node: ast.AST, envs: list[dict[str, object]], cell: int) -> None:
        if isinstance(node, ast.For):
            items = _iterate(node.iter, names)
            bound = [_bind(node.target, it) for it in items] if items is not None else [None]
            if any(b is None for b in bound):  # unknown values: the names stay unknown
                bound = [{n: _UNKNOWN for n in _target_names(node.target)}]
            inner = [{**e, **b} for e in envs for b in bound]
            for child in node.body:
                visit(child, inner, cell)
            for child in node.orelse:
                visit(child, envs, cell)
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "glue":
            key = _key_node(node)
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.static.add(key.value)
            elif isinstance(key, ast.JoinedStr) and \
                    (keys := _expand_fstring(key, envs)) is not None:
                found.static |= keys
            elif key is not None:
                found.dynamic.append((cell, _shape(key), ast.unparse(key)))
        for child in ast.iter_child_nodes(node):
            visit(child, envs, cell)

    for i, tree in parsed:
        visit(tree, [{}], i)
    return found


# -- (b) committed glue outputs ------------------------------------------------------------
RECORD = "application/papermill.record/"


def committed_glue(nb: dict) -> dict[str, tuple[int, str]]:
    """key -> (code cell index, stored text/plain) of every glued value in the outputs."""
    out = {}
    for i, c in enumerate(nb.get("cells", [])):
        for o in c.get("outputs", []) if c.get("cell_type") == "code" else []:
            name = (o.get("metadata") or {}).get("scrapbook", {}).get("name")
            data = o.get("data") or {}
            if name and any(k.startswith(RECORD) for k in data):
                out[name] = (i, _text(data.get(RECORD + "text/plain", "")))
    return out


def has_outputs(nb: dict) -> bool:
    return any(c.get("outputs") for c in nb.get("cells", []) if c.get("cell_type") == "code")


def unresolved_references(nb: dict) -> list[str]:
    calls, stored = glue_calls(nb), committed_glue(nb)
    problems = [f"code cell {i} calls glue but does not parse" for i in calls.unparsable]
    for cell, key in references(nb):
        if key in calls.static:
            continue
        shapes = calls.dynamic_match(key)
        if shapes and key in stored:
            continue  # made by a dynamic key, and the committed outputs show it was
        why = (f"only the dynamic glue key(s) {shapes} could make it, and no committed output "
               "carries it") if shapes else "no code cell glues it"
        problems.append(f"markdown cell {cell}: {{glue}}`{key}`: {why}")
    return problems


EMPTY_VALUES = {"nan", "-nan", "none", "'nan'", "inf", "-inf", ""}


def uncommitted_references(nb: dict) -> list[str]:
    stored = committed_glue(nb)
    problems = []
    for cell, key in references(nb):
        if key not in stored:
            problems.append(f"markdown cell {cell}: `{key}` has no committed glue output")
        elif stored[key][1].strip().lower() in EMPTY_VALUES:
            problems.append(f"markdown cell {cell}: `{key}` is stored as {stored[key][1]!r} "
                            f"(code cell {stored[key][0]})")
    return problems


# -- (c) hand-typed numbers in prose -------------------------------------------------------
CODE_DIRECTIVES = {"code", "code-block", "code-cell", "sourcecode", "math"}
FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*(.*?)\s*$")
DIRECTIVE_OPTION = re.compile(r"^\s*:[\w-]+:(\s|$)")


def _blank(s: str) -> str:
    return re.sub(r"[^\n]", " ", s)


def _mask_fences(src: str) -> str:
    """Blank code fences (whole), directive fence lines and option lines; keep the prose
    inside admonitions and other container directives."""
    out, stack = [], []  # stack of (fence char, fence length, is_code)
    for line in src.split("\n"):
        m = FENCE.match(line)
        top = stack[-1] if stack else None
        if top and top[2]:  # inside code: only its closing fence ends it
            if m and m.group(1)[0] == top[0] and len(m.group(1)) >= top[1] \
                    and not m.group(2):
                stack.pop()
            out.append(_blank(line))
            continue
        if m and (m.group(1)[0] != ":" or m.group(2).startswith("{")):
            fence, info = m.group(1), m.group(2)
            if top and not info and fence[0] == top[0] and len(fence) >= top[1]:
                stack.pop()  # closes a container directive
            elif not (fence[0] == ":" and not info):
                directive = re.match(r"\{([\w:-]+)\}", info)
                is_code = directive is None or directive.group(1) in CODE_DIRECTIVES
                stack.append((fence[0], len(fence), is_code))
            out.append(_blank(line))
            continue
        if stack and DIRECTIVE_OPTION.match(line):
            out.append(_blank(line))
            continue
        out.append(line)
    return "\n".join(out)


_INLINE_MASKS = [
    re.compile(r"<!--.*?-->", re.S),
    re.compile(r"\$\$.+?\$\$", re.S),
    re.compile(r"(?<![\\$])\$(?!\s)(?:[^$\\\n]|\\.|\n(?!\s*\n))+?(?<!\s)\$"),
    re.compile(r"(`+)(?:(?!\1).|\n(?!\s*\n))+?\1"),
    re.compile(r"\]\([^)\s]*\)"),
    re.compile(r"https?://\S+"),
]


def mask(src: str) -> str:
    """The markdown with everything that is not running prose blanked (same length)."""
    s = _mask_fences(src)
    for pat in _INLINE_MASKS:
        s = pat.sub(lambda m: _blank(m.group()), s)
    return s


NUMBER = re.compile(r"(?<![\w.:])(?<![A-Za-z]-)"
                    r"[-+−]?(?:\d{1,3}(?:,\d{3})+\.\d+|\d+\.\d+|\.\d+)"
                    r"(?!\.?\w)(?!-[A-Za-z])")
LABEL_BEFORE = re.compile(r"(?:\b(?:section|table|figure|fig\.|eq\.|equation|chapter|algorithm"
                          r"|exercise|appendix)|§)\s*$", re.I)
ATTRIBUTED = re.compile(r"\bpaper\b|\bWu et al\b|\{cite(?::[\w-]+)?\}", re.I)
DEFAULT = re.compile(r"\bdefaults?\b", re.I)
DEFAULT_WINDOW = 40
# a unit of prose: paragraphs, list items, table rows and headings start new units
UNIT_START = re.compile(r"^\s*(?:[*+-]\s|\d+[.)]\s|\||#)")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z*_({\[\"'`])")


def _units(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of paragraphs, list items, table rows, headings."""
    spans, start, pos = [], None, 0
    for line in text.split("\n") + [""]:
        end = pos + len(line)
        if not line.strip() or UNIT_START.match(line):
            if start is not None:
                spans.append((start, pos - 1))
            start = pos if line.strip() else None
        elif start is None:
            start = pos
        pos = end + 1
    return spans


def _sentences(masked: str) -> list[tuple[int, int]]:
    out = []
    for a, b in _units(masked):
        cut = a
        for m in SENTENCE_END.finditer(masked, a, b):
            out.append((cut, m.start()))
            cut = m.end()
        out.append((cut, b))
    return out


@dataclass(frozen=True)
class TypedNumber:
    cell: int
    number: str
    sentence: str

    def __str__(self) -> str:
        return f"markdown cell {self.cell}: {self.number!r} in: {self.sentence}"


def typed_numbers(src: str, cell: int = 0) -> list[TypedNumber]:
    """The decimals of one markdown cell that rule (c) does not allow."""
    masked = mask(src)
    found = []
    for a, b in _sentences(masked):
        sentence, plain = src[a:b], masked[a:b]
        if ATTRIBUTED.search(sentence):
            continue
        for m in NUMBER.finditer(plain):
            if LABEL_BEFORE.search(plain[:m.start()]):
                continue
            if any(abs(d.start() - m.start()) <= DEFAULT_WINDOW
                   for d in DEFAULT.finditer(plain)):
                continue
            found.append(TypedNumber(cell, m.group(), " ".join(sentence.split())))
    return found


def notebook_typed_numbers(nb: dict) -> list[TypedNumber]:
    return [t for i, src in cells(nb, "markdown") for t in typed_numbers(src, i)]


# -- the chapters ---------------------------------------------------------------------------
@lru_cache(maxsize=1)
def stated_result() -> tuple[str, ...]:
    """The result's sentences as computed from the committed runs (whitespace flattened)."""
    return tuple(" ".join(s.split()) for s in claim_sentences(headline_claims()))


def test_glue_roles_only_shrink():
    """Chapters are being converted from glue roles to printed numbers (book-style note,
    section 2): only the chapters test_book_facts.GLUE_ALLOWED lists may still quote through
    them, so the checks below cover fewer chapters over time, never more."""
    from test_book_facts import GLUE_ALLOWED  # here: test_book_facts imports this module
    assert CHAPTERS, "no book/*.ipynb found"
    assert {p.stem for p in CHAPTERS if references(load(p))} <= GLUE_ALLOWED


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_every_glue_reference_names_a_key_a_code_cell_of_the_chapter_glues(path):
    problems = unresolved_references(load(path))
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_every_referenced_glue_key_has_a_committed_output_with_a_value(path):
    nb = load(path)
    if not has_outputs(nb):
        pytest.skip(f"{path.name} has no committed outputs")
    problems = uncommitted_references(nb)
    assert not problems, (f"{path.name} (re-execute the chapter):\n" + "\n".join(problems))


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_chapter_prose_types_no_measured_decimal_outside_glue_math_code_or_citation(path):
    found = [t for t in notebook_typed_numbers(load(path))
             if not any(t.sentence in claim for claim in stated_result())]
    assert not found, (f"{path.name}: {len(found)} hand-typed number(s); glue them, or put "
                       "a definition in $math$, or attribute a cited number in its "
                       "sentence:\n" + "\n".join(map(str, found)))


# -- the checkers on synthetic cells -------------------------------------------------------
def _nb(*cells_: tuple[str, str], outputs: dict[int, list[dict]] | None = None) -> dict:
    out = []
    for i, (kind, src) in enumerate(cells_):
        cell = {"cell_type": kind, "metadata": {}, "source": src}
        if kind == "code":
            cell["outputs"] = (outputs or {}).get(i, [])
        out.append(cell)
    return {"cells": out, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _record(key: str, text: str = "0.5") -> dict:
    return {"output_type": "display_data", "data": {RECORD + "text/plain": text},
            "metadata": {"scrapbook": {"name": key, "mime_prefix": RECORD}}}


def test_resolver_expands_loop_generated_keys_and_reads_role_keys_before_the_format():
    code = (
        "%matplotlib inline\n"
        "metrics = {'f1': 'f1', 'sr': 'support_recall'}\n"
        "glue('c_a', 1)\n"
        "glue(name=\"c_b\", value=2)\n"
        "for run in ('fixed_k', 'dynakrag'):\n"
        "    for key, col in metrics.items():\n"
        "        glue(f'c_{run}_{key}', 0.1, display=False)\n"
        "for key, cap in (('cap1', 1), ('none', 'none')):\n"
        "    glue(f'c_{key}_docs', 2.0)\n"
        "for key, gen in (('src', generator), ('tgt', target_generator)):\n"
        "    glue(f'c_tok_{key}', 3.0)\n")
    nb = _nb(("code", code),
             ("markdown", "F1 {glue:text}`c_dynakrag_f1:.3f`, {glue}`c_a` and\n"
                          "{glue:}`c_none_docs` ({glue:text}`c_b:,d`)"))
    calls = glue_calls(nb)
    assert calls.static == {"c_a", "c_b", "c_fixed_k_f1", "c_fixed_k_sr", "c_dynakrag_f1",
                            "c_dynakrag_sr", "c_cap1_docs", "c_none_docs", "c_tok_src",
                            "c_tok_tgt"}
    assert not calls.dynamic and not calls.unparsable
    assert references(nb) == [(1, "c_dynakrag_f1"), (1, "c_a"), (1, "c_none_docs"),
                              (1, "c_b")]
    assert unresolved_references(nb) == []


def test_a_key_nobody_glues_is_reported_and_a_dynamic_one_needs_a_committed_output():
    code = "for run in runs_found():\n    glue(f'c_{run}_f1', 0.3)\n"
    prose = "{glue:text}`c_x_f1:.2f` and {glue:text}`c_typo:.2f`"
    bare = _nb(("code", code), ("markdown", prose))
    assert glue_calls(bare).dynamic[0][1].pattern == r"c_[A-Za-z0-9_]+_f1"
    problems = unresolved_references(bare)
    assert len(problems) == 2
    assert "c_x_f1" in problems[0] and "no committed output" in problems[0]
    assert "c_typo" in problems[1] and "no code cell glues it" in problems[1]
    ran = _nb(("code", code), ("markdown", prose), outputs={0: [_record("c_x_f1")]})
    assert [p for p in unresolved_references(ran) if "c_x_f1" in p] == []
    assert any("c_typo" in p for p in unresolved_references(ran))


def test_committed_output_check_reports_missing_and_nan_values():
    nb = _nb(("code", "glue('a', 1)\nglue('b', x)\nglue('c', y)"),
             ("markdown", "{glue:text}`a:.1f` {glue:text}`b:.1f` {glue:text}`c`"),
             outputs={0: [_record("a", "0.25"), _record("b", "nan")]})
    assert committed_glue(nb) == {"a": (0, "0.25"), "b": (0, "nan")}
    problems = uncommitted_references(nb)
    assert len(problems) == 2
    assert "`b` is stored as 'nan'" in problems[0]
    assert "`c` has no committed glue output" in problems[1]


def test_number_scanner_flags_typed_results():
    prose = ("DynaKRAG reached F1 .342 on the dev slice.\n"
             "* support recall was 0.27 and the gain 34.2 % over Fixed-K\n\n"
             "| run | F1 |\n|---|---|\n| dynakrag | 0.31 |\n\n"
             "With an F1 of 0.3, it costs 1,234.5 tokens and -0.03 F1 per call.\n\n"
             "````{admonition} Hint\n:class: dropdown\nTen questions give an error near 0.1.\n"
             "````\n")
    numbers = [t.number for t in typed_numbers(prose)]
    assert numbers == [".342", "0.27", "34.2", "0.31", "0.3", "1,234.5", "-0.03", "0.1"]
    first = typed_numbers(prose)[0]
    assert first.sentence == "DynaKRAG reached F1 .342 on the dev slice."


def test_number_scanner_allows_math_code_glue_citations_defaults_labels_and_names():
    prose = (
        "The label is $SR(s') - SR(s) = 0.5$ and $$\\tau = 0.05$$ stays.\n"
        "Run `replace(policy, lam=1.05)` and read {glue:text}`c12_dynakrag_f1:.3f`.\n\n"
        "```python\nx = 0.25\n```\n\n"
        "```{math}\n:label: eq-x\n0.75\n```\n\n"
        "In the paper's ablation removing it costs 1.7 F1 points.\n"
        "FlashRAG reports EM/F1 30.6/41.5 on HotpotQA {cite:p}`yang2018hotpotqa`.\n"
        "Wu et al. report .600 on HotpotQA.\n"
        "The threshold is 0.05 by default, a choice. Our default (0.05) is a choice.\n"
        "See exercise 7.3, Section 4.2 and Eq. 3.1 of arXiv:2607.06507 "
        "([link](https://example.org/v1.2)).\n"
        "Qwen2.5-7B, Llama-3.1-8B and the 0.5B model, version v1.2.3.\n"
        "<!-- measured 0.44 -->\n")
    assert typed_numbers(prose) == []


def test_attribution_is_per_sentence_not_per_paragraph():
    prose = ("In the paper's ablations the loss is .5340 → .4623. The cap sweep on MuSiQue "
             "gives cap 2 (.2796) over cap 3 (.2641).")
    assert [t.number for t in typed_numbers(prose)] == [".2796", ".2641"]


def test_default_allowance_is_limited_to_numbers_near_the_word():
    prose = ("With the default policy the run answered many questions and then reached "
             "an F1 of 0.41 on the slice.")
    assert [t.number for t in typed_numbers(prose)] == ["0.41"]
