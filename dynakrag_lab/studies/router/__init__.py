"""A question-level router, Adaptive-RAG style (Jeong et al. 2024; issue 35, item 2): per
question, answer after the first retrieval (*one-shot*) or let the continuation controller walk
(*multi-step*), decided from what is known after that first retrieval. No model call: training
labels are the saved answer F1s, the evaluation reading uses the committed prediction rows.

* **Training questions.** The questions of ``results/trajectories/<dataset>-<reader>.npz`` whose
  every prefix has the reader's answer F1 (the file's own, plus the ``.answer-f1.jsonl`` labels
  merged by ``merge_answer_labels``; ``diagnosis.question_paths``). One-shot = the first prefix
  (the state after the first ``retrieve_more``: three documents); multi-step = the path's *end*
  (the seeded uniform-valid walk's last prefix; the continuation controller's own depth cannot
  be replayed on these paths, it walks other actions). Tokens: ledger + the answer call.
* **Label.** ``helps`` = F1(end) > F1(first): multi-step strictly better. A tie goes to one-shot,
  the cheaper strategy (Adaptive-RAG's "simplest strategy that answers").
* **Features** (:data:`ROUTER_FEATURES`), only those computable *identically* from a training
  prefix and from an evaluation prediction row: the question's shape
  (``features.question_shape``: length, content words, capitalized words, comparison cues,
  "of", possessives, wh-word) and the first three documents' retrieval scores, rounded to the 4
  decimals a prediction row stores. The npz keeps max, mean and min of the three scores; the
  middle one is 3 mean - max - min. Left out: the lexical overlap features (a prediction row
  holds compressed snippets, not the documents), ``rank_gap_1_3``/``rank_next_score``/
  ``frontier`` (the ranking past the kept documents is not in a row), and what is constant
  after one retrieval (n_titles, steps, tokens so far, counts).
* **Model and threshold.** Logistic regression (standardized) or a random forest (300 trees,
  min leaf 8) for P(helps); route multi-step when P > tau. (model, tau) is chosen by the mean
  routed F1 over out-of-fold predictions (GroupKFold over questions, 5 folds), within
  :data:`F1_TIE` of the best the fewest tokens. Because that choice looks at the same folds, the
  CV estimate reported against the baselines is *nested*: each outer fold's (model, tau) is
  chosen on its own training questions only.
* **Read once.** The chosen model, refitted on every training question, routes each evaluation
  question from its one-shot row (``dynakrag-cont-stop1``: the question and the first
  acquisition's documents with their scores); its F1 and tokens are those of the chosen run's
  row (``dynakrag-cont`` for multi-step), paired by question id.

The training label and the evaluation outcome differ in two ways the report states: multi-step
is the uniform walk in training and the learned controller's walk in evaluation, and the
training F1s are the reader's answers on the documents while the evaluation runs answer from
the compressor's snippets.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from dynakrag_lite.features import STATE_FEATURE_NAMES, question_shape
from dynakrag_lite.trajectories import PrefixSample, TrainingData
from dynakrag_lite.training.files import load_training_data_bytes
from dynakrag_lab.report.answer_labels import merge_answer_labels

from dynakrag_lab.report.comparison import compare_runs, paired_difference, paired_rows
from dynakrag_lab.report.results import read_run
from dynakrag_lab.report.names import MULTI_STEP_RUN, ONE_SHOT_RUN
from dynakrag_lab.studies.diagnosis import question_folds, question_paths
from dynakrag_lab.studies.router.report import ci, reading, token_diff

__all__ = ["QUESTION_FEATURES", "SCORE_FEATURES", "ROUTER_FEATURES", "MODELS", "TAUS",
           "ONE_SHOT_RUN", "MULTI_STEP_RUN", "BASELINE_RUNS", "RouterQuestion",
           "score_features", "prefix_scores", "training_features", "evaluation_features",
           "load_training", "training_questions", "make_model", "oof_probabilities",
           "route", "choose", "cross_validate", "against_constants", "fit_router",
           "route_evaluation", "random_rows", "evaluation_report", "pooled_report",
           "score_recovery", "feature_aucs", "feature_drift", "ci", "token_diff", "reading"]

QUESTION_FEATURES: tuple[str, ...] = tuple(question_shape("x"))
SCORE_FEATURES: tuple[str, ...] = ("score_1", "score_2", "score_3", "score_mean", "gap_1_2",
                                   "gap_1_3")
ROUTER_FEATURES: tuple[str, ...] = QUESTION_FEATURES + SCORE_FEATURES
FIRST_DOCS = 3  # the first retrieve_more adds per_action = 3 documents (every run here)
SCORE_DECIMALS = 4  # prediction rows store round(score, 4) (experiments/run.py)
MODELS: tuple[str, ...] = ("logreg", "forest")
TAUS: tuple[float, ...] = tuple(round(0.05 * i, 2) for i in range(1, 20))  # 0.05 .. 0.95
F1_TIE = 0.001  # selection: F1 this close to the best is a tie, broken by fewer tokens
TIE = 1e-9  # F1 differences below this are equal F1s
SEED = 13
BASELINE_RUNS: tuple[str, ...] = (MULTI_STEP_RUN, ONE_SHOT_RUN, "uniform", "fixed_k6")
_COL = {n: i for i, n in enumerate(STATE_FEATURE_NAMES)}


# -- features ----------------------------------------------------------------------------------
def score_features(scores: Sequence[float]) -> dict[str, float]:
    """The first retrieval's three scores, each rounded to :data:`SCORE_DECIMALS` (what a
    prediction row keeps), sorted high to low, with their mean and gaps. Both sides call this
    on their own three scores, so equal scores give bit-equal features."""
    s = sorted((round(float(x), SCORE_DECIMALS) for x in scores), reverse=True)
    if len(s) != FIRST_DOCS:
        raise ValueError(f"the first retrieval has {FIRST_DOCS} documents, got {len(s)} scores")
    return {"score_1": s[0], "score_2": s[1], "score_3": s[2],
            "score_mean": (s[0] + s[1] + s[2]) / 3, "gap_1_2": s[0] - s[1],
            "gap_1_3": s[0] - s[2]}


def prefix_scores(p: PrefixSample) -> tuple[float, float, float]:
    """The three retrieval scores of a first prefix, recovered from its state features: max,
    3 * mean - max - min, min (exact up to float rounding; the npz stores no per-document
    score)."""
    f = p.features
    n = int(round(float(f[_COL["n_docs"]])))
    if n != FIRST_DOCS:
        raise ValueError(f"question {p.qid}: its first prefix holds {n} documents, not "
                         f"{FIRST_DOCS}")
    hi, mean, lo = (float(f[_COL[k]]) for k in ("score_max", "score_mean", "score_min"))
    return hi, 3.0 * mean - hi - lo, lo


def _vector(shape: Mapping[str, float], scores: Mapping[str, float]) -> np.ndarray:
    f = {**{k: float(shape[k]) for k in QUESTION_FEATURES}, **scores}
    return np.array([f[k] for k in ROUTER_FEATURES], dtype=np.float64)


def training_features(p: PrefixSample) -> np.ndarray:
    """Router features of a training question from its first prefix (question-shape columns as
    stored, scores via :func:`prefix_scores`)."""
    return _vector({k: p.features[_COL[k]] for k in QUESTION_FEATURES},
                   score_features(prefix_scores(p)))


def evaluation_features(row: Mapping) -> np.ndarray:
    """Router features of an evaluation question from its one-shot prediction row: the question
    text through ``question_shape`` (as ``state_features`` computes it) and the stored scores
    of the first acquisition's documents (the row's first three)."""
    docs = list(row["docs"])[:FIRST_DOCS]
    if len(docs) != FIRST_DOCS or any(d.get("source") not in (None, "retrieve_more")
                                      for d in docs):
        raise ValueError(f"question {row.get('id')}: its first {FIRST_DOCS} documents are not "
                         "one retrieve_more's")
    return _vector(question_shape(row["question"]), score_features([d["score"] for d in docs]))


# -- training questions and labels -------------------------------------------------------------
@dataclass(frozen=True)
class RouterQuestion:
    """One question: router features and both strategies' F1 and tokens."""
    qid: str
    x: np.ndarray
    f1_one: float
    f1_multi: float
    tokens_one: float
    tokens_multi: float

    @property
    def gain(self) -> float:
        """What multi-step adds to the answer F1 (negative: it hurts)."""
        return self.f1_multi - self.f1_one

    @property
    def helps(self) -> bool:
        return self.gain > TIE


