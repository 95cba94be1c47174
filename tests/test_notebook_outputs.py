"""The committed outputs of the chapters carry no machine noise.

Every committed ``book/*.ipynb`` is scanned for: a progress widget output (tqdm's notebook bar,
transformers' "Loading weights"; any other widget view too, since its state is stripped and a
static page could only show an error box), an error output or a traceback, an absolute path of
the machine that executed it (``/work/...``, ``/root/...``, ``/home/<user>/...``,
``/tmp/...``), a progress bar on stderr, and saved widget state. ``data_scripts/clean_outputs.py`` removes all
of these but errors (a failing chapter must be fixed and re-executed, not cleaned); run it
after executing chapters:

    python data_scripts/execute_chapters.py NN && python data_scripts/clean_outputs.py

The scanner here is written independently of the cleaner, and the cleaner is checked against
it on synthetic notebooks and on cleaned copies of the real chapters.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((REPO / "book").glob("*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"

PROGRESS = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\d+(?:\.\d+)?(?:it/s|s/it)\]|\?it/s\]"
                      r"|Loading (?:weights|checkpoint shards)")
MACHINE_PATH = re.compile(r"(?<![\w./:~$-])/(?:work|root|home|Users|tmp|content|var/folders"
                          r"|private/var)(?=/|\b)")
BINARY = re.compile(r"^image/(?!svg)")


def _text(v) -> str:
    return "".join(v) if isinstance(v, list) else str(v)


def problems(nb: dict) -> list[str]:
    """Every noise item in a notebook's outputs and metadata, as readable strings."""
    found = []
    if "widgets" in nb.get("metadata", {}):
        found.append("widget state in the notebook metadata")
    for i, cell in enumerate(nb.get("cells", [])):
        for out in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            kind, where = out.get("output_type"), f"cell {i}"
            texts = []
            if kind == "error":
                found.append(f"{where}: error output {out.get('ename')}: {out.get('evalue')}")
                texts.append(_text(out.get("traceback", "")))
            elif kind == "stream":
                text = _text(out.get("text", ""))
                if out.get("name") == "stderr" and (PROGRESS.search(text)
                                                    or "\r" in text.rstrip("\r\n")):
                    found.append(f"{where}: progress bar on stderr: {text[:60]!r}")
                texts.append(text)
            else:
                data = out.get("data") or {}
                if WIDGET_VIEW in data:
                    label = _text(data.get("text/plain", ""))[:60]
                    what = "progress bar" if PROGRESS.search(label) else "widget"
                    found.append(f"{where}: widget output ({what}: {label!r})")
                texts += [_text(v) for k, v in data.items()
                          if isinstance(v, (str, list)) and not BINARY.match(k)]
            for t in texts:
                if "Traceback (most recent call last)" in t and kind != "error":
                    found.append(f"{where}: a traceback in a {kind} output")
                for m in MACHINE_PATH.finditer(t):
                    found.append(f"{where}: machine path {t[m.start():m.start() + 40]!r}")
                if re.search(r"\bat 0x[0-9a-fA-F]{6,}", t):
                    found.append(f"{where}: an object's memory address (changes every run)")
    return found


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"dynakrag_{name}",
                                                  REPO / "data_scripts" / f"{name}.py")
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


clean_outputs = _load("clean_outputs")


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_committed_chapter_outputs_are_clean(path):
    found = problems(json.loads(path.read_text(encoding="utf-8")))
    assert not found, (f"{path.name}: {len(found)} noisy output(s); run "
                       "`python data_scripts/clean_outputs.py` (errors: fix and re-execute):\n"
                       + "\n".join(found[:20]))


def _cell(outputs, source="x = 1"):
    return {"cell_type": "code", "id": "c", "metadata": {}, "source": [source],
            "execution_count": 1, "outputs": outputs}


def _noisy_notebook():
    bar = "Loading weights:  50%|#####     | 1/2 [00:00<00:00, 9.1it/s]"
    return {
        "cells": [
            {"cell_type": "markdown", "id": "m", "metadata": {},
             "source": ["Data in /work/main/results, see /root/.cache"]},  # prose: untouched
            _cell([
                {"output_type": "display_data", "metadata": {},
                 "data": {WIDGET_VIEW: {"model_id": "p1", "version_major": 2},
                          "text/plain": ["trajectories:   0%|          | 0/4 [00:00<?, ?it/s]"]}},
                {"output_type": "display_data", "metadata": {},
                 "data": {WIDGET_VIEW: {"model_id": "hb", "version_major": 2},
                          "text/plain": ["HBox(children=(HTML(value=''), FloatProgress(...)))"]}},
                {"output_type": "stream", "name": "stderr",
                 "text": [bar + "\r" + bar.replace("50%", "100%") + "\n"]},
                {"output_type": "stream", "name": "stderr",
                 "text": ["UserWarning: something real\n", bar + "\n"]},
                {"output_type": "stream", "name": "stdout",
                 "text": ["index in /work/main/.cache/idx\n", "data: /work/shared/data\n",
                          "tmp: /tmp/explorer-ab12/runs\n", "home: /home/alice/models/x\n",
                          "url: https://example.org/home/page and results/x stay\n"]},
                {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                 "data": {"text/html": ["<td>/root/.cache/dynakrag_lite/models</td>"],
                          "text/plain": ["/work/main"],
                          "image/png": "iVBORw0KGgo/work/AAAA"}},
            ]),
            _cell([{"output_type": "error", "ename": "ValueError", "evalue": "boom",
                    "traceback": ["Traceback (most recent call last)", "ValueError: boom"]}]),
        ],
        "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": {
            "hb": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_fp"]}},
            "fp": {"model_name": "FloatProgressModel", "state": {}}}}}},
        "nbformat": 4, "nbformat_minor": 5,
    }


