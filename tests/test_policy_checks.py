"""A saved policy is refused when it does not fit the run (features, embedder, truncation,
budget, scikit-learn version, train/eval overlap), and a policy file in a folder that keeps a
MANIFEST.sha256 (the project's results/policies) is unpickled only when its sha256 is the one
listed there; `python -m dynakrag_lite policy-manifest` checks and updates the manifest."""
from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import joblib
import numpy as np
import pytest
import sklearn
from sklearn.ensemble import RandomForestRegressor

from dynakrag_lite import policy as policy_mod
from dynakrag_lite.experiments import artifacts
from dynakrag_lite.experiments.artifacts import (POLICIES_DIR, display_path, register_policy,
                                                 update_policy_manifest)
from dynakrag_lite.experiments.cli import main
from dynakrag_lite.features import FEATURE_NAMES, STATE_FEATURE_NAMES
from dynakrag_lite.policy import CostModel, Policy, PolicyError, check_policy
from dynakrag_lite.storage import MANIFEST_NAME, read_manifest

RUN = {"embedder": "all-MiniLM-L6-v2", "doc_chars": 600, "per_action": 3}
TRAIN_IDS = ["q1", "q2", "q3"]


def _policy(**meta) -> Policy:
    rng = np.random.default_rng(0)
    X = rng.random((40, len(FEATURE_NAMES)))
    value = RandomForestRegressor(n_estimators=3, random_state=0).fit(X, X[:, 0])
    info = {"feature_names": FEATURE_NAMES, "state_feature_names": STATE_FEATURE_NAMES,
            "sklearn": sklearn.__version__, "numpy": np.__version__, "dataset": "library",
            "generator": "smollm2-135m", "train_ids": TRAIN_IDS, "n_questions": 3, **RUN}
    info.update(meta)
    return Policy(value, None, CostModel(), meta=info)


def test_matching_policy_is_accepted():
    check_policy(_policy(), **RUN, eval_ids=["e1", "e2"])


def test_policy_from_another_generator_is_allowed():
    check_policy(_policy(generator="qwen2.5-coder-1.5b"), **RUN, eval_ids=["e1"])


def test_embedder_aliases_count_as_the_same_model():
    check_policy(_policy(), **{**RUN, "embedder": "minilm"})


@pytest.mark.parametrize("meta, run, message", [
    ({"embedder": "all-mpnet-base-v2"}, {}, r"embedder 'all-mpnet-base-v2'.*uses 'all-MiniLM"),
    ({}, {"embedder": "BAAI/bge-large-en-v1.5"}, r"this run uses 'BAAI/bge-large-en-v1.5'"),
    ({"doc_chars": 300}, {}, r"doc_chars=300, this run uses 600"),
    ({}, {"doc_chars": None}, r"doc_chars=600, this run uses None"),
    ({"per_action": 5}, {}, r"per_action=5 .*this run uses 3"),
    ({"sklearn": "0.24.2"}, {}, rf"scikit-learn 0.24.2, installed is {sklearn.__version__}"),
    ({"feature_names": FEATURE_NAMES[:-1] + ("old_feature",)}, {},
     r"other features.*old_feature"),
    ({"feature_names": FEATURE_NAMES[::-1]}, {}, r"other features \(same names in another"),
])
def test_each_mismatch_is_refused(meta, run, message):
    with pytest.raises(PolicyError, match=message):
        check_policy(_policy(**meta), **{**RUN, **run})


def test_missing_metadata_is_refused_not_assumed():
    pol = _policy()
    del pol.meta["embedder"], pol.meta["train_ids"]
    with pytest.raises(PolicyError, match=r"lacks \['embedder', 'train_ids'\]"):
        check_policy(pol, **RUN)


def test_training_and_evaluation_overlap_is_refused_with_count_and_example():
    with pytest.raises(PolicyError, match=r"2 evaluation question\(s\) were training "
                                          r"questions of this policy \(e.g. 'q2'\)"):
        check_policy(_policy(), **RUN, eval_ids=["e1", "q2", "q3", "q2"])


def test_every_problem_is_listed_at_once():
    with pytest.raises(PolicyError) as e:
        check_policy(_policy(per_action=5, doc_chars=100), **RUN, eval_ids=["q1"])
    assert all(s in str(e.value) for s in ("per_action=5", "doc_chars=100", "q1"))


# -- saving, loading, provenance -----------------------------------------------------------------

def test_save_records_library_versions_and_writes_no_temp_files(tmp_path):
    path = _policy().save(tmp_path / "p.joblib")
    back = Policy.load(path)
    assert back.meta["joblib"] == joblib.__version__
    assert back.meta["sklearn"] == sklearn.__version__ and back.meta["numpy"] == np.__version__
    assert [p.name for p in tmp_path.iterdir()] == ["p.joblib"]


