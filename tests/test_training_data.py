"""Saved trajectories as a complete training input: TrainingData's run settings and sufficiency
calibration table, and ``train --from-data`` (a policy from a saved .npz, no model call, cut
to the current split's training questions). No model runs here: collection uses the scripted
generator, and the --from-data runs use a generator factory that fails if it is ever called."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import dynakrag_lite.generators.base as generators_mod
import dynakrag_lite.pipeline as pipeline_mod
from dynakrag_lite.actions import ControlConfig, Environment
from dynakrag_lite.experiments.cli import main
from dynakrag_lite.data.sources import load_dataset, split_questions
from dynakrag_lite.policy import Policy, check_policy
from dynakrag_lite.sufficiency import train_signal
from dynakrag_lite.training_data import TrainingData, build_calibration, same_signal

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
        mp.setattr(generators_mod, "make_generator",
                   lambda spec, cache=True, **kw: ScriptedGenerator())
        assert main([*BASE, *SPLIT, "--out", str(pol), "--save-data", str(traj)]) == 0
    return pol, traj


@pytest.fixture
def no_model(monkeypatch):
    gen, setup = Forbidden("make_generator"), Forbidden("build_setup")
    monkeypatch.setattr(generators_mod, "make_generator", gen)
    monkeypatch.setattr(pipeline_mod, "build_setup", setup)
    return gen, setup


# -- the file ---------------------------------------------------------------------------
def test_saved_file_holds_the_run_settings_and_a_reproducing_calibration(collected):
    pol_path, traj = collected
    data = TrainingData.load(traj)
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
    data = TrainingData.load(old)
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
    data = TrainingData.load(path)
    assert recorded == data.continuation_target == "f1"
    gains = np.array([p.gain for p in data.prefixes])
    f1 = np.array([p.target("f1") for p in data.prefixes])
    assert np.isfinite(gains).any()
    assert np.array_equal(np.isfinite(gains), np.isfinite(f1))
    assert np.allclose(gains[np.isfinite(gains)], f1[np.isfinite(f1)])


def _hand_built(target=None) -> TrainingData:
    from dynakrag_lite.features import FEATURE_NAMES, STATE_FEATURE_NAMES
    from dynakrag_lite.training_data import PrefixSample, Sample
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
        data.save(tmp_path / "x.npz")
    assert not (tmp_path / "x.npz").exists()
    pol = train_policy(data.set_continuation_target("f1"), n_estimators=3,
                       min_samples_leaf=2, n_jobs=1)
    assert pol.meta["continuation_target"] == "f1" and pol.continuation_model is not None
    assert data.prefixes[0].gain == 0.75
    back = TrainingData.load(data.save(tmp_path / "x.npz"))
    assert back.continuation_target == "f1"


def test_samples_without_prefixes_need_no_target_and_round_trip_it_as_none(tmp_path):
    from dynakrag_lite.policy import train_policy
    data = _hand_built()
    data.prefixes = []
    assert TrainingData.load(data.save(tmp_path / "s.npz")).continuation_target is None
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
    path = _hand_built("sr").save(tmp_path / "old.npz")
    _without_meta_field(path, "continuation_target")
    with pytest.raises(ValueError, match=r"old\.npz: not a complete training-data file "
                                         r"\(no field 'continuation_target'\)"):
        TrainingData.load(path)
    _without_meta_field(path, "continuation_target", None)
    with pytest.raises(ValueError, match=r"old\.npz: field 'continuation_target' is null"):
        TrainingData.load(path)
    _without_meta_field(path, "continuation_target", "guess")
    with pytest.raises(ValueError, match=r"old\.npz: field 'continuation_target' is 'guess'"):
        TrainingData.load(path)


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
    back = TrainingData.load(TrainingData(questions=[q.id for q in qs], calibration=table)
                             .save(tmp_path / "t.npz")).calibration
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
    data = TrainingData.load(traj)
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
    file_ids = TrainingData.load(traj).questions
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
    data = TrainingData.load(traj)
    data.run = {}
    old = data.save(tmp_path / "old.npz")
    code, _, err = run(capsys, [*BASE, *SPLIT, "--out", str(tmp_path / "a.joblib"),
                                "--from-data", str(old)])
    assert code == 2 and "old.npz" in err and "'run' metadata" in err
    data = TrainingData.load(traj)
    data.calibration = None
    nocal = data.save(tmp_path / "nocal.npz")
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
    data = TrainingData.load(traj)
    assert pol.meta["n_continuation_questions"] == len({p.qid for p in data.prefixes}) > 6


def test_from_data_and_save_data_are_mutually_exclusive(collected, tmp_path, capsys):
    _, traj = collected
    with pytest.raises(SystemExit) as e:
        main([*BASE, *SPLIT, "--out", str(tmp_path / "p.joblib"), "--from-data", str(traj),
              "--save-data", str(tmp_path / "t.npz")])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


# -- train --from-data FILE --signal-from POLICY: format-1 files -----------------------------
def as_format_1(path: Path) -> Path:
    """Rewrite a saved .npz in place as format 1 (what the committed trajectories are): no
    'run' settings, no calibration table."""
    with np.load(path) as z:
        a = {k: z[k] for k in z.files if not k.startswith("c_")}
    meta = json.loads(str(a["meta"]))
    del meta["run"], meta["calibration"]
    meta["format"] = 1
    a["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(path, **a)
    return path


@pytest.fixture(scope="module")
def collected_v1(tmp_path_factory):
    """Another real train run with --save-data, its file then made format 1: (policy, file),
    the policy being the one trained by the run that wrote the file."""
    folder = tmp_path_factory.mktemp("collected_v1")
    pol, traj = folder / "orig.joblib", folder / "traj.npz"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(generators_mod, "make_generator",
                   lambda spec, cache=True, **kw: ScriptedGenerator())
        assert main([*BASE, *SPLIT, "--out", str(pol), "--save-data", str(traj)]) == 0
    as_format_1(traj)
    return pol, traj


def doctored(pol_path: Path, folder: Path, **meta) -> Path:
    """A copy of a policy with some metadata changed (a policy of another run, as far as the
    provenance checks can tell)."""
    pol = Policy.load(pol_path)
    pol.meta.update(meta)
    return pol.save(folder / "doctored.joblib")


def test_committed_style_format_1_file_has_no_run_or_calibration(collected_v1):
    data = TrainingData.load(collected_v1[1])
    assert data.run == {} and data.calibration is None and len(data.questions) == 8


def test_format_1_file_with_its_own_policy_builds_a_gain_policy_with_that_signal(
        collected, collected_v1, tmp_path, capsys, no_model):
    import hashlib
    src_path, traj = collected_v1
    out = tmp_path / "gain.joblib"
    code, res, err = run(capsys, [*BASE, *SPLIT, "--stop-rule", "gain", "--out", str(out),
                                  "--from-data", str(traj), "--signal-from", str(src_path)])
    assert code == 0, err
    gen, setup = no_model
    assert gen.calls == 0 and setup.calls == 0
    src, new = Policy.load(src_path), Policy.load(out)
    assert new.stop_rule == "gain" == res["stop_rule"] and src.stop_rule == "level"
    # the signal is the source policy's, not recalibrated
    X = TrainingData.load(collected[1]).calibration.features  # learned-signal features
    assert new.sufficiency.describe() == src.sufficiency.describe()
    assert same_signal(new.sufficiency, src.sufficiency, X)
    # the same trajectories and seed: the same value model
    data = TrainingData.load(traj)
    Xs, _, _ = data.matrix()
    np.testing.assert_array_equal(src.value_model.predict(Xs), new.value_model.predict(Xs))
    m = new.meta
    assert m["train_ids"] == src.meta["train_ids"] == data.questions
    assert m["signal_from"].endswith("orig.joblib") and res["signal_from"] == m["signal_from"]
    assert m["signal_from_sha256"] == hashlib.sha256(src_path.read_bytes()).hexdigest()
    assert m["run_metadata_from"] == "signal_from" and not m["sufficiency_recalibrated"]
    assert m["signal_train_ids_outside_training"] == []
    assert m["from_data_sha256"] == hashlib.sha256(traj.read_bytes()).hexdigest()
    assert m["collection"]["command"] == src.meta["command"]
    assert m["collection"]["split"]["limit"] == 8
    assert m["generator_model_id"] == src.meta["generator_model_id"]
    assert m["tuning"]["grid"][0]["stop_rule"] == "gain"


def test_format_1_file_without_signal_from_is_refused_naming_the_option(
        collected_v1, tmp_path, capsys, no_model):
    out = tmp_path / "p.joblib"
    code, res, err = run(capsys, [*BASE, *SPLIT, "--out", str(out),
                                  "--from-data", str(collected_v1[1])])
    assert code == 2 and res is None and not out.exists()
    assert "traj.npz" in err and "'run' metadata" in err and "--signal-from" in err


def test_signal_from_is_refused_with_a_format_2_file_or_without_from_data(
        collected, tmp_path, capsys, no_model):
    pol, traj = collected
    out = tmp_path / "p.joblib"
    code, _, err = run(capsys, [*BASE, *SPLIT, "--out", str(out), "--from-data", str(traj),
                                "--signal-from", str(pol)])
    assert code == 2 and not out.exists()
    assert "--signal-from" in err and "own run metadata" in err and "format 1" in err
    code, _, err = run(capsys, [*BASE, *SPLIT, "--out", str(out), "--signal-from", str(pol)])
    assert code == 2 and not out.exists() and "only goes with --from-data" in err


@pytest.mark.parametrize("meta, field", [
    ({"dataset": "musique"}, "dataset: policy 'musique', this run 'library'"),
    ({"train_ids": None}, "train_ids: policy 7 questions, file 8"),  # None: drop the last
    ({"data_hash": "0" * 16}, "data_hash: policy '0000000000000000'"),
    ({"embedder": "all-mpnet-base-v2"}, "embedder: policy 'all-mpnet-base-v2'"),
    ({"rf": {"n_estimators": 10, "min_samples_leaf": 2, "random_state": 7}},
     "seed: policy 7, this run 13"),
])
def test_a_policy_of_another_run_is_refused_naming_the_field(
        collected_v1, tmp_path, capsys, no_model, meta, field):
    src_path, traj = collected_v1
    if "train_ids" in meta:
        meta = {"train_ids": Policy.load(src_path).meta["train_ids"][:-1]}
    other = doctored(src_path, tmp_path, **meta)
    out = tmp_path / "p.joblib"
    code, res, err = run(capsys, [*BASE, *SPLIT, "--out", str(out), "--from-data", str(traj),
                                  "--signal-from", str(other)])
    assert code == 2 and res is None and not out.exists()
    assert "traj.npz" in err and "doctored.joblib" in err and field in err


def test_the_policy_of_another_save_data_file_is_refused(collected, collected_v1, tmp_path,
                                                         capsys, no_model):
    """The other fixture's run collected the very same trajectories (same questions, same
    data hash) but saved them elsewhere: only its --save-data path tells them apart."""
    out = tmp_path / "p.joblib"
    code, _, err = run(capsys, [*BASE, *SPLIT, "--out", str(out), "--from-data",
                                str(collected_v1[1]), "--signal-from", str(collected[0])])
    assert code == 2 and not out.exists()
    assert "save_data: policy '" in err and "collected0/traj.npz" in err
    assert "train_ids" not in err and "data_hash" not in err


@pytest.mark.parametrize("change, field", [
    (["--doc-chars", "300"], "doc_chars: policy 600, this run 300"),
    (["--continuation-questions", "5"], "continuation_questions: policy 6, this run 5"),
    (["--calibration-questions", "5"], "calibration_questions: policy 4, this run 5"),
    (["--max-steps", "3"], "config.max_steps: policy 4, this run 3"),
])
def test_this_runs_settings_are_checked_against_the_policys_record(
        collected_v1, tmp_path, capsys, no_model, change, field):
    """Fields the policy's meta lacks come from its recorded command."""
    src_path, traj = collected_v1
    out = tmp_path / "p.joblib"
    code, _, err = run(capsys, [*BASE, *SPLIT, *change, "--out", str(out), "--from-data",
                                str(traj), "--signal-from", str(src_path)])
    assert code == 2 and not out.exists() and field in err and "orig.joblib" in err