def test_scanner_finds_every_kind_of_noise():
    found = "\n".join(problems(_noisy_notebook()))
    for what in ("widget state", "widget output (progress bar", "widget output (widget",
                 "progress bar on stderr", "error output ValueError", "machine path '/work/main",
                 "machine path '/tmp/", "machine path '/home/alice", "machine path '/root/"):
        assert what in found, what
    assert "example.org" not in found and "results/x" not in found
    assert "cell 0" not in found  # markdown prose is not an output


def test_cleaner_removes_the_noise_and_keeps_the_rest(tmp_path):
    nb = _noisy_notebook()
    rules = clean_outputs.path_rules(Path("/work/main"), home=Path("/root"))
    stats = clean_outputs.Counter()
    out = clean_outputs.clean_notebook(nb, rules, stats)
    assert problems(out) == ["cell 2: error output ValueError: boom"]  # errors are kept
    assert stats["progress widget"] == 2 and stats["widget state"] == 1
    outputs = out["cells"][1]["outputs"]
    assert [o["output_type"] for o in outputs] == ["stream", "stream", "execute_result"]
    assert outputs[0]["text"] == ["UserWarning: something real\n"]  # a real warning stays
    assert _text(outputs[1]["text"]) == (
        "index in .cache/idx\ndata: ../shared/data\ntmp: $TMPDIR/explorer-ab12/runs\n"
        "home: ~/models/x\nurl: https://example.org/home/page and results/x stay\n")
    assert outputs[2]["data"]["text/html"] == ["<td>~/.cache/dynakrag_lite/models</td>"]
    assert outputs[2]["data"]["text/plain"] == ["."]
    assert outputs[2]["data"]["image/png"] == "iVBORw0KGgo/work/AAAA"  # images untouched
    # Sources, markdown and cell metadata are never touched; the input is not mutated.
    assert [c["source"] for c in out["cells"]] == [c["source"] for c in nb["cells"]]
    assert "widgets" in nb["metadata"] and len(nb["cells"][1]["outputs"]) == 6
    assert clean_outputs.clean_notebook(out, rules) == out  # idempotent


def test_cleaned_copies_of_the_chapters_pass(tmp_path):
    for p in CHAPTERS:
        shutil.copy(p, tmp_path / p.name)
    copies = sorted(tmp_path.glob("*.ipynb"))
    assert clean_outputs.main([*map(str, copies), "--root", str(REPO)], log=lambda _: None) == 0
    assert clean_outputs.main([*map(str, copies), "--check", "--root", str(REPO)],
                              log=lambda _: None) == 0  # idempotent
    for p in copies:
        cleaned = json.loads(p.read_text(encoding="utf-8"))
        original = json.loads((REPO / "book" / p.name).read_text(encoding="utf-8"))
        assert problems(cleaned) == [e for e in problems(original) if "error output" in e]
        assert [c["source"] for c in cleaned["cells"]] == [c["source"] for c in
                                                           original["cells"]]
        assert [c["metadata"] for c in cleaned["cells"]] == [c["metadata"] for c in
                                                             original["cells"]]


def captioned_cells_with_other_outputs(nb: dict) -> list[int]:
    """Cells whose MyST-NB figure caption would also label a non-image output: MyST-NB gives
    every output of a captioned cell the caption and the figure name (a table beside the
    plot is captioned, and the name defined twice)."""
    bad = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or not cell["metadata"].get("mystnb", {}).get("figure"):
            continue
        shown = [o for o in cell.get("outputs", ())
                 if o["output_type"] in ("display_data", "execute_result", "stream")]
        if len(shown) != 1 or not any(BINARY.match(k) or k == "image/svg+xml"
                                      for k in shown[0].get("data", {})):
            bad.append(i)
    return bad


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_a_captioned_figure_cell_shows_its_figure_and_nothing_else(path):
    bad = captioned_cells_with_other_outputs(json.loads(path.read_text(encoding="utf-8")))
    assert not bad, (f"{path.name}: cells {bad} carry a figure caption but show other output "
                     "too (or no figure): put the table in a cell of its own")


def test_the_caption_check_sees_a_table_beside_a_figure():
    png = {"output_type": "display_data", "data": {"image/png": "x", "text/plain": "<Figure>"}}
    table = {"output_type": "execute_result", "data": {"text/html": "<table/>"}}
    cell = {"cell_type": "code", "metadata": {"mystnb": {"figure": {"caption": "c"}}},
            "outputs": [table, png]}
    assert captioned_cells_with_other_outputs({"cells": [cell]}) == [0]
    assert captioned_cells_with_other_outputs({"cells": [dict(cell, outputs=[png])]}) == []


def test_the_cleaner_drops_an_object_address_the_scanner_reports():
    styler = {"output_type": "display_data", "metadata": {},
              "data": {"text/html": "<table/>",
                       "text/plain": ["<pandas.io.formats.style.Styler at 0x7fd3bbf9d110>"]}}
    nb = {"cells": [_cell([styler])], "metadata": {}}
    assert any("memory address" in p for p in problems(nb))
    cleaned = clean_outputs.clean_notebook(nb, rules=[])
    assert problems(cleaned) == []
    assert cleaned["cells"][0]["outputs"][0]["data"]["text/plain"] == [
        "<pandas.io.formats.style.Styler>"]
