"""Which stop target can a forest learn? A study along the saved uniform rollouts (issue 24):
no model call, only the answer F1 every prefix of a labelled question carries.

The continuation forest's AUC for "continuing raises the answer's F1" is near chance because
that event is rare (about 6 % of prefixes; ``diagnosis.stop_auc``). An AUC does not say what a
stop rule built on a forest would earn, so here every candidate is run as the rule itself:

* **The rule.** Along a question's path of prefixes (the states with documents, in step
  order), continue past prefix j while the forest's out-of-fold *continuation score* of j is
  above a threshold tau; answer at the first prefix where it is not (the last prefix always
  answers). Its outcome is that prefix's answer F1 and tokens (ledger + the answer call).
  Sweeping tau traces a curve from "always stop at the first prefix" to "always continue".
* **Targets** (regressed by the paper's forest on the prefix's state features; the score is
  the prediction, or minus it for ``f1_now``):

  - ``sr``: SR(end) - SR(now), the committed continuation model's proxy;
  - ``f1``: F1(end) - F1(now), the answer's utility over the remaining path (rare, see above);
  - ``f1_best``: max F1 over the later prefixes - F1(now): could continuing raise F1 at all
    (positive more often: any later prefix counts, not only the end);
  - ``f1_now``: F1(now), answer confidence without the answer: continue where the forest
    expects the current documents to answer badly.
* **Chance at the same cost.** A rule that continues at every prefix with probability c has
  an exact expected outcome per question; c is set so its mean tokens equal the learned
  rule's. A learned point is worth its forest only if it beats this *random stop* (paired per
  question, bootstrap over questions), and worth stopping only if it stays close to
  *always continue* (the path's end) at fewer tokens.
* **Pooling.** ``extra`` adds other files' labelled paths (other datasets, same reader) to
  every training fold; they are never scored.

The rule continues along the *uniform* path; a live controller continues along its own
choices, so this ranks targets, it does not predict an evaluation run's F1.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from dynakrag_lite.policy import make_forest
from dynakrag_lite.trajectories import PrefixSample, TrainingData

from dynakrag_lab.report.verdicts import interval_word
from dynakrag_lab.studies.diagnosis import RF, question_folds, question_paths

TARGETS: tuple[str, ...] = ("sr", "f1", "f1_best", "f1_now")
# The done-when's window for "the stop adapts": share of questions stopping before the end.
ADAPT_WINDOW = (0.2, 0.8)


def path_targets(path: Sequence[PrefixSample]) -> dict[str, np.ndarray]:
    """Each target's value at every prefix of one question's path (step order)."""
    f1 = np.array([p.f1_now for p in path], dtype=float)
    sr = np.array([p.sr_now for p in path], dtype=float)
    later = np.array([f1[j + 1:].max() if j + 1 < len(f1) else f1[j] for j in range(len(f1))])
    return {"sr": sr[-1] - sr, "f1": f1[-1] - f1, "f1_best": later - f1, "f1_now": f1}


def _sign(target: str) -> float:
    # the score is "how much continuing is worth": high expected F1 now means stop
    return -1.0 if target == "f1_now" else 1.0


def oof_scores(paths: dict[str, list[PrefixSample]], target: str, folds: int = 5,
               rf: dict | None = None, extra: Sequence[list[PrefixSample]] = ()
               ) -> dict[str, np.ndarray]:
    """Per question, the out-of-fold continuation score of every prefix of its path: a forest
    fitted to ``target`` on the other folds' prefixes (every prefix, the last included, as
    ``train_policy`` fits the continuation model) plus ``extra`` paths."""
    if target not in TARGETS:
        raise ValueError(f"unknown stop target {target!r}; one of {TARGETS}")
    rf = {**RF, **(rf or {})}
    pool_X = [p.features for path in extra for p in path]
    pool_y = [v for path in extra for v in path_targets(path)[target]]
    out: dict[str, np.ndarray] = {}
    for train_q, test_q in question_folds(list(paths), folds):
        X = np.stack([p.features for q in train_q for p in paths[q]] + pool_X)
        y = np.concatenate([path_targets(paths[q])[target] for q in train_q] + [pool_y])
        m = make_forest(rf["n_estimators"], rf["min_samples_leaf"], rf["seed"], rf["n_jobs"])
        m.fit(X, y)
        for q in test_q:
            out[q] = _sign(target) * m.predict(np.stack([p.features for p in paths[q]]))
    return out


def _outcome(path: Sequence[PrefixSample]) -> tuple[np.ndarray, np.ndarray]:
    """(answer F1, tokens) of stopping at each prefix."""
    f1 = np.array([p.f1_now for p in path], dtype=float)
    tok = np.array([p.tokens + (p.answer_tokens if np.isfinite(p.answer_tokens) else 0.0)
                    for p in path], dtype=float)
    return f1, tok


def rule_outcomes(paths: dict[str, list[PrefixSample]], scores: dict[str, np.ndarray],
                  tau: float) -> dict[str, np.ndarray]:
    """Per question (``paths`` order): F1, tokens, stopped before the end (0/1) and the stop
    prefix's index under "continue while score > tau"."""
    f1s, toks, early, at = [], [], [], []
    for q, path in paths.items():
        s = scores[q]
        j = next((i for i in range(len(path) - 1) if not s[i] > tau), len(path) - 1)
        f1, tok = _outcome(path)
        f1s.append(f1[j])
        toks.append(tok[j])
        early.append(float(j < len(path) - 1))
        at.append(j)
    return {"f1": np.array(f1s), "tokens": np.array(toks), "early": np.array(early),
            "index": np.array(at, dtype=float)}


