"""Reading experiment results back, and the paper's reference numbers.

Layout written by ``python -m dynakrag_lite evaluate --out ...`` (and by
``data_scripts/run_experiments.py``)::

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

:func:`paper_table` returns the numbers printed in the paper (Wu et al. 2026,
arXiv:2607.06507): Table 1 (Qwen2.5-7B-Instruct, EM/F1/average tokens on the full dev sets),
the ablation F1s, the retrieval-cap sweep and the GPT-4o-mini transfer F1. They are facts
quoted from the paper, kept here so the book can put them next to ours.

Runs are re-run and extended in place (a new policy, a larger evaluation split), so a run
folder may be missing, just started or partial while the tables are rebuilt. Every table here
says so (:func:`status_label`, :func:`run_status`): a partial run is labelled with how many
questions it answered, paired comparisons use only the questions both runs answered and give
that n, and a run that is not there gets a "not run yet" row rather than an exception or no
row at all.

:func:`stop_rule_table` turns the cross-validated stop-rule report of
``data_scripts/stop_rule.py`` (``results/diagnostics/<dataset>-<generator>-stop-rule.json``)
into one tidy row per (stop rule, λ); :func:`~dynakrag_lite.figures.stop_rule_sweeps_figure`
draws it.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from .diagnostics import row_diagnostics
from .folder import latest_rows, read_predictions
from .run import SUMMARY_KEYS

DEFAULT_ROOT = Path("results/experiments")
ID_COLUMNS = ("dataset", "generator", "run")
METRIC_COLUMNS = tuple(k for k in SUMMARY_KEYS if k not in ("dataset", "generator"))
# errors: error rows (questions whose method raised); complete: every requested question
# has a real row; n_expected: questions requested. None for summaries written before they
# were recorded. status: status_label of the run ("complete", "partial: 40 of 150", ...).
SUMMARY_COLUMNS = ID_COLUMNS + METRIC_COLUMNS + ("errors", "complete", "n_expected", "status",
                                                 "command", "path")

PAPER_CITATION = ("Wu et al. 2026, 'A Unified Framework for Learnable Evidence Control in "
                  "Multi-Hop RAG', arXiv:2607.06507")
DATASETS = ("hotpotqa", "2wikimultihopqa", "musique")


def _find_root(root: str | Path) -> Path:
    """``root`` as given; a relative root that does not exist is also tried from the parent
    folders of the working directory (a chapter runs from ``book/``)."""
    p = Path(root)
    if p.is_absolute() or p.exists():
        return p
    for parent in Path.cwd().resolve().parents:
        cand = parent / p
        if cand.exists():
            return cand
    return p


def load_summaries(root: str | Path = DEFAULT_ROOT) -> pd.DataFrame:
    """One row per ``<root>/<dataset>/<generator>/<run>/summary.json``.

    Columns: dataset, generator, run (from the folder names), the summary metrics (method, n,
    em, f1, support_recall, all_support_rate, docs_mean, tokens_mean, llm_calls_mean,
    retrieval_calls_mean, seconds_mean), ``errors``, ``complete``, ``n_expected`` and
    ``status`` (:func:`status_label`), the command that produced it (``run.command``) and the
    summary's path relative to ``root``. An empty DataFrame with these columns when nothing
    exists; unreadable summaries are skipped with a warning.
    """
    import warnings
    base = _find_root(root)
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


def _state(dataset: str, generator: str, run: str, root: str | Path
           ) -> tuple[list[dict], dict]:
    """(answered rows, status record) of one run folder; see :func:`run_status`."""
    folder = _find_root(root) / dataset / generator / run
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
    return _state(dataset, generator, run, root)[1]


def load_summary(dataset: str, generator: str, run: str,
                 root: str | Path = DEFAULT_ROOT) -> dict:
    """The full summary.json of one run (including its ``run`` block)."""
    path = _find_root(root) / dataset / generator / run / "summary.json"
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
    path = _find_root(root) / dataset / generator / run / "predictions.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"no predictions for {dataset}/{generator}/{run} under {root}")
    return latest_rows(read_predictions(path), errors=errors)


def load_diagnostics(dataset: str, generator: str, run: str,
                     root: str | Path = DEFAULT_ROOT) -> pd.DataFrame:
    """One row per question of a run: stop reason, vetoes, sufficiency verdicts, parse
    fallbacks and action counts (``n_<action>``), as recorded in each row or derived from its
    trace for older rows (see :mod:`dynakrag_lite.experiments.diagnostics`)."""
    recs = []
    for r in _latest(dataset, generator, run, root, errors=False):
        d = row_diagnostics(r)
        rec = {"id": r["id"], "stop_reason": d["stop_reason"], "vetoes": d["vetoes"]}
        rec.update({f"suff_{k}": v for k, v in d["sufficiency"].items()})
        rec.update({f"fallback_{k}": v for k, v in d["parse_fallbacks"].items()})
        rec.update({f"n_{k}": v for k, v in d["actions"].items()})
        recs.append(rec)
    return pd.DataFrame(recs).fillna(0)


# -- the paper's numbers ------------------------------------------------------------------
# Table 1, Qwen2.5-7B-Instruct: (EM, F1, average tokens) per dataset.
_TABLE1 = {
    "Fixed-K": ((.3958, .5177, 1892), (.3177, .3757, 3089), (.1518, .2553, 2918)),
    "IRCoT": ((.4339, .5617, 1724), (.3514, .4308, 2442), (.1862, .2889, 2110)),
    "S2G-RAG": ((.4425, .5710, 2807), (.3818, .4621, 3544), (.1936, .2999, 3887)),
    "CoRAG-s3": ((.4282, .5573, 2814), (.3490, .4273, 3676), (.1858, .2848, 3264)),
    "Adaptive-RAG": ((.3862, .5042, 1596), (.2976, .3557, 2180), (.1647, .2579, 2160)),
    "CRAG": ((.4181, .5445, 1720), (.3437, .4099, 2375), (.1676, .2740, 2480)),
    "Self-Ask+Search": ((.4043, .5273, 3302), (.3494, .4345, 4566), (.1974, .2998, 4762)),
    "DynaKRAG": ((.4732, .5998, 2373), (.4587, .5340, 3078), (.1986, .3061, 3082)),
}
# Our run name for the paper's methods we implement.
RUN_OF_METHOD = {"Fixed-K": "fixed_k", "IRCoT": "ircot", "Self-Ask+Search": "self_ask",
                 "DynaKRAG": "dynakrag"}
# Ablations (Qwen, F1).
_ABLATIONS = {
    "full": ("dynakrag", (.5998, .5340, .3061)),
    "no compression": ("dynakrag-no_compression", (.5826, .4963, .2978)),
    "no sufficiency check": ("dynakrag-no_sufficiency", (.5835, .4623, .2800)),
    "uniform-valid controller": ("uniform", (.5519, .4762, .2665)),
    "retrieval cap 1": ("dynakrag-cap1", (.4938, .4111, .1970)),
    "retrieval cap 2": ("dynakrag-cap2", (.5823, .5096, .2796)),
    "retrieval cap 3": ("dynakrag-cap3", (.5996, .5340, .2641)),
}
_TRANSFER_GPT4O_MINI_F1 = (.6218, .6391, .3977)


def paper_table(which: str = "main") -> pd.DataFrame:
    """The paper's reported numbers (source: :data:`PAPER_CITATION`), in long form.

    * ``"main"``: Table 1 with Qwen2.5-7B-Instruct; columns method, run (our run name or
      None for methods we do not implement), dataset, em, f1, tokens_mean, generator.
    * ``"ablations"``: F1 of the ablations and the retrieval-cap sweep; columns variant, run,
      dataset, f1, generator.
    * ``"transfer"``: DynaKRAG F1 with the Qwen-trained policy run unchanged on GPT-4o-mini,
      next to the Qwen F1; columns method, run, dataset, generator, f1, policy_generator.
    """
    gen = "Qwen2.5-7B-Instruct"
    if which == "main":
        rows = [{"method": m, "run": RUN_OF_METHOD.get(m), "dataset": d, "em": v[0], "f1": v[1],
                 "tokens_mean": float(v[2]), "generator": gen}
                for m, vals in _TABLE1.items() for d, v in zip(DATASETS, vals)]
    elif which == "ablations":
        rows = [{"variant": name, "run": run, "dataset": d, "f1": f, "generator": gen}
                for name, (run, vals) in _ABLATIONS.items() for d, f in zip(DATASETS, vals)]
    elif which == "transfer":
        rows = []
        for d, f_q, f_g in zip(DATASETS, _ABLATIONS["full"][1], _TRANSFER_GPT4O_MINI_F1):
            rows.append({"method": "DynaKRAG", "run": "dynakrag", "dataset": d,
                         "generator": gen, "f1": f_q, "policy_generator": gen})
            rows.append({"method": "DynaKRAG", "run": "dynakrag", "dataset": d,
                         "generator": "GPT-4o-mini", "f1": f_g, "policy_generator": gen})
    else:
        raise ValueError(f"unknown table {which!r}; choose main, ablations or transfer")
    df = pd.DataFrame(rows)
    df.attrs["source"] = PAPER_CITATION
    return df


def side_by_side(ours: pd.DataFrame, dataset: str, metrics=("em", "f1", "tokens_mean")
                 ) -> pd.DataFrame:
    """Our rows of ``dataset`` (one per generator and run) joined with the paper's Table 1 row
    of the same method (columns ``paper_<metric>``); runs the paper lacks get NaN there.
    ``status`` (when ``ours`` has it, as :func:`load_summaries` gives it) follows ``n``, so a
    partial run is read as one."""
    paper = paper_table("main")
    paper = paper[(paper.dataset == dataset) & paper.run.notna()]
    paper = paper.rename(columns={m: f"paper_{m}" for m in metrics})[
        ["run"] + [f"paper_{m}" for m in metrics]]
    ids = ["generator", "run", "n"] + (["status"] if "status" in ours.columns else [])
    mine = ours[ours.dataset == dataset][ids + list(metrics)]
    return mine.merge(paper, on="run", how="left").sort_values(["generator", "run"]) \
        .reset_index(drop=True)


# Policies trained with other settings than the main one, saved beside it as
# <dataset>-<generator><suffix>.joblib (data_scripts/main_experiment.py POLICY_VARIANTS).
POLICY_VARIANT_SUFFIXES = ("-gain_stop",)


def find_policies(dataset: str | None = None, root: str | Path = "results/policies",
                  variants: bool = False) -> list[Path]:
    """Saved policies ``<root>/<dataset>-<generator>.joblib`` (all datasets when None); the
    variants (:data:`POLICY_VARIANT_SUFFIXES`) only with ``variants=True``."""
    base = _find_root(root)
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
    from ..storage import sha256_file
    try:
        rec = load_summary(dataset, generator, run, root).get("policy")
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(rec, dict) or not rec.get("path"):
        return None
    saved = _find_root(root).parent / "policies" / Path(rec["path"]).name
    state = ("missing" if not saved.is_file() else
             "same" if sha256_file(saved) == rec.get("sha256") else "changed")
    return {**rec, "file": state}


# -- stop-rule reports (data_scripts/stop_rule.py) ------------------------------------------
STOP_RULE_COLUMNS = ("dataset", "generator", "rule", "lam", "veto_threshold", "f1", "sr",
                     "tokens", "early", "vetoes", "n_questions", "chosen")


def stop_rule_table(report: Mapping, dataset: str | None = None,
                    all_thresholds: bool = False) -> pd.DataFrame:
    """A stop-rule report (the JSON of ``data_scripts/stop_rule.py``, read with ``json``) as
    one tidy row per (stop rule, λ), at the veto threshold τ that rule's cross-validation chose
    (``all_thresholds=True``: every (λ, τ) of both grids). Columns
    :data:`STOP_RULE_COLUMNS`: the cross-validated answer F1, support recall ``sr``, mean
    tokens per question, ``early`` (the fraction of questions stopped before the step cap),
    mean ``vetoes``, ``n_questions`` (the held-out questions scored: those collected with
    answer calls) and ``chosen`` (the (λ, τ) the rule picked: one row per rule).

    ``dataset`` and ``generator`` come from the report's trajectories file,
    ``<dataset>-<generator>.npz`` (``dataset`` overrides; a dataset name has no hyphen).
    ``attrs`` keeps the report's ``questions`` (training questions), ``folds``, ``metric``
    and ``trajectories``. Pure: reads nothing but ``report``."""
    rules = report.get("rules")
    if not isinstance(rules, Mapping) or not rules:
        raise ValueError("not a stop-rule report: no 'rules' (data_scripts/stop_rule.py "
                         "writes one)")
    stem = Path(str(report.get("trajectories") or "")).stem
    if dataset is None:
        dataset = stem.split("-", 1)[0] or None
    generator = stem[len(dataset) + 1:] if dataset and stem.startswith(f"{dataset}-") else None
    if not generator and "-" in stem:
        generator = stem.split("-", 1)[1]
    out = []
    for rule, r in rules.items():
        lam, tau = float(r["lam"]), float(r["veto_threshold"])
        rows = [g for g in r["grid"]
                if all_thresholds or math.isclose(float(g["veto_threshold"]), tau)]
        chosen = [math.isclose(float(g["lam"]), lam) and
                  math.isclose(float(g["veto_threshold"]), tau) for g in rows]
        if sum(chosen) != 1:
            raise ValueError(f"rule {rule!r}: its chosen pair λ={lam:g}, τ={tau:g} is "
                             f"{'missing from' if not any(chosen) else 'repeated in'} its grid")
        for g, c in zip(rows, chosen):
            out.append({"dataset": dataset, "generator": generator, "rule": rule,
                        "lam": float(g["lam"]), "veto_threshold": float(g["veto_threshold"]),
                        **{k: float(g.get(k, math.nan)) for k in
                           ("f1", "sr", "tokens", "early", "vetoes")},
                        "n_questions": int(g.get("n_questions", 0)), "chosen": c})
    df = pd.DataFrame(out, columns=list(STOP_RULE_COLUMNS))
    order = {rule: i for i, rule in enumerate(rules)}
    df = df.sort_values(["rule", "veto_threshold", "lam"],
                        key=lambda c: c.map(order) if c.name == "rule" else c,
                        kind="stable").reset_index(drop=True)
    df.attrs.update({k: report[k] for k in ("questions", "folds", "metric", "trajectories")
                     if k in report})
    return df


def transfer_folder(generator: str) -> tuple[str, str] | None:
    """(answer generator, policy generator) of a transfer folder ``<A>-policy-<P>``; None for
    a generator's own folder."""
    answer, sep, policy = str(generator).partition("-policy-")
    return (answer, policy) if sep else None


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
RUN_ORDER = ("fixed_k", "fixed_k3", "fixed_k6", "ircot", "self_ask", "uniform", "dynakrag",
             "oracle")


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
    (:mod:`dynakrag_lite.experiments.comparison`; 10,000 resamples, fixed seed).

    Only the questions both runs answered are paired, and ``n`` counts them: a partial run is
    compared on what it has, and ``status`` (:func:`status_label` of the other run) says it
    is partial. A pair that cannot be made is still a row, with ``n`` 0, NaN numbers and the
    reason as its verdict: :data:`NOT_RUN` or :data:`STARTED` for the other run,
    ``"<base> not run yet"`` (or started) for the base, :data:`NO_COMMON` when they share no
    question. Only a damaged predictions file raises."""
    if runs is None:
        runs = [r for r in _run_names(dataset, generator, root) if r != base]
    base_run = _state(dataset, generator, base, root)
    out = [{"run": run, **rec} for run in runs
           for rec in _pair(base_run, _state(dataset, generator, run, root), metrics,
                            base, base)]
    cols = list(PAIRED_COLUMNS)
    return pd.DataFrame(out, columns=cols[:3] + [base] + cols[3:])


def _pair(a: tuple[list[dict], dict], b: tuple[list[dict], dict], metrics: Sequence[str],
          a_name: str, a_column: str) -> list[dict]:
    """Run ``a`` against run ``b``, both as :func:`_state` gives them, paired per question:
    one record per metric with n, the means (``a_column`` and ``other``), the difference
    a - b with its interval, p-value, wins, losses, verdict and ``status`` (of ``b``). A pair
    that cannot be made gives n 0, NaN numbers and the reason as the verdict (``a_name``
    prefixes the reason when ``a`` is the run that is missing)."""
    from .comparison import compare_runs, paired_rows
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
                          comparisons: Sequence[str] | None = None) -> pd.DataFrame:
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

    ``generator`` / ``comparisons``: only that transfer folder / those comparisons (the
    others are not paired at all, each pairing being a 10,000-resample bootstrap)."""
    folder = _find_root(root) / dataset
    # a transfer counts from its first predictions file on, so a just-started run says so
    transfers = sorted(p.name for p in (folder.iterdir() if folder.is_dir() else ())
                       if transfer_folder(p.name) and generator in (None, p.name)
                       and (p / "dynakrag" / "predictions.jsonl").exists())
    out = []
    for gen in transfers:
        answer, policy = transfer_folder(gen)
        moved = _state(dataset, gen, "dynakrag", root)
        for comparison, whose, run in TRANSFER_COMPARISONS:
            if comparisons is not None and comparison not in comparisons:
                continue
            other_gen = policy if whose == "policy" else answer
            ids = {"dataset": dataset, "generator": gen, "answer_generator": answer,
                   "policy_generator": policy, "comparison": comparison,
                   "other_generator": other_gen, "other_run": run}
            out += [{**ids, **rec, "transferred_status": moved[1]["status"]}
                    for rec in _pair(moved, _state(dataset, other_gen, run, root), metrics,
                                     "transferred dynakrag", "transferred")]
    return pd.DataFrame(out, columns=list(TRANSFER_PAIRED_COLUMNS))


