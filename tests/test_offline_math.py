"""The book's math is typeset offline (issue 34): MathJax is served from the build, not a CDN.

Sphinx's default ``mathjax_path`` is a CDN URL, so a book read without a network showed raw
``\\( ... \\)``. _config.yml names a relative ``mathjax_path`` and the extension that copies
MathJax into ``_build/html/_static/mathjax`` (the pip package ``sphinx-mathjax-offline``). These
tests check the configuration, then build a one-page book with it and read the page's script
tags; ``data_scripts/page_check.py`` checks in headless Chromium that the real pages typeset
(its :func:`math_problems` rules are tested at the end).
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
EXTENSION = "sphinx-mathjax-offline"
REMOTE = re.compile(r"^(https?:)?//")

sys.path.insert(0, str(ROOT / "data_scripts"))
from page_check import math_problems  # noqa: E402


def test_config_serves_mathjax_from_the_build():
    sphinx = CONFIG["sphinx"]
    path = sphinx["config"].get("mathjax_path")
    assert path and not REMOTE.match(path), f"mathjax_path {path!r} is not a local path"
    assert EXTENSION in sphinx["extra_extensions"]
    # no CDN anywhere in the math settings (mathjax3_config could load components remotely)
    for key, value in sphinx["config"].items():
        if "mathjax" in key:
            assert "http" not in str(value) and "//" not in str(value).replace(path, ""), key


def test_the_extension_is_a_requirement_and_ships_the_file():
    reqs = (ROOT / "requirements.txt").read_text().splitlines()
    assert any(r.split("==")[0].strip() == EXTENSION for r in reqs), \
        f"{EXTENSION} must be in requirements.txt, so that `make install` installs it"
    spec = importlib.util.find_spec(EXTENSION)
    if spec is None:
        pytest.fail(f"{EXTENSION} is not installed: run make install")
    shipped = Path(spec.origin).parent / "static" / "mathjax" / CONFIG["sphinx"]["config"][
        "mathjax_path"].removeprefix("mathjax/")
    assert shipped.is_file(), f"{shipped} missing: mathjax_path names a file the package lacks"


def test_a_built_page_loads_mathjax_from_its_static_folder(tmp_path):
    """A one-page book built with the book's math settings: the page's MathJax script tag is
    relative and the file it names exists in the build."""
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text("")
    (src / "index.rst").write_text("Math\n====\n\nInline :math:`a^2 + b^2` and\n\n"
                                   ".. math::\n\n   \\hat v(s, a) = f_\\theta(\\phi(s, a))\n")
    sphinx = CONFIG["sphinx"]
    overrides = {"extensions": ["sphinx.ext.mathjax", EXTENSION],
                 "mathjax_path": sphinx["config"]["mathjax_path"]}
    out = tmp_path / "html"
    app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html",
                 confoverrides=overrides, status=None, warning=None, freshenv=True)
    app.build()
    page = (out / "index.html").read_text()
    scripts = re.findall(r'<script[^>]*src="([^"]+)"', page)
    mathjax = [s for s in scripts if "mathjax" in s.lower() or "tex-" in s]
    assert mathjax, scripts
    for s in mathjax:
        assert not REMOTE.match(s), f"the page loads MathJax from {s}"
        assert (out / s.split("?")[0]).is_file(), f"{s} is not in the build"
    assert (out / "_static" / "mathjax" / "output" / "chtml" / "fonts").is_dir()


@pytest.mark.parametrize("math, problem", [
    (None, None),
    ({"formulas": 0, "scripts": [], "typeset": 0, "n_raw": 0}, None),
    ({"formulas": 3, "scripts": ["../_static/mathjax/tex-chtml.js"], "typeset": 3, "n_raw": 0},
     None),
    ({"formulas": 3, "scripts": ["https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"],
      "typeset": 0, "n_raw": 3, "raw": ["\\(a^2\\)"]}, "loaded from https://cdn"),
    ({"formulas": 3, "scripts": ["../_static/mathjax/tex-chtml.js"], "typeset": 0, "n_raw": 3,
      "raw": ["\\(a^2\\)"]}, "3 of 3 formulas not typeset"),
    ({"formulas": 2, "scripts": [], "typeset": 0, "n_raw": 2}, "no MathJax script"),
])
def test_page_check_math_rules(math, problem):
    found = math_problems(math)
    if problem is None:
        assert found == []
    else:
        assert any(problem in p for p in found), found