def load_training(npz: str | Path, labels: str | Path | None = None
                  ) -> tuple[TrainingData, dict]:
    """The trajectories file with its answer labels merged (``<name>.answer-f1.jsonl`` beside
    it by default; checked against the file's sha256), and the merge's counts."""
    npz = Path(npz)
    raw = npz.read_bytes()
    data = load_training_data_bytes(raw, npz)
    labels = Path(labels) if labels else npz.with_name(f"{npz.stem}.answer-f1.jsonl")
    if not labels.exists():
        return data, {"file": None}
    return merge_answer_labels(data, labels, hashlib.sha256(raw).hexdigest())


def _tokens(p: PrefixSample) -> float:
    return float(p.tokens) + (float(p.answer_tokens) if math.isfinite(p.answer_tokens) else 0.0)


def training_questions(data: TrainingData) -> list[RouterQuestion]:
    """Every question whose whole path has answer F1: features from its first prefix, one-shot
    = that prefix, multi-step = the path's end (a one-prefix path: both the same)."""
    out = []
    for qid, path in question_paths(data, need_f1=True).items():
        first, end = path[0], path[-1]
        if int(round(float(first.features[_COL["retrieval_calls"]]))) != 1:
            raise ValueError(f"question {qid}: its first prefix is not after one retrieval")
        out.append(RouterQuestion(qid, training_features(first), float(first.f1_now),
                                  float(end.f1_now), _tokens(first), _tokens(end)))
    return out


