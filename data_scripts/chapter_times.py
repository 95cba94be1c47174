#!/usr/bin/env python
"""How long each chapter takes in quick mode, from the recorded model calls and live.

    python data_scripts/chapter_times.py --cache recorded          # every chapter
    python data_scripts/chapter_times.py --cache empty 05 07 10    # live, three chapters

A chapter is executed in memory (the committed file is never written) with its default
parameters (quick mode), in a kernel whose working folder is book/. ``--cache recorded`` gives
it a copy of book/_llm_cache.sqlite, so every call the committed outputs show replays;
``--cache empty`` gives it an empty cache, so every model call runs on this machine's CPU (one
llama.cpp thread: DYNAKRAG_N_THREADS=1 unless set). Each chapter's entry in the report
(results/diagnostics/chapter-times.json, merged by chapter and cache mode) holds the wall
time from kernel start to the last cell, the model calls made (cache rows after minus before),
the words of its markdown (``\\w+`` tokens, the count the chapter-size test uses) and the
glue roles left in it, with the CPU, its load average at the start and the commit.
"""
from __future__ import annotations

import argparse
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
BOOK_CACHE = BOOK / "_llm_cache.sqlite"
DEFAULT_OUT = ROOT / "results" / "diagnostics" / "chapter-times.json"
GLUE = re.compile(r"\{glue(?::\w+)?\}")


def markdown_words(nb: dict) -> int:
    """``\\w+`` tokens in the chapter's markdown cells (prose and exercises, not code)."""
    return sum(len(re.findall(r"\w+", "".join(c["source"])))
               for c in nb["cells"] if c["cell_type"] == "markdown")


def glue_roles(nb: dict) -> int:
    return sum(len(GLUE.findall("".join(c["source"])))
               for c in nb["cells"] if c["cell_type"] == "markdown")


def cache_rows(path: Path) -> int:
    if not path.exists():
        return 0
    with sqlite3.connect(path) as db:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return db.execute("SELECT COUNT(*) FROM calls").fetchone()[0] if "calls" in tables else 0


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() \
            else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def time_chapter(path: Path, cache: Path) -> dict:
    """Execute ``path`` in memory with ``cache`` as its LLM call cache; what it took."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    before = cache_rows(cache)
    os.environ["DYNAKRAG_LLM_CACHE"] = str(cache)
    entry = {"words": markdown_words(nb), "glue_roles": glue_roles(nb),
             "code_cells": sum(c.cell_type == "code" for c in nb.cells),
             "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    t0 = time.perf_counter()
    try:
        NotebookClient(nb, timeout=3600, startup_timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(BOOK)}}).execute()
        entry["ok"] = True
    except Exception as e:  # a failed chapter is reported, not timed as if it had run
        entry["ok"] = False
        entry["error"] = " ".join(f"{getattr(e, 'ename', type(e).__name__)}: "
                                  f"{getattr(e, 'evalue', e)}".split())[:300]
    entry["seconds"] = round(time.perf_counter() - t0, 1)
    entry["model_calls"] = cache_rows(cache) - before
    return entry


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chapters", nargs="*", help="numbers or stems (default: every chapter)")
    ap.add_argument("--cache", choices=("recorded", "empty"), required=True)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    chapters = sorted(BOOK.glob("[0-9][0-9]*_*.ipynb"))
    if args.chapters:
        wanted = {a.zfill(2) if a.isdigit() else a for a in args.chapters}
        chapters = [c for c in chapters if c.name.split("_", 1)[0] in wanted or c.stem in wanted]
        if not chapters:
            ap.error(f"no chapter matches {sorted(wanted)} in {BOOK}")
    os.environ.setdefault("DYNAKRAG_N_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    for k in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS"):
        os.environ.setdefault(k, "1")
    # The kernels import this checkout's library, whichever checkout an editable install names.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    report = json.loads(args.out.read_text()) if args.out.exists() else {}
    report.update({"what": __doc__.split("\n\n")[0], "cpu": cpu_model(),
                   "cores": os.cpu_count(), "python": platform.python_version()})
    report.setdefault("chapters", {})
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="chapter-times-") as tmp:
        for path in chapters:
            cache = Path(tmp) / f"{path.stem}.sqlite"
            if args.cache == "recorded":
                shutil.copyfile(BOOK_CACHE, cache)
            entry = time_chapter(path, cache)
            entry.update(commit=commit, date=dt.datetime.now(dt.timezone.utc).isoformat(
                timespec="seconds"), threads=os.environ["DYNAKRAG_N_THREADS"])
            report["chapters"].setdefault(path.stem, {})[args.cache] = entry
            print(f"{path.stem} ({args.cache} cache): {entry['seconds']} s, "
                  f"{entry['model_calls']} model calls"
                  + ("" if entry["ok"] else f", FAILED: {entry['error']}"), flush=True)
            # written after every chapter: an interrupted sweep keeps what it measured
            args.out.parent.mkdir(parents=True, exist_ok=True)
            tmp_out = args.out.with_suffix(".tmp")
            tmp_out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
            tmp_out.replace(args.out)
    return 0 if all(e.get(args.cache, {}).get("ok", True)
                    for e in report["chapters"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
