"""Reading experiment results back: the runs' summaries and predictions, how far each run got,
and the tables chapters 11b-14 print (results per run, paired comparisons per question,
generator transfer, traces, stop-rule sweeps).

Layout written by ``python -m dynakrag_lite evaluate --out ...`` (and by
``data_scripts/run_experiments.py``; the folder is
:data:`dynakrag_lite.experiments.artifacts.EXPERIMENTS_DIR`)::

    results/experiments/<dataset>/<generator>/<run>/summary.json
    results/experiments/<dataset>/<generator>/<run>/predictions.jsonl

``<run>`` is a method name (``dynakrag``, ``fixed_k``, ``ircot``, ``self_ask``, ``uniform``,
``oracle``) or an ablation of DynaKRAG (``dynakrag-no_compression``,
``dynakrag-no_sufficiency``, ``dynakrag-cap1`` ...). The dataset, generator and run of a row
come from the folder names, so two runs of one method (an ablation and the full method) never
collapse into one row even though both summaries say ``"method": "dynakrag"``.

Everything here only reads: no function of this module writes a file (a torn last line of a
predictions file is ignored, not cut; the writer,
:func:`dynakrag_lite.experiments.run.evaluate`, does that when it resumes).

Runs are re-run and extended in place (a new policy, a larger evaluation split), so a run
folder may be missing, just started or partial while the tables are rebuilt. Every table here
says so (:func:`status_label`, :func:`run_status`): a partial run is labelled with how many
questions it answered, paired comparisons (:mod:`dynakrag_lab.report.comparison`) use
only the questions both runs answered and give that n, and a run that is not there gets a
"not run yet" row rather than an exception or no row at all.

:func:`~dynakrag_lab.report.records.stop_rule_table` turns the cross-validated stop-rule
report of ``python -m dynakrag_lab.studies.stop_rule``
(``results/diagnostics/<dataset>-<generator>-stop-rule.json``) into one tidy row per (stop
rule, λ);
:func:`~dynakrag_lab.report.plots.stop_rule_sweeps_figure` draws it. The paper's own
numbers, and our runs beside them, are :mod:`dynakrag_lab.report.paper`; the scores per
question type and hop count are :mod:`dynakrag_lab.report.breakdown`.
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from dynakrag_lite.experiments.artifacts import (EXPERIMENTS_DIR, POLICIES_DIR,
                                                 POLICY_VARIANT_SUFFIXES)
from dynakrag_lite.experiments.folder import latest_rows, read_predictions
from dynakrag_lite.experiments.run import SUMMARY_KEYS
from dynakrag_lite.storage import sha256_file

from .comparison import compare_runs, paired_rows
from .names import BASELINES
from .names import RUN_ORDER, locate, run_names, transfer_folder  # noqa: F401 (the book's names)

DEFAULT_ROOT = EXPERIMENTS_DIR
ID_COLUMNS = ("dataset", "generator", "run")
METRIC_COLUMNS = tuple(k for k in SUMMARY_KEYS if k not in ("dataset", "generator"))
# errors: error rows (questions whose method raised); complete: every requested question
# has a real row; n_expected: questions requested. None for summaries written before they
# were recorded. status: status_label of the run ("complete", "partial: 40 of 150", ...).
SUMMARY_COLUMNS = ID_COLUMNS + METRIC_COLUMNS + ("errors", "complete", "n_expected", "status",
                                                 "command", "path")


def load_summaries(root: str | Path = DEFAULT_ROOT) -> pd.DataFrame:
    """One row per ``<root>/<dataset>/<generator>/<run>/summary.json``.

    Columns: dataset, generator, run (from the folder names), the summary metrics (method, n,
    em, f1, support_recall, all_support_rate, docs_mean, tokens_mean, llm_calls_mean,
    retrieval_calls_mean, seconds_mean), ``errors``, ``complete``, ``n_expected`` and
    ``status`` (:func:`status_label`), the command that produced it (``run.command``) and the
    summary's path relative to ``root``. An empty DataFrame with these columns when nothing
    exists; unreadable summaries are skipped with a warning.
    """
    base = locate(root)
    rows = []
    if base.is_dir():
        for path in sorted(base.glob("*/*/*/summary.json")):
            try:
                s = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as e:
                warnings.warn(f"skipping unreadable {path.name} in {path.parent.name}: {e}")
                continue
            dataset, generator, run = path.relative_to(base).parts[:3]
            row = {"dataset": dataset, "generator": generator, "run": run}
            row.update({k: s.get(k) for k in METRIC_COLUMNS})
            row["errors"] = s.get("errors")
            row["complete"] = (s.get("run") or {}).get("complete")
            row["n_expected"] = (s.get("run") or {}).get("n_expected")
            row["status"] = status_label(s.get("n"), row["n_expected"], row["complete"])
            row["command"] = (s.get("run") or {}).get("command")
            row["path"] = str(path.relative_to(base))
            rows.append(row)
    df = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    for k in METRIC_COLUMNS:
        if k != "method":
            df[k] = pd.to_numeric(df[k], errors="coerce")
    df["n_expected"] = df["n_expected"].astype("Int64")  # <NA>: not recorded
    return df


# -- the state of a run: complete, partial, started or not there ---------------------------
NOT_RUN = "not run yet"
STARTED = "started, nothing answered yet"
NO_COMMON = "no common questions yet"
COMPLETE = "complete"
UNRECORDED = "completeness not recorded"


def _missing(v) -> bool:
    return v is None or (not isinstance(v, str) and bool(pd.isna(v)))


def status_label(n, n_expected=None, complete=None) -> str:
    """How far a run got, to print next to it: :data:`COMPLETE`, ``"partial: 40 of 150"``
    (``complete`` false: the run covers the ``n`` questions answered so far),
    :data:`UNRECORDED` (a run that predates the ``complete`` flag), :data:`STARTED` (no
    question answered) or :data:`NOT_RUN` (``n`` None: no run)."""
    if _missing(n):
        return NOT_RUN
    if int(n) == 0:
        return STARTED
    if _missing(complete):
        return UNRECORDED
    if bool(complete):
        return COMPLETE
    of = "answered" if _missing(n_expected) else f"of {int(n_expected)}"
    return f"partial: {int(n)} {of}"


def is_partial(status: str) -> bool:
    """True for a :func:`status_label` of a run that has not answered every question yet."""
    return str(status).startswith("partial")


# A chapter asks for the same runs' states table after table: a predictions file whose
# (path, mtime_ns, size) has not changed is not parsed again. One entry per path, so a file
# still being appended to replaces its entry instead of piling up copies.
_ANSWERED: dict[Path, tuple[int, int, list[dict]]] = {}


def _answered(path: Path) -> list[dict]:
    """The answered rows of a predictions file (latest row per id, error rows left out)."""
    st = path.stat()  # before reading: a line appended meanwhile changes the stamp next time
    key = path.resolve()
    hit = _ANSWERED.get(key)
    if hit is None or hit[:2] != (st.st_mtime_ns, st.st_size):
        hit = _ANSWERED[key] = (st.st_mtime_ns, st.st_size,
                                latest_rows(read_predictions(path), errors=False))
    return list(hit[2])


def read_run(dataset: str, generator: str, run: str, root: str | Path
             ) -> tuple[list[dict], dict]:
    """(answered rows, status record) of one run folder: the latest row of each question, error
    rows left out, and :func:`run_status`'s record."""
    folder = locate(root) / dataset / generator / run
    rec = {"run": run, "status": NOT_RUN, "answered": 0, "expected": None, "complete": None}
    if not (folder / "predictions.jsonl").exists():
        return [], rec
    rows = _answered(folder / "predictions.jsonl")
    try:
        info = json.loads((folder / "summary.json").read_text()).get("run") or {}
    except (OSError, ValueError):  # no summary yet (written after the first question)
        info = {}
    rec.update(answered=len(rows), expected=info.get("n_expected"),
               complete=info.get("complete"),
               status=status_label(len(rows), info.get("n_expected"), info.get("complete")))
    return rows, rec