def transfer_baselines(dataset: str, generator: str, root: str | Path = DEFAULT_ROOT,
                       metrics: Sequence[str] = ("f1", "em", "support_recall")
                       ) -> pd.DataFrame:
    """The rows of :func:`transfer_paired_table` that pair the transfer folder ``generator``
    (``<A>-policy-<P>``) with answer generator A's baselines (:data:`ANSWER_BASELINE`): the
    policy judged against no policy with the same reader. Empty for another folder."""
    return transfer_paired_table(dataset, root=root, metrics=metrics, generator=generator,
                                 comparisons=(ANSWER_BASELINE,))


def best_baseline(pairs: pd.DataFrame) -> pd.Series | None:
    """The F1 row of the best baseline among paired rows (:func:`paired_table` or
    :func:`transfer_paired_table` rows restricted to baselines): the highest mean F1 of the
    other run (``other``) among the runs paired on the most questions, so that a run begun on
    a handful of questions cannot win by luck. None when no baseline is paired yet."""
    f1 = pairs[(pairs.metric == "f1") & (pairs.n > 0)]
    if f1.empty:
        return None
    return f1[f1.n == f1.n.max()].sort_values("other", ascending=False).iloc[0]


# The paper's ablation table, in its order: the full method, the component ablations, the
# uniform-valid controller and the retrieval-cap sweep.
ABLATION_RUNS = tuple(run for run, _ in _ABLATIONS.values())
ABLATION_COLUMNS = ("variant", "run", "status", "n", "f1", "paper_f1", "em", "support_recall",
                    "tokens_mean", "llm_calls_mean", "retrieval_calls_mean")


