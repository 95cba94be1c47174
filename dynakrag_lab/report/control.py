"""The control diagnosis as the diagnosis appendix reads it: the columns it shows and its
findings (from :func:`~.records.diagnosis_table`), the horizon labels in two sentences, and the
stop targets' best operating points. The study itself is :mod:`dynakrag_lab.studies.diagnosis`;
:mod:`.appendix` re-exports these for the book."""
from __future__ import annotations

from typing import Mapping

import pandas as pd

from .comparison import fmt_ci
from .names import join_words, label, short_names


# -- the offline diagnosis ------------------------------------------------------------------------
DIAGNOSIS_SHOWN = {"dataset": "dataset", "reader": "reader", "decisions": "decisions",
                   "probe chosen": "picks probe", "probe best": "probe strictly best",
                   "gain forest": "forest", "gain uniform": "uniform",
                   "gain retrieve_more": "retrieve_more", "gain w/o probe": "forest w/o probe",
                   "gain best": "best", "AUC f1": "stop AUC (F1)"}


def diagnosis_view(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`~.records.diagnosis_table` with the columns the appendix shows, renamed: the
    share of held-out decisions where the forest picks the probe and where the probe is
    strictly best, the support gain per decision of each chooser, the F1 stop AUC."""
    view = table[list(DIAGNOSIS_SHOWN)].rename(columns=DIAGNOSIS_SHOWN)
    view["dataset"] = view.dataset.map(label)
    view["reader"] = view.reader.map(short_names(view.reader))
    return view.round(3).reset_index(drop=True)


def diagnosis_findings(table: pd.DataFrame) -> str:
    """The diagnosis in three findings, each computed from :func:`~.records.diagnosis_table`:
    the probe wins the choice without adding support; without it the same forest's ranking
    is not the problem; the F1 stop target is near chance, and below it on some rows."""
    n = len(table)
    below = int((table["gain forest"] < table["gain uniform"]).sum())
    noprobe = int((table["gain w/o probe"] > table["gain uniform"]).sum())
    sr_better = int((table["AUC sr on F1"] > table["AUC f1"]).sum())
    worse = int((table["AUC f1"] < 0.5).sum())
    best = table["probe best"].max()
    return "\n".join([
        f"* The forest picks `sufficiency_check` at {table['probe chosen'].min():.0%} to "
        f"{table['probe chosen'].max():.0%} of the held-out decisions, though the probe is "
        + ("never strictly the best action" if best == 0 else
           f"strictly the best action at no more than {best:.0%} of them")
        + ": its label $1[SR(s) = 1]$ is a level and outbids the acquisitions' gains. Its picks "
        f"gain less support than a uniform pick in {below} of {n} rows.",
        f"* With the probe taken out of the choice, the same forest gains more support than "
        f"uniform in {noprobe} of {n} rows: the ranking of the acquisitions is not what keeps "
        "the controller from doing better than chance.",
        f"* The continuation forest trained on answer F1 predicts \"continuing raises F1\" at "
        f"an AUC of {table['AUC f1'].min():.2f} to {table['AUC f1'].max():.2f} ($0.5$ is "
        "chance" + (f"; below it, on {worse} of {n} rows, it is worse than chance: it ranks "
                    "the states where continuing helps below those where it does not"
                    if worse else "") + f"); trained on support recall it predicts that same "
        f"event better in {sr_better} of {n} rows."])


def horizon_markdown(table: pd.DataFrame, report: Mapping) -> str:
    """The horizon-label diagnosis (:func:`~.records.horizon_table` and its report) in two
    sentences: how much less the horizon forest picks the probe, and on how many datasets it
    (and its probe-free version) clears uniform and always-retrieve_more."""
    t = table.reset_index()
    hz = [r["horizon"] for r in report["results"].values()]
    k = t.dataset.nunique()
    clear = int((t[t.chooser == "horizon forest"].lo > 0).sum())
    clear_np = int((t[t.chooser == "horizon, no probe"].lo > 0).sum())
    vs_rm = sum(h["horizon_minus_retrieve_more"]["ci"][0] > 0 for h in hz)
    probe = max(h["choosers"]["horizon_forest"]["share_sufficiency_check"] for h in hz)
    onestep = min(h["choosers"]["onestep_forest"]["share_sufficiency_check"] for h in hz)
    r2 = [h["r2_returns"] for h in hz]
    return (f"Labels over the remaining horizon stop the forest from picking the probe "
            f"({probe:.0%} of decisions at most, against {onestep:.0%} or more one step at a "
            f"time), and the returns are predictable (held-out $R^2$ {min(r2):.2f} to "
            f"{max(r2):.2f}). Against uniform, the interval of the horizon forest's difference "
            f"lies above 0 on {clear} of {k} datasets ({clear_np} with the probe taken out of "
            f"its choice), and above always-`retrieve_more` on {vs_rm}: at the states uniform "
            "visits the acquisitions are close in value, and a few hundred training questions "
            "do not separate a good pick from a random one.")


# -- stop targets ---------------------------------------------------------------------------------
def best_stop_targets(targets: pd.DataFrame) -> pd.DataFrame:
    """Per dataset of :func:`~.records.stop_targets_table`, the target (and training) with the
    highest F1 over a random stop at equal tokens, with its operating point: the share
    stopping early, F1, tokens relative to always continuing, and the difference to the random
    stop with its 95 % interval."""
    rows = []
    for d, g in targets.groupby("dataset", sort=False):
        r = g.loc[g["over random"].idxmax()]
        rows.append({"dataset": label(d), "target": f"{r.target}/{r.training}",
                     "over random": round(float(r["over random"]), 3),
                     "stop early": f"{r['stop early']:.0%}", "F1": round(float(r.F1), 3),
                     "token ratio": round(float(r["token ratio"]), 2),
                     "minus random [95% CI]": fmt_ci(r["minus random"], r["random lo"],
                                                  r["random hi"])})
    return pd.DataFrame(rows)


def stop_targets_markdown(targets: pd.DataFrame, report: Mapping, reader: str) -> str:
    """How rare the event an F1 stop must predict is, and on how many datasets any target's
    operating point is better than the random stop (interval above 0)."""
    files = {k: r["stop_targets"] for k, r in report["results"].items()
             if k.endswith("/" + reader) and "targets" in r["stop_targets"]}
    rates = [f["positive_rate"]["f1"] for f in files.values()]
    clear = sorted({d for d, lo in zip(targets.dataset, targets["random lo"])
                    if lo is not None and lo > 0})
    n = targets.dataset.nunique()
    return (f"Along the uniform paths, continuing raises the answer's F1 at "
            f"{min(rates):.0%} to {max(rates):.0%} of the decision prefixes"
            if rates else "No answer-labelled question yet") + (
        f". Run as stop rules, the targets' operating points are better than a random stop "
        f"at equal tokens (interval above 0) on {len(clear)} of {n} datasets"
        + (f" ({join_words(label(d) for d in clear)})" if clear else "")
        + ", and each point is picked on the scores it is judged on, which flatters it.")