def random_outcomes(paths: dict[str, list[PrefixSample]], c: float) -> dict[str, np.ndarray]:
    """Per question, the exact expectation of "continue at each prefix with probability c"."""
    return _random([_outcome(path) for path in paths.values()], c)


def _random(outcomes: Sequence[tuple[np.ndarray, np.ndarray]], c: float
            ) -> dict[str, np.ndarray]:
    f1s, toks, early = [], [], []
    for f1, tok in outcomes:
        m = len(f1)
        w = np.array([c ** j * (1 - c) for j in range(m - 1)] + [c ** (m - 1)])
        f1s.append(float(w @ f1))
        toks.append(float(w @ tok))
        early.append(1.0 - c ** (m - 1))
    return {"f1": np.array(f1s), "tokens": np.array(toks), "early": np.array(early)}


def random_at_tokens(paths: dict[str, list[PrefixSample]], tokens: float
                     ) -> tuple[float, dict[str, np.ndarray]]:
    """The random stop whose mean tokens equal ``tokens`` (bisection on c: the mean tokens
    grow with c), clipped to [0, 1]."""
    outcomes = [_outcome(path) for path in paths.values()]  # once, not per bisection step
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if _random(outcomes, mid)["tokens"].mean() < tokens:
            lo = mid
        else:
            hi = mid
    c = (lo + hi) / 2
    return c, _random(outcomes, c)


def paired_interval(a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 13
                    ) -> tuple[float, float, float]:
    """(mean of a - b, 95 % bootstrap interval over questions)."""
    d = np.asarray(a, float) - np.asarray(b, float)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n_boot, len(d)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return float(d.mean()), float(lo), float(hi)


def _summary(o: dict[str, np.ndarray]) -> dict[str, float]:
    return {"f1": float(o["f1"].mean()), "tokens": float(o["tokens"].mean()),
            "stop_early": float(o["early"].mean())}


def target_curve(paths: dict[str, list[PrefixSample]], scores: dict[str, np.ndarray],
                 n_points: int = 21) -> list[dict]:
    """The rule's outcome at thresholds spread over the quantiles of the decision prefixes'
    scores (every prefix but each path's last), from stopping first to always continuing."""
    dec = np.concatenate([scores[q][:-1] for q in paths if len(paths[q]) > 1])
    taus = [-np.inf] + sorted(set(np.quantile(dec, np.linspace(0, 1, n_points)).tolist()))
    out = []
    for tau in taus[::-1]:  # from "stop at once" (tau above every score) to "always continue"
        o = rule_outcomes(paths, scores, tau)
        out.append({"tau": float(tau), **_summary(o)})
    return out


