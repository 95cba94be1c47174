#!/usr/bin/env python
"""Remove machine noise from the committed outputs of the book's chapters.

    python data_scripts/clean_outputs.py            # clean every book/*.ipynb in place
    python data_scripts/clean_outputs.py FILE ...   # only these notebooks
    python data_scripts/clean_outputs.py --check    # exit 1 if anything would change

What it removes (outputs and notebook metadata only; cell sources are never touched):

* **Progress widgets**: ``display_data`` outputs carrying
  ``application/vnd.jupyter.widget-view+json`` that are progress bars (tqdm's notebook bar,
  transformers' "Loading weights" bar): their text fallback reads like a bar
  (``12%|...| 3/25 [...]``), or the saved widget state says it is an HBox holding a
  FloatProgress. Other widgets (the chapter 15 explorer) are dropped too once their state is
  stripped (below): without it a static page can only show an error box or a ``VBox(...)``
  repr, and the explorer prints its static HTML view right after the widget anyway.
* **Text progress bars on stderr**: lines of a ``stderr`` stream that carry carriage returns,
  tqdm bars or "Loading weights"; a stderr output left empty is dropped. Other stderr text
  (warnings) stays: it is a problem to fix at the source, not to hide here.
* **Absolute machine paths** in text outputs (streams, ``text/*`` and other text mime types;
  never images): the repository root becomes a relative path (``/work/main/results/x`` ->
  ``results/x``), its parent ``../`` (``/work/shared/data`` -> ``../shared/data``, the README's
  default data folder), the home folder ``~/``, temporary folders ``$TMPDIR/``, and the
  remaining ``/work``, ``/root``, ``/home/<user>``, ``/Users/<user>``, ``/content`` prefixes
  the same way.
* **Object addresses** in rich outputs' text (``<pandas.io.formats.style.Styler at 0x7f..>``
  becomes ``<pandas.io.formats.style.Styler>``): they change on every run.
* **Widget state**: ``metadata.widgets`` of the notebook (the saved state of every widget
  model, including progress bars).

Error outputs (tracebacks) are left alone: a chapter that fails must be fixed and re-executed,
and tests/test_notebook_outputs.py reports them. Running the script twice changes nothing the
second time (idempotent); files are only rewritten when their content changes, in the layout
Jupyter writes.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from collections import Counter
from typing import Callable, Iterable, Mapping

ROOT = Path(__file__).resolve().parents[1]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

# tqdm's bar: "42%|####      | 21/50 [00:03<00:04, 6.1it/s]" (also "0/103 [00:00<?, ?it/s]").
TQDM_RE = re.compile(r"\d+%\|.*\|\s*[\d.]+[kMG]?/[\d.?]+[kMG]?\s*\[|[?\d.]+\s*(?:it|s)/(?:s|it)\]")
LOADING_RE = re.compile(r"Loading (?:weights|checkpoint shards)|Batches:\s*\d+%")
# A slash that starts a path: not inside a URL, a relative path or a word.
_START = r"(?<![\w./:~$-])"
BINARY_MIME = re.compile(r"^(?:image/(?!svg)|application/(?:pdf|octet-stream))")
ADDRESS = re.compile(r" at 0x[0-9a-f]{6,}>")  # "<pandas...Styler at 0x7fd3...>"


def is_progress_text(text: str) -> bool:
    return bool(TQDM_RE.search(text) or LOADING_RE.search(text))


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _like(original, text: str):
    """``text`` in the shape the notebook stored the original in (a list of lines or a str)."""
    return text.splitlines(keepends=True) if isinstance(original, list) else text


def _widget_states(nb: Mapping) -> dict:
    return ((nb.get("metadata", {}).get("widgets") or {}).get(WIDGET_STATE) or {}).get(
        "state") or {}


def is_progress_widget(output: Mapping, states: Mapping | None = None) -> bool:
    """A widget view that is a progress bar, by its text fallback or its saved state."""
    data = output.get("data") or {}
    if WIDGET_VIEW not in data:
        return False
    if is_progress_text(_text(data.get("text/plain", ""))):
        return True
    states = states or {}
    model = states.get((data[WIDGET_VIEW] or {}).get("model_id", ""), {})
    if model.get("model_name") == "FloatProgressModel":
        return True
    children = (model.get("state") or {}).get("children") or []
    ids = [c.split("IPY_MODEL_", 1)[-1] for c in children if isinstance(c, str)]
    return any(states.get(i, {}).get("model_name") == "FloatProgressModel" for i in ids)


def clean_stderr(text: str) -> str:
    """``text`` without progress-bar lines (carriage-return redraws, tqdm bars)."""
    keep = []
    for line in re.split(r"(?<=\n)", text):  # on newlines only: a redraw keeps its "\r"
        if "\r" in line.rstrip("\r\n") or is_progress_text(line):
            continue
        keep.append(line)
    return "".join(keep)


def path_rules(root: Path = ROOT, home: Path | None = None) -> list[tuple[re.Pattern, str]]:
    """(pattern, replacement) pairs, most specific first."""
    home = home or Path.home()
    rules: list[tuple[re.Pattern, str]] = []

    def exact(prefix: Path, repl_slash: str, repl_bare: str) -> None:
        p = re.escape(str(prefix).rstrip("/"))
        if str(prefix) in ("/", ""):
            return
        rules.append((re.compile(_START + p + "/"), repl_slash))
        rules.append((re.compile(_START + p + r"(?![\w./-])"), repl_bare))

    exact(root, "", ".")
    exact(root.parent, "../", "..")
    exact(home, "~/", "~")
    generic = [
        (r"/(?:tmp|var/tmp)/", "$TMPDIR/"),
        (r"/(?:private/)?var/folders/[^\s/]+/[^\s/]+/T/", "$TMPDIR/"),
        (r"/home/[^\s/\"'<>]+/", "~/"),
        (r"/Users/[^\s/\"'<>]+/", "~/"),
        (r"/root/", "~/"),
        (r"/content/", ""),
        (r"/work/", "../"),
    ]
    rules += [(re.compile(_START + p), r) for p, r in generic]
    return rules


def strip_paths(text: str, rules: Iterable[tuple[re.Pattern, str]]) -> str:
    for pat, repl in rules:
        text = pat.sub(repl.replace("\\", "\\\\"), text)
    return text


def clean_notebook(nb: dict, rules: list | None = None, stats: Counter | None = None) -> dict:
    """A cleaned copy of ``nb`` (see the module docstring); ``stats`` counts what went."""
    nb = json.loads(json.dumps(nb))
    stats = Counter() if stats is None else stats
    rules = path_rules() if rules is None else rules
    states = _widget_states(nb)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        outputs = []
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind in ("display_data", "execute_result"):
                data = out.get("data") or {}
                if WIDGET_VIEW in data:  # progress bars, and widgets whose state goes below
                    stats["progress widget" if is_progress_widget(out, states)
                          else "other widget"] += 1
                    continue
                for mime, value in list(data.items()):
                    if isinstance(value, (str, list)) and not BINARY_MIME.match(mime):
                        text = strip_paths(_text(value), rules)
                        if text != _text(value):
                            stats["output with machine paths"] += 1
                        # a repr's memory address changes on every run: a diff with no news
                        text, n = ADDRESS.subn(">", text)
                        stats["object address"] += n
                        if text != _text(value):
                            data[mime] = _like(value, text)
            elif kind == "stream":
                text = _text(out.get("text", ""))
                if out.get("name") == "stderr":
                    before, text = text, clean_stderr(text)
                    stats["stderr progress output"] += text != before
                    if not text.strip():
                        continue
                stripped = strip_paths(text, rules)
                stats["output with machine paths"] += stripped != text
                text = stripped
                if text != _text(out.get("text", "")):
                    out["text"] = _like(out.get("text", ""), text)
            outputs.append(out)
        if "outputs" in cell:
            cell["outputs"] = outputs
    if nb.get("metadata", {}).pop("widgets", None) is not None:
        stats["widget state"] += 1
    return nb


def dumps_notebook(nb: Mapping) -> str:
    """The byte layout Jupyter and nbformat write (sorted keys, one-space indent)."""
    return json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def clean_file(path: str | Path, check: bool = False, rules: list | None = None,
               stats: Counter | None = None) -> bool:
    """Clean one notebook in place; True if it changed (``check``: would change)."""
    path = Path(path)
    raw = path.read_text(encoding="utf-8")
    new = dumps_notebook(clean_notebook(json.loads(raw), rules, stats))
    if new == raw:
        return False
    if not check:
        from dynakrag_lite.storage import atomic_write_text
        atomic_write_text(path, new)
    return True


def main(argv: list[str] | None = None, log: Callable[[str], None] = print) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path,
                    help="notebooks to clean (default: book/*.ipynb)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if dirty")
    ap.add_argument("--root", type=Path, default=ROOT,
                    help="repository root that machine paths are made relative to")
    args = ap.parse_args(argv)
    files = args.notebooks or sorted((ROOT / "book").glob("*.ipynb"))
    rules = path_rules(args.root.resolve())
    changed = []
    for p in files:
        stats: Counter = Counter()
        if clean_file(p, check=args.check, rules=rules, stats=stats):
            changed.append(p)
            what = ", ".join(f"{n} {k}" for k, n in sorted(stats.items()) if n)
            log(f"{'would clean' if args.check else 'cleaned'}: {p} ({what})")
    log(f"{len(changed)} of {len(files)} notebook(s) {'dirty' if args.check else 'cleaned'}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
