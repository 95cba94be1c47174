"""The packages' shape (issues 22 and 34): dynakrag_lite is the method, a small core with
training/ and experiments/ on top of it; dynakrag_lab, beside it, reads results and holds the
diagnostic studies, and only the lab imports the method, never the reverse.

import-linter (`lint-imports`, run by `make test`) checks the layering and cycles from the
top-level imports; these tests check what it cannot see: imports hidden inside functions,
module sizes, how much of dynakrag_lite is the taught method, how many scripts data_scripts/
keeps, and which part of the packages each chapter of the book uses.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dynakrag_lite"
LAB = ROOT / "dynakrag_lab"
OWN_PACKAGES = ("dynakrag_lite", "dynakrag_lab")
TOOLING = ("training", "experiments")
MAX_MODULE_LINES = 650  # the lab's modules
MAX_LITE_MODULE_LINES = 500  # dynakrag_lite's (issue 42)
# A ceiling, lowered as dynakrag_lite sheds code: issues 34 and 42's aim of 12,000 lines.
MAX_LITE_LINES = 12_000
# The taught method: the modules chapters 1-11 build the controller from, and the training
# recipe; demonstrations are the baselines' own few-shot examples (baselines imports them).
# Everything else in dynakrag_lite (data, generators, storage, the run machinery, the command
# line) serves it; what only reads results or studies the controller is the lab's.
METHOD_MODULES = ("state", "config", "evidence", "bridge", "actions", "validity", "sufficiency",
                  "compression", "features", "forest", "policy", "controller", "oracle",
                  "baselines", "demonstrations", "trajectories", "pipeline", "prompts",
                  "metrics", "retriever", "text", "training/recipe", "methods")
MIN_METHOD_SHARE = 0.40
MAX_DATA_SCRIPTS = 15
# The lab's budget (issue 42): studies one package each, finished ones removed (results/README.md
# names the git tag of each), so the lab stays readable in a sitting.
MAX_LAB_LINES = 10_500
MAX_LAB_FILE_LINES = 500


def modules(pkg: Path = PKG) -> list[Path]:
    return sorted(p for p in pkg.rglob("*.py") if "__pycache__" not in p.parts)


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def own_import(node: ast.AST) -> bool:
    """An import of one of the packages' own modules (dynakrag_lite's or dynakrag_lab's)."""
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] in OWN_PACKAGES
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in OWN_PACKAGES for a in node.names)
    return False


def nested_own_imports(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for node in ast.walk(fn):
                if node is not fn and own_import(node):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return sorted(set(found))


def test_no_function_level_import_of_the_package_s_own_modules():
    found = [hit for p in modules(PKG) + modules(LAB) for hit in nested_own_imports(p)]
    assert not found, "import these at the top of the module: " + ", ".join(found)


def test_no_module_is_longer_than_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in modules(PKG) + modules(LAB)
            if (n := lines(p)) > MAX_MODULE_LINES}
    assert not long, f"split these (over {MAX_MODULE_LINES} lines): {long}"
    long = {str(p.relative_to(ROOT)): n for p in modules(PKG)
            if (n := lines(p)) > MAX_LITE_MODULE_LINES}
    assert not long, f"split these (over {MAX_LITE_MODULE_LINES} lines): {long}"


def test_the_lab_stays_within_its_line_budget():
    sizes = {str(p.relative_to(ROOT)): lines(p) for p in modules(LAB)}
    total = sum(sizes.values())
    assert total <= MAX_LAB_LINES, \
        f"dynakrag_lab has {total} lines (at most {MAX_LAB_LINES}): fold repetition, or remove " \
        "a finished study that neither the book nor results/README.md reads (tag it first)"
    long = {name: n for name, n in sizes.items() if n > MAX_LAB_FILE_LINES}
    assert not long, f"split these lab files (over {MAX_LAB_FILE_LINES} lines): {long}"