def run_status(dataset: str, generator: str, run: str,
               root: str | Path = DEFAULT_ROOT) -> dict:
    """The state of one run folder, read from its files: ``run``, ``status``
    (:func:`status_label`: :data:`NOT_RUN` without a predictions file, :data:`STARTED` with
    no answered question), ``answered`` (questions with a real row in predictions.jsonl),
    ``expected`` (questions requested, from summary.json; None when not recorded) and
    ``complete``. Raises :class:`~dynakrag_lite.experiments.folder.ResultsError` for a damaged
    predictions file."""
    return read_run(dataset, generator, run, root)[1]


def load_summary(dataset: str, generator: str, run: str,
                 root: str | Path = DEFAULT_ROOT) -> dict:
    """The full summary.json of one run (including its ``run`` block)."""
    path = locate(root) / dataset / generator / run / "summary.json"
    if not path.exists():
        raise FileNotFoundError(f"no summary for {dataset}/{generator}/{run} under {root}")
    return json.loads(path.read_text())


def load_predictions(dataset: str, generator: str, run: str,
                     root: str | Path = DEFAULT_ROOT, errors: bool = False) -> pd.DataFrame:
    """The per-question records of one run: the latest line of each question id in
    predictions.jsonl (a retried question's success supersedes its error row). Error rows
    (``"error"`` column) are left out unless ``errors=True``. Never writes; raises
    :class:`~dynakrag_lite.experiments.folder.ResultsError` for a damaged file."""
    return pd.DataFrame(_latest(dataset, generator, run, root, errors))


