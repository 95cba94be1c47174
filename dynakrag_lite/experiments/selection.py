"""Which questions a run folder is for: the split options of ``evaluate``, recorded in
``DIR/run.json`` under ``"selection"`` and compared on resume, so that rows of two question
lists never mix. ``--limit`` is not part of it (a larger limit extends a run); a folder without
the field has it derived from its recorded commands (:func:`recorded_selection`). ``--n-eval``
is recorded as given, so two values above the split's cap are refused although they agree."""
from __future__ import annotations

import argparse
import shlex
from typing import Callable, Sequence

from ..config import RunSettings

SELECTION_FIELD = "selection"
# The flag behind each recorded field, for messages that say what to type.
FLAGS = {"split": "--split", "n_eval": "--n-eval", "split_seed": "--split-seed",
         "offset": "--offset", "unseen_by_selector": "--unseen-by-selector"}
EVALUATE_SPLIT = "eval"  # evaluate's default --split (run folders are evaluate's only)


# -- the command line's split options -------------------------------------------------------
def _int_at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` (argparse names the flag in its error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(
                f"must be {'a positive integer' if low == 1 else f'an integer >= {low}'}, "
                f"got {value}")
        return value
    return parse


POSITIVE = _int_at_least(1)
NON_NEGATIVE = _int_at_least(0)


def add_split_options(p: argparse.ArgumentParser, default: str) -> None:
    """The split options of a command (``default``: its ``--split``). Defined here so that a
    recorded command is read with the same flags and defaults it ran with."""
    p.add_argument("--split", choices=("train", "eval", "all"), default=default)
    p.add_argument("--n-eval", type=POSITIVE, default=100,
                   help="questions held out for evaluation (at most half of the file)")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--offset", type=NON_NEGATIVE, default=0,
                   help="skip the first M questions of the split (before --limit), e.g. to "
                   "measure on training questions a policy was not trained on")
    p.add_argument("--unseen-by-selector", action="store_true",
                   help="leave out the questions the sentence selector (--selector) was fit "
                   "on (before --offset), e.g. to run on training questions")
    p.add_argument("--limit", type=POSITIVE, default=None, help="first N questions of the split")


# -- the record ---------------------------------------------------------------------------------
def question_selection(split: str, n_eval: int | None, split_seed: int | None,
                       offset: int | None, unseen_by_selector: bool = False) -> dict:
    """The record of which questions a run takes: ``{"split", "n_eval", "split_seed",
    "offset"}``, and ``"unseen_by_selector": True`` only when set (older folders lack it).
    With ``--split all``, ``n_eval`` and ``split_seed`` select nothing and are None."""
    held_out = split != "all"
    out = {"split": split, "n_eval": n_eval if held_out else None,
           "split_seed": split_seed if held_out else None, "offset": offset or 0}
    return {**out, "unseen_by_selector": True} if unseen_by_selector else out


def selection_of(args: argparse.Namespace | RunSettings) -> dict:
    """:func:`question_selection` of a parsed command's split options (or its settings)."""
    return question_selection(args.split, args.n_eval, args.split_seed, args.offset,
                              bool(getattr(args, "unseen_by_selector", False)))


class _RecordParser(argparse.ArgumentParser):
    def error(self, message: str):  # a record that cannot be read: "not known", never an exit
        raise ValueError(message)


def selection_from_command(command: str | None) -> dict | None:
    """The selection of a recorded ``evaluate`` command (direct or through
    data_scripts/warm_cache.py); None when there is none or it cannot be read."""
    if not isinstance(command, str) or not command.strip():
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if "--" in words:  # warm_cache.py: the run's own command line follows "--"
        words = words[words.index("--") + 1:]
    if "dynakrag_lite" in words[:3]:
        words = words[words.index("dynakrag_lite") + 1:]
    if words and words[0] == "evaluate":
        words = words[1:]
    elif words and not words[0].startswith("-"):  # another command: not a run folder's
        return None
    parser = _RecordParser(add_help=False)
    add_split_options(parser, EVALUATE_SPLIT)
    try:
        args, _ = parser.parse_known_args(words)  # the other options are not ours to read
    except ValueError:
        return None
    return selection_of(args)


def recorded_selection(records: Sequence[tuple[str, dict]]) -> list[tuple[dict, str]]:
    """The selections a folder's ``records`` ((where, record) of run.json, then summary.json's
    ``"run"``) allow, each with where: a ``"selection"`` field (run.json's decides alone), else
    what its ``"command"`` makes (older runs could change the split). []: not checked."""
    allowed: list[tuple[dict, str]] = []
    for i, (where, record) in enumerate(records):
        if isinstance(record.get(SELECTION_FIELD), dict):
            found = (record[SELECTION_FIELD], f'{where}, field "{SELECTION_FIELD}"')
            if i == 0:
                return [found]
        else:
            derived = selection_from_command(record.get("command"))
            if derived is None:
                continue
            found = (derived, f"{where}, derived from its command (recorded before the "
                              f'"{SELECTION_FIELD}" field existed)')
        if found[0] not in [a for a, _ in allowed]:
            allowed.append(found)
    return allowed


def selection_diff(recorded: dict, new: dict) -> list[str]:
    """Human-readable differences ``selection.FIELD (--flag): recorded X, this command Y``."""
    def shown(d: dict, k: str) -> str:
        return repr(d[k]) if k in d else "(absent)"
    return [f"{SELECTION_FIELD}.{k} ({FLAGS.get(k, k)}): recorded {shown(recorded, k)}, "
            f"this command {shown(new, k)}"
            for k in sorted(set(recorded) | set(new)) if recorded.get(k) != new.get(k)]
