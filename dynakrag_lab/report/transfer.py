"""Generator transfer read as phrases (chapter 14): a transferred run (``<A>-policy-<G>``: reader
A answering with the policy trained with G) paired per question with the policy's native run,
A's own policy and A's Fixed-K runs, in both directions, and whether the reverse direction
reads as a reader limit. Every value is computed from the paired table
(:func:`~dynakrag_lab.report.results.transfer_paired_table`); a pair not made yet reads
as its reason ("not run yet"), never as nan.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from .comparison import A_BETTER, A_WORSE, COMPARATIVE, NO_DIFFERENCE
from .results import NOT_RUN, is_partial

# "A" of comparison.verdict is the transferred run
VERDICT_WORDS = {v: f"transferred run {word}" for v, word in COMPARATIVE.items()}
PARTS = ("n", "diff", "lo", "hi", "verdict", "status", "result")
DATASET_TAGS = (("hotpotqa", ""), ("2wikimultihopqa", "2wiki_"))


def pair_text(row: pd.DataFrame) -> dict[str, Any]:
    """The parts of one comparison's row (n, diff, lo, hi, verdict, the other run's status) and
    ``result``, the whole comparison as one phrase that reads in every case."""
    if not len(row):  # no transfer folder: the paired table has no row for it
        return {**dict.fromkeys(PARTS[:-1], NOT_RUN), "result": f"not paired yet ({NOT_RUN})"}
    r = row.iloc[0]
    if r.n == 0:
        return {**dict.fromkeys(PARTS[:5], r.verdict), "status": r.status,
                "result": f"not paired yet ({r.verdict})"}
    verdict = VERDICT_WORDS.get(r.verdict, r.verdict)
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
    limits F1: the same support as that policy's native run but lower F1, or more support than
    the reader's own policy without an F1 gain, says the reader is short, not the evidence."""
    if not isinstance(f1_native["n"], int):
        return "cannot be read yet (the reverse transfer is not paired)"
    same_sr = sr_native["verdict"] == NO_DIFFERENCE
    more_sr = sr_own["verdict"] == VERDICT_WORDS[A_BETTER]
    no_f1_gain = f1_own["verdict"] == NO_DIFFERENCE
    if same_sr and more_sr and no_f1_gain:
        return ("reads as a reader limit: the larger reader's policy gave the smaller reader "
                "more support than its own policy but no measurable F1 gain"
                + (", and the same support as with the larger reader, at a lower F1"
                   if f1_native["verdict"] == VERDICT_WORDS[A_WORSE] else
                   "; against the larger reader on the same support, F1 differed by "
                   f"{f1_native['diff']}, not measurably"))
    return ("does not show the reader-limit pattern (same support as the native run, more "
            "than the reader's own policy, no F1 gain over it)")


def transfer_texts(pairs: pd.DataFrame, generator: str, target_generator: str
                   ) -> dict[str, Any]:
    """Chapter 14's glue values for both directions of one transfer on HotpotQA (keys
    ``c14_vs_<key>_<part>``) and 2Wiki (``c14_2wiki_vs_<key>_<part>``): ``fwd``/``rev`` status,
    the F1 pairs native/own/k3/k6/rev_native/rev_own, the support-recall pairs of the reverse
    direction and its reader-limit reading."""
    out: dict[str, Any] = {}
    forward = f"{target_generator}-policy-{generator}"  # target answers with generator's policy
    backward = f"{generator}-policy-{target_generator}"  # and the other way round
    for ds, tag in DATASET_TAGS:
        on = pairs[pairs.dataset == ds]
        f1 = on[on.metric == "f1"]
        for direction, folder in (("fwd", forward), ("rev", backward)):
            status = f1[f1.generator == folder].transferred_status
            out[f"c14_{tag}{direction}_status"] = status.iloc[0] if len(status) else NOT_RUN

        def pick(frame: pd.DataFrame, folder: str, other_gen: str, other_run: str) -> dict:
            return pair_text(frame[(frame.generator == folder)
                                   & (frame.other_generator == other_gen)
                                   & (frame.other_run == other_run)])

        texts = {key: pick(f1, folder, gen, run) for key, folder, gen, run in (
            ("native", forward, generator, "dynakrag"),
            ("own", forward, target_generator, "dynakrag"),
            ("k3", forward, target_generator, "fixed_k3"),
            ("k6", forward, target_generator, "fixed_k6"),
            ("rev_native", backward, target_generator, "dynakrag"),
            ("rev_own", backward, generator, "dynakrag"))}
        for key, text in texts.items():
            out.update({f"c14_{tag}vs_{key}_{part}": text[part] for part in PARTS})
        sr = on[on.metric == "support_recall"]
        sr_texts = {"rev_native": pick(sr, backward, target_generator, "dynakrag"),
                    "rev_own": pick(sr, backward, generator, "dynakrag")}
        for key, text in sr_texts.items():
            out[f"c14_{tag}vs_{key}_sr_result"] = text["result"]
        out[f"c14_{tag}reader_text"] = reader_limit_reading(
            texts["rev_native"], texts["rev_own"], sr_texts["rev_native"], sr_texts["rev_own"])
    return out


__all__ = ["VERDICT_WORDS", "pair_text", "reader_limit_reading", "transfer_texts"]