def ablation_table(summaries: pd.DataFrame, dataset: str, generator: str,
                   runs: Sequence[str] = ABLATION_RUNS) -> pd.DataFrame:
    """One row per ablation run of ``dataset``/``generator`` in ``runs`` order, whether it
    was run or not (columns :data:`ABLATION_COLUMNS`): ``variant`` is the paper's name of the
    ablation, ``paper_f1`` its F1 in the paper (NaN for runs the paper lacks), ``status`` and
    the metrics come from ``summaries`` (:func:`load_summaries`). A run without a summary
    gets ``status`` :data:`NOT_RUN`, ``n`` 0 and NaN metrics: a missing ablation stays
    visible instead of dropping out of the table."""
    paper = paper_table("ablations")
    paper = paper[paper.dataset == dataset].set_index("run")
    mine = summaries[(summaries.dataset == dataset) & (summaries.generator == generator)]
    mine = mine.set_index("run")
    out = []
    for run in runs:
        rec = {"variant": paper.variant.get(run, run), "run": run,
               "paper_f1": float(paper.f1.get(run, math.nan))}
        if run in mine.index:
            r = mine.loc[run]
            status = r["status"] if "status" in mine.columns else status_label(
                r["n"], r.get("n_expected"), r.get("complete"))
            rec.update({k: r[k] for k in ABLATION_COLUMNS if k in r.index and k not in rec},
                       status=status)
        else:
            rec.update(status=NOT_RUN, n=0)
        out.append(rec)
    df = pd.DataFrame(out, columns=list(ABLATION_COLUMNS))
    df["n"] = df["n"].fillna(0).astype(int)
    return df


