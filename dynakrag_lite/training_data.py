"""The labelled records that trajectories produce and the policy learns from.

* :class:`Sample`: one (state, action) pair with its feature vector phi(s, a), its Eq. 1 target
  and the tokens the action really cost.
* :class:`PrefixSample`: one trajectory prefix (a visited state with documents) with its state
  features, what stopping there would give (SR, and the reader's answer F1 from those
  documents) and what the rollout reached at its end; ``gain`` is the continuation model's
  training target, chosen by :data:`CONTINUATION_TARGETS`.
* :class:`TrainingData`: both lists plus the training question ids. :meth:`TrainingData.save`
  writes them as one ``.npz`` of plain arrays (no pickle, so a file from anyone is safe to
  load) and :meth:`TrainingData.load` reads it back: the stop rule, lambda and the forests can
  then be re-tuned without re-collecting (``python -m dynakrag_lite train --save-data``).
* ``TrainingData.run``: the settings the trajectories were collected under (dataset,
  generator, embedder, budgets, seed, sufficiency request, data hash, split, command), and
  :class:`CalibrationTable`: the sufficiency calibration states (their learned-signal
  features, SR and LLM-signal scores). With both, ``train --from-data FILE`` rebuilds a whole
  policy, calibrated signal included, without a model call, on any subset of the questions
  (another split's training part). Files written before these existed (format 1) still load,
  with ``run == {}`` and no table; ``--from-data`` refuses them, naming what is missing,
  unless ``--signal-from POLICY`` names the policy trained by the run that wrote the file
  (checked: its --save-data, train_ids and data hash): its recorded settings then stand in
  for ``run`` and its calibrated signal is reused as is (``cli._signal_source``).

Continuation targets (the paper: "a random forest on trajectory prefixes estimating the answer
utility of continuing"; the exact target is not stated):

* ``f1`` (default): F1(answer at the end of the continued rollout) - F1(answer if stopping at
  this prefix). Both answers come from the reader on the documents alone (no compression), so
  the difference is the answer utility of the rest of the rollout.
* ``sr``: SR(end of the rollout) - SR(now): the cheap variant (no answer calls).
* ``onestep``: the best one-step SR gain among the valid acquisition actions (the earlier
  target of this project; kept for comparison).

The rollout that continues is the seeded uniform-valid exploration, so the targets estimate the
utility of continuing *under that exploration*, not under the learned policy.
"""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from .features import FEATURE_NAMES

CONTINUATION_TARGETS = ("f1", "sr", "onestep")
# 2: adds the "run" settings and the optional sufficiency calibration table (format 1 loads).
FORMAT = 2


@dataclass
class Sample:
    qid: str
    step: int
    action: str
    features: np.ndarray
    target: float
    cost_tokens: float  # tokens the action actually cost (for the cost model)
    n_docs: int
    chosen: bool = False  # the rollout continued with this action (the path tau)
    # False for a counterfactual branch that was labelled without being executed
    # (sufficiency_check: its target 1[SR(s) = 1] needs no call); cost_tokens is then 0.
    executed: bool = True


@dataclass
class PrefixSample:
    """A visited state with documents, for the continuation model (see the module text)."""
    qid: str
    features: np.ndarray  # state features (STATE_FEATURE_NAMES order)
    gain: float  # the continuation target in use (TrainingData.continuation_target)
    step: int = -1  # len(history) of the prefix (pairs it with the Samples of that state)
    onestep: float = math.nan  # best one-step SR gain among the valid acquisition actions
    sr_now: float = math.nan  # SR of this state
    sr_end: float = math.nan  # SR at the end of the rollout
    f1_now: float = math.nan  # reader's answer F1 from this state's documents
    f1_end: float = math.nan  # ... from the rollout's final documents
    tokens: float = math.nan  # ledger tokens spent to reach this state
    answer_tokens: float = math.nan  # tokens of the answer call from this state

    def target(self, kind: str) -> float:
        if kind == "f1":
            return self.f1_end - self.f1_now
        if kind == "sr":
            return self.sr_end - self.sr_now
        if kind == "onestep":
            return self.onestep
        raise ValueError(f"unknown continuation target {kind!r}; one of {CONTINUATION_TARGETS}")