# -- model, cross-validation, choice -----------------------------------------------------------
def make_model(kind: str, seed: int = SEED):
    """An unfitted classifier: "logreg" (standardized, L2, C = 1) or "forest" (300 trees, min
    leaf 8, one job)."""
    if kind == "logreg":
        return make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=5000))
    if kind == "forest":
        return RandomForestClassifier(n_estimators=300, min_samples_leaf=8, random_state=seed,
                                      n_jobs=1)
    raise ValueError(f"unknown router model {kind!r}; one of {MODELS}")


class _Constant:
    """A training set with one class: predict its rate (sklearn refuses to fit one class)."""

    def __init__(self, rate: float):
        self.rate = rate

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return np.tile([1.0 - self.rate, self.rate], (len(X), 1))


def _fit(kind: str, X: np.ndarray, y: np.ndarray, seed: int = SEED):
    if len(np.unique(y)) < 2:
        return _Constant(float(y.mean()) if len(y) else 0.0)
    return make_model(kind, seed).fit(X, y)


def _arrays(qs: Sequence[RouterQuestion]) -> tuple[np.ndarray, np.ndarray]:
    return np.stack([q.x for q in qs]), np.array([q.helps for q in qs], dtype=int)


def _index(qs: Sequence[RouterQuestion]) -> dict[str, int]:
    # folds are made over distinct ids: a repeated one would be scored once and cross folds
    idx = {q.qid: i for i, q in enumerate(qs)}
    if len(idx) != len(qs):
        raise ValueError("a question is listed twice; one row per question")
    return idx


def oof_probabilities(qs: Sequence[RouterQuestion], kind: str, folds: int = 5,
                      seed: int = SEED) -> np.ndarray:
    """Out-of-fold P(helps) per question (``qs`` order): folds grouped by question id."""
    idx = _index(qs)
    X, y = _arrays(qs)
    out = np.full(len(qs), np.nan)
    for train_q, test_q in question_folds([q.qid for q in qs], folds):
        tr, te = [idx[q] for q in train_q], [idx[q] for q in test_q]
        out[te] = _fit(kind, X[tr], y[tr], seed).predict_proba(X[te])[:, 1]
    return out


