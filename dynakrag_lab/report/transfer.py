"""Generator transfer read as phrases (the diagnosis appendix, through
:func:`~dynakrag_lab.report.appendix.reader_limit_markdown`): a transferred run
(``<A>-policy-<G>``: reader A answering with the policy trained with G) paired per question
with the policy's native run and A's own policy, and whether the reverse direction reads as a
reader limit. Every value is computed from the paired table
(:func:`~dynakrag_lab.report.results.transfer_paired_table`); a pair not made yet reads
as its reason ("not run yet"), never as nan.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from .comparison import A_BETTER, COMPARATIVE
from .results import NOT_RUN, is_partial
from .verdicts import INCONCLUSIVE, pair_word

# "A" of comparison.verdict is the transferred run
VERDICT_WORDS = {v: f"transferred run {word}" for v, word in COMPARATIVE.items()}
PARTS = ("n", "diff", "lo", "hi", "verdict", "status", "result")


def pair_text(row: pd.DataFrame) -> dict[str, Any]:
    """The parts of one comparison's row (n, diff, lo, hi, verdict, the other run's status) and
    ``result``, the whole comparison as one phrase that reads in every case."""
    if not len(row):  # no transfer folder: the paired table has no row for it
        return {**dict.fromkeys(PARTS[:-1], NOT_RUN), "result": f"not paired yet ({NOT_RUN})"}
    r = row.iloc[0]
    if r.n == 0:
        return {**dict.fromkeys(PARTS[:5], r.verdict), "status": r.status,
                "result": f"not paired yet ({r.verdict})"}
    verdict = VERDICT_WORDS.get(r.verdict, pair_word(r.verdict))
    unfinished = [f"{who} {st}" for who, st in (("transferred run", r.transferred_status),
                                                 (f"{r.other_generator}/{r.other_run}", r.status))
                  if is_partial(st)]
    result = (f"n {int(r.n)}, difference {r['diff']:+.3f}, 95 % interval {r.lo:+.3f} to "
              f"{r.hi:+.3f}: {verdict}" + (f" (on the questions answered so far: "
                                           f"{'; '.join(unfinished)})" if unfinished else ""))
    return {"n": int(r.n), "diff": f"{r['diff']:+.3f}", "lo": f"{r.lo:+.3f}",
            "hi": f"{r.hi:+.3f}", "verdict": verdict, "status": r.status, "result": result}


def reader_limit_reading(f1_native: dict, f1_own: dict, sr_native: dict, sr_own: dict) -> str:
    """The reverse transfer (the smaller reader with the larger reader's policy) read for what
    limits F1: support inconclusive at this n against that policy's native run, better than
    with the reader's own policy, and F1 inconclusive at this n against the latter fit a reader
    that is short, not evidence that is (a pattern, not a test of it)."""
    if not isinstance(f1_native["n"], int):
        return "cannot be read yet (the reverse transfer is not paired)"
    if (sr_native["verdict"] == INCONCLUSIVE and sr_own["verdict"] == VERDICT_WORDS[A_BETTER]
            and f1_own["verdict"] == INCONCLUSIVE):
        return ("fits a reader limit: the larger reader's policy gave the smaller reader more "
                "support than its own policy (better) with F1 inconclusive at this n against "
                "it; against the larger reader, support inconclusive at this n and F1 "
                f"{f1_native['diff']} ({f1_native['verdict']})")
    return ("does not fit the reader-limit pattern (support inconclusive at this n against the "
            "native run, better than with the reader's own policy, F1 inconclusive at this n "
            "against it)")


__all__ = ["VERDICT_WORDS", "pair_text", "reader_limit_reading"]