def _run_names(dataset: str, generator: str, root: str | Path) -> list[str]:
    """Run folders holding a predictions file, in :data:`RUN_ORDER` (then by name)."""
    folder = _find_root(root) / dataset / generator
    if not folder.exists():
        return []
    order = {r: i for i, r in enumerate(RUN_ORDER)}
    return sorted((p.name for p in folder.iterdir() if (p / "predictions.jsonl").exists()),
                  key=lambda r: (order.get(r, len(order)), r))


# -- breakdowns per question type and hop count ---------------------------------------------
# The groups of each benchmark in reading order: the datasets' own question types, and
# MuSiQue's hop shapes (2hop, 3hop1, 3hop2, 4hop1 ...) folded into their hop count, since the
# shape variants split 100 questions into groups too small to read.
QUESTION_GROUPS = {
    "hotpotqa": ("bridge", "comparison"),
    "2wikimultihopqa": ("compositional", "comparison", "bridge_comparison", "inference"),
    "musique": ("2-hop", "3-hop", "4-hop"),
}
# Rows without a type: some HotpotQA records came from a source that did not keep it (see
# ../shared/data/README.md); guessing it from the question would be a label we made up.
UNTYPED = "untyped"
MIN_GROUP_N = 10  # below this a group's mean or difference is reported but flagged
BREAKDOWN_COLUMNS = ("run", "group", "n", "em", "f1", "support_recall", "too_few", "n_paired",
                     "diff", "lo", "hi", "p_value", "verdict", "status")
