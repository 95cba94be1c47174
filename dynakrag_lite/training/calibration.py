"""Calibrating the sufficiency signal (chapter 8): which signal, with which threshold, on
training questions with gold labels.

:func:`calibration_states` reaches states at different support recall (SR) by retrieval-only
actions, plus matched incomplete *contrast* states; :func:`signal_scores` scores each signal on
them. :func:`calibrate` takes per signal the AUC against 1[SR = 1] with a bootstrap standard
error over *questions*; a signal is *informative* when AUC - 0.5 exceeds both ``min_gain`` (.05)
and 1.645 standard errors. The most informative (ties: the cheaper) is chosen, its threshold by
maximal Youden J or :func:`precision_threshold`; with none the text probe gets ``gates=False``."""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve
from tqdm.auto import tqdm

from .. import prompts
from ..actions import apply_action
from ..bridge import bridge_candidates
from .concurrency import check_workers, locked_runner, run_in_order
from .estimator import fit_estimator, oof_estimator_scores
from ..data.corpus import gold_titles, normalize_title
from ..metrics import support_recall
from ..state import RetrievedDoc, initial_state
from ..sufficiency import (LEARNED_FEATURE_NAMES, SIGNALS, SignalStats, SufficiencyError,
                           SufficiencyEstimator, SufficiencySignal, answer_confidence,
                           learned_features, probe_margin)
from ..validity import valid_actions

__all__ = [
    "COST_ORDER", "CalibrationState", "calibration_states", "auc", "grouped_auc_se", "youden_threshold",
    "precision_threshold", "signal_scores", "calibrate", "CalibrationTable",
    "calibration_table", "train_signal",
]

# Cheaper first: breaks AUC ties in calibrate().
COST_ORDER = {"learned": 0, "margin": 1, "answer_conf": 2, "text": 3}


# -- calibration states (training questions only; no LLM call) --------------------------------

@dataclass
class CalibrationState:
    qid: str
    state: Any  # EvidenceState
    sr: float
    kind: str = "reachable"  # or "contrast" (see calibration_states)

    @property
    def sufficient(self) -> bool:
        return self.sr >= 1.0 - 1e-9


def _contrast(c: CalibrationState, gold: Sequence[str], env) -> CalibrationState | None:
    """The complete state ``c`` with its lower-scored gold document swapped for the best unseen
    non-gold document of the initial ranking: same size, support incomplete."""
    st = c.state
    keys = {normalize_title(t) for t in gold}
    golds = [i for i, d in enumerate(st.docs) if normalize_title(d.title) in keys]
    if len(st.docs) < 2 or not golds or st.initial_ranking is None:
        return None
    i = min(golds, key=lambda k: st.docs[k].score)
    ids, titles = set(st.doc_ids), set(st.title_keys)
    for e in st.initial_ranking:
        key = normalize_title(e.title)
        if e.id in ids or key in titles or key in keys:
            continue
        old = st.docs[i]
        docs = st.docs[:i] + (RetrievedDoc(e.id, e.title, e.text, e.score, old.source,
                                           old.step),) + st.docs[i + 1:]
        cfg = env.config
        bridges = bridge_candidates(st.question, docs, exclude=st.expanded_bridges,
                                    max_candidates=cfg.max_bridges, use_spacy=cfg.use_spacy)
        new = replace(st, docs=docs, bridge_candidates=bridges)
        return CalibrationState(c.qid, new, support_recall(new.titles, gold), "contrast")
    return None