def _latest(dataset: str, generator: str, run: str, root: str | Path, errors: bool
            ) -> list[dict]:
    path = locate(root) / dataset / generator / run / "predictions.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no predictions for {dataset}/{generator}/{run} under {root}")
    return latest_rows(read_predictions(path), errors=errors)


def find_policies(dataset: str | None = None, root: str | Path = POLICIES_DIR,
                  variants: bool = False) -> list[Path]:
    """Saved policies ``<root>/<dataset>-<generator>.joblib`` (all datasets when None); the
    variants (:data:`POLICY_VARIANT_SUFFIXES`) only with ``variants=True``."""
    base = locate(root)
    if not base.is_dir():
        return []
    found = sorted(base.glob(f"{dataset}-*.joblib" if dataset else "*.joblib"))
    return found if variants else [p for p in found
                                   if not p.stem.endswith(POLICY_VARIANT_SUFFIXES)]


def run_policy(dataset: str, generator: str, run: str,
               root: str | Path = DEFAULT_ROOT) -> dict | None:
    """The policy a run used, as its summary.json records it (``path``, ``sha256``,
    ``n_train`` ...), and ``file``: ``"same"`` when ``<results>/policies/<file name>`` (beside
    ``root``) still holds that policy, ``"changed"`` when it holds another one (retrained after
    the run: the run's results are the earlier policy's), ``"missing"`` when there is no such
    file now. None for a run that records no policy (a baseline) or has no summary."""
    try:
        rec = load_summary(dataset, generator, run, root).get("policy")
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(rec, dict) or not rec.get("path"):
        return None
    saved = locate(root).parent / "policies" / Path(rec["path"]).name
    state = ("missing" if not saved.is_file() else
             "same" if sha256_file(saved) == rec.get("sha256") else "changed")
    return {**rec, "file": state}


# The runs a transfer folder is for: the controller run made with another generator's policy
# (main_experiment.py --policy-generator), which transfer_paired_table reads. Baselines use no
# policy, so they live in the answer generator's own folder and are never missing here.
TRANSFER_RUNS = ("dynakrag",)


def transfer_runs(summaries: pd.DataFrame) -> pd.DataFrame:
    """Rows whose generator folder is ``<generator>-policy-<policy generator>``: runs of a
    policy trained on one generator's trajectories, applied unchanged with another. Adds the
    columns ``answer_generator`` and ``policy_generator``; other rows get policy_generator =
    answer_generator (the policy was trained with the generator that answers)."""
    df = summaries.copy()
    split = [transfer_folder(g) or (g, g) for g in df.generator]
    df["answer_generator"] = [p[0] for p in split]
    df["policy_generator"] = [p[1] for p in split]
    df["transferred"] = df.answer_generator != df.policy_generator
    return df


