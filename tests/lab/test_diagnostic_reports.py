"""The four-word pair reading of the diagnosis appendix (dynakrag_lab.report.pair_words) and
the study reports that left it (dynakrag_lab.report.diagnostic_reports): readings on the committed runs, and the committed
reports under results/diagnostics/ are what the generator writes today."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from dynakrag_lab.report import diagnostic_reports as dr
from dynakrag_lab.report import pair_words as pw
from dynakrag_lab.report.verdicts import BETTER, INCONCLUSIVE, WORSE, Rules

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results"
needs_runs = pytest.mark.skipif(not (RESULTS / "experiments").is_dir(), reason="no runs")


@needs_runs
def test_pairs_are_read_in_the_four_words_with_holm_over_the_datasets_of_one_family():
    specs = [(d, g, "dynakrag", "uniform") for d in dr.DATASETS for g in (dr.SMALL, dr.BIG)]
    t = pw.read_pairs(specs, RESULTS / "experiments")
    assert len(t) == 6
    words = {BETTER, WORSE, INCONCLUSIVE, "equivalent within ±.03"}
    assert set(t.word) <= words
    assert all(h >= p.p_value for h, p in zip(t.p_holm, t.pd))
    # one family per reader: the larger reader's Holm p ignores the smaller reader's pairs
    alone = pw.read_pairs([s for s in specs if s[1] == dr.BIG], RESULTS / "experiments")
    assert list(alone.p_holm) == list(t[t.reader == dr.BIG].p_holm)
    view = pw.pairs_view(t)
    assert list(view.columns)[-1] == "reading" and view["run minus other"].iloc[0] == \
        "dynakrag - uniform"


@needs_runs
def test_a_wider_margin_can_only_turn_inconclusive_into_equivalent():
    specs = [(d, dr.SMALL, "dynakrag", "uniform") for d in dr.DATASETS]
    narrow = pw.read_pairs(specs, RESULTS / "experiments", Rules(0.05, 0.03, 0.8))
    wide = pw.read_pairs(specs, RESULTS / "experiments", Rules(0.05, 0.5, 0.8))
    assert set(wide.word) == {"equivalent within ±.5"}
    assert list(narrow.p_holm) == list(wide.p_holm)


def test_words_sentence_counts_per_reader_and_plain_drops_the_old_verdict():
    t = pd.DataFrame({"reader": ["m-0.5b", "m-0.5b", "m-1.5b"],
                      "word": [INCONCLUSIVE, BETTER, INCONCLUSIVE]})
    text = pw.words_sentence(t)
    assert text == (f"with the 0.5b reader {INCONCLUSIVE} on 1 of 2, {BETTER} on 1 of 2; "
                    f"with the 1.5b reader {INCONCLUSIVE} on 1 of 1.")
    assert dr._plain("F1 no measurable difference") == f"F1 {INCONCLUSIVE}"


@needs_runs
@pytest.mark.parametrize("name", [n for n in dr.REPORTS if n != "retrieval-cap-sweep"])
def test_the_committed_report_is_what_the_generator_writes(name):
    committed = (RESULTS / "diagnostics" / f"{name}.md").read_text(encoding="utf-8")
    assert committed == dr.REPORTS[name](RESULTS)
    for old in ("no measurable difference", "A better", "A worse", " ties "):
        assert old not in committed, old


def test_the_live_sweep_report_is_committed_with_every_cap():
    text = (RESULTS / "diagnostics" / "retrieval-cap-sweep.md").read_text(encoding="utf-8")
    assert all(f"| {cap} " in text for cap in ("1", "2", "3", "none"))