def calibration_states(questions: Iterable, env, per_question: int = 4, seed: int = 13,
                       contrast: bool = True) -> list[CalibrationState]:
    """States of training questions at different SR, reached without an LLM call, at most
    ``per_question`` per question. Reachable states are mostly complete on pooled HotpotQA, so
    ``contrast`` adds a complete state with one gold document swapped for a distractor."""
    out: list[CalibrationState] = []
    cfg = env.config
    for q in questions:
        gold = gold_titles(q)
        seen: set[tuple[str, ...]] = set()
        found: list[CalibrationState] = []

        def keep(s) -> None:
            if s.docs and s.doc_ids not in seen:
                seen.add(s.doc_ids)
                found.append(CalibrationState(q.id, s, support_recall(s.titles, gold)))
        s = initial_state(q.question, q.id)
        for _ in range(3):
            if "retrieve_more" not in valid_actions(s, cfg):
                break
            s = apply_action(s, "retrieve_more", env)
            keep(s)
        rng = random.Random(f"{seed}|calib|{q.id}")
        s = apply_action(initial_state(q.question, q.id), "retrieve_more", env)
        for _ in range(3):
            opts = [a for a in valid_actions(s, cfg)
                    if a in ("retrieve_more", "bridge_entity_expand")]
            if not opts:
                break
            s = apply_action(s, "bridge_entity_expand" if "bridge_entity_expand" in opts
                             and rng.random() < 0.7 else rng.choice(opts), env)
            keep(s)
        # Keep the first, the last, then the rest; in discovery order (KV-cache reuse).
        idx = list(range(len(found)))
        keep_idx = sorted((idx[:1] + idx[-1:] + idx[1:-1] if len(idx) > 2 else idx)[:per_question])
        chosen = [found[i] for i in keep_idx]
        if contrast:
            full = next((k for k, c in enumerate(chosen) if c.sufficient), None)
            alt = _contrast(chosen[full], gold, env) if full is not None else None
            if alt is not None and alt.state.doc_ids not in seen:
                chosen.insert(full + 1, alt)
        out.extend(chosen)
    return out


# -- AUC, thresholds, calibration -------------------------------------------------------------

def auc(scores: Sequence[float], labels: Sequence[float]) -> float:
    """ROC AUC of ``scores`` for labels 1 (ties count half); nan with one class only."""
    s, y = np.asarray(scores, float), np.asarray(labels).astype(int)
    if len(set(y.tolist())) < 2:
        return float("nan")
    return float(roc_auc_score(y, s))


def grouped_auc_se(scores: Sequence[float], labels: Sequence[float], groups: Sequence,
                   n_boot: int = 200, seed: int = 13) -> float:
    """Bootstrap standard error of the AUC, resampling whole questions (states of one
    question are not independent)."""
    s, y = np.asarray(scores, float), np.asarray(labels).astype(int)
    g = np.asarray(groups, dtype=object)
    ids = sorted(set(g.tolist()), key=str)
    if len(ids) < 2 or len(set(y.tolist())) < 2:
        return float("nan")
    rows = {i: np.nonzero(g == i)[0] for i in ids}
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(ids), len(ids))
        idx = np.concatenate([rows[ids[k]] for k in pick])
        a = auc(s[idx], y[idx])
        if np.isfinite(a):
            vals.append(a)
    return float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan")


def youden_threshold(scores: Sequence[float], labels: Sequence[float]) -> float:
    """The threshold t maximizing TPR - FPR for the verdict "sufficient iff score >= t"."""
    s, y = np.asarray(scores, float), np.asarray(labels).astype(int)
    if len(set(y.tolist())) < 2:
        return float(np.median(s)) if len(s) else 0.0
    fpr, tpr, thr = roc_curve(y, s)
    j = tpr - fpr
    j[~np.isfinite(thr)] = -np.inf
    return float(thr[int(np.argmax(j))])


def precision_threshold(scores: Sequence[float], labels: Sequence[float], target: float
                        ) -> float | None:
    """The lowest t whose verdicts "score >= t" are sufficient with precision >= ``target``
    (most recall at that precision); None when no threshold reaches it."""
    s, y = np.asarray(scores, float), np.asarray(labels).astype(float)
    best = None
    for t in sorted(set(s.tolist()), reverse=True):
        sel = s >= t
        if sel.any() and y[sel].mean() >= target:
            best = t
    return best


def _threshold(scores, labels, rule: str) -> tuple[float, str]:
    if rule.startswith("precision:"):
        t = precision_threshold(scores, labels, float(rule.split(":", 1)[1]))
        if t is not None:
            return float(t), rule
        return youden_threshold(scores, labels), "youden (precision target unreachable)"
    if rule != "youden":
        raise ValueError(f"unknown threshold rule {rule!r} (youden | precision:P)")
    return youden_threshold(scores, labels), "youden"