_HOPS = re.compile(r"^(\d+)hop")


def question_group(row: Mapping, dataset: str) -> str:
    """The breakdown group of a predictions row: its ``type`` for HotpotQA and
    2WikiMultiHopQA, ``"<k>-hop"`` for MuSiQue (``"3hop2"`` -> ``"3-hop"``), :data:`UNTYPED`
    when the row has no type."""
    t = row.get("type")
    if t is None or str(t).strip() == "":
        return UNTYPED
    t = str(t).strip()
    m = _HOPS.match(t)
    if m and dataset == "musique":
        return f"{int(m.group(1))}-hop"
    return t


def _group_order(dataset: str, groups) -> list[str]:
    known = QUESTION_GROUPS.get(dataset, ())
    rank = {g: i for i, g in enumerate(known)}
    # known groups first, then others by name, untyped last
    return sorted(groups, key=lambda g: (g == UNTYPED, rank.get(g, len(rank)), g))


def _mean(rows: Sequence[Mapping], key: str) -> float:
    vals = [float(r[key]) for r in rows if r.get(key) is not None]
    return sum(vals) / len(vals) if vals else math.nan


def _folder_run(generator: str, name: str) -> tuple[str, str]:
    """(generator folder, run) of a run name: ``run`` of ``generator``'s folder, or
    ``<other generator>/<run>`` (a run folder's name has no slash, so this is unambiguous)."""
    other, sep, run = name.rpartition("/")
    return (other, run) if sep else (generator, name)


