"""Execute book chapters in place (quick mode, their default parameters), so that the committed
outputs are the ones a reader sees and the -W book build renders.

    python data_scripts/execute_chapters.py                  # every chapter
    python data_scripts/execute_chapters.py 12 13 15 11b     # chapters by number, in this order
    python data_scripts/execute_chapters.py 12_results,5     # by name or number, comma lists too

Model calls go through $DYNAKRAG_LLM_CACHE when set, else through a working copy of
book/_llm_cache.sqlite (.cache/llm_calls.sqlite, as `make book` does). The recorded calls are
merged into that copy first (an older copy lacks the ones recorded since it was made), and every
new call is merged back into book/_llm_cache.sqlite afterwards, so CI replays exactly the calls
whose replies the committed outputs show (both with experiments.maintenance.merge_cache). A chapter
that fails is reported and left unchanged.

    python data_scripts/execute_chapters.py --time recorded       # time every chapter
    python data_scripts/execute_chapters.py --time empty 05 07    # live, two chapters

``--time`` measures instead of writing: each chapter runs in memory (its file is never written)
with a copy of book/_llm_cache.sqlite (``recorded``: the calls the committed outputs show
replay) or an empty cache (``empty``: every model call runs on this machine, one llama.cpp
thread unless DYNAKRAG_N_THREADS says otherwise). Its entry in results/diagnostics/
chapter-times.json (merged by chapter and mode) holds the wall time from kernel start to the
last cell, the model calls made (cache rows after minus before), the words of its markdown
(``\\w+`` tokens) and the glue roles left in it, with the CPU, its load average and the commit;
a chapter that failed, its error and traceback (:func:`failure_record`). A SIGINT or SIGTERM
stops the sweep; the chapter it interrupted gets no entry.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's library, not another clone's editable install
if str(ROOT / "data_scripts") not in sys.path:  # the sibling scripts, last: they shadow nothing
    sys.path.append(str(ROOT / "data_scripts"))
from dynakrag_lite.experiments.maintenance import merge_cache  # noqa: E402
from dynakrag_lite.storage import atomic_write_text  # noqa: E402
from install_llama import cpu_model  # noqa: E402

BOOK = ROOT / "book"
BOOK_CACHE = BOOK / "_llm_cache.sqlite"
TIMES = ROOT / "results" / "diagnostics" / "chapter-times.json"
GLUE = re.compile(r"\{glue(?::\w+)?\}")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # IPython colours a cell's traceback
TRACEBACK_CHARS = 20_000  # kept of a failure's traceback, from its end (where it failed)


def chapter_number(path: Path) -> str:
    """The chapter's number, the file name before its first underscore ("11b" of
    11b_walkthrough.ipynb)."""
    return path.name.split("_", 1)[0]


def failure_text(e: BaseException, limit: int = 500) -> str:
    """What failed, in one line: a cell's exception name and message (nbclient's
    CellExecutionError carries them; the first line of its text is only "An error occurred
    while executing the following cell"), else the exception itself."""
    what = (f"{e.ename}: {e.evalue}" if getattr(e, "ename", None)
            else f"{type(e).__name__}: {e}")
    return " ".join(what.split())[:limit]


def resolve_chapters(names: Sequence[str], book: Path | None = None) -> list[Path]:
    """The chapters ``names`` name, in the order named, each once; every chapter when there are
    no names. A name is a file name (12_results.ipynb), a stem (12_results) or a chapter number,
    the part before the first underscore (12, 11b; 5 is 05); an argument may be a comma list.
    ValueError naming each name that matches no chapter, or when the arguments name none."""
    book = book or BOOK
    chapters = sorted(book.glob("[0-9][0-9]*_*.ipynb"))
    if not names:
        return chapters
    parts = [p.strip() for name in names for p in name.split(",") if p.strip()]
    if not parts:
        raise ValueError(f"no chapter named in {', '.join(map(repr, names))}")
    found: list[Path] = []
    missing = []
    for part in parts:
        number = part.zfill(2) if part.isdigit() else part
        hits = [c for c in chapters if part in (c.name, c.stem) or chapter_number(c) == number]
        if not hits:
            missing.append(repr(part))
        found += [c for c in hits if c not in found]
    if missing:
        raise ValueError(f"no chapter numbered or named {', '.join(missing)} in {book}")
    return found