def _state_llm_scores(c: CalibrationState, env, llm_kinds: Sequence[str]) -> dict[str, float]:
    """The LLM signals' scores of one calibration state, in ``llm_kinds`` order."""
    cfg, st = env.config, c.state
    got: dict[str, float] = {}
    for kind in llm_kinds:
        if kind == "text":
            gen = env.generate(prompts.sufficiency_messages(st.question, st.docs, cfg.doc_chars),
                               prompts.SUFFICIENCY_MAX_TOKENS)
            got[kind] = 1.0 if prompts.parse_sufficiency(gen.text).sufficient else 0.0
        elif kind == "margin":
            got[kind] = probe_margin(st.question, st.docs, env.generator, cfg.doc_chars)
        else:  # answer_conf
            got[kind] = answer_confidence(st.question, st.docs, env.generator, cfg.doc_chars)[0]
    return got


def signal_scores(states: Sequence[CalibrationState], env, kinds: Sequence[str],
                  estimator_folds: int = 5, seed: int = 13, progress: bool = False,
                  estimator_kind: str = "forest", workers: int = 1
                  ) -> dict[str, dict[str, np.ndarray]]:
    """Per signal: {"score": ..., "extra": ...} on the calibration states; ``learned`` scores
    are out-of-fold, ``text`` extra is 1 where the reply parsed SUFFICIENT. ``workers`` > 1
    needs a server generator (:mod:`dynakrag_lite.training.concurrency`)."""
    check_workers(workers, env.generator, items="calibration states")
    y = np.array([float(c.sufficient) for c in states])
    groups = np.array([c.qid for c in states], dtype=object)
    out: dict[str, dict[str, np.ndarray]] = {}
    llm_kinds = [k for k in kinds if k != "learned"]
    bad = [k for k in llm_kinds if k not in SIGNALS]
    if bad:
        raise ValueError(f"unknown signal(s) {bad}")
    vals: dict[str, list[float]] = {k: [] for k in llm_kinds}
    extra: list[float] = []
    # States outer, signals inner: shared prompt prefixes, so llama.cpp reuses the KV cache.
    todo = list(states) if llm_kinds else []
    with tqdm(total=len(todo), desc="signals", disable=not progress or not todo) as bar:
        def emit(c: CalibrationState, got: dict[str, float]) -> None:
            for kind in llm_kinds:
                vals[kind].append(got[kind])
            if "text" in got:
                extra.append(got["text"])
            bar.update(1)
        run_in_order(todo, locked_runner(lambda c, e: _state_llm_scores(c, e, llm_kinds), env,
                                         workers), workers, emit, name="signals")
    for kind in kinds:
        if kind == "learned":
            X = np.stack([learned_features(c.state) for c in states]) if states else \
                np.zeros((0, len(LEARNED_FEATURE_NAMES)))
            reach = np.array([c.kind == "reachable" for c in states], bool)
            out[kind] = {"score": oof_estimator_scores(X, y, groups, estimator_folds,
                                                       kind=estimator_kind, seed=seed,
                                                       train_mask=reach)}
        else:
            out[kind] = {"score": np.array(vals[kind], dtype=np.float64)}
            if kind == "text":
                out[kind]["extra"] = np.array(extra)
    return out


def calibrate(scores: dict[str, np.ndarray], labels: Sequence[float], groups: Sequence,
              rule: str = "youden", min_gain: float = 0.05, generator: str | None = None,
              estimator: SufficiencyEstimator | None = None,
              text_sufficient: np.ndarray | None = None, seed: int = 13) -> SufficiencySignal:
    """Choose the signal and threshold (see the module text) from ``scores`` per state, labels
    1[SR = 1] and question ``groups``; ``estimator`` is used when ``learned`` wins."""
    y = np.asarray(labels, float)
    g = np.asarray(groups, dtype=object)
    stats: dict[str, SignalStats] = {}
    for kind, s in scores.items():
        s = np.asarray(s, float)
        a = auc(s, y)
        se = grouped_auc_se(s, y, g, seed=seed)
        thr, how = (0.5, "text verdict") if kind == "text" else _threshold(s, y, rule)
        informative = bool(np.isfinite(a) and a - 0.5 > max(min_gain, 1.645 * (
            se if np.isfinite(se) else 0.0)))
        sel = s >= thr
        stats[kind] = SignalStats(
            kind, a, se, informative, float(thr), how, float(sel.mean()) if len(s) else 0.0,
            float(text_sufficient.mean()) if kind == "text" and text_sufficient is not None
            else None, int(len(s)), int(y.sum()),
            float(y[sel].mean()) if sel.any() else None,
            float(sel[y == 1].mean()) if (y == 1).any() else None)
    good = [k for k, st in stats.items() if st.informative]
    n_q = len(set(g.tolist()))
    if not good:
        return SufficiencySignal("text", None, gates=False, rule=rule, generator=generator,
                                 stats=stats, n_states=len(y), n_questions=n_q)
    best = max(good, key=lambda k: (round(stats[k].auc, 3), -COST_ORDER.get(k, 9)))
    st = stats[best]
    return SufficiencySignal(best, None if best == "text" else st.threshold, gates=True,
                             rule=st.rule, generator=generator,
                             estimator=estimator if best == "learned" else None,
                             stats=stats, n_states=len(y), n_questions=n_q)