def trace_table(trace) -> pd.DataFrame:
    """One row per step of a method's trace: a list of ``StepTrace`` (``MethodResult.trace``)
    or of their JSON dicts (the ``trace`` field of predictions.jsonl).

    Columns: step, action, n_valid, value (v(s, a*) when the chooser reports values),
    stop_value (v(s, stop_answer)), continue_gain, vetoed (stop_answer was suppressed),
    added (number of new documents), query, gap, sufficient, note."""
    rows = []
    for t in trace:
        t = t if isinstance(t, dict) else t.to_json()
        scores = t.get("scores") or {}
        mine, stop = scores.get(t["action"], {}), scores.get("stop_answer", {})
        gain = next((s["continue_gain"] for s in scores.values() if "continue_gain" in s), None)
        rows.append({"step": t["step"], "action": t["action"], "n_valid": len(t["valid"]),
                     "value": mine.get("value"), "stop_value": stop.get("value"),
                     "continue_gain": gain, "vetoed": bool(stop.get("vetoed")),
                     "added": len(t.get("added") or ()), "query": t.get("query", ""),
                     "gap": t.get("gap", ""), "sufficient": t.get("sufficient"),
                     "note": t.get("note", "")})
    return pd.DataFrame(rows, columns=["step", "action", "n_valid", "value", "stop_value",
                                       "continue_gain", "vetoed", "added", "query", "gap",
                                       "sufficient", "note"])