def breakdown_table(dataset: str, generator: str, runs: Sequence[str] | None = None,
                    root: str | Path = DEFAULT_ROOT, base: str = "dynakrag",
                    min_n: int = MIN_GROUP_N) -> pd.DataFrame:
    """Each run's scores per question group (:func:`question_group`), and ``base`` against
    every other run within each group.

    One row per (run, group): ``n`` questions the run answered in the group (error rows left
    out), mean ``em``, ``f1`` and ``support_recall``; for runs other than ``base`` (when
    ``base`` has answered questions) ``n_paired`` (questions of the group both runs answered: a
    partial run is compared on what it has), the F1 difference base - run ``diff``, its paired
    bootstrap 95 % interval ``lo``/``hi``, the sign-flip permutation ``p_value`` and the
    ``verdict`` (:func:`dynakrag_lite.experiments.comparison.compare_runs`). ``too_few`` flags rows whose
    ``n`` or ``n_paired`` is below ``min_n``: their numbers are printed, not read, and their
    verdict is ``"too few to read"``. ``status``: the run's :func:`status_label`.

    A run (or ``base``) named ``<other generator>/<run>`` is read from that generator's folder
    of ``dataset`` and paired per question across the two folders, as
    :func:`transfer_paired_table` pairs a transferred run with the answer generator's
    baselines. Runs default to every run folder, in table order (a folder with nothing
    answered yet has no group, so no row). A run named in ``runs`` that has answered nothing
    is one row, as a missing run in :func:`ablation_table`: group None, ``n`` 0, NaN numbers
    and its status (:data:`NOT_RUN` without a folder, :data:`STARTED`) as verdict. Only a
    damaged predictions file raises."""
    from .comparison import compare_runs, paired_rows
    named = runs is not None
    runs = list(_run_names(dataset, generator, root) if runs is None else runs)
    # base is compared against even when not listed; a base with no answers pairs nothing
    states = {r: _state(dataset, *_folder_run(generator, r), root)
              for r in dict.fromkeys([*runs, base])}
    by_group = {r: {} for r in states}
    for r, (rs, _) in states.items():
        for row in rs:
            by_group[r].setdefault(question_group(row, dataset), []).append(row)
    groups = _group_order(dataset, {g for d in by_group.values() for g in d})
    out = []
    for run in runs:
        status = states[run][1]["status"]
        if not by_group[run] and named:  # asked for by name: said so, not dropped
            out.append({"run": run, "group": None, "n": 0, "em": math.nan, "f1": math.nan,
                        "support_recall": math.nan, "too_few": True, "n_paired": None,
                        "diff": math.nan, "lo": math.nan, "hi": math.nan,
                        "p_value": math.nan, "verdict": status, "status": status})
            continue
        for g in groups:
            mine = by_group[run].get(g, [])
            if not mine:
                continue
            rec = {"run": run, "group": g, "n": len(mine), "em": _mean(mine, "em"),
                   "f1": _mean(mine, "f1"), "support_recall": _mean(mine, "support_recall"),
                   "too_few": len(mine) < min_n, "n_paired": None, "diff": math.nan,
                   "lo": math.nan, "hi": math.nan, "p_value": math.nan, "verdict": "",
                   "status": status}
            if run != base and by_group[base]:
                theirs = by_group[base].get(g, [])
                if paired_rows(theirs, mine):
                    d = compare_runs(theirs, mine, ("f1",))["f1"]
                    rec.update(n_paired=d.n, diff=d.diff, lo=d.lo, hi=d.hi,
                               p_value=d.p_value, verdict=d.verdict)
                else:  # no question of this group in both runs (a run just started)
                    rec["n_paired"] = 0
                if rec["n_paired"] < min_n:
                    rec.update(too_few=True, verdict="too few to read")
            out.append(rec)
    df = pd.DataFrame(out, columns=list(BREAKDOWN_COLUMNS))
    df["n_paired"] = df["n_paired"].astype("Int64")  # None for the base run's own rows
    return df