@dataclass
class CalibrationTable:
    """The states a sufficiency signal was calibrated on, as plain arrays (one row per state)
    so :meth:`signal` can redo the calibration without an environment. ``llm`` marks the
    LLM-scored rows, ``scores`` the LLM signals' scores (NaN elsewhere); ``reproduced``:
    :meth:`signal` gave the collection's signal (``signal_info``) when the file was written."""
    qids: np.ndarray
    kinds: np.ndarray
    sr: np.ndarray
    features: np.ndarray
    llm: np.ndarray
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    text_extra: np.ndarray | None = None
    settings: dict = field(default_factory=dict)
    signal_info: dict | None = None
    reproduced: bool | None = None

    def __len__(self) -> int:
        return len(self.qids)

    def subset(self, qids) -> "CalibrationTable":
        keep = set(qids)
        m = np.array([q in keep for q in self.qids.tolist()], dtype=bool)
        return CalibrationTable(
            self.qids[m], self.kinds[m], self.sr[m], self.features[m], self.llm[m],
            {k: v[m] for k, v in self.scores.items()},
            None if self.text_extra is None else self.text_extra[m],
            dict(self.settings), self.signal_info, self.reproduced)

    def signal(self):
        """The calibrated signal these rows give (None for the text probe; on the same rows,
        seeds and order, the same signal). ValueError when an LLM signal's scores are missing."""
        st = self.settings
        kind, seed = st["kind"], int(st["seed"])
        if kind == "text":
            return None
        kinds = ("text", "margin", "learned") if kind == "auto" else (kind,)
        if not len(self):
            raise SufficiencyError("no calibration states (no documents retrieved)")
        y = np.array([float(v >= 1.0 - 1e-9) for v in self.sr.tolist()])
        groups = np.array(self.qids.tolist(), dtype=object)
        sub = np.nonzero(self.llm)[0]
        scores: dict[str, np.ndarray] = {}
        estimator = None
        if "learned" in kinds:  # first: the dict order breaks AUC ties
            # fitted on reachable states only: contrast states are not what a policy visits
            # (their swapped-in document is always ranked low, a retrieval-score artefact)
            reach = self.kinds == "reachable"
            oof = oof_estimator_scores(self.features, y, groups, 5, kind="forest", seed=seed,
                                       train_mask=reach)
            estimator = fit_estimator(self.features[reach], y[reach], seed=seed)
            scores["learned"] = oof[sub]
        for k in kinds:
            if k == "learned":
                continue
            v = self.scores.get(k)
            if v is None or not np.all(np.isfinite(v[sub])):
                raise ValueError(f"the calibration table lacks {k!r} scores")
            scores[k] = v[sub]
        text_suff = self.text_extra[sub] if "text" in kinds and self.text_extra is not None \
            else None
        sig = calibrate(scores, y[sub], groups[sub], rule=st["rule"],
                        min_gain=float(st["min_gain"]), generator=st["generator"],
                        estimator=estimator, text_sufficient=text_suff, seed=seed)
        if kind != "auto" and sig.kind != kind:  # a named signal is kept (train_signal)
            s = sig.stats[kind]
            sig = replace(sig, kind=kind, threshold=s.threshold, gates=True, rule=s.rule,
                          estimator=estimator if kind == "learned" else None)
        return sig

    # -- persistence inside TrainingData's .npz ------------------------------------------
    def _arrays(self) -> dict[str, np.ndarray]:
        a = {"c_qid": np.array(self.qids.tolist(), dtype=str),
             "c_kind": np.array(self.kinds.tolist(), dtype=str),
             "c_sr": self.sr.astype(np.float64), "c_features": self.features.astype(np.float64),
             "c_llm": self.llm.astype(bool)}
        for k, v in self.scores.items():
            a[f"c_score_{k}"] = v.astype(np.float64)
        if self.text_extra is not None:
            a["c_text_extra"] = self.text_extra.astype(np.float64)
        return a

    def _meta(self) -> dict:
        return {"settings": self.settings, "signal": self.signal_info,
                "reproduced": self.reproduced, "score_kinds": sorted(self.scores),
                "learned_feature_names": list(LEARNED_FEATURE_NAMES)}

    @classmethod
    def _from(cls, a: dict, meta: dict, path: Path) -> "CalibrationTable":
        if meta.get("learned_feature_names") != list(LEARNED_FEATURE_NAMES):
            raise ValueError(f"{path}: its calibration states have other learned-signal "
                             "features than this library's; collect the trajectories again")
        n = len(a["c_qid"])
        return cls(np.array([str(q) for q in a["c_qid"]], dtype=object),
                   np.array([str(k) for k in a["c_kind"]], dtype=object),
                   a["c_sr"].astype(np.float64),
                   a["c_features"].astype(np.float64).reshape(n, len(LEARNED_FEATURE_NAMES)),
                   a["c_llm"].astype(bool),
                   {k: a[f"c_score_{k}"] for k in meta.get("score_kinds", [])},
                   a.get("c_text_extra"), dict(meta["settings"]), meta.get("signal"),
                   meta.get("reproduced"))