def test_signal_from_refuses_a_split_that_evaluates_its_calibration_questions(
        collected_v1, tmp_path, capsys, no_model):
    """--n-eval 20 moves 2 of the file's questions into evaluation: the signal (calibrated on
    them, not recalibratable) would have seen their gold support."""
    src_path, traj = collected_v1
    out = tmp_path / "p.joblib"
    code, _, err = run(capsys, [*BASE, "--n-eval", "20", "--limit", "8", "--out", str(out),
                                "--from-data", str(traj), "--signal-from", str(src_path)])
    assert code == 2 and not out.exists()
    assert "2 of which are evaluation questions" in err and "orig.joblib" in err


def test_signal_from_allows_fewer_training_questions_and_records_the_others(
        collected_v1, tmp_path, capsys, no_model):
    src_path, traj = collected_v1
    out = tmp_path / "p6.joblib"
    code, res, err = run(capsys, [*BASE, "--n-eval", "10", "--limit", "6", "--out", str(out),
                                  "--from-data", str(traj), "--signal-from", str(src_path)])
    assert code == 0, err
    src, new = Policy.load(src_path), Policy.load(out)
    file_ids = TrainingData.load(traj).questions
    assert new.meta["train_ids"] == file_ids[:6]
    assert new.meta["signal_train_ids_outside_training"] == file_ids[6:]
    assert new.sufficiency.describe() == src.sufficiency.describe()
    assert "2 question(s) outside this run's training questions" in err


