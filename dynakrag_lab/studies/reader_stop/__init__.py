"""Reader confidence as a stop signal: does the reader's own answer say when to stop?

The continuation controller's stop carries no information about the question (its depths do
no better than a shuffle of them, :func:`dynakrag_lab.report.claims.stop_shuffle`), and a
third of the perfect-stop gap comes from the reader changing its answer while the evidence
state stays the same. Two reader signals see that change:

* **confidence**: the mean token log-probability of the final answer at depth k, scored as a
  continuation of the very prompt that produced it (:func:`dynakrag_lite.sufficiency.
  reply_confidence` on :func:`dynakrag_lite.actions.final_answer_prompt`);
* **changed**: whether the answer at depth k differs (after HotpotQA normalization) from the
  answer at depth k - 1.

The answers at every depth are the stop-at-k schedules' (``dynakrag-cont-stop{k}``: the same
learned walk, the stop forced after k acquisitions), so a stop rule's F1 is read exactly from
them (:class:`~dynakrag_lab.report.claims.StopGrid`). :func:`collect` re-asks the reader each
schedule's final prompt (rebuilt from the row's snippets, or its documents when compression
fell back), checks that the reply parses to the recorded answer, and scores it; the rows are
appended to a JSONL file, so a stopped collection resumes where it was.

Stop rules (each stops at the first depth k in 1..K where it fires, else at K):

* ``stable``: the answer did not change (k >= 2). No parameter.
* ``confident``: confidence >= tau.
* ``confident_or_stable``: either.
* ``model``: a logistic stop model on (confidence, changed, k, confidence change) predicting
  "stopping here loses nothing" (F1 at k >= F1 at every later depth), stopping where its
  probability >= p.

tau and p are chosen on the training questions' grid (maximum mean F1, the smaller depth on a
tie) and applied once to the evaluation grid, where the rule is tested against its own
shuffle.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold

from dynakrag_lite.actions import final_answer_prompt
from dynakrag_lite.metrics import normalize_answer
from dynakrag_lite.sufficiency import reply_confidence

from dynakrag_lab.report.claims import StopGrid, stop_shuffle

__all__ = ["RULES", "read_scores", "collect", "ReaderGrid", "reader_grid", "stop_depths",
           "choose_parameter", "stop_label", "stop_model_features", "fit_stop_model",
           "cv_auc", "model_auc", "stop_aucs", "power_curve", "rule_report", "report_frame"]

RULES = ("stable", "confident", "confident_or_stable", "model")


# -- collecting (model calls) ---------------------------------------------------------------
def read_scores(path: str | Path) -> dict[tuple[str, int], dict]:
    """The scored rows of ``path`` by (question id, depth). A last line cut off by a stopped
    run is dropped from the file (it is re-scored); a bad line elsewhere is a ValueError that
    names the file and line."""
    path = Path(path)
    if not path.exists():
        return {}
    lines = path.read_bytes().split(b"\n")
    out: dict[tuple[str, int], dict] = {}
    good = 0  # bytes of complete lines
    for i, raw in enumerate(lines):
        if not raw.strip():
            good += len(raw) + 1
            continue
        try:
            row = json.loads(raw)
            key = (str(row["id"]), int(row["k"]))
        except (ValueError, KeyError, TypeError) as e:
            if i >= len(lines) - 2 and not raw.endswith(b"}"):  # torn tail of a killed run
                with open(path, "r+b") as f:
                    f.truncate(good)
                break
            raise ValueError(f"{path}:{i + 1}: not a scored row ({e})") from None
        out[key] = row
        good += len(raw) + 1
    return out


def collect(rows_by_depth: Mapping[int, Sequence[Mapping]], generator,
            docs_of: Callable[[Mapping], Sequence], out: str | Path, doc_chars: int | None,
            progress: Callable[[Iterable], Iterable] = iter) -> dict[tuple[str, int], dict]:
    """Score every (question, depth) answer of ``rows_by_depth`` (depth -> prediction rows of
    that stop-at-k schedule) not yet in ``out``, appending one JSON line each; returns every
    scored row. ``docs_of(row)``: the row's documents (for a prompt without snippets)."""
    done = read_scores(out)
    ks = sorted(rows_by_depth)
    ids = [str(r["id"]) for r in rows_by_depth[ks[0]]]
    by_k = {k: {str(r["id"]): r for r in rows_by_depth[k]} for k in ks}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    with open(out, "a", encoding="utf-8") as f:
        for qid in progress(ids):
            for k in ks:
                row = by_k[k].get(qid)
                if row is None or (qid, k) in done:
                    continue
                t0 = time.perf_counter()
                msgs = final_answer_prompt(row["question"], docs_of(row), row.get("snippets"),
                                           doc_chars)
                logprob, draft, gens = reply_confidence(msgs, generator)
                rec = {"id": qid, "k": k, "prediction": row["prediction"], "draft": draft,
                       "reproduced": draft == row["prediction"], "logprob": round(logprob, 5),
                       "answer_tokens": gens[0].prompt_tokens + gens[0].completion_tokens,
                       "seconds": round(time.perf_counter() - t0, 2)}
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                f.flush()
                os.fsync(f.fileno())
                done[(qid, k)] = rec
    return done