def test_the_lab_runs_as_packages_without_path_hacks():
    # a study's command line is its package's __main__ (python -m dynakrag_lab.studies.NAME)
    assert not (LAB / "scripts").exists(), "dynakrag_lab/scripts/: move it into its study"
    hacks = [str(p.relative_to(ROOT)) for p in modules(LAB)
             if "sys.path.insert" in p.read_text(encoding="utf-8")]
    assert not hacks, f"run these as modules (python -m ...), not with sys.path: {hacks}"
    studies = [p for p in (LAB / "studies").iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert studies and not list((LAB / "studies").glob("[!_]*.py")), \
        "every study is a package under dynakrag_lab/studies/"
    for study in studies:
        missing = [f for f in ("__init__.py", "__main__.py", "README.md")
                   if not (study / f).is_file()]
        assert not missing, f"dynakrag_lab/studies/{study.name} lacks {missing}"


def test_dynakrag_lite_stays_small_and_mostly_method():
    total = sum(lines(p) for p in modules(PKG))
    missing = [m for m in METHOD_MODULES if not (PKG / f"{m}.py").is_file()]
    assert not missing, f"METHOD_MODULES names modules that are gone: {missing}"
    method = sum(lines(PKG / f"{m}.py") for m in METHOD_MODULES)
    assert total <= MAX_LITE_LINES, \
        f"dynakrag_lite has {total} lines (at most {MAX_LITE_LINES}): code only the lab uses " \
        "belongs in dynakrag_lab"
    assert method / total >= MIN_METHOD_SHARE, \
        f"the method is {method} of dynakrag_lite's {total} lines ({method / total:.0%}; at " \
        f"least {MIN_METHOD_SHARE:.0%})"


def test_data_scripts_keeps_few_scripts():
    # its README.md is not a script; the lab's command lines are its studies' __main__ modules
    scripts = sorted(p.name for p in (ROOT / "data_scripts").iterdir()
                     if p.is_file() and p.name != "README.md")
    assert len(scripts) <= MAX_DATA_SCRIPTS, \
        f"data_scripts/ has {len(scripts)} scripts (at most {MAX_DATA_SCRIPTS}): {scripts}"


def chapter_imports(nb: Path, package: str = "dynakrag_lite") -> set[str]:
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return set(re.findall(rf"{package}\.([a-z_]+(?:\.[a-z_]+)?)", code))


def early_chapters() -> list[Path]:
    out = []
    for nb in sorted((ROOT / "book").glob("*.ipynb")):
        m = re.match(r"(\d+)([a-z]?)_", nb.name)
        if m and int(m.group(1)) <= 11 and not m.group(2):
            out.append(nb)
    return out


@pytest.mark.parametrize("nb", early_chapters(), ids=lambda p: p.stem)
def test_chapters_1_to_11_teach_the_core_only(nb: Path):
    used = {m.split(".")[0] for m in chapter_imports(nb)} & set(TOOLING)
    assert not used, f"{nb.name} imports dynakrag_lite.{sorted(used)}: chapters 1-11 " \
                     "build on the core; result reading belongs in 11b onward"
    # the lab's concept figures draw the core's own definitions; nothing else of the lab
    lab = chapter_imports(nb, "dynakrag_lab") - {"report.figures"}
    assert not lab, f"{nb.name} imports dynakrag_lab.{sorted(lab)}: chapters 1-11 build on " \
                    "the core; result reading belongs in 11b onward"


def test_the_layout_checks_would_catch_a_hidden_import(tmp_path: Path):
    # the detector itself: a function-level relative import is found, a top-level one is not;
    # so is a function-level import of the other package
    src = tmp_path / "m.py"
    src.write_text("from .state import X\n\ndef f():\n    from .actions import Y\n"
                   "    import dynakrag_lab.report\n    return Y\n")
    assert nested_own_imports(src, tmp_path) == ["m.py:4", "m.py:5"]


def test_the_import_contract_lists_every_core_module():
    import tomllib
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    core = next(c for c in conf["contracts"] if c["type"] == "forbidden"
                and "dynakrag_lite.experiments" in c["forbidden_modules"])
    have = set(core["source_modules"])
    want = {f"dynakrag_lite.{p.stem if p.suffix else p.name}" for p in PKG.iterdir()
            if not p.name.startswith("__") and p.name not in TOOLING
            and (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert want == have, f"add to the contract: {sorted(want - have)}; " \
                         f"remove: {sorted(have - want)}"