def calibration_table(questions: Sequence, env, kind: str = "auto", rule: str = "youden",
                      llm_questions: int | None = 100, seed: int = 13, min_gain: float = 0.05,
                      progress: bool = False, workers: int = 1) -> CalibrationTable | None:
    """The rows to calibrate ``kind`` on (None for ``text``) on TRAINING questions, with the LLM
    signals scored on the first ``llm_questions`` questions' states."""
    if kind == "text":
        return None
    kinds = ("text", "margin", "learned") if kind == "auto" else (kind,)
    qs = list(questions)
    states = calibration_states(qs, env, per_question=4, seed=seed)
    llm_ids = {q.id for q in qs[:llm_questions]} if llm_questions else {q.id for q in qs}
    llm = np.array([c.qid in llm_ids for c in states], dtype=bool)
    scores: dict[str, np.ndarray] = {}
    text_extra = None
    llm_kinds = [k for k in kinds if k != "learned"]
    if llm_kinds:
        idx = np.nonzero(llm)[0]
        got = signal_scores([states[i] for i in idx], env, llm_kinds, seed=seed,
                            progress=progress, workers=workers)
        for k in llm_kinds:
            scores[k] = np.full(len(states), np.nan)
            scores[k][idx] = got[k]["score"]
        if "text" in got and "extra" in got["text"]:
            text_extra = np.full(len(states), np.nan)
            text_extra[idx] = got["text"]["extra"]
    X = np.stack([learned_features(c.state) for c in states]) if states else \
        np.zeros((0, len(LEARNED_FEATURE_NAMES)))
    return CalibrationTable(
        np.array([c.qid for c in states], dtype=object),
        np.array([c.kind for c in states], dtype=object),
        np.array([c.sr for c in states], dtype=np.float64), X, llm, scores, text_extra,
        {"kind": kind, "rule": rule, "llm_questions": llm_questions, "seed": seed,
         "min_gain": min_gain,
         "generator": None if env.generator is None else env.generator.spec})


def train_signal(questions: Sequence, env, kind: str = "auto", rule: str = "youden",
                 llm_questions: int | None = 100, seed: int = 13, progress: bool = True,
                 min_gain: float = 0.05, workers: int = 1) -> SufficiencySignal | None:
    """The signal for a training run (``train --sufficiency-signal``), on TRAINING questions:
    :meth:`CalibrationTable.signal` of :func:`calibration_table`."""
    table = calibration_table(questions, env, kind, rule, llm_questions, seed, min_gain,
                              progress, workers)
    return None if table is None else table.signal()