# -- the grid with the reader's signals -------------------------------------------------------
@dataclass(frozen=True)
class ReaderGrid:
    """A :class:`StopGrid` with the reader's confidence and answer change at every depth."""
    grid: StopGrid
    logprob: np.ndarray  # questions x depths
    changed: np.ndarray  # questions x depths (False at the first depth)
    answer_tokens: np.ndarray  # the final answer call's tokens at each depth
    reproduced: float  # share of (question, depth) replies that parsed to the recorded answer

    @property
    def n(self) -> int:
        return len(self.grid.ids)


def reader_grid(grid: StopGrid, scores: Mapping[tuple[str, int], Mapping]) -> ReaderGrid:
    """Join ``grid`` with the scored rows; questions without a score at every depth are left
    out (a collection still running)."""
    keep = [i for i, q in enumerate(grid.ids) if all((q, k) in scores for k in grid.ks)]
    if not keep:
        raise ValueError(f"{grid.dataset}: no question scored at every depth {grid.ks}")
    ids = [grid.ids[i] for i in keep]
    sub = StopGrid(grid.dataset, ids, [grid.types[i] for i in keep], grid.ks,
                   grid.f1[keep], grid.tokens[keep], grid.depth[keep])
    rows = [[scores[(q, k)] for k in grid.ks] for q in ids]
    norm = [[normalize_answer(r["prediction"]) for r in rr] for rr in rows]
    changed = np.array([[j > 0 and a[j] != a[j - 1] for j in range(len(a))] for a in norm])
    return ReaderGrid(sub, np.array([[r["logprob"] for r in rr] for rr in rows], dtype=float),
                      changed,
                      np.array([[r["answer_tokens"] for r in rr] for rr in rows], dtype=float),
                      float(np.mean([r["reproduced"] for rr in rows for r in rr])))


def stop_label(rg: ReaderGrid) -> np.ndarray:
    """1 where stopping at that depth loses nothing: F1 there >= F1 at every later depth."""
    f1 = rg.grid.f1
    later = np.maximum.accumulate(f1[:, ::-1], axis=1)[:, ::-1]  # max over depths >= j
    best_after = np.concatenate([later[:, 1:], np.full((len(f1), 1), -np.inf)], axis=1)
    return (f1 >= best_after - 1e-12).astype(int)


def stop_model_features(rg: ReaderGrid) -> np.ndarray:
    """(questions x depths x 4): confidence, changed, depth, confidence change."""
    lp = rg.logprob
    delta = np.concatenate([np.zeros((len(lp), 1)), np.diff(lp, axis=1)], axis=1)
    depth = np.broadcast_to(np.asarray(rg.grid.ks, dtype=float), lp.shape)
    return np.stack([lp, rg.changed.astype(float), depth, delta], axis=2)


def fit_stop_model(rg: ReaderGrid) -> LogisticRegression:
    X = stop_model_features(rg).reshape(-1, 4)
    return LogisticRegression(max_iter=1000).fit(X, stop_label(rg).ravel())


def stop_probability(model: LogisticRegression, rg: ReaderGrid) -> np.ndarray:
    X = stop_model_features(rg)
    return model.predict_proba(X.reshape(-1, 4))[:, 1].reshape(X.shape[:2])