def route(qs: Sequence[RouterQuestion], p: np.ndarray, tau: float) -> dict[str, np.ndarray]:
    """Per question: routed F1 and tokens, and whether it went multi-step (P > tau)."""
    multi = np.asarray(p, dtype=float) > tau
    f1 = np.where(multi, [q.f1_multi for q in qs], [q.f1_one for q in qs])
    tok = np.where(multi, [q.tokens_multi for q in qs], [q.tokens_one for q in qs])
    return {"f1": f1.astype(float), "tokens": tok.astype(float), "multi": multi}


def choose(qs: Sequence[RouterQuestion], probs: Mapping[str, np.ndarray],
           taus: Sequence[float] = TAUS) -> tuple[dict, list[dict]]:
    """(the chosen {"model", "tau", "f1", "tokens", "multi_rate"}, the whole grid): the highest
    mean routed F1, among those within :data:`F1_TIE` of it the fewest mean tokens."""
    grid = []
    for kind, p in probs.items():
        for tau in taus:
            r = route(qs, p, tau)
            grid.append({"model": kind, "tau": float(tau), "f1": float(r["f1"].mean()),
                         "tokens": float(r["tokens"].mean()),
                         "multi_rate": float(r["multi"].mean())})
    top = max(g["f1"] for g in grid)
    best = min((g for g in grid if g["f1"] >= top - F1_TIE), key=lambda g: g["tokens"])
    return best, grid


def _auc(y: np.ndarray, score: np.ndarray) -> float:
    return float(roc_auc_score(y, score)) if 0 < y.sum() < len(y) else float("nan")


def cross_validate(qs: Sequence[RouterQuestion], folds: int = 5, models: Sequence[str] = MODELS,
                   taus: Sequence[float] = TAUS, seed: int = SEED) -> dict:
    """Out-of-fold AUC per model; the (model, tau) chosen on all folds (``choice``, its value
    optimistic: chosen on the folds it is read on); and the *nested* estimate: each outer
    fold's held-out questions routed by the (model, tau) chosen on that fold's training
    questions alone (``nested``: per question ``f1``, ``tokens``, ``multi``, ``p``)."""
    probs = {k: oof_probabilities(qs, k, folds, seed) for k in models}
    _, y = _arrays(qs)
    choice, grid = choose(qs, probs, taus)
    idx = _index(qs)
    X = np.stack([q.x for q in qs])
    n = len(qs)
    nested = {"f1": np.full(n, np.nan), "tokens": np.full(n, np.nan),
              "multi": np.zeros(n, dtype=bool), "p": np.full(n, np.nan)}
    picks = []
    for train_q, test_q in question_folds([q.qid for q in qs], folds):
        inner = [qs[idx[q]] for q in train_q]
        best, _ = choose(inner, {k: oof_probabilities(inner, k, folds, seed) for k in models},
                         taus)
        tr, te = [idx[q] for q in train_q], [idx[q] for q in test_q]
        p = _fit(best["model"], X[tr], y[tr], seed).predict_proba(X[te])[:, 1]
        r = route([qs[i] for i in te], p, best["tau"])
        for key in ("f1", "tokens", "multi"):
            nested[key][te] = r[key]
        nested["p"][te] = p
        picks.append({"model": best["model"], "tau": best["tau"], "n_held_out": len(te)})
    return {"n_questions": n, "positive_rate": float(y.mean()),
            "hurts_rate": float(np.mean([q.gain < -TIE for q in qs])),
            "auc": {k: _auc(y, p) for k, p in probs.items()},
            "choice": choice, "grid": grid, "nested": nested, "nested_picks": picks,
            "nested_auc": _auc(y, nested["p"])}


