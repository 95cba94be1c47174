"""Where does learned control lose its signal? An offline diagnosis from saved trajectories
(issue 24, part 1): no model call, only the labels the uniform-valid rollouts recorded.

Everything is cross-validated with folds grouped by question (GroupKFold): a state is judged
only by forests that never saw its question. Forests are the paper's (300 trees, min leaf 8,
seed 13), one job each.

* **Action choice** (:func:`choice_metrics`). A state is the group of samples sharing
  (qid, step); its options are the valid actions other than stop_answer (the stop decision is
  diagnosed apart). Each option's *realized* SR gain is its Eq. 1 label for the four
  acquisition actions and 0 for sufficiency_check (it adds no document; its label
  1[SR(s) = 1] is a level, not a gain). States with a single option are no choice and are
  left out. A chooser is scored by the gain of its pick against the best option (oracle) and
  against uniform's expectation (mean gain over the options); ties count as agreement.
* **Stop** (:func:`stop_auc`, :func:`stop_at_k`): out-of-fold AUC of the continuation forest
  (trained as ``policy.train_policy`` trains it) for "continuing raises F1 / SR", and F1 and
  tokens when stopping after k acquisitions *along the saved uniform rollouts*.
* **Features** (:func:`permutation_importances`): out-of-fold permutation importance of the
  value forest on the held-out acquisition samples, flagged when a feature cannot tell the
  states of one question (or of the whole file) apart.
* **Data size**: the value forest's regret trained on 25/50/100/all questions of each fold.
* **Horizon labels**: in :mod:`.horizon`.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from sklearn.metrics import r2_score

from dynakrag_lite.features import FEATURE_NAMES, STATE_FEATURE_NAMES
from dynakrag_lite.policy import CostModel, Policy, make_forest
from dynakrag_lite.state import RETRIEVAL_ACTIONS
from dynakrag_lite.training.tuning import GAIN_LAMBDA_GRID, LAMBDA_GRID, replay_decisions
from dynakrag_lite.trajectories import TrainingData

# Not options of the action choice: stop is diagnosed apart, compression is terminal.
NOT_CHOICES = ("stop_answer", "compress_answer_evidence")
# Both stop rules' lambda grids: among non-stop actions the rule does not matter, lambda does.
CHOICE_LAMBDAS: tuple[float, ...] = tuple(sorted(set(LAMBDA_GRID) | set(GAIN_LAMBDA_GRID)))
RF = {"n_estimators": 300, "min_samples_leaf": 8, "seed": 13, "n_jobs": 1}
TIE = 1e-9  # SR gains are multiples of 1/|gold|; anything closer is the same gain


class ChoiceState:
    """One held-out decision: its options, their realized SR gains, predicted values, costs."""
    __slots__ = ("qid", "step", "actions", "gains", "values", "costs")

    def __init__(self, qid: str, step: int, actions: Sequence[str], gains, values=None,
                 costs=None):
        self.qid, self.step, self.actions = qid, int(step), tuple(actions)
        self.gains = np.asarray(gains, dtype=np.float64)
        n = len(self.actions)
        self.values = np.full(n, np.nan) if values is None else np.asarray(values, float)
        self.costs = np.zeros(n) if costs is None else np.asarray(costs, float)


def realized_gain(action: str, target: float) -> float:
    """SR gained by taking ``action``: its label for an acquisition, 0 for anything else."""
    return float(target) if action in RETRIEVAL_ACTIONS else 0.0


def choice_states(decisions: list[dict]) -> list[ChoiceState]:
    """States with at least two options, from ``tuning.replay_decisions`` output (values and
    costs of the replayed policy; its ``targets`` are the recorded labels)."""
    out = []
    for d in decisions:
        acts = [a for a in d["valid"] if a not in NOT_CHOICES]
        if len(acts) < 2:
            continue
        out.append(ChoiceState(d["qid"], d["step"], acts,
                               [realized_gain(a, d["targets"][a]) for a in acts],
                               [d["values"][a] for a in acts], [d["costs"][a] for a in acts]))
    return out


# -- choosers: state -> one score per option; the first maximum is picked (as policy.select)
Chooser = Callable[[ChoiceState], np.ndarray]


def forest_chooser(lam: float = 0.0, acquisitions_only: bool = False) -> Chooser:
    """argmax v(s, a) - lam c(s, a); ``acquisitions_only`` never picks sufficiency_check (what
    the forest would do if that action's level-valued label did not compete with gains)."""
    def choose(s: ChoiceState) -> np.ndarray:
        sc = s.values - lam * s.costs
        if acquisitions_only:
            sc = np.where([a in RETRIEVAL_ACTIONS for a in s.actions], sc, -np.inf)
        return sc
    return choose


def constant_chooser(action: str = "retrieve_more") -> Chooser:
    """Always ``action`` when it is an option, else the first option (action order)."""
    return lambda s: np.array([float(a == action) for a in s.actions])


def oracle_chooser(s: ChoiceState) -> np.ndarray:
    return s.gains


def choice_metrics(states: Sequence[ChoiceState], chooser: Chooser) -> dict:
    """Mean realized gain of the chooser's pick, of the best option and of a uniform pick;
    regret = best - chosen; top-1 agreement (ties agree); the same on the *decisive* states
    (options not all tied); and per action: share of states where it is an option, chosen,
    best (ties included: shares can sum above 1), strictly best, and its mean gain there."""
    if not states:
        return {"n_states": 0}
    chosen, best, unif, decisive, agree, neg = [], [], [], [], [], []
    per: dict[str, dict[str, float]] = {}
    for s in states:
        sc = chooser(s)
        i = int(np.argmax(sc))
        neg.append(float(sc[i]) < 0)
        g, top = s.gains, float(s.gains.max())
        chosen.append(float(g[i]))
        best.append(top)
        unif.append(float(g.mean()))
        decisive.append(top - float(g.min()) > TIE)
        agree.append(float(g[i]) >= top - TIE)
        n_top = int(np.sum(g >= top - TIE))
        for j, a in enumerate(s.actions):
            r = per.setdefault(a, {"valid": 0, "chosen": 0, "best": 0, "strictly_best": 0,
                                   "gain_sum": 0.0})
            r["valid"] += 1
            r["chosen"] += int(j == i)
            r["best"] += int(g[j] >= top - TIE)
            r["strictly_best"] += int(g[j] >= top - TIE and n_top == 1)
            r["gain_sum"] += float(g[j])
    c, b, u = np.array(chosen), np.array(best), np.array(unif)
    dm, ag = np.array(decisive), np.array(agree)
    n = len(states)
    out = {"n_states": n, "n_questions": len({s.qid for s in states}),
           "gain_chosen": float(c.mean()), "gain_best": float(b.mean()),
           "gain_uniform": float(u.mean()), "regret": float((b - c).mean()),
           "regret_uniform": float((b - u).mean()), "agreement": float(ag.mean()),
           "share_decisive": float(dm.mean()),
           # the pick scores below 0: under the "gain" stop rule (stop scores -lam c(stop) = 0)
           # the live controller would stop there instead (meaningful for forest choosers)
           "pick_score_negative": float(np.mean(neg)),
           "regret_decisive": float((b - c)[dm].mean()) if dm.any() else float("nan"),
           "agreement_decisive": float(ag[dm].mean()) if dm.any() else float("nan"),
           "actions": {a: {"valid": r["valid"] / n, "chosen": r["chosen"] / n,
                           "best": r["best"] / n, "strictly_best": r["strictly_best"] / n,
                           "mean_gain": r["gain_sum"] / r["valid"]}
                       for a, r in per.items()}}
    return out


# -- cross-validation ----------------------------------------------------------------------
def fit_value_policy(train: TrainingData, rf: dict | None = None) -> Policy:
    """The value forest and cost model of ``policy.train_policy`` (no continuation model: the
    action choice does not consult it), wrapped so ``replay_decisions`` can replay it."""
    rf = {**RF, **(rf or {})}
    X, y, _ = train.matrix()
    value = make_forest(rf["n_estimators"], rf["min_samples_leaf"], rf["seed"], rf["n_jobs"])
    return Policy(value.fit(X, y), None, CostModel().fit(train))


def question_folds(qids: Sequence[str], folds: int) -> list[tuple[list[str], list[str]]]:
    """GroupKFold over questions: (training qids, held-out qids) per fold."""
    from sklearn.model_selection import GroupKFold
    q = np.array(list(dict.fromkeys(qids)), dtype=object)
    k = min(folds, len(q))
    if k < 2:
        raise ValueError("cross-validation needs at least 2 questions")
    return [(q[tr].tolist(), q[te].tolist())
            for tr, te in GroupKFold(n_splits=k).split(q, groups=q)]


def diagnose_choice(data: TrainingData, folds: int = 5, lams: Sequence[float] = CHOICE_LAMBDAS,
                    sizes: Sequence[int] = (25, 50, 100), n_repeats: int = 5,
                    rf: dict | None = None, seed: int = 13) -> dict:
    """Action choice (per lambda, the constant and acquisitions-only rules), the data-size
    curve and the value forest's permutation importances, all out of fold."""
    from sklearn.inspection import permutation_importance
    held_states: list[ChoiceState] = []
    by_size: dict[str, list[ChoiceState]] = {}
    imps, acq_y, acq_pred = [], [], []
    rng = np.random.default_rng(seed)
    for train_q, test_q in question_folds(data.questions, folds):
        held = data.subset(test_q)
        pol = fit_value_policy(data.subset(train_q), rf)
        states = choice_states(replay_decisions(pol, held, lam=0.0, veto_threshold=np.inf))
        held_states += states
        by_size.setdefault("all", []).extend(states)
        # Smaller training sets: nested random subsets of this fold's training questions.
        order = rng.permutation(len(train_q))
        for n in sizes:
            if n < len(train_q):
                sub = fit_value_policy(data.subset([train_q[i] for i in order[:n]]), rf)
                by_size.setdefault(str(n), []).extend(choice_states(
                    replay_decisions(sub, held, lam=0.0, veto_threshold=np.inf)))
        acq = [s for s in held.samples if s.action in RETRIEVAL_ACTIONS]
        if len(acq) >= 2:
            Xh = np.stack([s.features for s in acq])
            yh = np.array([s.target for s in acq])
            acq_y.append(yh)
            acq_pred.append(pol.value_model.predict(Xh))
            if n_repeats > 0:
                r = permutation_importance(pol.value_model, Xh, yh, n_repeats=n_repeats,
                                           random_state=seed, scoring="r2", n_jobs=1)
                imps.append(r.importances)
    out = {
        "lambdas": {f"{lam:g}": choice_metrics(held_states, forest_chooser(lam))
                    for lam in lams},
        "forest_acquisitions_only": choice_metrics(held_states,
                                                   forest_chooser(0.0, acquisitions_only=True)),
        "retrieve_more": choice_metrics(held_states, constant_chooser("retrieve_more")),
        "oracle": choice_metrics(held_states, oracle_chooser),
        # with and without sufficiency_check: does more data fix the ranking, the label, both?
        "data_size": {k: {**{m: choice_metrics(v, forest_chooser(0.0))[m]
                             for m in ("n_states", "gain_chosen", "regret", "agreement")},
                          **{f"{m}_acquisitions_only": choice_metrics(
                              v, forest_chooser(0.0, acquisitions_only=True))[m]
                             for m in ("regret", "agreement")}}
                      for k, v in by_size.items()},
        "value_r2_acquisitions": float(r2_score(np.concatenate(acq_y),
                                                np.concatenate(acq_pred))) if acq_y else None,
    }
    out["data_size"] = dict(sorted(out["data_size"].items(),
                                   key=lambda kv: float("inf") if kv[0] == "all" else int(kv[0])))
    if imps:
        allimp = np.concatenate(imps, axis=1)  # features x (folds * repeats)
        const = feature_constancy(data)
        order = np.argsort(-allimp.mean(axis=1))
        out["importance"] = [{"feature": FEATURE_NAMES[i], "mean": float(allimp[i].mean()),
                              "std": float(allimp[i].std()), "constant": const[FEATURE_NAMES[i]]}
                             for i in order]
        out["constant_in_dataset"] = [f for f, c in const.items() if c == "dataset"]
        out["constant_per_question"] = [f for f, c in const.items() if c == "question"]
    return out


def feature_constancy(data: TrainingData) -> dict[str, str | None]:
    """Per feature of phi, over every sample of the file: "dataset" (one value in the whole
    file), "question" (varies only between questions, so it cannot rank one question's
    states or actions) or None."""
    if not data.samples:
        return {f: None for f in FEATURE_NAMES}
    X = np.stack([s.features for s in data.samples])
    q = np.array([s.qid for s in data.samples], dtype=object)
    within = np.zeros(X.shape[1])
    for qid in np.unique(q):
        Xi = X[q == qid]
        within = np.maximum(within, Xi.max(axis=0) - Xi.min(axis=0))
    span = X.max(axis=0) - X.min(axis=0)
    return {f: ("dataset" if span[i] == 0 else "question" if within[i] == 0 else None)
            for i, f in enumerate(FEATURE_NAMES)}


# -- stop ----------------------------------------------------------------------------------
def _acquisitions(p) -> int:
    """Acquisition actions taken to reach a prefix (its count_* state features)."""
    idx = [STATE_FEATURE_NAMES.index(f"count_{a}") for a in RETRIEVAL_ACTIONS]
    return int(round(float(np.sum(p.features[idx]))))


def question_paths(data: TrainingData, need_f1: bool) -> dict[str, list]:
    """Each question's prefixes in path order (only questions whose every prefix has F1 when
    ``need_f1``)."""
    by: dict[str, list] = {}
    for p in data.prefixes:
        by.setdefault(p.qid, []).append(p)
    return {q: sorted(ps, key=lambda p: p.step) for q, ps in by.items()
            if not need_f1 or all(np.isfinite(p.f1_now) for p in ps)}


def oof_continuation(data: TrainingData, kind: str, folds: int = 5,
                     rf: dict | None = None) -> dict[tuple[str, int], float]:
    """Out-of-fold predictions of the continuation forest for target ``kind`` ("f1" or "sr"),
    trained as ``train_policy`` trains it (every prefix with a finite target, the rollout's
    last one included), with folds over the questions that have that target."""
    rf = {**RF, **(rf or {})}
    paths = question_paths(data, need_f1=kind == "f1")
    out: dict[tuple[str, int], float] = {}
    for train_q, test_q in question_folds(list(paths), folds):
        tr = [p for q in train_q for p in paths[q]]
        m = make_forest(rf["n_estimators"], rf["min_samples_leaf"], rf["seed"], rf["n_jobs"])
        m.fit(np.stack([p.features for p in tr]), np.array([p.target(kind) for p in tr]))
        te = [p for q in test_q for p in paths[q]]
        for p, v in zip(te, m.predict(np.stack([p.features for p in te]))):
            out[(p.qid, p.step)] = float(v)
    return out


def _auc(y: np.ndarray, score: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score
    return float(roc_auc_score(y, score)) if 0 < y.sum() < len(y) else float("nan")


def stop_auc(data: TrainingData, folds: int = 5, rf: dict | None = None) -> dict:
    """How well the continuation forest predicts that continuing pays: AUC for
    1[F1(end) > F1(now)] (forest on the f1 target, F1 questions only), for 1[SR(end) > SR(now)]
    (forest on the sr target, every question) and the sr forest's AUC for the F1 event. The
    rollout's last prefix is left out of the scoring: its target is 0 by construction and no
    stop decision is made there (stop is the only valid action)."""
    preds = {"f1": oof_continuation(data, "f1", folds, rf),
             "sr": oof_continuation(data, "sr", folds, rf)}
    out: dict[str, dict] = {}
    for name, kind, event in (("f1", "f1", "f1"), ("sr", "sr", "sr"),
                              ("sr_model_f1_event", "sr", "f1")):
        paths = question_paths(data, need_f1=event == "f1").values()
        ps = [p for path in paths for p in path[:-1]]
        y = np.array([p.target(event) > TIE for p in ps], dtype=float)
        s = np.array([preds[kind][(p.qid, p.step)] for p in ps])
        out[name] = {"auc": _auc(y, s), "n_prefixes": len(ps),
                     "positive_rate": float(y.mean()) if len(y) else float("nan"),
                     "n_questions": len({p.qid for p in ps})}
    return out


def stop_at_k(data: TrainingData, ks: Sequence[int] = (1, 2, 3, 4)) -> dict:
    """Answer F1, SR and tokens (ledger + the answer call) when stopping right after the k-th
    acquisition of the saved *uniform* rollout (the first prefix with k acquisitions; a path
    with fewer stops at its end, counted in ``reached``); plus "end" (the path's end) and
    "best" (the prefix with the highest F1 on each path: a perfect stop along this path)."""
    paths = question_paths(data, need_f1=True)
    rows: dict[str, list] = {}
    for path in paths.values():
        for k in ks:
            at = [p for p in path if _acquisitions(p) >= k]
            rows.setdefault(str(k), []).append((at[0] if at else path[-1], bool(at)))
        rows.setdefault("end", []).append((path[-1], True))
        rows.setdefault("best", []).append((max(path, key=lambda p: p.f1_now), True))
    return {k: {"f1": float(np.mean([p.f1_now for p, _ in v])),
                "sr": float(np.mean([p.sr_now for p, _ in v])),
                "tokens": float(np.mean([p.tokens + (p.answer_tokens if np.isfinite(
                    p.answer_tokens) else 0.0) for p, _ in v])),
                "reached": float(np.mean([r for _, r in v])), "n_questions": len(v)}
            for k, v in rows.items()}


def diagnose(data: TrainingData, folds: int = 5, lams: Sequence[float] = CHOICE_LAMBDAS,
             sizes: Sequence[int] = (25, 50, 100), n_repeats: int = 5,
             rf: dict | None = None) -> dict:
    """Every number of the diagnosis for one dataset x reader (:func:`verdict` reads them)."""
    out = {"n_questions": len(data.questions),
           "choice": diagnose_choice(data, folds, lams, sizes, n_repeats, rf),
           "stop": {"auc": stop_auc(data, folds, rf), "at_k": stop_at_k(data)}}
    return out


def verdict(r: dict) -> list[str]:
    """Sentences read off :func:`diagnose`'s numbers (stored or fresh), the last one naming
    where the signal is lost. The choosers' gains have no interval here: the sentences give
    their differences, and where the signal is lost counts a gain as higher when it is more than
    0.01 SR per decision above the other."""
    c, st = r["choice"], r["stop"]
    f, rm, orc = c["lambdas"]["0"], c["retrieve_more"], c["oracle"]
    acq, ds = c["forest_acquisitions_only"], c["data_size"]
    above = lambda x, y: x > y + 0.01  # noqa: E731
    out, lost = [], []
    out.append(
        f"Choice (lambda 0): the forest's pick gains {f['gain_chosen']:.3f} SR per decision, "
        f"uniform {f['gain_uniform']:.3f}, always-retrieve_more {rm['gain_chosen']:.3f}, best "
        f"{orc['gain_best']:.3f} (regret {f['regret']:.3f}, uniform's "
        f"{f['regret_uniform']:.3f}): {f['gain_chosen'] - f['gain_uniform']:+.3f} against "
        f"chance, {f['gain_chosen'] - rm['gain_chosen']:+.3f} against the constant rule (point "
        "estimates, no interval).")
    lam, g = max(((k, v["gain_chosen"]) for k, v in c["lambdas"].items()), key=lambda kv: kv[1])
    suff = {k: v["actions"].get("sufficiency_check", {}).get("chosen", 0.0)
            for k, v in c["lambdas"].items()}
    neg = c["lambdas"][lam]["pick_score_negative"]
    out.append(f"The best lambda of the grid ({lam}) gives the forest a gain of {g:.3f}, with "
               f"sufficiency_check chosen at {suff[lam]:.0%} of decisions (lambda 0: "
               f"{suff['0']:.0%})" + (" by pricing that action out" if suff[lam] < suff["0"]
                                      - 0.2 else "") + f"; but the pick's score v - lambda c "
               f"is negative at {neg:.0%} of decisions, where the 'gain' stop rule would stop "
               "instead.")
    sc = f["actions"].get("sufficiency_check")
    if sc:
        out.append(f"sufficiency_check is chosen at {sc['chosen']:.0%} of decisions, strictly "
                   f"best at {sc['strictly_best']:.0%} (best alongside others only where no "
                   f"acquisition adds support: {sc['best']:.0%}); its label 1[SR=1] is a level that "
                   "competes with gains.")
        if sc["chosen"] > 0.25 and above(acq["gain_chosen"], f["gain_chosen"]):
            lost.append(f"labels (sufficiency_check's level label is picked at "
                        f"{sc['chosen']:.0%} of decisions)")
    rank_ok = above(acq["gain_chosen"], rm["gain_chosen"])
    out.append(f"Without sufficiency_check the same forest gains {acq['gain_chosen']:.3f} "
               f"(regret {acq['regret']:.3f}, agreement {acq['agreement']:.2f} vs "
               f"retrieve_more's {rm['agreement']:.2f}), " + ("more" if rank_ok else "not more")
               + " than .01 SR above the constant rule (point estimates).")
    if c.get("importance"):
        top = c["importance"][:3]
        per_q = sum(t["constant"] == "question" for t in c["importance"][:10])
        out.append(f"Value forest R2 on held-out acquisitions {c['value_r2_acquisitions']:.2f}"
                   "; top features " + ", ".join(f"{t['feature']} ({t['mean']:.3f})"
                                                 for t in top)
                   + f"; {per_q} of the top 10 are constant within a question.")
    if not rank_ok:
        lost.append("model/features (no ranking of the acquisitions beyond retrieve_more)")
    small = min((k for k in ds if k != "all"), key=int, default=None)
    if small is not None:
        d0, d1 = ds[small]["regret_acquisitions_only"], ds["all"]["regret_acquisitions_only"]
        helps = d0 - d1 > 0.01
        out.append(f"Data size (without sufficiency_check): regret {d0:.3f} with {small} "
                   f"training questions per fold, {d1:.3f} with all ("
                   + ("more data helps" if helps else "flat: more of the same data would "
                      "not help") + ").")
        if helps and not rank_ok:
            lost.append("data size (the curve still falls)")
    head = orc["gain_best"] - rm["gain_chosen"]
    out.append(f"Action set: the best option gains {orc['gain_best']:.3f} against "
               f"retrieve_more's {rm['gain_chosen']:.3f} (headroom {head:.3f}); all options "
               f"gain the same at {1 - f['share_decisive']:.0%} of decisions (the one-step labels "
               "say nothing there about which action to take).")
    if head <= 0.02:
        lost.append("the action set (little to gain over retrieve_more)")
    a, a_sr = st["auc"]["f1"]["auc"], st["auc"].get("sr_model_f1_event", {}).get("auc")
    k = st["at_k"]
    out.append(f"Stop: continuation AUC for 'continuing raises F1' {a:.2f}"
               + (" (below chance)" if a < 0.45 else " (near chance)" if not a > 0.6 else "")
               + f" at a positive rate of {st['auc']['f1']['positive_rate']:.0%}"
               + (f"; the sr-target forest, trained on every question, predicts the same event "
                  f"better (AUC {a_sr:.2f}): the f1 labels are too few or too noisy"
                  if a_sr is not None and a_sr > max(a + 0.05, 0.6) else "") + "; along the "
               f"uniform path F1 {k['1']['f1']:.3f} after 1 acquisition, {k['end']['f1']:.3f} "
               f"at the end, {k['best']['f1']:.3f} with a perfect per-question stop.")
    if not a > 0.6:
        n_f1 = st["auc"]["f1"].get("n_questions")
        lost.append(f"stop labels and data (the f1 target on {n_f1} questions is learned worse "
                    "than the sr proxy)" if a_sr is not None and a_sr > 0.6 else
                    "stop features (the continuation forest cannot tell when continuing pays)")
    out.append("Signal lost in: " + ("; ".join(lost) if lost else "no single place") + ".")
    return out
