"""The commands the READMEs show are commands that run: every ``--flag`` a command line of
README.md, results/README.md, data_scripts/README.md or the Makefile names is an option of that
command's own argparse parser (and a value shown as ``--flag a|b`` is one of its choices), every
``make X`` is a Makefile target and every script named is a file in the checkout.

A command is ``python -m dynakrag_lite ...``, ``python -m dynakrag_lab.<module> ...``, ``python
data_scripts/<x>.py ...`` or ``python benchmarks/<x>.py ...`` on an indented or fenced line
(``\\`` continues it) or in an inline code span (the Makefile: any line, ``$(PY)`` for python);
``train ...`` / ``evaluate ...`` spans are ``python -m dynakrag_lite`` commands. Each command's
parser is read in-process: the script or module runs as ``__main__`` with ``--help``, and its
first parse call hands the parser over instead of parsing, so nothing runs and the imports are
shared (seconds in all).
"""
from __future__ import annotations

import argparse
import os
import re
import runpy
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "results/README.md", "data_scripts/README.md", "Makefile")
PYTHON = re.compile(r"\bpython3? +(?:-m +(?P<module>[\w.<>]+)|(?P<script>[\w/.<>-]+\.py))")
CLI_SPAN = re.compile(r"^(?:train|evaluate|index|retrieval-eval|generate|cache merge|"
                      r"policy-manifest|models) (?:--|\.\.\.)")
FLAG = re.compile(r"(?<![\w-])--[A-Za-z][\w-]*")
MAKE = re.compile(r"(?<![\w-])make +([a-z][\w-]*)")
SCRIPT_FILE = re.compile(r"(?<![\w/.-])((?:data_scripts|benchmarks)/\w+\.(?:py|sh))\b")


def command_lines(text: str, makefile: bool = False) -> list[str]:
    """Indented and fenced lines (continuations joined) and inline code spans, whitespace
    collapsed; of a Makefile, every line (recipes and comments), ``$(PY)`` read as python."""
    if makefile:
        return [" ".join(ln.replace("$(PY)", "python").split()) for ln in text.splitlines()]
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced or line.startswith("    "):
            lines.append(line.strip())
    joined, held = [], ""
    for line in lines:
        if line.endswith("\\"):
            held += line[:-1] + " "
        else:
            joined.append(held + line)
            held = ""
    spans = re.findall(r"`([^`]+)`", text)
    return [" ".join(s.split()) for s in joined + spans]


def commands(text: str, makefile: bool = False) -> list[tuple[str, str]]:
    """(target, the arguments' text) of every command line: the target is ``-m MODULE`` or a
    script path; ``X -- python -m ...`` (warm_cache.py) is two commands."""
    out = []
    for line in command_lines(text, makefile):
        if CLI_SPAN.match(line):
            line = "python -m dynakrag_lite " + line
        for part in re.split(r" -- ", line):
            m = PYTHON.search(part)
            if not m or "<" in m.group(0):  # python -m dynakrag_lab.studies.<study>
                continue
            target = f"-m {m['module']}" if m["module"] else m["script"]
            if target.startswith("-m dynakrag_") or target.startswith(("data_scripts/",
                                                                      "benchmarks/")):
                out.append((target, part[m.end():]))
    return out


class Captured(BaseException):  # not an Exception: a script's `except Exception` lets it by
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


# where a command's parser is defined when its __main__ only calls main()
PARSER_IN = {"-m dynakrag_lite": "dynakrag_lite/experiments/cli.py"}
_PARSERS: dict[str, argparse.ArgumentParser] = {}


def source_of(target: str) -> Path:
    """The file ``python TARGET`` runs (``-m PKG``: its __main__.py)."""
    if not target.startswith("-m "):
        return ROOT / target
    mod = target[3:].replace(".", "/")
    main = ROOT / mod / "__main__.py"
    return main if main.exists() else ROOT / f"{mod}.py"


def parser_of(target: str) -> argparse.ArgumentParser:
    """The parser ``python TARGET --help`` would print, taken at its first parse call."""
    if target in _PARSERS:
        return _PARSERS[target]
    source = source_of(target)
    defines = ROOT / PARSER_IN.get(target, source)
    assert "ArgumentParser" in defines.read_text(encoding="utf-8"), \
        f"{defines.relative_to(ROOT)}: no argparse parser (would --help run it?)"

    def capture(self, *args, **kwargs):
        raise Captured(self)

    saved = {k: getattr(argparse.ArgumentParser, k)
             for k in ("parse_args", "parse_known_args", "parse_intermixed_args")}
    argv, path, environ = sys.argv[:], sys.path[:], dict(os.environ)
    try:
        for k in saved:
            setattr(argparse.ArgumentParser, k, capture)
        sys.argv = [str(source), "--help"]
        if target.startswith("-m "):
            with warnings.catch_warnings():  # a module other tests imported runs afresh
                warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
                runpy.run_module(target[3:], run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, str(source.parent))
            runpy.run_path(str(source), run_name="__main__")
    except Captured as c:
        _PARSERS[target] = c.parser
        return c.parser
    finally:
        for k, f in saved.items():
            setattr(argparse.ArgumentParser, k, f)
        sys.argv, sys.path[:] = argv, path
        os.environ.clear()
        os.environ.update(environ)
    raise AssertionError(f"{target}: ran to the end without parsing its arguments")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: p for a in parser._actions if isinstance(a, argparse._SubParsersAction)
            for name, p in a.choices.items()}