def test_provenance_after_load_needs_no_argument(tmp_path):
    path = _policy().save(tmp_path / "p.joblib")
    prov = Policy.load(path).provenance()
    assert prov["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert prov["generator"] == "smollm2-135m" and prov["dataset"] == "library"
    assert prov["n_train"] == 3
    assert not Path(prov["path"]).is_absolute() and prov["path"].endswith("p.joblib")
    with pytest.raises(PolicyError, match="not loaded from a file"):
        _policy().provenance()
    assert _policy().provenance(path)["sha256"] == prov["sha256"]


def test_provenance_of_a_project_policy_is_project_relative(monkeypatch):
    files = sorted(POLICIES_DIR.glob("*.joblib"))
    if not files:
        pytest.skip("no committed policy")
    prov = Policy.load(files[0]).provenance()
    assert prov["path"] == f"results/policies/{files[0].name}"
    # evaluate records it as the project knows it, from any working directory
    monkeypatch.chdir(POLICIES_DIR.parent.parent / "book")
    assert display_path(files[0]) == f"results/policies/{files[0].name}"


# -- the manifest --------------------------------------------------------------------------------

def test_committed_policies_match_the_committed_manifest():
    entries = read_manifest(POLICIES_DIR)
    files = sorted(POLICIES_DIR.glob("*.joblib"))
    assert sorted(entries) == [f.name for f in files], "run: python -m dynakrag_lite " \
                                                       "policy-manifest --update <new policy file>"
    for f in files:
        assert entries[f.name] == hashlib.sha256(f.read_bytes()).hexdigest(), f.name
    text = (POLICIES_DIR / MANIFEST_NAME).read_text()
    assert all(len(line.split("  ")) == 2 for line in text.splitlines())  # sha256sum format


def test_the_check_command_passes_on_the_committed_policies(capsys):
    assert main(["policy-manifest", "--check"]) == 0
    assert "every policy matches the manifest" in capsys.readouterr().out


@pytest.fixture
def project_folder(tmp_path, monkeypatch):
    """Stand-in for results/policies (the real one is shared and committed): a folder that
    keeps a manifest, empty for now."""
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / MANIFEST_NAME).write_text("")
    monkeypatch.setattr(artifacts, "POLICIES_DIR", folder)
    return folder


def test_a_folder_without_manifest_is_the_user_s_own(tmp_path):
    """Loading verifies against the manifest that sits beside the file, wherever it is; a
    folder without one holds the user's files, loaded as they are."""
    path = _policy().save(tmp_path / "mine.joblib")
    assert Policy.load(path).meta["dataset"] == "library"
    (tmp_path / MANIFEST_NAME).write_text("")  # from now on the folder vouches for its files
    with pytest.raises(PolicyError, match=r"mine.joblib: not listed in .*MANIFEST.sha256.*"
                                          r"policy-manifest --update"):
        Policy.load(path)


def test_project_policy_missing_from_manifest_is_refused(project_folder):
    path = _policy().save(project_folder / "lib-x.joblib")
    with pytest.raises(PolicyError, match=r"lib-x.joblib: not listed in .*MANIFEST.sha256"):
        Policy.load(path)
    update_policy_manifest(project_folder, files=[path])
    assert Policy.load(path).meta["dataset"] == "library"


def test_project_policy_with_changed_bytes_is_refused(project_folder):
    path = _policy().save(project_folder / "lib-x.joblib")
    update_policy_manifest(project_folder, files=[path])
    _policy(dataset="tampered").save(path)
    with pytest.raises(PolicyError, match=r"lib-x.joblib: sha256 .* does not match"):
        Policy.load(path)
    assert Policy.load(path, trusted=True).meta["dataset"] == "tampered"  # explicit opt-out