# -- upgrade-data FILE --signal-from POLICY --out NEW: a format-1 file made format 2 ---------
UPGRADE = ["upgrade-data", *BASE[1:]]  # train's options: the run's own


def upgraded(capsys, collected_v1, folder: Path, *extra) -> tuple[int, dict | None, str, Path]:
    src_path, traj = collected_v1
    new = folder / "traj-v2.npz"
    code, res, err = run(capsys, [*UPGRADE, *SPLIT, *extra, str(traj), "--signal-from",
                                  str(src_path), "--out", str(new)])
    return code, res, err, new


def test_upgraded_file_equals_the_format_2_file_of_the_same_run(
        collected, collected_v1, tmp_path, capsys, monkeypatch):
    """Both fixtures are the same train run (same settings, same trajectories); one saved
    format 2, the other's file made format 1. Upgraded, the latter is the former: every array
    (samples, prefixes, calibration states) and the run settings, apart from the paths in the
    recorded command; the learned signal's states need no generator."""
    import os
    gen = Forbidden("make_generator")
    monkeypatch.setattr(generators_mod, "make_generator", gen)
    monkeypatch.delenv(generators_mod.REPLAY_ONLY_ENV, raising=False)
    before = collected_v1[1].read_bytes()
    code, res, err, new = upgraded(capsys, collected_v1, tmp_path)
    assert code == 0, err
    # replay-only during the upgrade, not after it (main() may be called again in-process)
    assert generators_mod.REPLAY_ONLY_ENV not in os.environ
    assert gen.calls == 0 and collected_v1[1].read_bytes() == before  # input untouched
    assert res["reproduced"] is True and res["questions"] == 8
    with np.load(collected[1]) as a, np.load(new) as b:
        assert sorted(a.files) == sorted(b.files)
        assert any(k.startswith("c_") for k in b.files)
        for k in a.files:
            if k != "meta":
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        ma, mb = json.loads(str(a["meta"])), json.loads(str(b["meta"]))
    ra, rb = ma.pop("run"), mb.pop("run")
    assert ma == mb  # format, questions, feature names, calibration settings and signal
    assert mb["calibration"]["reproduced"] is True
    for k in ra:
        if k != "command":
            assert rb[k] == ra[k], k
    assert rb["command"] == Policy.load(collected_v1[0]).meta["command"]
    up = rb["upgraded_from"]
    assert up["file"].endswith("traj.npz") and up["signal_from"].endswith("orig.joblib")
    assert "upgrade-data" in up["command"]
    data = TrainingData.load(new)
    assert data.calibration.signal().describe() == \
        Policy.load(collected_v1[0]).sufficiency.describe()