def against_constants(qs: Sequence[RouterQuestion], f1: np.ndarray, tokens: np.ndarray,
                      multi: np.ndarray, rate: float | np.ndarray | None = None) -> dict:
    """Routed F1 and tokens paired against always-one-shot, always-multi-step and the random
    router sending the same share to multi-step (its exact expectation per question; ``rate``:
    that share per question, e.g. each dataset's own when datasets are pooled; default the
    routed share), plus the oracle's F1 (the better strategy per question) for the headroom."""
    one = np.array([q.f1_one for q in qs])
    mul = np.array([q.f1_multi for q in qs])
    t_one = np.array([q.tokens_one for q in qs])
    t_mul = np.array([q.tokens_multi for q in qs])
    c = np.full(len(qs), float(np.mean(multi))) if rate is None else \
        np.broadcast_to(np.asarray(rate, dtype=float), (len(qs),))
    others = {"one_shot": (one, t_one), "multi_step": (mul, t_mul),
              "random_same_rate": ((1 - c) * one + c * mul, (1 - c) * t_one + c * t_mul)}
    return {"n": len(qs), "f1": float(np.mean(f1)), "tokens": float(np.mean(tokens)),
            "multi_rate": float(np.mean(multi)),
            "oracle_f1": float(np.maximum(one, mul).mean()),
            "against": {name: {"f1": paired_difference(f1, o_f1, "f1").to_dict(),
                               "tokens": paired_difference(tokens, o_t, "tokens").to_dict()}
                        for name, (o_f1, o_t) in others.items()}}


def fit_router(qs: Sequence[RouterQuestion], kind: str, seed: int = SEED):
    """The chosen model refitted on every training question."""
    X, y = _arrays(qs)
    return _fit(kind, X, y, seed)


# -- the evaluation split, read once -------------------------------------------------------------
def route_evaluation(model, tau: float, one_rows: Sequence[Mapping],
                     multi_rows: Sequence[Mapping]) -> list[dict]:
    """Per evaluation question answered by both runs (paired by ``id``, in the one-shot run's
    order): the router's P(helps) from the one-shot row's features, its route, and the chosen
    run's F1, EM and tokens (each run's own values kept beside them)."""
    pairs = paired_rows(one_rows, multi_rows)
    if not pairs:
        return []
    p = model.predict_proba(np.stack([evaluation_features(a) for a, _ in pairs]))[:, 1]
    out = []
    for (a, b), pi in zip(pairs, p):
        multi = bool(pi > tau)
        c = b if multi else a
        out.append({"id": str(a["id"]), "p": float(pi), "route": "multi" if multi else "one",
                    "f1": float(c["f1"]), "em": float(c["em"]), "tokens": float(c["tokens"]),
                    "f1_one": float(a["f1"]), "f1_multi": float(b["f1"]),
                    "tokens_one": float(a["tokens"]), "tokens_multi": float(b["tokens"]),
                    "same_first_docs": [d["id"] for d in a["docs"][:FIRST_DOCS]]
                    == [d["id"] for d in b["docs"][:FIRST_DOCS]]})
    return out


def random_rows(routed: Sequence[Mapping], rate: float) -> list[dict]:
    """The random router at multi-step share ``rate``: per question the exact expectation."""
    return [{"id": r["id"], "f1": (1 - rate) * r["f1_one"] + rate * r["f1_multi"],
             "tokens": (1 - rate) * r["tokens_one"] + rate * r["tokens_multi"]}
            for r in routed]


def _eval_summary(routed: Sequence[Mapping], runs: Mapping[str, Sequence[Mapping]],
                  random: Sequence[Mapping] | None = None) -> dict:
    rate = float(np.mean([r["route"] == "multi" for r in routed]))
    random = random_rows(routed, rate) if random is None else random
    one = np.array([r["f1_one"] for r in routed])
    mul = np.array([r["f1_multi"] for r in routed])
    helps = (mul - one > TIE).astype(int)
    against = {}
    for name, rows in {**runs, "random_same_rate": random}.items():
        if paired_rows(routed, rows):
            against[name] = {m: d.to_dict() for m, d in
                             compare_runs(routed, rows, metrics=("f1", "tokens")).items()}
    return {"n": len(routed), "f1": float(np.mean([r["f1"] for r in routed])),
            "tokens": float(np.mean([r["tokens"] for r in routed])), "multi_rate": rate,
            "oracle_f1": float(np.maximum(one, mul).mean()),
            "helps_rate": float(helps.mean()), "hurts_rate": float(np.mean(mul - one < -TIE)),
            "auc": _auc(helps, np.array([r["p"] for r in routed])),
            "same_first_docs": int(sum(r["same_first_docs"] for r in routed)),
            "against": against}