def operating_point(paths: dict[str, list[PrefixSample]], scores: dict[str, np.ndarray],
                    curve: list[dict], window: tuple[float, float] = ADAPT_WINDOW,
                    n_boot: int = 2000) -> dict | None:
    """The curve's point with the highest F1 among those stopping early on a share of
    questions inside ``window`` (ties: fewer tokens), with paired intervals against always
    continuing (the path's end) and against the random stop at the same mean tokens. The
    point is picked on the same out-of-fold scores it is judged on: a mild optimism, the
    price of reporting one number per target besides the curve."""
    inside = [p for p in curve if window[0] <= p["stop_early"] <= window[1]]
    if not inside:
        return None
    best = max(inside, key=lambda p: (round(p["f1"], 6), -p["tokens"]))
    o = rule_outcomes(paths, scores, best["tau"])
    end = {"f1": np.array([_outcome(p)[0][-1] for p in paths.values()]),
           "tokens": np.array([_outcome(p)[1][-1] for p in paths.values()])}
    c, rnd = random_at_tokens(paths, float(o["tokens"].mean()))
    d_end = paired_interval(o["f1"], end["f1"], n_boot)
    d_rnd = paired_interval(o["f1"], rnd["f1"], n_boot)
    return {**best, "end_f1": float(end["f1"].mean()), "end_tokens": float(end["tokens"].mean()),
            "token_ratio": float(o["tokens"].mean() / end["tokens"].mean()),
            "minus_end": d_end[0], "minus_end_ci": [d_end[1], d_end[2]],
            "random_c": c, "random_f1": float(rnd["f1"].mean()),
            "minus_random": d_rnd[0], "minus_random_ci": [d_rnd[1], d_rnd[2]]}


def over_random(paths: dict[str, list[PrefixSample]], curve: list[dict],
                window: tuple[float, float] = ADAPT_WINDOW) -> float:
    """Mean F1 of the curve's points inside ``window`` minus the random stop's at the same
    mean tokens: the forest's ranking of questions, summed up in one number."""
    diffs = [p["f1"] - random_at_tokens(paths, p["tokens"])[1]["f1"].mean()
             for p in curve if window[0] <= p["stop_early"] <= window[1]]
    return float(np.mean(diffs)) if diffs else float("nan")


def study(data: TrainingData, folds: int = 5, targets: Sequence[str] = TARGETS,
          extra: Sequence[TrainingData] = (), rf: dict | None = None,
          n_boot: int = 2000) -> dict:
    """Every target's curve, operating point and gain over the random stop, on the questions
    of ``data`` whose every prefix has answer F1 (with and without ``extra`` pooled in)."""
    paths = question_paths(data, need_f1=True)
    pool = [ps for d in extra for ps in question_paths(d, need_f1=True).values()]
    if len(paths) < max(folds, 2):
        return {"n_questions": len(paths), "skipped": "too few questions with answer F1"}
    out: dict = {"n_questions": len(paths),
                 "n_prefixes": sum(len(p) for p in paths.values()),
                 "n_pooled_questions": len(pool),
                 "positive_rate": {t: float(np.mean([v > 1e-9 for ps in paths.values()
                                                     for v in path_targets(ps)[t][:-1]]))
                                   for t in targets if t != "f1_now"},
                 "random_curve": [{"c": float(c), **_summary(random_outcomes(paths, c))}
                                  for c in np.linspace(0, 1, 11)],
                 "targets": {}}
    for label, ext in (("own", ()), ("pooled", pool)) if pool else (("own", ()),):
        for t in targets:
            sc = oof_scores(paths, t, folds, rf, ext)
            curve = target_curve(paths, sc)
            out["targets"][f"{t}/{label}"] = {
                "curve": curve, "over_random": over_random(paths, curve),
                "operating_point": operating_point(paths, sc, curve, n_boot=n_boot)}
    return out


def verdict(r: dict) -> str:
    """One sentence read off :func:`study`'s numbers (stored or fresh): the best target by its
    gain over the random stop, its operating point's interval in the four words
    (:func:`~dynakrag_lab.report.verdicts.interval_word`), and which points meet the issue's
    stop criterion on their point estimates along this path; a skipped file says why."""
    if "targets" not in r:
        return r.get("skipped", "skipped")
    ts = {k: v for k, v in r["targets"].items() if v["over_random"] is not None
          and np.isfinite(v["over_random"])}
    if not ts:
        return "No target stops early on 20-80 % of questions at any threshold."
    k, best = max(ts.items(), key=lambda kv: kv[1]["over_random"])
    op = best["operating_point"]
    lo, hi = op["minus_random_ci"]
    meets = [n for n, v in r["targets"].items() if v["operating_point"] and
             v["operating_point"]["minus_end"] >= -0.01 and
             v["operating_point"]["token_ratio"] <= 0.7]
    return (f"Best target {k}: {best['over_random']:+.3f} F1 over a random stop at equal tokens "
            f"(mean over its 20-80 % points); at its operating point {op['minus_random']:+.3f} "
            f"[{lo:+.3f}, {hi:+.3f}] over random: {interval_word(lo, hi)}. Points whose mean F1 "
            "is at most .01 below always-continue's at <= 0.7x its tokens: "
            + (", ".join(meets) if meets else "none") + ".")