class _Payload:
    """Unpickling this touches a marker file: the stand-in for malicious code."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_mismatched_file_is_never_unpickled(project_folder, tmp_path):
    marker = tmp_path / "code-ran"
    good = _policy().save(project_folder / "lib-x.joblib")
    update_policy_manifest(project_folder, files=[good])
    good.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(PolicyError, match="does not match"):
        Policy.load(good)
    assert not marker.exists()
    with pytest.raises(PolicyError):  # trusted: it does run, then fails as a non-policy
        Policy.load(good, trusted=True)
    assert marker.exists()


def test_policy_without_manifest_is_trusted_by_default_and_can_be_checked(tmp_path):
    path = _policy().save(tmp_path / "mine.joblib")
    assert Policy.load(path).meta["generator"] == "smollm2-135m"
    with pytest.raises(PolicyError, match="not listed"):
        Policy.load(path, trusted=False)
    update_policy_manifest(tmp_path, files=[path])
    Policy.load(path, trusted=False)
    Policy.load(path)


def test_update_manifest_keeps_other_entries_and_drops_deleted_files(project_folder):
    a = _policy().save(project_folder / "a.joblib")
    b = _policy(dataset="b").save(project_folder / "b.joblib")
    update_policy_manifest(project_folder, files=[a])
    assert list(read_manifest(project_folder)) == ["a.joblib"]  # b is not vouched for
    update_policy_manifest(project_folder, files=[b])
    assert sorted(read_manifest(project_folder)) == ["a.joblib", "b.joblib"]
    a.unlink()
    update_policy_manifest(project_folder)
    assert list(read_manifest(project_folder)) == ["b.joblib"]


def test_manifest_command_line(project_folder, capsys):
    path = _policy().save(project_folder / "c.joblib")
    assert main(["policy-manifest", str(project_folder)]) == 2  # --check is the default
    assert "c.joblib: not listed in MANIFEST.sha256" in capsys.readouterr().err
    assert main(["policy-manifest", "--update", str(path)]) == 0
    assert "MANIFEST.sha256" in capsys.readouterr().out
    Policy.load(path)
    assert main(["policy-manifest", "--check", str(project_folder)]) == 0
    _policy(dataset="changed").save(path)
    assert main(["policy-manifest", "--check", str(project_folder)]) == 2
    assert "c.joblib: sha256 differs" in capsys.readouterr().err


def _bad_policy_file(kind: str, folder: Path, marker: Path) -> Path:
    path = folder / f"{kind}.joblib"
    if kind == "text":
        path.write_text("not a policy\n")
    elif kind == "truncated":
        raw = _policy().save(folder / "whole.joblib").read_bytes()
        path.write_bytes(raw[: len(raw) // 2])
    elif kind == "bare-pickle":  # code, not what Policy.save writes: refused, never run
        path.write_bytes(pickle.dumps(_Payload(marker)))
    return path  # "missing": never created


@pytest.mark.parametrize("kind", ["missing", "text", "truncated", "bare-pickle"])
def test_manifest_command_reports_a_bad_file_in_one_line_with_exit_code_2(
        kind, project_folder, tmp_path, capsys):
    """`error: ...` naming the file, exit 2, no traceback (an exception escaping main would
    fail this test), and the manifest is not touched."""
    good = _policy().save(project_folder / "good.joblib")
    update_policy_manifest(project_folder, files=[good])
    before = (project_folder / MANIFEST_NAME).read_bytes()
    marker = tmp_path / "code-ran"
    bad = _bad_policy_file(kind, project_folder, marker)
    assert main(["policy-manifest", "--update", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert str(bad) in err
    assert (project_folder / MANIFEST_NAME).read_bytes() == before
    assert not marker.exists()
    if kind != "missing":  # rebuilding from the whole folder refuses it too
        assert main(["policy-manifest", "--update", str(project_folder)]) == 2
        assert str(bad) in capsys.readouterr().err
        assert (project_folder / MANIFEST_NAME).read_bytes() == before


def test_python_m_policy_manifest_reports_a_bad_file_without_traceback(tmp_path):
    """The command run as a program ends the same way."""
    import subprocess
    import sys
    bad = tmp_path / "notes.joblib"
    bad.write_text("not a policy\n")
    out = subprocess.run([sys.executable, "-m", "dynakrag_lite", "policy-manifest", "--update",
                          str(bad)], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith("error: ") and str(bad) in out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1
    assert not (tmp_path / MANIFEST_NAME).exists()


def test_register_policy_after_training(project_folder, tmp_path):
    path = _policy().save(project_folder / "d.joblib")
    assert register_policy(path) == project_folder / MANIFEST_NAME
    Policy.load(path)
    elsewhere = tmp_path / "mine"
    own = _policy().save(elsewhere / "e.joblib")
    assert register_policy(own) is None  # a user's folder: no manifest imposed
    assert not (elsewhere / MANIFEST_NAME).exists()


def test_update_manifest_vouches_for_the_bytes_it_checked_reading_them_once(
        project_folder, monkeypatch):
    """The manifest entry is the sha256 of the bytes the policy check read and accepted: the
    file is not read a second time to hash it, so a file replaced between the check and the
    hash is not vouched for."""
    from dynakrag_lite import storage
    path = _policy().save(project_folder / "lib-x.joblib")
    checked = path.read_bytes()
    real_check = policy_mod.check_policy_file

    def check_then_replace(p):
        digest = real_check(p)
        p.write_bytes(b"replaced after the check")
        return digest

    def no_second_read(p):
        raise AssertionError(f"{p} read again to hash it")
    monkeypatch.setattr(artifacts, "check_policy_file", check_then_replace)
    monkeypatch.setattr(storage, "sha256_file", no_second_read)
    update_policy_manifest(project_folder, files=[path])
    assert read_manifest(project_folder) == {"lib-x.joblib": hashlib.sha256(checked).hexdigest()}