@dataclass
class CalibrationTable:
    """The states a sufficiency signal was calibrated on (``sufficiency.calibrate_for``), kept
    as plain arrays so :meth:`signal` can redo the calibration without an environment: the
    learned estimator needs only the states' features and SR, the LLM signals their recorded
    scores. One row per calibration state, in calibration order.

    ``llm``: the row lies in the LLM-scored subset (the first ``llm_questions`` training
    questions); the learned signal's AUC and threshold are measured there as well.
    ``scores``: per LLM signal the score of each row (NaN outside ``llm``); ``text_extra``: 1
    where the text probe replied SUFFICIENT. ``settings``: what :func:`train_signal` was called
    with (kind, rule, llm_questions, seed, min_gain, generator); ``signal_info``: describe()
    of the signal the trajectories were collected under; ``reproduced``: :meth:`signal` gave
    that same signal when the file was written (False: do not build from this table)."""
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
        """The calibrated signal (``sufficiency.SufficiencySignal``, or None for the text
        probe) these rows give: the arithmetic of ``sufficiency.train_signal`` /
        ``calibrate_for`` on stored states instead of freshly retrieved ones (same seeds, same
        order, so on the same rows it is the same signal; :func:`build_calibration` checks
        that when the file is written). On a subset of the questions it is the signal those
        questions alone calibrate. Raises ValueError when an LLM signal needs scores the table
        lacks."""
        from dataclasses import replace
        from .sufficiency import SufficiencyError, calibrate, fit_estimator, \
            oof_estimator_scores
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
        if "learned" in kinds:  # first, as in calibrate_for (dict order breaks AUC ties)
            # fitted on reachable states only, as calibrate_for does
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
                        min_gain=float(st.get("min_gain", 0.05)), generator=st.get("generator"),
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
        from .sufficiency import LEARNED_FEATURE_NAMES
        return {"settings": self.settings, "signal": self.signal_info,
                "reproduced": self.reproduced, "score_kinds": sorted(self.scores),
                "learned_feature_names": list(LEARNED_FEATURE_NAMES)}

    @classmethod
    def _from(cls, a: dict, meta: dict, path: Path) -> "CalibrationTable":
        from .sufficiency import LEARNED_FEATURE_NAMES
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


def build_calibration(questions, env, kind: str = "auto", rule: str = "youden",
                      llm_questions: int | None = 100, seed: int = 13, min_gain: float = 0.05,
                      live_signal=None, check: bool = True,
                      generator: str | None = None) -> CalibrationTable | None:
    """The :class:`CalibrationTable` of a training run: the calibration states of
    ``sufficiency.calibrate_for`` (retrieval only) with the LLM signals' scores on the scored
    subset (the calls ``train_signal`` just made, so they come from the call cache), for
    ``train --save-data``. None for the text probe (nothing is calibrated). Sequential also
    under ``train --workers N``: its calls are cache hits, there is no server time to overlap.

    ``live_signal``: the signal ``train_signal`` returned with the same arguments; with
    ``check`` the table's own :meth:`~CalibrationTable.signal` is compared with it (summary
    and estimator predictions) and ``reproduced`` records the outcome, so a table that would
    rebuild another signal is never used silently.

    ``generator``: the generator spec the signal is calibrated for, when ``env`` has none (a
    retrieval-only environment suffices for the learned signal: its states need no LLM call;
    ``cli.cmd_upgrade_data``); default: ``env.generator.spec``."""
    from .sufficiency import LEARNED_FEATURE_NAMES, calibration_states, learned_features, \
        signal_scores
    if kind == "text":
        return None
    kinds = ("text", "margin", "learned") if kind == "auto" else (kind,)
    qs = list(questions)
    # per_question=4 and the contrast states: calibrate_for's (and train_signal's) defaults
    states = calibration_states(qs, env, per_question=4, seed=seed)
    llm_ids = {q.id for q in qs[:llm_questions]} if llm_questions else {q.id for q in qs}
    llm = np.array([c.qid in llm_ids for c in states], dtype=bool)
    scores: dict[str, np.ndarray] = {}
    text_extra = None
    llm_kinds = [k for k in kinds if k != "learned"]
    if llm_kinds:
        idx = np.nonzero(llm)[0]
        got = signal_scores([states[i] for i in idx], env, llm_kinds, seed=seed)
        for k in llm_kinds:
            scores[k] = np.full(len(states), np.nan)
            scores[k][idx] = got[k]["score"]
        if "text" in got and "extra" in got["text"]:
            text_extra = np.full(len(states), np.nan)
            text_extra[idx] = got["text"]["extra"]
    X = np.stack([learned_features(c.state) for c in states]) if states else \
        np.zeros((0, len(LEARNED_FEATURE_NAMES)))
    table = CalibrationTable(
        np.array([c.qid for c in states], dtype=object),
        np.array([c.kind for c in states], dtype=object),
        np.array([c.sr for c in states], dtype=np.float64), X, llm, scores, text_extra,
        {"kind": kind, "rule": rule, "llm_questions": llm_questions, "seed": seed,
         "min_gain": min_gain,
         "generator": generator or getattr(env.generator, "spec", None)},
        live_signal.describe() if live_signal is not None else None)
    if check:
        table.reproduced = same_signal(table.signal(), live_signal, X)
    return table


