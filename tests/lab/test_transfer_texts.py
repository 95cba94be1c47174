"""The transfer phrases of the diagnosis appendix (dynakrag_lab.report.transfer): every pair
reads in every case, a missing pair as its reason, never as nan; the reverse direction's
reader-limit reading."""
import pandas as pd

from dynakrag_lab.report.results import NOT_RUN, TRANSFER_PAIRED_COLUMNS
from dynakrag_lab.report.transfer import VERDICT_WORDS, pair_text, reader_limit_reading


def _row(**kw) -> pd.DataFrame:
    base = {c: None for c in TRANSFER_PAIRED_COLUMNS}
    base.update({"dataset": "hotpotqa", "metric": "f1", "generator": "big-policy-small",
                 "other_generator": "small", "other_run": "dynakrag", "n": 30, "diff": 0.05,
                 "lo": -0.01, "hi": 0.11, "verdict": "no measurable difference",
                 "status": "complete", "transferred_status": "complete"})
    base.update(kw)
    return pd.DataFrame([base])


def test_a_missing_pair_reads_as_its_reason_never_as_nan():
    text = pair_text(pd.DataFrame(columns=list(TRANSFER_PAIRED_COLUMNS)))
    assert text["result"] == f"not paired yet ({NOT_RUN})"
    assert not any(isinstance(v, float) for v in text.values())
    assert reader_limit_reading(text, text, text, text).startswith("cannot be read yet")
    made = pair_text(_row(n=0, verdict="not run yet", status="not run yet"))
    assert made["result"] == "not paired yet (not run yet)"


def test_a_pair_names_its_interval_and_a_partial_side():
    text = pair_text(_row(status="partial: 10 of 30"))
    assert text["n"] == 30 and text["diff"] == "+0.050"
    assert text["result"] == ("n 30, difference +0.050, 95 % interval -0.010 to +0.110: "
                              "inconclusive at this n (on the questions answered so far: "
                              "small/dynakrag partial: 10 of 30)")
    assert pair_text(_row(verdict="A worse"))["verdict"] == VERDICT_WORDS["A worse"]


def test_reverse_transfer_reads_as_a_reader_limit_only_in_its_pattern():
    open_ = pair_text(_row())  # inconclusive at this n
    more = pair_text(_row(verdict="A better"))
    text = reader_limit_reading(open_, open_, open_, more)
    assert text.startswith("fits a reader limit") and "F1 +0.050 (inconclusive at this n)" in text
    assert reader_limit_reading(open_, open_, more, more).startswith("does not fit")
