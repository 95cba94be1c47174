"""The package's shape (issue 22): a small core, training/ and experiments/ on top of it.

import-linter (`lint-imports`, run by `make test`) checks the layering and cycles from the
top-level imports; these tests check what it cannot see: imports hidden inside functions,
module sizes, and which part of the package each chapter of the book uses.
"""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "dynakrag_lite"
TOOLING = ("training", "experiments")
MAX_MODULE_LINES = 650
MAX_CORE_LINES = 10_000


def modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def is_core(path: Path) -> bool:
    return path.relative_to(PKG).parts[0] not in TOOLING


def own_import(node: ast.AST) -> bool:
    """An import of one of the package's own modules."""
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "dynakrag_lite"
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] == "dynakrag_lite" for a in node.names)
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
    found = [hit for p in modules() for hit in nested_own_imports(p)]
    assert not found, "import these at the top of the module: " + ", ".join(found)


def test_no_module_is_longer_than_the_limit():
    long = {str(p.relative_to(ROOT)): n for p in modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"split these (over {MAX_MODULE_LINES} lines): {long}"


def test_the_core_stays_small():
    total = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in modules()
                if is_core(p))
    assert total < MAX_CORE_LINES, f"the core has {total} lines"


def chapter_imports(nb: Path) -> set[str]:
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return set(re.findall(r"dynakrag_lite\.([a-z_]+)", code))


def early_chapters() -> list[Path]:
    out = []
    for nb in sorted((ROOT / "book").glob("*.ipynb")):
        m = re.match(r"(\d+)([a-z]?)_", nb.name)
        if m and int(m.group(1)) <= 11 and not m.group(2):
            out.append(nb)
    return out


@pytest.mark.parametrize("nb", early_chapters(), ids=lambda p: p.stem)
def test_chapters_1_to_11_teach_the_core_only(nb: Path):
    used = chapter_imports(nb) & set(TOOLING)
    assert not used, f"{nb.name} imports dynakrag_lite.{sorted(used)}: chapters 1-11 " \
                     "build on the core; result reading belongs in 11b onward"


def test_the_layout_checks_would_catch_a_hidden_import(tmp_path: Path):
    # the detector itself: a function-level relative import is found, a top-level one is not
    src = tmp_path / "m.py"
    src.write_text("from .state import X\n\ndef f():\n    from .actions import Y\n    return Y\n")
    assert nested_own_imports(src, tmp_path) == ["m.py:4"]


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