def kernel_environment() -> None:
    """What every kernel started from here inherits."""
    # The kernels import this checkout's library, whatever checkout an editable install of
    # dynakrag_lite points to (another clone's `pip install -e` moves it there).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # No progress bars or weight-loading bars in committed outputs (read at import time).
    for k, v in (("TQDM_DISABLE", "1"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                 ("TRANSFORMERS_VERBOSITY", "error")):
        os.environ.setdefault(k, v)


def run_notebook(nb: Any, book: Path | None = None) -> None:
    """Execute the notebook ``nb`` (an nbformat node) in place, from the book folder. A failure
    carries what nbclient does not say: ``cell_index``, the cell whose error stopped the run,
    and, when the kernel died, ``kernel_exit_status`` (negative: the signal that ended it, -9
    e.g. the OOM killer). A SIGINT or SIGTERM, which nbclient's handler turns into a kernel
    shutdown and a bare AssertionError, is raised as KeyboardInterrupt: stopped, not failed."""
    # A kernel starts in seconds on a quiet machine and in minutes beside two model runs
    # (nbclient's default wait is 60 s).
    client = NotebookClient(nb, timeout=3600, startup_timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(book or BOOK)}})
    seen: dict = {}  # nbclient forgets the kernel's process when it cleans up
    client.on_notebook_start = lambda notebook: seen.update(
        kernel=getattr(client.km.provisioner, "process", None))
    client.on_cell_error = lambda cell, cell_index, execute_reply: seen.update(cell=cell_index)
    try:
        client.execute()
    except Exception as e:
        # set by nbclient's SIGINT/SIGTERM handler (0.11): it shuts the kernel down, no more
        if getattr(client, "_async_cleanup_kernel_future", None) is not None:
            raise KeyboardInterrupt("SIGINT or SIGTERM: nbclient shut the kernel down") from e
        if isinstance(e, CellExecutionError):
            e.cell_index = seen.get("cell")
        if isinstance(e, DeadKernelError) and seen.get("kernel") is not None:
            e.kernel_exit_status = seen["kernel"].poll()
        raise


def execute_in_place(chapters: list[Path]) -> int:
    """Execute each chapter and write it back, cleaned; 1 when one failed (left unchanged)."""
    work = Path(os.environ.get("DYNAKRAG_LLM_CACHE") or ROOT / ".cache" / "llm_calls.sqlite")
    if BOOK_CACHE.exists():
        merge_cache(BOOK_CACHE, work)
    os.environ["DYNAKRAG_LLM_CACHE"] = str(work)
    from clean_outputs import clean_file  # drops widgets, stderr bars and machine paths
    failed = []
    for path in chapters:
        nb = nbformat.read(path, as_version=4)
        t0 = time.perf_counter()
        try:
            run_notebook(nb)
        except Exception as e:  # keep the committed version of a chapter that fails
            failed.append(path.name)
            print(f"{path.name}: FAILED after {time.perf_counter() - t0:.0f} s: "
                  f"{failure_text(e)}", flush=True)
            continue
        nbformat.write(nb, path)
        clean_file(path)
        print(f"{path.name}: {time.perf_counter() - t0:.0f} s", flush=True)
    # Executing stamps the Colab install cells with run metadata; restore their canonical form.
    subprocess.run([sys.executable, str(ROOT / "data_scripts" / "colab.py"), "--write"],
                   check=True, stdout=subprocess.DEVNULL)
    if work.exists() and BOOK_CACHE.exists() and work.resolve() != BOOK_CACHE.resolve():
        # vacuum: keep the committed file compact; a merge that adds nothing leaves its bytes
        added = merge_cache(work, BOOK_CACHE, vacuum=True)
        print(f"{added} new model calls recorded in {BOOK_CACHE.name}")
    return 1 if failed else 0


# -- --time: measure, write nothing but the report ----------------------------------------------
def markdown_words(nb: dict) -> int:
    """``\\w+`` tokens in the chapter's markdown cells (prose and exercises, not code)."""
    return sum(len(re.findall(r"\w+", "".join(c["source"])))
               for c in nb["cells"] if c["cell_type"] == "markdown")


def glue_roles(nb: dict) -> int:
    """``{glue}`` roles left in the chapter's markdown (each one a number read at build time)."""
    return sum(len(GLUE.findall("".join(c["source"])))
               for c in nb["cells"] if c["cell_type"] == "markdown")


def cache_rows(path: Path) -> int | None:
    """Rows of the ``calls`` table of an LLM call cache file (0 without that table), None when
    there is no file. Read-only: CallCache would create the file, the table and turn on WAL."""
    if not path.exists():
        return None
    uri = f"{path.resolve().as_uri()}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:  # "with connect" won't close
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return db.execute("SELECT COUNT(*) FROM calls").fetchone()[0] if "calls" in tables else 0