def markdown_table(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A GitHub-markdown table (no extra dependency such as tabulate)."""
    def cell(v):
        if isinstance(v, float) and math.isnan(v):
            return "-"  # not computed (e.g. a pair without common questions)
        if isinstance(v, float):
            return format(v, floatfmt) if abs(v) < 100 else f"{v:,.0f}"
        return str(v)
    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule] + body)


MAIN_TABLE_COLUMNS = ("run", "n", "status", "em", "f1", "support_recall", "all_support_rate",
                      "docs_mean", "tokens_mean", "llm_calls_mean", "retrieval_calls_mean",
                      "seconds_mean")


def results_table(summaries: pd.DataFrame, dataset: str, generator: str) -> pd.DataFrame:
    """One dataset/generator's runs in a fixed order (methods, then ablations)."""
    df = summaries[(summaries.dataset == dataset) & (summaries.generator == generator)]
    order = {r: i for i, r in enumerate(RUN_ORDER)}
    df = df.assign(_o=[order.get(r, len(order)) for r in df.run]).sort_values(["_o", "run"])
    return df[list(MAIN_TABLE_COLUMNS)].reset_index(drop=True)


PAIRED_COLUMNS = ("run", "metric", "n", "other", "diff", "lo", "hi", "p_value", "wins",
                  "losses", "verdict", "status")


def paired_table(dataset: str, generator: str, base: str = "dynakrag",
                 runs: Sequence[str] | None = None,
                 metrics: Sequence[str] = ("f1", "em", "support_recall"),
                 root: str | Path = DEFAULT_ROOT) -> pd.DataFrame:
    """``base`` against every other run of ``dataset``/``generator`` (or ``runs``), paired per
    question: one row per (run, metric) with n, both means, the difference base - run, its
    paired bootstrap 95 % interval, the paired permutation p-value and the verdict
    (:mod:`dynakrag_lab.report.comparison`; 10,000 resamples, fixed seed).

    Only the questions both runs answered are paired, and ``n`` counts them: a partial run is
    compared on what it has, and ``status`` (:func:`status_label` of the other run) says it
    is partial. A pair that cannot be made is still a row, with ``n`` 0, NaN numbers and the
    reason as its verdict: :data:`NOT_RUN` or :data:`STARTED` for the other run,
    ``"<base> not run yet"`` (or started) for the base, :data:`NO_COMMON` when they share no
    question. Only a damaged predictions file raises."""
    if runs is None:
        runs = [r for r in run_names(dataset, generator, root) if r != base]
    base_run = read_run(dataset, generator, base, root)
    out = [{"run": run, **rec} for run in runs
           for rec in _pair(base_run, read_run(dataset, generator, run, root), metrics,
                            base, base)]
    cols = list(PAIRED_COLUMNS)
    return pd.DataFrame(out, columns=cols[:3] + [base] + cols[3:])


def _pair(a: tuple[list[dict], dict], b: tuple[list[dict], dict], metrics: Sequence[str],
          a_name: str, a_column: str) -> list[dict]:
    """Run ``a`` against run ``b``, both as :func:`read_run` gives them, paired per question:
    one record per metric with n, the means (``a_column`` and ``other``), the difference
    a - b with its interval, p-value, wins, losses, verdict and ``status`` (of ``b``). A pair
    that cannot be made gives n 0, NaN numbers and the reason as the verdict (``a_name``
    prefixes the reason when ``a`` is the run that is missing)."""
    (a_rows, a_state), (b_rows, b_state) = a, b
    if not a_rows:
        why = f"{a_name} {a_state['status']}"
    elif not b_rows:
        why = b_state["status"]
    elif not paired_rows(a_rows, b_rows):
        why = NO_COMMON
    else:
        why = None
    if why:  # no pair: said so, one row per metric like any other run
        return [{"metric": m, "n": 0, a_column: math.nan, "other": math.nan, "diff": math.nan,
                 "lo": math.nan, "hi": math.nan, "p_value": math.nan, "wins": 0, "losses": 0,
                 "verdict": why, "status": b_state["status"]} for m in metrics]
    return [{"metric": m, "n": r.n, a_column: r.mean_a, "other": r.mean_b, "diff": r.diff,
             "lo": r.lo, "hi": r.hi, "p_value": r.p_value, "wins": r.wins,
             "losses": r.losses, "verdict": r.verdict, "status": b_state["status"]}
            for m, r in compare_runs(a_rows, b_rows, metrics).items()]


# What a transferred DynaKRAG run is paired with: (comparison, whose generator folder, run).
# "policy": the policy generator's own folder, "answer": the answer generator's.
ANSWER_BASELINE = "answer generator's baseline"
TRANSFER_COMPARISONS = (
    ("same policy, native generator", "policy", "dynakrag"),
    ("answer generator's own policy", "answer", "dynakrag"),
    (ANSWER_BASELINE, "answer", "fixed_k3"),
    (ANSWER_BASELINE, "answer", "fixed_k6"),
    (ANSWER_BASELINE, "answer", "ircot"),
)
TRANSFER_PAIRED_COLUMNS = ("dataset", "generator", "answer_generator", "policy_generator",
                           "comparison", "other_generator", "other_run", "metric", "n",
                           "transferred", "other", "diff", "lo", "hi", "p_value", "wins",
                           "losses", "verdict", "transferred_status", "status")


def transfer_paired_table(dataset: str, root: str | Path = DEFAULT_ROOT,
                          metrics: Sequence[str] = ("f1", "em", "support_recall"),
                          generator: str | None = None,
                          against: Sequence[tuple[str, str, str]] = TRANSFER_COMPARISONS
                          ) -> pd.DataFrame:
    """Every transferred DynaKRAG run of ``dataset`` (a ``dynakrag`` run in a generator folder
    ``<A>-policy-<P>``, see :func:`transfer_runs`) paired per question with the runs it is
    read against (:data:`TRANSFER_COMPARISONS`): the same policy with its own generator
    ``<P>/dynakrag``, the answer generator's own policy ``<A>/dynakrag``, and the answer
    generator's baselines ``<A>/fixed_k3``, ``<A>/fixed_k6`` and ``<A>/ircot``.

    One row per (transfer folder, comparison, metric), with the columns and meaning of
    :func:`paired_table`: ``n`` questions both runs answered (only those are paired, across
    the two generator folders), the means ``transferred`` and ``other``, ``diff`` =
    transferred - other with its paired bootstrap 95 % interval ``lo``/``hi``, ``p_value``,
    ``wins``/``losses`` and the ``verdict`` ("A" is the transferred run); ``status`` is the
    other run's :func:`status_label` and ``transferred_status`` the transferred run's.
    ``generator`` is the transfer folder, ``other_generator``/``other_run`` the run it is
    paired with. Every comparison gets its rows: one that cannot be made has ``n`` 0, NaN
    numbers and the reason as its verdict (:data:`NOT_RUN` for a baseline never run with the
    answer generator, :data:`NO_COMMON` ...). No transfer folder: an empty frame with these
    columns. Only a damaged predictions file raises.

    ``generator``: only that transfer folder; ``against``: the (comparison, whose folder, run)
    to pair with, :data:`TRANSFER_COMPARISONS` by default (the others are not paired at all,
    each pairing being a 10,000-resample bootstrap)."""
    folder = locate(root) / dataset
    # a transfer counts from its first predictions file on, so a just-started run says so
    transfers = sorted(p.name for p in (folder.iterdir() if folder.is_dir() else ())
                       if transfer_folder(p.name) and generator in (None, p.name)
                       and (p / "dynakrag" / "predictions.jsonl").exists())
    out = []
    for gen in transfers:
        answer, policy = transfer_folder(gen)
        moved = read_run(dataset, gen, "dynakrag", root)
        for comparison, whose, run in against:
            other_gen = policy if whose == "policy" else answer
            ids = {"dataset": dataset, "generator": gen, "answer_generator": answer,
                   "policy_generator": policy, "comparison": comparison,
                   "other_generator": other_gen, "other_run": run}
            out += [{**ids, **rec, "transferred_status": moved[1]["status"]}
                    for rec in _pair(moved, read_run(dataset, other_gen, run, root), metrics,
                                     "transferred dynakrag", "transferred")]
    return pd.DataFrame(out, columns=list(TRANSFER_PAIRED_COLUMNS))


def transfer_baselines(dataset: str, generator: str, root: str | Path = DEFAULT_ROOT,
                       metrics: Sequence[str] = ("f1", "em", "support_recall")
                       ) -> pd.DataFrame:
    """:func:`transfer_paired_table`'s rows pairing the transfer folder ``generator``
    (``<A>-policy-<P>``) with every baseline of answer generator A (:data:`BASELINES`, as a
    reader's own headline has them): the policy judged against no policy with the same
    reader. Empty for another folder."""
    return transfer_paired_table(dataset, root=root, metrics=metrics, generator=generator,
                                 against=[(ANSWER_BASELINE, "answer", b) for b in BASELINES])


def best_baseline(pairs: pd.DataFrame) -> pd.Series | None:
    """The F1 row of the best baseline among paired rows (:func:`paired_table` or
    :func:`transfer_paired_table` rows restricted to baselines): the highest mean F1 of the
    other run (``other``) among the runs paired on the most questions, so that a run begun on
    a handful of questions cannot win by luck. None when no baseline is paired yet."""
    f1 = pairs[(pairs.metric == "f1") & (pairs.n > 0)]
    if f1.empty:
        return None
    return f1[f1.n == f1.n.max()].sort_values("other", ascending=False).iloc[0]


def json_clean(o, digits: int | None = 4):
    """A report as plain JSON: NaN and infinities as null, floats to ``digits`` decimals (None:
    unrounded, for a reader that words them again), numpy scalars and arrays as Python values
    and lists, keys as strings."""
    if isinstance(o, dict):
        return {str(k): json_clean(v, digits) for k, v in o.items()}
    if isinstance(o, (list, tuple, np.ndarray)):
        return [json_clean(v, digits) for v in o]
    if isinstance(o, (float, np.floating)):
        o = float(o)
        return None if not math.isfinite(o) else o if digits is None else round(o, digits)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.bool_):
        return bool(o)
    return o


def mean_of(rows: Sequence[Mapping], key: str) -> float:
    """The mean of ``key`` over prediction rows (NaN for none)."""
    return float(np.mean([float(r[key]) for r in rows])) if rows else math.nan