def test_upgraded_file_recalibrates_on_a_bigger_eval_split_where_signal_from_is_refused(
        collected, collected_v1, tmp_path, capsys):
    """--n-eval 20 moves 2 of the file's questions into evaluation: refused with the format-1
    file and --signal-from (the signal cannot be recalibrated), built from the upgraded file
    (recalibrated on the 6 kept questions), as from the run's own format-2 file."""
    code, _, err, new = upgraded(capsys, collected_v1, tmp_path)
    assert code == 0, err
    src_path, traj = collected_v1
    bigger = ["--n-eval", "20", "--limit", "8"]
    gen, setup = Forbidden("make_generator"), Forbidden("build_setup")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(generators_mod, "make_generator", gen)
        mp.setattr(pipeline_mod, "build_setup", setup)
        code, _, err = run(capsys, [*BASE, *bigger, "--out", str(tmp_path / "refused.joblib"),
                                    "--from-data", str(traj), "--signal-from", str(src_path)])
        assert code == 2 and "2 of which are evaluation questions" in err
        outs = {}
        for name, f in (("upgraded", new), ("format2", collected[1])):
            outs[name] = tmp_path / f"{name}.joblib"
            code, res, err = run(capsys, [*BASE, *bigger, "--out", str(outs[name]),
                                          "--from-data", str(f)])
            assert code == 0, err
            assert res["from_data_questions"]["moved_to_eval"] == 2
            assert "recalibrated on the kept questions" in err
    assert gen.calls == 0 and setup.calls == 0
    a, b = Policy.load(outs["upgraded"]), Policy.load(outs["format2"])
    assert a.meta["sufficiency_recalibrated"] is True
    assert a.meta["train_ids"] == b.meta["train_ids"] and len(a.meta["train_ids"]) == 6
    X = TrainingData.load(new).calibration.features
    assert same_signal(a.sufficiency, b.sufficiency, X)
    # measured on the LLM-scored subset (--calibration-questions 4), 2 of which moved
    assert a.sufficiency.n_questions == 2 < Policy.load(src_path).sufficiency.n_questions
    Xs, _, _ = TrainingData.load(new).matrix()
    np.testing.assert_array_equal(a.value_model.predict(Xs), b.value_model.predict(Xs))