def failure_record(e: BaseException) -> dict:
    """What the report keeps of a failure: ``error``, one line (:func:`failure_text`), and
    ``traceback``: of a cell's error (nbclient's CellExecutionError) the cell's source and
    IPython traceback without ANSI codes, else the Python traceback with its chained exceptions
    (a failure outside the cells, e.g. in nbclient's kernel handling); and the ``cell_index`` or
    ``kernel_exit_status`` :func:`run_notebook` found."""
    if isinstance(e, CellExecutionError):
        text = ANSI.sub("", str(e))
    else:
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    record = {"error": failure_text(e, 300), "traceback": text[-TRACEBACK_CHARS:]}
    record.update({k: getattr(e, k) for k in ("cell_index", "kernel_exit_status")
                   if hasattr(e, k)})
    return record


def time_chapter(path: Path, cache: Path, book: Path | None = None) -> dict:
    """Execute ``path`` in memory with ``cache`` as its LLM call cache; what it took."""
    nb = nbformat.read(path, as_version=4)
    before = cache_rows(cache) or 0  # an empty cache's file is made by the first call
    os.environ["DYNAKRAG_LLM_CACHE"] = str(cache)
    entry = {"words": markdown_words(nb), "glue_roles": glue_roles(nb),
             "code_cells": sum(c.cell_type == "code" for c in nb.cells),
             "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    t0 = time.perf_counter()
    try:
        run_notebook(nb, book)
        entry["ok"] = True
    except Exception as e:  # a failed chapter is reported, not timed as if it had run
        entry.update(ok=False, **failure_record(e))
    entry["seconds"] = round(time.perf_counter() - t0, 1)
    entry["model_calls"] = (cache_rows(cache) or 0) - before
    return entry


def read_times(path: Path) -> dict:
    """The report so far (a sweep merges into it), {} when there is none; ValueError naming
    the file when it is not such a report (read before any chapter runs)."""
    if not path.exists():
        return {}
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e}); fix or remove it") from None
    if not isinstance(report, dict) or not isinstance(report.get("chapters", {}), dict):
        raise ValueError(f"{path}: not a chapter-times report (its 'chapters' is no object)")
    return report


def time_chapters(chapters: list[Path], mode: str, out: Path = TIMES,
                  book_cache: Path = BOOK_CACHE, book: Path | None = None) -> int:
    """Time each chapter with the ``mode`` cache ("recorded" or "empty"), merging each entry
    into ``out`` as it is measured; 1 when a chapter failed."""
    os.environ.setdefault("DYNAKRAG_N_THREADS", "1")
    report = read_times(out)
    report.update({"what": "Quick-mode wall time per chapter, with the recorded model calls "
                           "(recorded) and live (empty); python data_scripts/"
                           "execute_chapters.py --time MODE",
                   "cpu": cpu_model(), "cores": os.cpu_count(),
                   "python": platform.python_version()})
    report.setdefault("chapters", {})
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="chapter-times-") as tmp:
        for path in chapters:
            cache = Path(tmp) / f"{path.stem}.sqlite"
            if mode == "recorded":
                shutil.copyfile(book_cache, cache)
            entry = time_chapter(path, cache, book)
            entry.update(commit=commit, threads=os.environ["DYNAKRAG_N_THREADS"],
                         date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
            report["chapters"].setdefault(path.stem, {})[mode] = entry
            failed += not entry["ok"]
            print(f"{path.stem} ({mode} cache): {entry['seconds']} s, "
                  f"{entry['model_calls']} model calls"
                  + ("" if entry["ok"] else f", FAILED: {entry['error']}"), flush=True)
            # written after every chapter: an interrupted sweep keeps what it measured
            atomic_write_text(out, json.dumps(report, indent=1, sort_keys=True) + "\n")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chapters", nargs="*", metavar="CHAPTER",
                    help="a chapter number (12, 11b), name (12_results) or comma list of them; "
                         "none: every chapter")
    ap.add_argument("--time", choices=("recorded", "empty"),
                    help="measure each chapter in memory with the recorded calls or an empty "
                         "cache, writing only results/diagnostics/chapter-times.json")
    args = ap.parse_intermixed_args(argv)  # --time before, between or after the chapters
    try:
        chapters = resolve_chapters(args.chapters)
    except ValueError as e:
        ap.error(str(e))
    kernel_environment()
    return time_chapters(chapters, args.time) if args.time else execute_in_place(chapters)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
