"""The diagnosis appendix's readings (``book/98_appendix_diagnosis.ipynb``): short tables and
sentences computed from the committed runs and diagnostics, so that the appendix types no
result by hand and reads the same in Jupyter, in Colab and in the built book.

* :func:`oracle_markdown`: the oracle's margin over uniform-valid beside the controller's.
  The oracle picks actions with the gold support labels; it is a heuristic with privileged
  information, not an upper bound on F1, and the sentence says where a controller's margin
  exceeds it;
* :func:`stop_profile_view` / :func:`stop_markdown`: how the paper's controller ended its
  questions, per reader;
* :func:`table1_view`: our F1 next to the paper's Table 1, one short table;
* :func:`ablation_means`: the ablations that were run, paired;
* :func:`diagnosis_view` / :func:`diagnosis_findings`: the offline control diagnosis;
* :func:`horizon_markdown`, :func:`best_stop_targets`, :func:`stop_targets_markdown`;
* :func:`transfer_markdown`: the generator-transfer pairs that were made;
* :func:`probe_cost`: what the committed policy's cost model charges a sufficiency probe
  against a retrieval;
* :func:`next_commands`: the commands that would extend the grid to another reader.

Only reads; no model call.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pandas as pd

from dynakrag_lite.experiments.artifacts import EXPERIMENTS_DIR

from .comparison import fmt_ci
from .control import (best_stop_targets, diagnosis_findings, diagnosis_view, horizon_markdown,
                      stop_targets_markdown)
from .headline import pair_rows
from .names import DATASETS, LABELS, join_words, label, readers, short_names, transfer_folder
from .paper import paper_table
from .results import is_partial, run_status
from .transfer import pair_text, reader_limit_reading
from .verdicts import holm, pair_word

__all__ = ["LABELS", "TABLE1_RUNS", "ablation_means", "best_stop_targets",
           "diagnosis_findings", "diagnosis_view", "holm", "horizon_markdown",
           "next_commands", "oracle_markdown", "probe_cost", "stop_markdown",
           "stop_profile_view", "stop_targets_markdown", "table1_view", "transfer_markdown",
           "answer_stage_markdown",
           "tradeoff_figure", "cap_sweep_figure", "reader_limit_markdown"]


def headroom_table(root: str | Path = EXPERIMENTS_DIR, reader: str = "qwen2.5-coder-1.5b",
                   run: str = "dynakrag", other: str = "uniform", upper: str = "oracle"
                   ) -> pd.DataFrame:
    """Per dataset of ``reader`` with complete ``upper``, ``run`` and ``other`` runs: the F1
    difference ``upper - other`` (the oracle's headroom) with its paired interval, and
    ``run - other`` with its interval and half-width (the resolution of the comparison at
    this n). A partial run leaves its dataset out."""
    rows = []
    for d, g in readers(root):
        if g != reader:
            continue
        pairs = [pair_rows(d, g, name, other, root) for name in (upper, run)]
        if any(pt is None for pt in pairs) or any(
                is_partial(run_status(d, g, name, root)["status"]) for name in (upper, run, other)):
            continue
        u, r = (pt.loc["f1"] for pt in pairs)
        rows.append({"dataset": d, "n": int(r.n), "upper": float(u["diff"]),
                     "upper_lo": float(u.lo), "upper_hi": float(u.hi), "run": float(r["diff"]),
                     "run_lo": float(r.lo), "run_hi": float(r.hi),
                     "half_width": float(r.hi - r.lo) / 2})
    return pd.DataFrame(rows, columns=["dataset", "n", "upper", "upper_lo", "upper_hi", "run",
                                       "run_lo", "run_hi", "half_width"])


def oracle_markdown(headroom: pd.DataFrame, run: str = "dynakrag", other: str = "uniform",
                    upper: str = "oracle") -> str:
    """The oracle's F1 margin over ``other`` beside ``run``'s, per dataset (rows of
    :func:`headroom_table`), and where ``run``'s margin is the larger: there the
    oracle, which chooses with the gold support labels, is visibly not an upper bound."""
    if headroom.empty:
        return f"No dataset has complete `{upper}`, `{run}` and `{other}` runs yet."
    per = "; ".join(f"{label(r.dataset)} (n = {r.n}): `{upper}` "
                    f"{fmt_ci(r.upper, r.upper_lo, r.upper_hi)}, `{run}` "
                    f"{fmt_ci(r.run, r.run_lo, r.run_hi)}" for r in headroom.itertuples())
    above = headroom[headroom.run > headroom.upper]
    clear = int((headroom.upper_lo > 0).sum())
    return (f"F1 minus `{other}`'s, paired: {per}. The oracle's own margin leaves 0 on "
            f"{clear} of {len(headroom)} datasets, "
            + (f"and on {join_words(label(d) for d in above.dataset)} the controller's "
               f"margin is larger than the oracle's. "
               if len(above) else "and nowhere is the controller's margin larger than the "
               "oracle's. ")
            + "The oracle picks each step by the gold support labels, which maximises support, "
              "not the answer's F1: it is a heuristic with privileged information, not an "
              "upper bound on what control could reach.")


# -- how the controller stopped -------------------------------------------------------------------
def stop_profile_view(profiles: pd.DataFrame) -> pd.DataFrame:
    """:func:`~.headline.stop_profiles` as a short table: per dataset and reader, questions,
    how many stopped by the controller's own choice after one retrieval, how many ran to the
    step cap, how many read exactly Fixed-K(3)'s documents, and the mean retrieval calls and
    documents."""
    short = short_names(profiles.reader)
    return pd.DataFrame({
        "dataset": profiles.dataset.map(label), "reader": profiles.reader.map(short),
        "n": profiles.n, "stopped after 1 retrieval": profiles.after_one_retrieval,
        "ran to step cap": profiles.at_step_cap,
        "Fixed-K(3)'s documents": profiles.same_docs_as_fixed_k3,
        "retrieval calls": profiles.retrieval_calls.round(2),
        "documents": profiles.docs.round(1)}).reset_index(drop=True)


def stop_markdown(profiles: pd.DataFrame) -> str:
    """Per reader, summed over its datasets: the share of questions the controller stopped
    after one retrieval reading exactly Fixed-K(3)'s documents, and the share it ran to the
    step cap; then what each pattern makes the comparison with one-shot retrieval."""
    parts = []
    for reader, g in profiles.groupby("reader", sort=False):
        n = int(g.n.sum())
        same, cap = int(g.same_docs_as_fixed_k3.sum()), int(g.at_step_cap.sum())
        parts.append(f"with `{reader}` the controller read exactly Fixed-K(3)'s documents on "
                     f"{same} of {n} questions ({same / n:.0%}) and ran to the step cap on "
                     f"{cap} ({cap / n:.0%})")
    return ("Summed over the datasets, " + "; ".join(parts) + ". Where a controller reads "
            "Fixed-K(3)'s documents, it can differ from Fixed-K(3) only through compression; "
            "where it runs to the cap, it is compared with one-shot retrieval at a larger "
            "budget, and the control that isolates its choices is uniform-valid, random valid "
            "actions under the same cap.")


# -- our runs beside Table 1 ----------------------------------------------------------------------
TABLE1_RUNS = ("fixed_k", "fixed_k3", "fixed_k6", "ircot", "self_ask", "uniform", "dynakrag",
               "dynakrag-cont", "oracle")


def table1_view(summaries: pd.DataFrame, runs: Sequence[str] = TABLE1_RUNS,
                datasets: Sequence[str] = DATASETS) -> pd.DataFrame:
    """F1 per run (rows) and dataset x source (columns: the paper's Table 1, then each of our
    readers; transfer folders are left out), "-" where a run does not exist; our partial runs
    are marked with "*". Rows with no number anywhere are dropped."""
    paper = paper_table("main")
    summaries = summaries[[transfer_folder(g) is None for g in summaries.generator]]
    short = short_names(summaries.generator)
    cols: dict[str, list[str]] = {}
    for d in datasets:
        p = paper[(paper.dataset == d) & paper.run.notna()].set_index("run").f1
        cols[f"{label(d)} paper"] = [f"{p[r]:.3f}" if r in p.index else "-" for r in runs]
        for g in sorted(summaries.generator[summaries.dataset == d].unique()):
            mine = summaries[(summaries.dataset == d) & (summaries.generator == g)]
            mine = mine.set_index("run")
            cols[f"{label(d)} {short[g]}"] = [
                f"{mine.f1[r]:.3f}" + ("*" if is_partial(str(mine.status[r])) else "")
                if r in mine.index and mine.n[r] > 0 else "-" for r in runs]
    view = pd.DataFrame(cols, index=pd.Index(list(runs), name="run"))
    return view[(view != "-").any(axis=1)]


# One marker per method (colour is the dataset), so no point needs a text label to overlap.
MARKERS = {"fixed_k": "s", "fixed_k3": "s", "fixed_k6": "D", "ircot": "^", "self_ask": "v",
           "uniform": "X", "dynakrag": "*", "dynakrag-cont": "P", "oracle": "h", "S2G-RAG": "<",
           "CoRAG-s3": ">", "Adaptive-RAG": "p", "CRAG": "d"}


def _size(short: str) -> float:
    """'1.5b' -> 1.5 (0 when the name carries no size)."""
    try:
        return float(short.lower().rstrip("b"))
    except ValueError:
        return 0.0


def tradeoff_figure(paper: pd.DataFrame, ours: pd.DataFrame):
    """F1 against tokens per question (log scale), the paper's Table 1 (left) beside our runs
    (right; transfer folders left out): colour is the dataset, the marker the method (legend
    under each panel), and on the right a filled marker is the larger reader, an open one the
    smaller; partial runs are listed in the legend."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter
    fig = Figure(figsize=(11, 5.4))
    axes = fig.subplots(1, 2)
    colors = dict(zip(DATASETS, ["tab:blue", "tab:orange", "tab:green"]))
    ours = ours[[transfer_folder(g) is None for g in ours.generator]]
    short = short_names(ours.generator)
    big = max(short, key=lambda g: _size(short[g]), default=None)
    paper = paper.assign(key=paper.run.where(paper.run.notna(), paper.method))
    for ax, df, title in ((axes[0], paper.assign(name=paper.method, generator=big),
                           "Paper, Table 1 (Qwen2.5-7B-Instruct)"),
                          (axes[1], ours.assign(key=ours.run, name=ours.run), "Ours (results/)")):
        names = {}
        for r in df.itertuples():
            c = colors.get(r.dataset, "tab:gray")
            ax.scatter(r.tokens_mean, r.f1, marker=MARKERS.get(r.key, "o"), s=55,
                       facecolors=c if r.generator == big else "none", edgecolors=c)
            partial = is_partial(str(getattr(r, "status", "")))
            names.setdefault(r.key, str(r.name) + (" (partial)" * partial))
        handles = [Line2D([], [], ls="", marker=MARKERS.get(k, "o"), color="dimgray", label=v)
                   for k, v in names.items()]
        handles += [Line2D([], [], ls="", marker="o", color=c, label=label(d))
                    for d, c in colors.items()]
        if ax is axes[1]:
            handles += [Line2D([], [], ls="", marker="o", color="dimgray", label=short[g],
                               markerfacecolor="dimgray" if g == big else "none")
                        for g in sorted(set(ours.generator), key=short.get)]
        ax.set(xlabel="tokens per question", ylabel="F1", title=title, xscale="log")
        lo, hi = ax.get_xlim()  # plain tick labels: log-scale minor labels run into each other
        ax.set_xticks([t for t in (300, 500, 1000, 2000, 3000, 5000) if lo <= t <= hi])
        ax.set_xticklabels([f"{t:,}" for t in ax.get_xticks()])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(handles=handles, fontsize=7, ncol=4, loc="upper center",
                  bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.tight_layout()
    return fig


# -- ablations ------------------------------------------------------------------------------------
def ablation_means(summaries: pd.DataFrame, reader: str,
                   runs: Sequence[str] = ("dynakrag", "dynakrag-no_compression",
                                          "dynakrag-no_sufficiency", "uniform"),
                   datasets: Sequence[str] = DATASETS) -> pd.DataFrame:
    """The component ablations' mean F1, the paper's (7B reader) beside ``reader``'s, one row
    per variant; a dataset whose runs do not exist with ``reader`` is left out."""
    paper = paper_table("ablations")
    mine = summaries[summaries.generator == reader]
    out = {}
    for d in datasets:
        have = mine[(mine.dataset == d) & mine.run.isin(runs) & (mine.n > 0)].set_index("run")
        if len(have) < 2:
            continue
        p = paper[paper.dataset == d].set_index("run")
        out[f"{label(d)} paper"] = [p.f1.get(r, math.nan) for r in runs]
        out[f"{label(d)} ours"] = [have.f1.get(r, math.nan) for r in runs]
    variants = paper.drop_duplicates("run").set_index("run").variant
    return pd.DataFrame(out, index=pd.Index([variants.get(r, r) for r in runs],
                                            name="variant")).round(3)


def cap_sweep_figure(summaries: pd.DataFrame):
    """Left: F1 against the retrieval cap, the paper's (solid, one line per dataset) and ours
    (dashed, one line per dataset and reader with cap runs; partial ones say so). Right: the
    paper's component ablations."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, 3.8))
    axes = fig.subplots(1, 2)
    paper = paper_table("ablations")
    is_cap = paper.run.str.startswith("dynakrag-cap")
    for d, g in paper[is_cap].groupby("dataset", sort=False):
        axes[0].plot(g.run.str[-1].astype(int), g.f1, marker="o", label=f"paper: {label(d)}")
    mine = summaries[summaries.run.str.startswith("dynakrag-cap") & (summaries.n > 0)]
    short = short_names(summaries.generator)
    for (d, g_), g in mine.groupby(["dataset", "generator"], sort=False):
        g = g.sort_values("run")
        partial = " (partial)" if any(is_partial(str(s)) for s in g.status) else ""
        axes[0].plot(g.run.str[-1].astype(int), g.f1, marker="s", ls="--",
                     label=f"ours: {label(d)} {short[g_]}{partial}")
    axes[0].set(xticks=[1, 2, 3], xlabel="retrieval cap", ylabel="F1",
                title="Retrieval-cap sweep")
    axes[0].legend(fontsize=6)
    variants = paper[~is_cap]
    wide = variants.pivot(index="variant", columns="dataset", values="f1").reindex(
        variants.variant.unique())
    wide.rename(columns=label).plot.barh(ax=axes[1])
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    axes[1].set(xlabel="F1 (paper)", title="Component ablations, paper")
    fig.tight_layout()
    return fig


# -- generator transfer ---------------------------------------------------------------------------
def transfer_markdown(pairs: pd.DataFrame) -> str:
    """One bullet per transfer folder (F1 rows of
    :func:`~.results.transfer_paired_table` that were made): the transferred run against the
    same policy with its native generator and against the answer generator's own policy."""
    f1 = pairs[(pairs.metric == "f1") & (pairs.n > 0)]
    if f1.empty:
        return "* No transferred run has been paired yet."
    short = short_names([*f1.answer_generator, *f1.policy_generator])
    out = []
    for (d, gen), g in f1.groupby(["dataset", "generator"], sort=False):
        a, p = short[g.answer_generator.iloc[0]], short[g.policy_generator.iloc[0]]
        parts = []
        for r in g.itertuples():
            if r.other_run != "dynakrag":
                continue
            whose = "its native reader" if r.other_generator == r.policy_generator else \
                "the reader's own policy"
            parts.append(f"against {whose} ({short.get(r.other_generator, r.other_generator)}/"
                         f"dynakrag) {pair_word(r.verdict)}, "
                         f"{fmt_ci(r.diff, r.lo, r.hi)}")
        out.append(f"* {label(d)}, the {a} reader with the {p} policy (n = {int(g.n.max())}): "
                   + "; ".join(parts) + ".")
    return "\n".join(out)


def reader_limit_markdown(pairs: pd.DataFrame, small: str, big: str) -> str:
    """Per dataset, the reverse transfer (``small`` answering with ``big``'s policy) read for
    what limits F1 (:func:`~.transfer.reader_limit_reading`), with the support-recall pairs it
    rests on; ``pairs`` holds the F1 and support-recall rows of
    :func:`~.results.transfer_paired_table`. A dataset without that folder is left out."""
    folder = f"{small}-policy-{big}"
    out = []
    for d, on in pairs[pairs.generator == folder].groupby("dataset", sort=False):
        def pick(metric: str, gen: str) -> dict:
            return pair_text(on[(on.metric == metric) & (on.other_generator == gen)
                                & (on.other_run == "dynakrag")])
        f1_native, f1_own = pick("f1", big), pick("f1", small)
        sr_native, sr_own = pick("support_recall", big), pick("support_recall", small)
        out.append(f"* {label(d)}: {reader_limit_reading(f1_native, f1_own, sr_native, sr_own)}"
                   f" (support recall against the policy's native run: {sr_native['result']}; "
                   f"against the reader's own policy: {sr_own['result']}).")
    return "\n".join(out) or "* No reverse transfer has been run yet."


# -- the answer stage -----------------------------------------------------------------------------
def answer_stage_markdown(report: Mapping) -> str:
    """One bullet per read-once root and run of an answer-stage report
    (``results/diagnostics/answer-stage/*.json``): the rule's F1 and its share answered from
    the documents, and its F1 minus the same run always from the snippets and always from the
    documents, with intervals."""
    if not report or not report.get("checks"):
        return "* The rule has not been read anywhere yet."
    where = {"experiments": "evaluation split", "check-set": "check set"}
    out = []
    for chk in report["checks"]:
        name = where.get(str(chk["root"]).rstrip("/").rsplit("/", 1)[-1], chk["root"])
        parts = [f"minus always {mode} {fmt_ci(a['f1']['diff'], a['f1']['lo'], a['f1']['hi'])} "
                 f"({pair_word(a['f1']['verdict'])})"
                 for mode in ("snippets", "documents")
                 for a in chk["against"] if a["other"] == f"{chk['run']} ({mode})"]
        out.append(f"* {name}, `{chk['run']}` (n = {chk['n']}, {chk['share_full']:.0%} "
                   f"answered from the documents): F1 {chk['f1']:.3f}; "
                   + "; ".join(parts) + ".")
    return "\n".join(out)


# -- what the reproduction did not find -----------------------------------------------------------
# -- cost of a probe ------------------------------------------------------------------------------
def probe_cost(cost_model, n_docs: int = 6) -> dict[str, float]:
    """What ``cost_model`` (a policy's :class:`~dynakrag_lite.policy.CostModel`) charges a
    ``sufficiency_check`` on a state of ``n_docs`` documents, and a retrieval action."""
    a0, b = cost_model.coef.get("sufficiency_check", (math.nan, math.nan))
    return {"probe": max(0.0, a0 + b * n_docs), "retrieval": float(cost_model.retrieval_tokens),
            "n_docs": n_docs}


# -- what to run next -----------------------------------------------------------------------------
def next_commands(records: Mapping[str, Mapping], runs: Iterable[str], reader: str,
                  train_sizes: Mapping[str, int] | None = None,
                  transfer_to: str = "openai:gpt-4o-mini@https://api.openai.com/v1"
                  ) -> list[str]:
    """The shell lines that rerun the grid ``runs`` with ``reader`` on the committed splits:
    one ``main_experiment.py`` line per dataset of ``records`` (each a
    :func:`~.records.run_record`: its ``n_eval`` and, unless ``train_sizes`` gives one, its
    ``n_train``), then the paper's transfer on HotpotQA and the reports."""
    runs = ",".join(runs)
    lines = [f'READER="{reader}"']
    for d, rec in records.items():
        n_train = (train_sizes or {}).get(d, rec["n_train"])
        lines.append(f"python data_scripts/main_experiment.py --dataset {d} --generator "
                     f"\"$READER\" --data-dir ../shared/data --n-eval {rec['n_eval']} "
                     f"--train-limit {n_train} --eval-limit {rec['n_eval']} --runs {runs}")
    if "hotpotqa" in records:
        lines += ["# the paper's transfer: the same policy, another reader",
                  f"python data_scripts/main_experiment.py --dataset hotpotqa --generator "
                  f"{transfer_to} --policy-generator \"$READER\" --data-dir ../shared/data "
                  f"--n-eval {records['hotpotqa']['n_eval']} --eval-limit "
                  f"{records['hotpotqa']['n_eval']} --runs dynakrag"]
    lines += ["# then the reports and the appendix that read them",
              "python -m dynakrag_lab.readme && "
              "python -m dynakrag_lab.report.pareto && "
              "python data_scripts/execute_chapters.py 98"]
    return lines