def same_signal(a, b, X: np.ndarray) -> bool:
    """Two calibrated signals agree: same summary (kind, threshold, gates, every candidate's
    AUC and threshold) and, for learned ones, the same estimator predictions on ``X``."""
    if a is None or b is None:
        return a is None and b is None
    if a.describe() != b.describe():
        return False
    ea, eb = a.estimator, b.estimator
    if (ea is None) != (eb is None):
        return False
    return ea is None or not len(X) or bool(np.array_equal(ea.predict(X), eb.predict(X)))


@dataclass
class TrainingData:
    samples: list[Sample] = field(default_factory=list)
    prefixes: list[PrefixSample] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    # Which target (CONTINUATION_TARGETS) the prefixes' ``gain`` holds. None: not stated, as
    # in records built by hand (collect() and load() always state it). Nothing guesses it:
    # save() refuses prefixes without it and train_policy() refuses to fit the continuation
    # model on them; set_continuation_target() states it (and recomputes the gains).
    continuation_target: str | None = None
    # What the trajectories were collected under (cli.cmd_train fills it; {} for old files):
    # train --from-data refuses a file whose settings differ from its run's.
    run: dict = field(default_factory=dict)
    calibration: CalibrationTable | None = None

    def matrix(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        X = np.stack([s.features for s in self.samples]) if self.samples else \
            np.zeros((0, len(FEATURE_NAMES)))
        y = np.array([s.target for s in self.samples])
        return X, y, [s.action for s in self.samples]

    def action_gains(self, retrieval_actions: tuple[str, ...] = (
            "retrieve_more", "gap_query", "bridge_entity_expand", "rewrite_query")
                     ) -> dict[str, dict[str, float]]:
        """Per acquisition action, over every executed branch (chosen or counterfactual):
        ``calls``, ``questions`` reached, ``mean_sr_gain`` (its Eq. 1 label, SR(s') - SR(s)),
        ``hit_rate`` (share of calls that added a gold document) and ``chosen`` (calls on the
        exploration path). A measurement of what each action finds, gold labels allowed."""
        out: dict[str, dict[str, float]] = {}
        for a in retrieval_actions:
            ss = [s for s in self.samples if s.action == a and s.executed]
            if not ss:
                continue
            gains = np.array([s.target for s in ss], dtype=np.float64)
            out[a] = {"calls": len(ss), "questions": len({s.qid for s in ss}),
                      "mean_sr_gain": round(float(gains.mean()), 4),
                      "hit_rate": round(float((gains > 0).mean()), 4),
                      "chosen": sum(s.chosen for s in ss)}
        return out

    def set_continuation_target(self, kind: str) -> "TrainingData":
        """Recompute every prefix's ``gain`` as ``kind`` from the stored components (no model
        call). Raises ValueError when the data lacks them (``f1`` needs answer F1s, collected
        with ``continuation="f1"``)."""
        if kind not in CONTINUATION_TARGETS:
            raise ValueError(f"unknown continuation target {kind!r}; one of "
                             f"{CONTINUATION_TARGETS}")
        vals = [p.target(kind) for p in self.prefixes]
        if any(not np.isfinite(v) for v in vals):
            raise ValueError(f"these trajectories lack the components of the {kind!r} target; "
                             f"collect them with continuation={kind!r}")
        for p, v in zip(self.prefixes, vals):
            p.gain = float(v)
        self.continuation_target = kind
        return self

    def subset(self, qids) -> "TrainingData":
        """The records of the given questions only (cross-validation folds)."""
        keep = set(qids)
        return TrainingData([s for s in self.samples if s.qid in keep],
                            [p for p in self.prefixes if p.qid in keep],
                            [q for q in self.questions if q in keep], self.continuation_target,
                            dict(self.run),
                            None if self.calibration is None else self.calibration.subset(keep))

    # -- persistence (plain arrays, no pickle) ------------------------------------------
    _SAMPLE_SCALARS = ("step", "target", "cost_tokens", "n_docs", "chosen", "executed")

    def save(self, path: str | Path) -> Path:
        """Write the records to ``path`` (``.npz``, written atomically). Raises ValueError
        when there are prefixes but no stated :attr:`continuation_target` (a file must say
        what its gains are)."""
        from .storage import atomic_write_bytes
        if self.continuation_target is not None and \
                self.continuation_target not in CONTINUATION_TARGETS:
            raise ValueError(f"unknown continuation target {self.continuation_target!r}; one "
                             f"of {CONTINUATION_TARGETS}")
        if self.prefixes and self.continuation_target is None:
            raise ValueError("these prefixes have no stated continuation target "
                             "(continuation_target is None): pass continuation_target= when "
                             "building the TrainingData, or call set_continuation_target(kind), "
                             "before saving")
        from .features import STATE_FEATURE_NAMES
        n_feat, n_state = len(FEATURE_NAMES), len(STATE_FEATURE_NAMES)
        pf = [f.name for f in fields(PrefixSample) if f.name not in ("qid", "features")]
        arrays = {
            "meta": np.array(json.dumps({
                "format": FORMAT, "continuation_target": self.continuation_target,
                "questions": list(self.questions), "feature_names": list(FEATURE_NAMES),
                "state_feature_names": list(STATE_FEATURE_NAMES), "prefix_fields": pf,
                "run": self.run, "calibration": None if self.calibration is None
                else self.calibration._meta()})),
            "s_qid": np.array([s.qid for s in self.samples], dtype=str),
            "s_action": np.array([s.action for s in self.samples], dtype=str),
            "s_features": np.stack([s.features for s in self.samples]).astype(np.float64)
            if self.samples else np.zeros((0, n_feat)),
            "p_qid": np.array([p.qid for p in self.prefixes], dtype=str),
            "p_features": np.stack([p.features for p in self.prefixes]).astype(np.float64)
            if self.prefixes else np.zeros((0, n_state)),
        }
        for name in self._SAMPLE_SCALARS:
            arrays[f"s_{name}"] = np.array([getattr(s, name) for s in self.samples],
                                           dtype=np.float64)
        for name in pf:
            arrays[f"p_{name}"] = np.array([getattr(p, name) for p in self.prefixes],
                                           dtype=np.float64)
        if self.calibration is not None:
            arrays.update(self.calibration._arrays())
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        return atomic_write_bytes(path, buf.getvalue())

    @classmethod
    def load(cls, path: str | Path) -> "TrainingData":
        """Read a file written by :meth:`save`. Raises ValueError naming the file when it is
        not one, or when its features are not this library's (retrain or re-collect)."""
        try:
            raw = Path(path).read_bytes()
        except OSError as e:
            raise ValueError(f"{path}: cannot read the training-data file ({e})") from None
        return cls.load_bytes(raw, path)

    @classmethod
    def load_bytes(cls, raw: bytes, path: str | Path = "<bytes>") -> "TrainingData":
        """:meth:`load` from the file's bytes (``path`` names it in errors): a caller that
        records the file's sha256 hashes exactly the bytes it loads."""
        from .features import STATE_FEATURE_NAMES
        import zipfile
        import zlib
        path = Path(path)
        try:
            with np.load(io.BytesIO(raw), allow_pickle=False) as z:
                a = {k: z[k] for k in z.files}
            meta = json.loads(str(a["meta"]))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as e:
            raise ValueError(f"{path}: not a training-data file written by "
                             f"TrainingData.save ({e})") from None
        if meta.get("format", 1) > FORMAT:
            raise ValueError(f"{path}: training-data format {meta.get('format')} is newer "
                             f"than this library's ({FORMAT}); update the library")
        for name, ours in (("feature_names", FEATURE_NAMES),
                           ("state_feature_names", STATE_FEATURE_NAMES)):
            if meta.get(name) != list(ours):
                raise ValueError(f"{path}: its feature names (field {name!r}) differ from "
                                 "this library's; collect the trajectories again")
        try:  # every format writes these fields: a file without one is not complete
            samples = [Sample(str(q), int(st), str(act), f, float(t), float(c), int(nd),
                              bool(ch), bool(ex))
                       for q, st, act, f, t, c, nd, ch, ex in zip(
                           a["s_qid"], a["s_step"], a["s_action"], a["s_features"],
                           a["s_target"], a["s_cost_tokens"], a["s_n_docs"], a["s_chosen"],
                           a["s_executed"])]
            prefixes = []
            for i, (q, f) in enumerate(zip(a["p_qid"], a["p_features"])):
                kw = {name: float(a[f"p_{name}"][i]) for name in meta["prefix_fields"]}
                kw["step"] = int(kw["step"])
                prefixes.append(PrefixSample(str(q), f, **kw))
            questions = list(meta["questions"])
            # stated by every save(); never defaulted (a guess would mislabel the gains)
            target = meta["continuation_target"]
        except KeyError as e:
            raise ValueError(f"{path}: not a complete training-data file (no field {e})") \
                from None
        if target is not None and target not in CONTINUATION_TARGETS:
            raise ValueError(f"{path}: field 'continuation_target' is {target!r}, not one of "
                             f"{CONTINUATION_TARGETS}")
        if prefixes and target is None:
            raise ValueError(f"{path}: field 'continuation_target' is null but the file has "
                             f"{len(prefixes)} prefixes: what their gains are is not stated")
        calib = meta.get("calibration")
        try:
            table = CalibrationTable._from(a, calib, path) if calib else None
        except KeyError as e:
            raise ValueError(f"{path}: its calibration table is incomplete (no {e})") from None
        return cls(samples, prefixes, questions, target, dict(meta.get("run") or {}), table)

    def to_frame(self):
        """The samples as a pandas DataFrame (one row per labelled (s, a); no features)."""
        import pandas as pd
        return pd.DataFrame([{"qid": s.qid, "step": s.step, "action": s.action,
                              "target": s.target, "chosen": s.chosen, "n_docs": s.n_docs,
                              "cost_tokens": s.cost_tokens} for s in self.samples],
                            columns=["qid", "step", "action", "target", "chosen", "n_docs",
                                     "cost_tokens"])

    def prefix_frame(self):
        """The prefixes as a DataFrame (no features): what stopping at each would give."""
        import pandas as pd
        cols = ["qid", "step", "gain", "onestep", "sr_now", "sr_end", "f1_now", "f1_end",
                "tokens", "answer_tokens"]
        return pd.DataFrame([{c: getattr(p, c) for c in cols} for p in self.prefixes],
                            columns=cols)