def cv_auc(rg: ReaderGrid, folds: int = 5) -> dict:
    """Out-of-fold AUC (folds by question) of the stop model, with :func:`stop_aucs`."""
    y = stop_label(rg)[:, :-1].ravel()
    X = stop_model_features(rg)[:, :-1].reshape(-1, 4)
    groups = np.repeat(np.arange(rg.n), rg.logprob.shape[1] - 1)
    p = np.zeros(len(y))
    for tr, te in GroupKFold(min(folds, rg.n)).split(X, y, groups):
        if len(set(y[tr])) < 2:  # one class in the fold: its rate
            p[te] = y[tr].mean()
        else:
            p[te] = LogisticRegression(max_iter=1000).fit(X[tr], y[tr]).predict_proba(
                X[te])[:, 1]
    return stop_aucs(rg, p.reshape(rg.n, -1))


def model_auc(model: LogisticRegression, rg: ReaderGrid) -> dict:
    """The fitted model's AUC on ``rg`` (read once, on the evaluation grid)."""
    return stop_aucs(rg, stop_probability(model, rg)[:, :-1])


def stop_aucs(rg: ReaderGrid, model_score: np.ndarray) -> dict:
    """AUCs for the stop label on the depths before the last (the last always stops): of
    ``model_score`` (questions x those depths), of confidence alone and of "unchanged"."""
    y = stop_label(rg)[:, :-1]
    return {"stop_model": _auc(y, model_score), "confidence": _auc(y, rg.logprob[:, :-1]),
            "unchanged": _auc(y[:, 1:], ~rg.changed[:, 1:-1]),
            "positives": float(y.mean()), "states": int(y.size)}


def _auc(y: np.ndarray, score: np.ndarray) -> float:
    y, score = np.asarray(y).ravel(), np.asarray(score, dtype=float).ravel()
    return float(roc_auc_score(y, score)) if len(set(y.tolist())) == 2 else float("nan")


# -- stop rules -------------------------------------------------------------------------------
def stop_depths(rg: ReaderGrid, rule: str, param: float | None = None,
                model: LogisticRegression | None = None) -> np.ndarray:
    """Each question's stop depth under ``rule`` (see the module docstring)."""
    if rule == "stable":
        fire = ~rg.changed
        fire[:, 0] = False
    elif rule == "confident":
        fire = rg.logprob >= param
    elif rule == "confident_or_stable":
        fire = rg.logprob >= param
        fire[:, 1:] |= ~rg.changed[:, 1:]
    elif rule == "model":
        fire = stop_probability(model, rg) >= param
    else:
        raise ValueError(f"unknown stop rule {rule!r} ({', '.join(RULES)})")
    fire = fire.copy()
    fire[:, -1] = True
    return np.asarray(rg.grid.ks)[fire.argmax(axis=1)]


def rule_f1(rg: ReaderGrid, depth: np.ndarray) -> float:
    return float(rg.grid.f1[np.arange(rg.n), rg.grid.column(depth)].mean())


def rule_tokens(rg: ReaderGrid, depth: np.ndarray) -> float:
    """Mean tokens when the reader answers at every depth up to the stop: the stop depth's
    run plus the answer calls of the depths before it."""
    col = rg.grid.column(depth)
    rows = np.arange(rg.n)
    before = np.array([rg.answer_tokens[i, :c].sum() for i, c in zip(rows, col)])
    return float((rg.grid.tokens[rows, col] + before).mean())


def candidates(rg: ReaderGrid, rule: str, model: LogisticRegression | None = None
               ) -> list[float]:
    """The parameter values worth trying: every observed score (each changes some stop)."""
    if rule in ("confident", "confident_or_stable"):
        vals = rg.logprob[:, :-1].ravel()
    elif rule == "model":
        vals = stop_probability(model, rg)[:, :-1].ravel()
    else:
        return [float("nan")]
    return sorted(set(np.round(vals, 5).tolist()) | {float("inf")})


def choose_parameter(rg: ReaderGrid, rule: str, model: LogisticRegression | None = None
                     ) -> float:
    """The parameter with the highest mean F1 on ``rg`` (on a tie: the shallower stop)."""
    if rule == "stable":
        return float("nan")
    best = None
    for c in candidates(rg, rule, model):
        d = stop_depths(rg, rule, c, model)
        key = (round(rule_f1(rg, d), 9), -float(d.mean()))
        if best is None or key > best[0]:
            best = (key, c)
    return float(best[1])