def test_upgrade_refuses_the_input_as_out_a_format_2_file_and_another_runs_policy(
        collected, collected_v1, tmp_path, capsys):
    src_path, traj = collected_v1
    before = traj.read_bytes()
    code, _, err = run(capsys, [*UPGRADE, *SPLIT, str(traj), "--signal-from", str(src_path),
                                "--out", str(traj)])
    assert code == 2 and "input file" in err and traj.read_bytes() == before
    new = tmp_path / "v2.npz"
    code, _, err = run(capsys, [*UPGRADE, *SPLIT, str(collected[1]), "--signal-from",
                                str(collected[0]), "--out", str(new)])
    assert code == 2 and "already format 2" in err and "'run'" in err and not new.exists()
    other = doctored(src_path, tmp_path, data_hash="0" * 16)
    code, _, err = run(capsys, [*UPGRADE, *SPLIT, str(traj), "--signal-from", str(other),
                                "--out", str(new)])
    assert code == 2 and "data_hash: policy '0000000000000000'" in err and not new.exists()
    code, _, err = run(capsys, [*UPGRADE, *SPLIT, "--doc-chars", "300", str(traj),
                                "--signal-from", str(src_path), "--out", str(new)])
    assert code == 2 and "doc_chars: policy 600, this run 300" in err and not new.exists()


def test_upgrade_refuses_a_table_that_does_not_reproduce_the_policys_signal(
        collected_v1, tmp_path, capsys):
    """A policy whose signal the file's questions do not give (its threshold moved): the
    rebuilt calibration states do not reproduce it, and nothing is written."""
    from dataclasses import replace
    src_path, _ = collected_v1
    pol = Policy.load(src_path)
    pol.sufficiency = replace(pol.sufficiency, threshold=pol.sufficiency.threshold + 0.1)
    moved = pol.save(tmp_path / "moved.joblib")
    code, _, err, new = upgraded(capsys, (moved, collected_v1[1]), tmp_path)
    assert code == 2 and not new.exists()
    assert "do not reproduce" in err and "traj.npz" in err and "moved.joblib" in err
