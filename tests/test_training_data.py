"""Saved trajectories as a complete training input: TrainingData's run settings and sufficiency
calibration table, and ``train --from-data`` (a policy from a saved .npz, no model call, cut
to the current split's training questions). No model runs here: collection uses the scripted
generator, and the --from-data runs use a generator factory that fails if it is ever called."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import dynakrag_lite.pipeline as pipeline_mod
from dynakrag_lite.config import ControlConfig, Environment
from dynakrag_lite.experiments.cli import main
from dynakrag_lite.data.sources import load_dataset, split_questions
from dynakrag_lite.policy import Policy, check_policy
from dynakrag_lite.training.calibration import train_signal
from dynakrag_lite.trajectories import TrainingData
from dynakrag_lite.training.files import (build_calibration, load_training_data, same_signal,
                                          save_training_data)

from helpers import ScriptedGenerator

REPO = Path(__file__).resolve().parents[1]
# Small but complete: 8 training questions of a 10-question evaluation split, the learned
# sufficiency signal (no LLM call) with answer F1s and its calibration on the first 4
# questions only (exercises the LLM-subset mask), a 2x2 tuning grid, 10 trees.
BASE = ["train", "--data", "library", "--generator", "scripted", "--seed", "13",
        "--trees", "10", "--min-leaf", "2", "--tune-folds", "2", "--lambdas", "0,0.0001",
        "--veto-thresholds", "0,1", "--sufficiency-signal", "learned",
        "--calibration-questions", "4", "--continuation-questions", "6"]
SPLIT = ["--n-eval", "10", "--limit", "8"]


class Forbidden:
    """Stands in for make_generator and build_setup: --from-data must need neither a model
    nor an index."""

    def __init__(self, what: str):
        self.what, self.calls = what, 0

    def __call__(self, *a, **kw):
        self.calls += 1
        raise AssertionError(f"--from-data called {self.what}")


def run(capsys, argv) -> tuple[int, dict | None, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    lines = [x for x in out.out.splitlines() if x.startswith("{")]
    return code, json.loads(lines[-1]) if lines else None, out.err


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """One real train run on the scripted generator with --save-data: (policy, trajectories)."""
    folder = tmp_path_factory.mktemp("collected")
    pol, traj = folder / "orig.joblib", folder / "traj.npz"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline_mod, "make_generator",
                   lambda spec, cache=True, **kw: ScriptedGenerator())
        assert main([*BASE, *SPLIT, "--out", str(pol), "--save-data", str(traj)]) == 0
    return pol, traj


@pytest.fixture
def no_model(monkeypatch):
    gen, setup = Forbidden("make_generator"), Forbidden("build_setup")
    monkeypatch.setattr(pipeline_mod, "make_generator", gen)
    monkeypatch.setattr(pipeline_mod, "build_setup", setup)
    return gen, setup


# -- the file ---------------------------------------------------------------------------
def test_saved_file_holds_the_run_settings_and_a_reproducing_calibration(collected):
    pol_path, traj = collected
    data = load_training_data(traj)
    run = data.run
    assert (run["dataset"], run["generator"], run["doc_chars"], run["per_action"]) == \
        ("library", "scripted", 600, 3)
    assert run["sufficiency_signal"] == "learned" and run["seed"] == 13
    assert run["split"]["n_eval"] == 10 and run["split"]["limit"] == 8
    assert "--save-data" in run["command"] and run["data_sha256"]
    table = data.calibration
    assert table is not None and table.reproduced is True and len(table) > 0
    assert set(table.qids.tolist()) <= set(data.questions)
    # the LLM-scored subset is the first --calibration-questions questions
    assert set(table.qids[table.llm].tolist()) <= set(data.questions[:4])
    pol = Policy.load(pol_path)
    assert table.signal().describe() == pol.sufficiency.describe() == table.signal_info


def test_old_format_files_still_load_without_run_or_calibration():
    """The committed MuSiQue trajectories predate the run settings (format 1)."""
    old = REPO / "results" / "trajectories" / "musique-qwen2.5-coder-0.5b.npz"
    if not old.exists():
        pytest.skip("committed trajectories not present")
    data = load_training_data(old)
    assert data.run == {} and data.calibration is None and len(data.questions) == 100
    assert data.subset(data.questions[:3]).calibration is None


@pytest.mark.parametrize("name", ["hotpotqa", "2wikimultihopqa", "musique"])
def test_committed_files_load_with_the_target_they_record(name):
    """Loading never substitutes a default: each committed file states 'f1' and its gains are
    F1(end) - F1(now) wherever an answer F1 was collected."""
    path = REPO / "results" / "trajectories" / f"{name}-qwen2.5-coder-0.5b.npz"
    if not path.exists():
        pytest.skip("committed trajectories not present")
    with np.load(path, allow_pickle=False) as z:
        recorded = json.loads(str(z["meta"]))["continuation_target"]
    data = load_training_data(path)
    assert recorded == data.continuation_target == "f1"
    gains = np.array([p.gain for p in data.prefixes])
    f1 = np.array([p.target("f1") for p in data.prefixes])
    assert np.isfinite(gains).any()
    assert np.array_equal(np.isfinite(gains), np.isfinite(f1))
    assert np.allclose(gains[np.isfinite(gains)], f1[np.isfinite(f1)])


def _hand_built(target=None) -> TrainingData:
    from dynakrag_lite.features import FEATURE_NAMES, STATE_FEATURE_NAMES
    from dynakrag_lite.trajectories import PrefixSample, Sample
    rng = np.random.default_rng(0)
    samples = [Sample(f"q{i}", 0, "retrieve_more", rng.random(len(FEATURE_NAMES)),
                      float(i % 2), 100.0, 3) for i in range(12)]
    prefixes = [PrefixSample(f"q{i}", rng.random(len(STATE_FEATURE_NAMES)), 0.0, 0,
                             onestep=0.1, sr_now=0.5, sr_end=1.0, f1_now=0.25, f1_end=1.0)
                for i in range(12)]
    kw = {} if target is None else {"continuation_target": target}
    return TrainingData(samples, prefixes, [f"q{i}" for i in range(12)], **kw)


def test_hand_built_prefixes_state_no_target_and_are_not_trained_on_until_stated(tmp_path):
    """A TrainingData built without continuation_target does not claim one (the old default
    labelled any gains 'onestep'): the continuation model and the file refuse them."""
    from dynakrag_lite.policy import PolicyError, train_policy
    data = _hand_built()
    assert data.continuation_target is None
    with pytest.raises(PolicyError, match="no stated continuation target"):
        train_policy(data, n_estimators=3, min_samples_leaf=2, n_jobs=1)
    with pytest.raises(ValueError, match="no stated continuation target"):
        save_training_data(data, tmp_path / "x.npz")
    assert not (tmp_path / "x.npz").exists()
    pol = train_policy(data.set_continuation_target("f1"), n_estimators=3,
                       min_samples_leaf=2, n_jobs=1)
    assert pol.meta["continuation_target"] == "f1" and pol.continuation_model is not None
    assert data.prefixes[0].gain == 0.75
    back = load_training_data(save_training_data(data, tmp_path / "x.npz"))
    assert back.continuation_target == "f1"


def test_samples_without_prefixes_need_no_target_and_round_trip_it_as_none(tmp_path):
    from dynakrag_lite.policy import train_policy
    data = _hand_built()
    data.prefixes = []
    back = load_training_data(save_training_data(data, tmp_path / "s.npz"))
    assert back.continuation_target is None
    assert train_policy(data, n_estimators=3, min_samples_leaf=2,
                        n_jobs=1).meta["continuation_target"] is None


def _without_meta_field(path: Path, field: str, value=...) -> Path:
    with np.load(path, allow_pickle=False) as z:
        a = {k: z[k] for k in z.files}
    meta = json.loads(str(a["meta"]))
    if value is ...:
        del meta[field]
    else:
        meta[field] = value
    a["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(path, **a)
    return path


def test_a_file_that_does_not_state_its_target_is_refused_naming_the_file(tmp_path):
    path = save_training_data(_hand_built("sr"), tmp_path / "old.npz")
    _without_meta_field(path, "continuation_target")
    with pytest.raises(ValueError, match=r"old\.npz: not a complete training-data file "
                                         r"\(no field 'continuation_target'\)"):
        load_training_data(path)
    _without_meta_field(path, "continuation_target", None)
    with pytest.raises(ValueError, match=r"old\.npz: field 'continuation_target' is null"):
        load_training_data(path)
    _without_meta_field(path, "continuation_target", "guess")
    with pytest.raises(ValueError, match=r"old\.npz: field 'continuation_target' is 'guess'"):
        load_training_data(path)


def test_calibration_on_a_subset_is_the_calibration_of_those_questions(library_questions,
                                                                         library_retriever):
    """Recalibrating from stored rows on fewer questions gives what train_signal computes
    from scratch on those questions (same states, same folds, same forest)."""
    env = Environment(library_retriever, ScriptedGenerator(),
                      ControlConfig(use_spacy=False, doc_chars=None))
    qs = library_questions[:6]
    live = train_signal(qs, env, "learned", llm_questions=None, seed=13, progress=False)
    table = build_calibration(qs, env, "learned", llm_questions=None, seed=13,
                              live_signal=live)
    assert table.reproduced is True
    few = qs[:4]
    fresh = train_signal(few, env, "learned", llm_questions=None, seed=13, progress=False)
    again = table.subset([q.id for q in few]).signal()
    assert same_signal(again, fresh, table.features)
    assert again.n_questions == 4


def test_auto_calibration_keeps_llm_scores_of_the_scored_subset(library_questions,
                                                                library_retriever, tmp_path):
    """auto calibrates text, margin and learned: the table keeps the LLM signals' scores on
    the first llm_questions questions (NaN elsewhere), survives the .npz, and rebuilds the
    signal train_signal chose."""
    from test_sufficiency import LogprobGenerator
    env = Environment(library_retriever, LogprobGenerator(sufficient_from=4),
                      ControlConfig(use_spacy=False, doc_chars=None))
    qs = library_questions[:6]
    live = train_signal(qs, env, "auto", llm_questions=3, seed=13, progress=False)
    table = build_calibration(qs, env, "auto", llm_questions=3, seed=13, live_signal=live)
    assert table.reproduced is True and set(table.scores) == {"text", "margin"}
    assert set(table.qids[table.llm].tolist()) == {q.id for q in qs[:3]}
    for v in (*table.scores.values(), table.text_extra):
        assert np.isfinite(v[table.llm]).all() and np.isnan(v[~table.llm]).all()
    back = load_training_data(save_training_data(
        TrainingData(questions=[q.id for q in qs], calibration=table),
        tmp_path / "t.npz")).calibration
    assert back.reproduced is True and back.settings == table.settings
    np.testing.assert_array_equal(back.features, table.features)
    assert same_signal(back.signal(), live, table.features)


# -- train --from-data ---------------------------------------------------------------------
def test_same_split_rebuilds_the_same_policy_without_a_model_call(collected, tmp_path,
                                                                  capsys, no_model):
    pol_path, traj = collected
    out = tmp_path / "again.joblib"
    code, res, err = run(capsys, [*BASE, *SPLIT, "--out", str(out), "--from-data", str(traj)])
    assert code == 0, err
    gen, setup = no_model
    assert gen.calls == 0 and setup.calls == 0
    a, b = Policy.load(pol_path), Policy.load(out)
    data = load_training_data(traj)
    X, _, _ = data.matrix()
    np.testing.assert_array_equal(a.value_model.predict(X), b.value_model.predict(X))
    P = np.stack([p.features for p in data.prefixes])
    np.testing.assert_array_equal(a.continuation_model.predict(P),
                                  b.continuation_model.predict(P))
    assert a.cost_model == b.cost_model
    assert (a.lam, a.veto_threshold, a.stop_rule) == (b.lam, b.veto_threshold, b.stop_rule)
    assert a.meta["tuning"] == b.meta["tuning"]
    assert a.meta["train_ids"] == b.meta["train_ids"] == data.questions
    assert a.meta["data_hash"] == b.meta["data_hash"]
    assert same_signal(a.sufficiency, b.sufficiency, data.calibration.features)
    m = b.meta
    assert m["from_data"].endswith("traj.npz") and not m["sufficiency_recalibrated"]
    import hashlib
    assert m["from_data_sha256"] == hashlib.sha256(traj.read_bytes()).hexdigest()
    assert "--from-data" in m["command"] and "--save-data" in m["collection"]["command"]
    assert m["from_data_questions"] == {"in_file": 8, "kept": 8, "moved_to_eval": 0,
                                        "not_selected": 0, "missing": 0}
    assert res["from_data_questions"]["kept"] == 8


def test_a_larger_eval_split_drops_the_questions_it_moved_into_evaluation(collected, tmp_path,
                                                                          capsys, no_model):
    _, traj = collected
    file_ids = load_training_data(traj).questions
    train20, evals = split_questions(load_dataset("library"), 20, 0)
    eval_ids = [q.id for q in evals]
    moved = [i for i in file_ids if i in set(eval_ids)]
    assert moved  # the split seed puts 2 of the 8 collected questions into evaluation
    out = tmp_path / "n20.joblib"
    code, res, err = run(capsys, [*BASE, "--n-eval", "20", "--limit", "8", "--out", str(out),
                                  "--from-data", str(traj)])
    assert code == 0, err
    pol = Policy.load(out)
    kept = [i for i in file_ids if i not in moved]
    assert pol.meta["train_ids"] == kept and pol.meta["n_questions"] == len(kept)
    assert not set(pol.meta["train_ids"]) & set(eval_ids)
    counts = pol.meta["from_data_questions"]
    assert counts["moved_to_eval"] == len(moved) and counts["kept"] == len(kept)
    # the new split's first 8 training questions reach past the collected ones
    assert counts["missing"] == len({q.id for q in train20[:8]} - set(file_ids)) > 0
    assert pol.meta["sufficiency_recalibrated"] and pol.sufficiency.n_questions <= len(kept)
    assert f"{len(moved)} question(s)" in err
    # check_policy's overlap check is truthful: this split's evaluation passes ...
    check_policy(pol, embedder="all-MiniLM-L6-v2", doc_chars=600, per_action=3,
                 eval_ids=eval_ids)
    # ... while the original policy, trained on the moved questions, is refused for it
    from dynakrag_lite.policy import PolicyError
    with pytest.raises(PolicyError, match="were training questions"):
        check_policy(Policy.load(collected[0]), embedder="all-MiniLM-L6-v2", doc_chars=600,
                     per_action=3, eval_ids=eval_ids)


@pytest.mark.parametrize("change, field", [
    (["--doc-chars", "300"], "doc_chars"),
    (["--per-action", "2"], "per_action"),
    (["--seed", "7"], "seed"),
    (["--max-steps", "3"], "config.max_steps"),
    (["--sufficiency-signal", "text"], "sufficiency_signal"),
    (["--embedder", "all-mpnet-base-v2"], "embedder"),
])
def test_a_file_collected_under_other_settings_is_refused_naming_the_field(
        collected, tmp_path, capsys, no_model, change, field):
    _, traj = collected
    out = tmp_path / "p.joblib"
    code, res, err = run(capsys, [*BASE, *SPLIT, *change, "--out", str(out),
                                  "--from-data", str(traj)])
    assert code == 2 and res is None and not out.exists()
    assert "traj.npz" in err and f"{field}: file " in err


def test_other_generator_and_dataset_are_refused(collected, tmp_path, capsys, no_model):
    _, traj = collected
    argv = [*BASE, *SPLIT, "--out", str(tmp_path / "p.joblib"), "--from-data", str(traj)]
    argv[argv.index("scripted")] = "qwen2.5-coder-0.5b"
    code, _, err = run(capsys, argv)
    assert code == 2 and "generator: file 'scripted'" in err


def test_old_file_and_file_without_calibration_states_are_refused(collected, tmp_path,
                                                                  capsys, no_model):
    _, traj = collected
    data = load_training_data(traj)
    data.run = {}
    old = save_training_data(data, tmp_path / "old.npz")
    code, _, err = run(capsys, [*BASE, *SPLIT, "--out", str(tmp_path / "a.joblib"),
                                "--from-data", str(old)])
    assert code == 2 and "old.npz" in err and "'run' metadata" in err
    data = load_training_data(traj)
    data.calibration = None
    nocal = save_training_data(data, tmp_path / "nocal.npz")
    code, _, err = run(capsys, [*BASE, *SPLIT, "--out", str(tmp_path / "b.joblib"),
                                "--from-data", str(nocal)])
    assert code == 2 and "nocal.npz" in err and "calibration states" in err
    # the text probe needs no calibration: the same file then serves a text-signal run?
    # No: the trajectories were collected under the learned signal, so it is refused too.
    code, _, err = run(capsys, [*BASE, *SPLIT, "--sufficiency-signal", "text",
                                "--out", str(tmp_path / "c.joblib"), "--from-data", str(nocal)])
    assert code == 2 and "sufficiency_signal: file 'learned'" in err


def test_continuation_target_is_recomputed_from_stored_components(collected, tmp_path, capsys,
                                                                  no_model):
    _, traj = collected
    out = tmp_path / "sr.joblib"
    code, res, err = run(capsys, [*BASE, *SPLIT, "--continuation-target", "sr",
                                  "--out", str(out), "--from-data", str(traj)])
    assert code == 0, err
    pol = Policy.load(out)
    assert pol.meta["continuation_target"] == "sr"
    # SR targets exist for every question, F1 ones only for the first 6 (answer calls)
    data = load_training_data(traj)
    assert pol.meta["n_continuation_questions"] == len({p.qid for p in data.prefixes}) > 6


def test_from_data_and_save_data_are_mutually_exclusive(collected, tmp_path, capsys):
    _, traj = collected
    with pytest.raises(SystemExit) as e:
        main([*BASE, *SPLIT, "--out", str(tmp_path / "p.joblib"), "--from-data", str(traj),
              "--save-data", str(tmp_path / "t.npz")])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_policy_train_questions_lets_a_training_split_grid_run_and_records_it(
        collected, tmp_path, capsys, monkeypatch):
    """evaluate refuses a policy's own training questions unless --policy-train-questions is
    given, which only --split train accepts; the summary then says how many were in-sample."""
    monkeypatch.setattr(pipeline_mod, "make_generator",
                        lambda spec, cache=True, **kw: ScriptedGenerator())
    pol = collected[0]
    ids = Policy.load(pol).meta["train_ids"]
    argv = ["evaluate", "--data", "library", "--generator", "scripted", "--method", "dynakrag",
            "--policy", str(pol), "--n-eval", "10", "--split", "train", "--limit", "2"]
    code, _, err = run(capsys, [*argv, "--out", str(tmp_path / "refused")])
    assert code == 2 and "2 evaluation question(s) were training questions" in err
    assert not (tmp_path / "refused").exists()
    code, _, err = run(capsys, [*argv[:-4], "--split", "eval", "--limit", "2",
                                "--policy-train-questions", "--out", str(tmp_path / "ev")])
    assert code == 2 and "--policy-train-questions is for --split train" in err
    out = tmp_path / "grid"
    code, _, err = run(capsys, [*argv, "--policy-train-questions", "--out", str(out)])
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy"]["training_questions_run"] == 2
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ids[:2]
