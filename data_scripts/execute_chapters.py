"""Execute book chapters in place (quick mode, their default parameters), so that the committed
outputs are the ones a reader sees and the -W book build renders.

    python data_scripts/execute_chapters.py                  # every chapter
    python data_scripts/execute_chapters.py 12 13 15 11b     # chapters by number
    python data_scripts/execute_chapters.py 12_results       # one chapter by name

Model calls go through $DYNAKRAG_LLM_CACHE when set, else through a working copy of
book/_llm_cache.sqlite (.cache/llm_calls.sqlite, as `make book` does). The recorded calls are
merged into that copy first (an older copy lacks the ones recorded since it was made), and every
new call is merged back into book/_llm_cache.sqlite afterwards, so CI replays exactly the calls
whose replies the committed outputs show (both with experiments.maintenance.merge_cache). A chapter
that fails is reported and left unchanged.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dynakrag_lite.experiments.maintenance import merge_cache  # noqa: E402

BOOK = ROOT / "book"
BOOK_CACHE = BOOK / "_llm_cache.sqlite"


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


def main(argv: list[str]) -> int:
    if any(a.startswith("-") for a in argv):
        print(__doc__)
        return 0 if set(argv) <= {"-h", "--help"} else 2
    import nbformat
    from nbclient import NotebookClient
    chapters = sorted(BOOK.glob("[0-9][0-9]*_*.ipynb"))
    if argv:
        wanted = {a.zfill(2) if a.isdigit() else a for a in argv}
        # By number ("12": every chapter numbered 12) or by name ("12_results").
        chapters = [c for c in chapters if chapter_number(c) in wanted or c.stem in wanted]
        missing = wanted - {chapter_number(c) for c in chapters} - {c.stem for c in chapters}
        if missing:
            print(f"no chapter numbered {', '.join(sorted(missing))} in {BOOK}")
            return 2
    work = Path(os.environ.get("DYNAKRAG_LLM_CACHE") or ROOT / ".cache" / "llm_calls.sqlite")
    if BOOK_CACHE.exists():
        merge_cache(BOOK_CACHE, work)
    os.environ["DYNAKRAG_LLM_CACHE"] = str(work)
    # The kernels import this checkout's library, whatever checkout an editable install of
    # dynakrag_lite points to (another clone's `pip install -e` moves it there).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # No progress bars or weight-loading bars in committed outputs (read at import time).
    for k, v in (("TQDM_DISABLE", "1"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),
                 ("TRANSFORMERS_VERBOSITY", "error")):
        os.environ.setdefault(k, v)
    sys.path.insert(0, str(ROOT / "data_scripts"))
    from clean_outputs import clean_file  # drops widgets, stderr bars and machine paths
    failed = []
    for path in chapters:
        nb = nbformat.read(path, as_version=4)
        t0 = time.perf_counter()
        try:
            # A kernel starts in seconds on a quiet machine and in minutes beside two model runs
            # (nbclient's default wait is 60 s).
            NotebookClient(nb, timeout=1800, startup_timeout=600, kernel_name="python3",
                           resources={"metadata": {"path": str(BOOK)}}).execute()
        except Exception as e:  # keep the committed version of a chapter that fails
            failed.append(path.name)
            print(f"{path.name}: FAILED after {time.perf_counter() - t0:.0f} s: "
                  f"{failure_text(e)}", flush=True)
            continue
        nbformat.write(nb, path)
        clean_file(path)
        print(f"{path.name}: {time.perf_counter() - t0:.0f} s", flush=True)
    # Executing stamps the Colab install cells with run metadata; restore their canonical form.
    import subprocess
    subprocess.run([sys.executable, str(ROOT / "data_scripts" / "colab.py"), "--write"],
                   check=True, stdout=subprocess.DEVNULL)
    if work.exists() and BOOK_CACHE.exists() and work.resolve() != BOOK_CACHE.resolve():
        # vacuum: keep the committed file compact; a merge that adds nothing leaves its bytes
        added = merge_cache(work, BOOK_CACHE, vacuum=True)
        print(f"{added} new model calls recorded in {BOOK_CACHE.name}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