def problems_of(target: str, args: str) -> list[str]:
    """What in ``args`` the parser of ``target`` does not know: flags of no parser on the
    subcommand path, and values shown for a flag with choices that are not among them."""
    if not source_of(target).is_file():
        return [f"python {target}: no such script or module in the checkout"]
    parser, options, problems = parser_of(target), {}, []
    for a in parser._actions:
        options.update(dict.fromkeys(a.option_strings, a))
    for token in args.split():
        sub = subparsers(parser).get(token)
        if sub is not None:  # descend: `cache merge`, `reader_stop collect`
            parser = sub
            for a in parser._actions:
                options.update(dict.fromkeys(a.option_strings, a))
    tokens = args.split()
    for i, token in enumerate(tokens):
        m = FLAG.match(token.lstrip("[(").split("=")[0])
        if not m or m.group(0) == "--":
            continue
        flag = m.group(0)
        action = options.get(flag)
        if action is None:
            problems.append(f"{target}: {flag} is no option ({token!r} in {args[:70]!r})")
            continue
        value = token.split("=", 1)[1] if "=" in token else \
            (tokens[i + 1] if i + 1 < len(tokens) else "")
        value = value.strip("[]()'\"")
        if action.choices and value and not value.startswith("-") \
                and re.fullmatch(r"[a-z0-9_.,-]+(\|[a-z0-9_.,-]+)*", value):
            bad = [v for v in value.split("|") if v not in action.choices]
            if bad:
                problems.append(f"{target}: {flag} {value}: {bad} not among "
                                f"{sorted(action.choices)}")
    return problems


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {t for line in text.splitlines()
            if (m := re.match(r"^([\w-]+(?: [\w-]+)*) *:(?!=)", line))
            for t in m.group(1).split()}


def check_text(text: str, makefile: bool = False) -> list[str]:
    problems = []
    for target, args in commands(text, makefile):
        problems += problems_of(target, args)
    targets = make_targets()
    for line in command_lines(text, makefile):
        problems += [f"make {t}: no such Makefile target" for t in MAKE.findall(line)
                     if t not in targets]
    problems += [f"{p}: no such file" for p in SCRIPT_FILE.findall(text)
                 if not (ROOT / p).is_file()]
    return problems


@pytest.mark.parametrize("doc", DOCS)
def test_the_commands_a_readme_shows_exist_with_their_flags(doc):
    text, makefile = (ROOT / doc).read_text(encoding="utf-8"), doc == "Makefile"
    assert commands(text, makefile), f"{doc} shows no command: is this test still reading it?"
    problems = check_text(text, makefile)
    assert not problems, f"{doc}:\n" + "\n".join(dict.fromkeys(problems))


def test_every_command_line_of_the_readme_is_read():
    # the targets README.md's commands use, each with a parser taken (not run)
    targets = {t for t, _ in commands((ROOT / "README.md").read_text(encoding="utf-8"))}
    assert {"-m dynakrag_lite", "data_scripts/main_experiment.py", "data_scripts/warm_cache.py",
            "-m dynakrag_lab.studies.stop_rule", "benchmarks/bench_llama_builds.py"} <= targets


@pytest.mark.parametrize("line, bad", [
    ("    python -m dynakrag_lite evaluate --data X --methd dynakrag", "--methd is no option"),
    ("    python -m dynakrag_lite train --data X \\\n        [--stop-rule level|gian]",
     "['gian'] not among"),
    ("`python -m dynakrag_lite cache merge A B --vacum`", "--vacum is no option"),
    ("`evaluate --worker 2`", "--worker is no option"),
    ("    python data_scripts/main_experiment.py --datasets hotpotqa", "--datasets is no"),
    ("    python data_scripts/warm_cache.py evaluate --begin 3 -- python -m dynakrag_lite "
     "evaluate --data x", "--begin is no option"),
    ("    python -m dynakrag_lite evaluate --data x --k 3", "--k is no option"),  # index's
    ("`python data_scripts/answer_stage.py --dataset x`", "no such script"),
    ("`make tests`", "make tests: no such Makefile target"),
])
def test_a_wrong_command_fails(line, bad):
    problems = check_text(line)
    assert any(bad in p for p in problems), problems


def test_a_wrong_makefile_recipe_fails():
    problems = check_text("smoke: install\n\t$(PY) data_scripts/smoke.py --requires x\n",
                          makefile=True)
    assert any("--requires is no option" in p for p in problems), problems


def test_right_commands_pass():
    assert check_text("    python -m dynakrag_lite evaluate --data x --split train|eval \\\n"
                      "        [--compressor llm|extractive --selector FILE]\n"
                      "`python -m dynakrag_lab.studies.reader_stop collect --help`\n"
                      "`make test`") == []