def power_curve(rg: ReaderGrid, n: int, sigmas: Sequence[float] = (0, .5, 1, 1.5, 2, 3),
                sims: int = 200, n_shuffles: int = 1000, seed: int = 0) -> list[dict]:
    """How good a stop signal must be for the shuffled-stop test to see it at ``n`` questions.

    A synthetic signal is the stop label plus Gaussian noise of scale sigma (0: a perfect
    stop); the rule stops at the first depth where it reaches 1/2. Each simulation resamples
    ``n`` questions of ``rg`` with replacement and runs the test (one-sided p). Per sigma: the
    signal's AUC (the same states as :func:`stop_aucs`), the share of simulations with
    p < .05 (power), and the mean F1 gain over the shuffles. Built on training grids only."""
    rng = np.random.default_rng(seed)
    y, g = stop_label(rg).astype(float), rg.grid
    out = []
    for sigma in sigmas:
        aucs, hits, gains = [], 0, []
        for s in range(sims):
            idx = rng.integers(0, rg.n, size=n)
            label = y[idx]
            score = label + sigma * rng.standard_normal(label.shape)
            fire = score >= .5
            fire[:, -1] = True
            depth = np.asarray(g.ks)[fire.argmax(axis=1)]
            sub = StopGrid(g.dataset, [g.ids[i] for i in idx], [g.types[i] for i in idx],
                           g.ks, g.f1[idx], g.tokens[idx], depth)
            test = stop_shuffle(sub, n_shuffles=n_shuffles, seed=seed + s)
            hits += test.p_value < .05
            gains.append(test.f1 - test.shuffled_f1)
            aucs.append(_auc(label[:, :-1], score[:, :-1]))
        out.append({"sigma": float(sigma), "auc": float(np.nanmean(aucs)),
                    "power": hits / sims, "gain": float(np.mean(gains))})
    return out


def rule_report(train: ReaderGrid, evaluation: ReaderGrid, n_shuffles: int = 10_000
                ) -> dict:
    """Every rule: its parameter chosen on ``train``, then read once on ``evaluation``: the
    depths, F1, tokens and the shuffled-stop test; the AUCs (out-of-fold on train, the fitted
    model on evaluation)."""
    model = fit_stop_model(train)
    out = {"train_n": train.n, "eval_n": evaluation.n,
           "reproduced": {"train": train.reproduced, "eval": evaluation.reproduced},
           "auc": {"train_cv": cv_auc(train), "eval": model_auc(model, evaluation)},
           "depth_f1": {int(k): float(evaluation.grid.f1[:, i].mean())
                        for i, k in enumerate(evaluation.grid.ks)},
           "rules": {}}
    for rule in RULES:
        param = choose_parameter(train, rule, model)
        d_train = stop_depths(train, rule, param, model)
        d = stop_depths(evaluation, rule, param, model)
        sh = stop_shuffle(evaluation.grid, d, n_shuffles=n_shuffles)
        out["rules"][rule] = {
            "param": param, "train_f1": rule_f1(train, d_train),
            "f1": rule_f1(evaluation, d), "tokens": rule_tokens(evaluation, d),
            "depths": sh.depths, "shuffled_f1": sh.shuffled_f1, "p_value": sh.p_value}
    own = stop_shuffle(evaluation.grid, n_shuffles=n_shuffles)
    out["learned_stop"] = {"f1": own.f1, "tokens": own.tokens, "depths": own.depths,
                           "shuffled_f1": own.shuffled_f1, "p_value": own.p_value}
    return out


def report_frame(reports: Mapping[str, Mapping]) -> pd.DataFrame:
    """One row per (dataset, stop) of :func:`rule_report` outputs (dataset -> report): the
    learned stop first, then each rule with its parameter, the depths it chose, F1, tokens,
    the mean F1 of its shuffles and the one-sided p."""
    rows = []
    for ds, rep in reports.items():
        for name, r in [("learned stop (dynakrag-cont)", rep["learned_stop"]),
                        *rep["rules"].items()]:
            rows.append({"dataset": ds, "stop": name, "n": rep["eval_n"],
                         "parameter": r.get("param"),
                         "depths": ", ".join(f"{k}: {v}" for k, v in r["depths"].items()),
                         "f1": r["f1"], "shuffled_f1": r["shuffled_f1"],
                         "p": r["p_value"], "tokens": r["tokens"]})
    return pd.DataFrame(rows)