def evaluation_report(dataset: str, reader: str, root: str | Path, model, tau: float,
                      baselines: Sequence[str] = BASELINE_RUNS,
                      train_x: np.ndarray | None = None) -> dict:
    """Route the evaluation questions of ``root/<dataset>/<reader>`` once and pair the routed
    F1 and tokens against every baseline run and the random router at the same rate; ``auc``
    is the router's P(helps) against the evaluation's own "multi-step beats one-shot" (a
    reading, nothing is chosen on it). ``routed``: the per-question rows; ``drift``
    (:func:`feature_drift`, with ``train_x``): the training questions' features against these."""
    runs = {name: read_run(dataset, reader, name, root)[0] for name in baselines}
    if not runs.get(ONE_SHOT_RUN) or not runs.get(MULTI_STEP_RUN):
        raise ValueError(f"{root}/{dataset}/{reader}: needs answered {ONE_SHOT_RUN} and "
                         f"{MULTI_STEP_RUN} runs")
    routed = route_evaluation(model, tau, runs[ONE_SHOT_RUN], runs[MULTI_STEP_RUN])
    out = {**_eval_summary(routed, {k: v for k, v in runs.items() if v}), "routed": routed}
    if train_x is not None:
        ev = np.stack([evaluation_features(a) for a, _ in
                       paired_rows(runs[ONE_SHOT_RUN], runs[MULTI_STEP_RUN])])
        out["drift"] = feature_drift(train_x, ev)
    return out


def pooled_report(per_dataset: Mapping[str, Mapping], root: str | Path, reader: str,
                  baselines: Sequence[str] = BASELINE_RUNS) -> dict:
    """:func:`evaluation_report`'s pairing over the datasets' questions together (ids prefixed
    by their dataset, so no two datasets' questions pair); the random router keeps each
    dataset's own multi-step share (a pooled share would move questions between datasets)."""
    routed, rnd, runs = [], [], {name: [] for name in baselines}
    for ds, rep in per_dataset.items():
        mine = [{**r, "id": f"{ds}/{r['id']}"} for r in rep["routed"]]
        routed += mine
        rnd += random_rows(mine, rep["multi_rate"])
        for name in baselines:
            runs[name] += [{**r, "id": f"{ds}/{r['id']}"}
                           for r in read_run(ds, reader, name, root)[0]]
    return _eval_summary(routed, {k: v for k, v in runs.items() if v}, rnd)


def score_recovery(data: TrainingData) -> dict:
    """A check of :func:`prefix_scores` on real prefixes: where the first retrieval read the
    ranking's top three (frontier 3), the recovered max - min must equal the stored
    ``rank_gap_1_3`` (ranking[0] - ranking[2]). ``max_abs_diff`` over ``n`` such questions."""
    diffs = []
    for path in question_paths(data, need_f1=False).values():
        f = path[0].features
        if int(round(float(f[_COL["frontier"]]))) == FIRST_DOCS:
            hi, _, lo = prefix_scores(path[0])
            diffs.append(abs((hi - lo) - float(f[_COL["rank_gap_1_3"]])))
    return {"n": len(diffs), "max_abs_diff": float(max(diffs)) if diffs else float("nan")}


def feature_aucs(qs: Sequence[RouterQuestion]) -> list[dict]:
    """Each router feature's own AUC for ``helps`` on the training questions (no model, no
    folds), farthest from 0.5 first: is there a single-feature signal a model could miss?"""
    X, y = _arrays(qs)
    out = [{"feature": n, "auc": _auc(y, X[:, i])} for i, n in enumerate(ROUTER_FEATURES)]
    return sorted(out, key=lambda r: -abs(r["auc"] - 0.5) if math.isfinite(r["auc"]) else 0)


def feature_drift(train: np.ndarray, evaluation: np.ndarray) -> list[dict]:
    """Per router feature, training and evaluation means and the standardized difference
    (evaluation - training over the pooled sd), largest first: are the two sides alike?"""
    out = []
    for i, name in enumerate(ROUTER_FEATURES):
        a, b = train[:, i], evaluation[:, i]
        sd = math.sqrt((a.var() + b.var()) / 2)
        out.append({"feature": name, "train": float(a.mean()), "eval": float(b.mean()),
                    "smd": float((b.mean() - a.mean()) / sd) if sd > 0 else 0.0})
    return sorted(out, key=lambda r: -abs(r["smd"]))
