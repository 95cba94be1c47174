"""Run fingerprints hash behaviour, not module bytes, and committed run folders stay resumable
(issue 22): version-1 records are read in version-2 terms only where they prove the setup."""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from dynakrag_lite import prompts
from dynakrag_lite.config import ControlConfig
from dynakrag_lite.data.corpus import Corpus, Document, doc_id_for
from dynakrag_lite.data.sources import data_dir, load_dataset
import dynakrag_lite.experiments.run as run_module
from dynakrag_lite.experiments.fingerprint import (LEGACY_PROMPTS, FingerprintError,
                                                    budget_record, build_change, corpus_sha256,
                                                    legacy_corpus_hash, llama_build,
                                                    prompts_digest, upgrade)
from dynakrag_lite.experiments.selection import (question_selection, recorded_selection,
                                                  selection_from_command)
from dynakrag_lite.storage import sha256_file

from helpers import ScriptedGenerator, require_model
from test_experiments import lexical_env, run

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "results").glob("**/run.json"))


def as_version_1(fp: dict, selector_path: str | None = None) -> dict:
    """What a version-1 run.json recorded for the same setup."""
    old = json.loads(json.dumps(fp))
    old["version"] = 1
    old["prompts_sha256"] = next(iter(LEGACY_PROMPTS))
    old["budgets"]["selector_path"] = selector_path
    old.pop("selector_sha256")
    return old


def test_prompts_behave_as_when_the_committed_runs_were_made():
    recorded = {json.loads(p.read_text())["fingerprint"]["prompts_sha256"] for p in COMMITTED}
    for digest in recorded:
        # a version-1 hash must be known and stand for today's behaviour; a version-2 one is it
        assert LEGACY_PROMPTS.get(digest, digest) == prompts_digest(), digest


def test_the_prompts_digest_sees_a_changed_template_and_a_changed_parser(monkeypatch):
    base = prompts_digest()
    monkeypatch.setattr(prompts, "ANSWER_MAX_TOKENS", prompts.ANSWER_MAX_TOKENS + 1)
    assert prompts_digest() != base
    monkeypatch.undo()
    monkeypatch.setattr(prompts, "parse_answer", lambda text: text.upper())
    # the probe runs what the module holds: a different parser is a different digest
    assert prompts_digest() != base


def test_a_version_1_folder_resumes_when_its_setup_is_proven_equal(tmp_path):
    qs, env = lexical_env()
    out = tmp_path / "run"
    run(qs[:2], env, out)
    record = json.loads((out / "run.json").read_text())
    fp = record["fingerprint"]
    old = as_version_1(fp)
    old["corpus_sha256"] = legacy_corpus_hash(env.retriever.corpus)
    (out / "run.json").write_text(json.dumps({"fingerprint": old, "command": "c"}))
    assert run(qs[:3], env, out)["n"] == 3
    now = json.loads((out / "run.json").read_text())
    assert now["fingerprint"] == fp and now["upgraded_from"] == old


def test_a_version_1_folder_whose_corpus_ids_are_not_content_hashes_is_refused():
    docs = [Document("a", "Title A", "text one"), Document("b", "Title B", "text two")]
    corpus = Corpus(docs, name="own-ids")
    old = {"version": 1, "corpus_sha256": legacy_corpus_hash(corpus), "budgets": {}}
    got = upgrade(old, corpus)
    assert "texts not recorded" in got["corpus_sha256"]
    # ... while the same texts under ids derived from them prove themselves
    pooled = Corpus([Document(doc_id_for(d.title, d.text), d.title, d.text) for d in docs])
    assert upgrade({"version": 1, "corpus_sha256": legacy_corpus_hash(pooled),
                    "budgets": {}}, pooled)["corpus_sha256"] == corpus_sha256(pooled)


def test_an_edited_text_changes_the_corpus_hash():
    a = Corpus([Document("x", "T", "one")], name="c")
    b = Corpus([Document("x", "T", "two")], name="c")
    assert legacy_corpus_hash(a) == legacy_corpus_hash(b)  # why version 1 could not see it
    assert corpus_sha256(a) != corpus_sha256(b)


def test_a_version_1_selector_path_becomes_the_file_hash(tmp_path):
    sel = tmp_path / "sel.joblib"
    sel.write_bytes(b"selector bytes")
    old = {"version": 1, "budgets": {"selector_path": str(sel)}}
    got = upgrade(old, None)
    assert got["selector_sha256"] == sha256_file(sel) and "selector_path" not in got["budgets"]
    assert "not found" in upgrade({"version": 1, "budgets": {"selector_path": "nope"}},
                                  None)["selector_sha256"]


def test_a_version_1_record_with_another_prompts_file_is_refused(tmp_path):
    qs, env = lexical_env()
    out = tmp_path / "run"
    run(qs[:1], env, out)
    fp = json.loads((out / "run.json").read_text())["fingerprint"]
    old = as_version_1(fp)
    old["prompts_sha256"] = "f" * 64
    old["corpus_sha256"] = legacy_corpus_hash(env.retriever.corpus)
    (out / "run.json").write_text(json.dumps({"fingerprint": old}))
    with pytest.raises(FingerprintError, match="prompts_sha256.*not known"):
        run(qs[:2], env, out)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_committed_run_folders_accept_the_split_of_the_commands_they_record(path: Path):
    """The split of each command a committed folder records (run.json's first, summary.json's
    latest; most predate the "selection" field) is one a resume may use, and no other."""
    run_json = json.loads(path.read_text())
    summary = json.loads((path.parent / "summary.json").read_text())["run"]
    allowed = [a for a, _ in recorded_selection([("run.json", run_json),
                                                 ("summary.json", summary)])]
    for record in (run_json, summary):
        assert selection_from_command(record["command"]) in allowed
    assert question_selection("eval", 99, 0, 0) not in allowed


@pytest.mark.skipif(data_dir() is None, reason="benchmark data folder not available")
@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_committed_run_folders_upgrade_to_today_s_setup(path: Path, monkeypatch):
    """Every committed run.json reads, in today's terms, as the setup today's code records
    for the same data: prompts, corpus, selector and the budgets' fields."""
    old = json.loads(path.read_text())["fingerprint"]
    ds = next(p for p in path.parts if p in ("hotpotqa", "2wikimultihopqa", "musique"))
    corpus = _corpus(ds)
    monkeypatch.chdir(ROOT)  # recorded selector paths are relative to the checkout
    new = upgrade(old, corpus)
    assert new["prompts_sha256"] == prompts_digest()
    assert new["corpus_sha256"] == corpus_sha256(corpus)
    assert not str(new["selector_sha256"]).endswith("(file not found)")
    assert set(new["budgets"]) == set(budget_record(ControlConfig())), \
        "ControlConfig changed: give the new field a default in ADDED_BUDGETS"


_CORPORA: dict[str, Corpus] = {}


def _corpus(dataset: str) -> Corpus:
    if dataset not in _CORPORA:
        _CORPORA[dataset] = Corpus.from_questions(load_dataset(dataset), name=dataset)
    return _CORPORA[dataset]


# -- the llama.cpp build: recorded, not fingerprinted ---------------------------------------
def test_the_llama_build_is_read_through_the_cache_wrapper_and_is_none_for_other_backends(
        tmp_path):
    require_model("smollm2-135m")
    import llama_cpp
    from dynakrag_lite.generators import CachedGenerator, CallCache, LlamaCppGenerator, models
    gen = LlamaCppGenerator(models.gguf_path("smollm2-135m"), spec="smollm2-135m", lazy=True)
    build = llama_build(CachedGenerator(gen, CallCache(tmp_path / "c.sqlite")))
    assert build["llama_cpp"] == llama_cpp.__version__
    assert "AVX2" in build["cpu"] or not build["cpu"][0].startswith("SSE")  # x86: the baseline
    assert not gen.loaded  # reading the build loads no model
    assert llama_build(ScriptedGenerator()) is None


def test_a_folder_resumed_with_another_llama_build_keeps_the_first_and_says_so(
        tmp_path, monkeypatch):
    qs, env = lexical_env()
    out = tmp_path / "run"
    first, second = {"llama_cpp": "0.3.36", "cpu": ["AVX2"]}, {"llama_cpp": "0.3.36",
                                                               "cpu": ["AVX2", "AVX512"]}
    monkeypatch.setattr(run_module, "llama_build", lambda g: first)
    run(qs[:2], env, out, fixed_k=2)
    assert json.loads((out / "run.json").read_text())["llama_build"] == first
    monkeypatch.setattr(run_module, "llama_build", lambda g: second)
    with pytest.warns(RuntimeWarning, match="another llama.cpp build"):
        run(qs[:3], env, out, fixed_k=2)
    assert json.loads((out / "run.json").read_text())["llama_build"] == first
    summary = json.loads((out / "summary.json").read_text())["run"]
    assert summary["llama_build"] == second and summary["llama_build_first"] == first
    assert build_change(out, first) is None and build_change(tmp_path, second) is None


def test_a_budget_added_later_is_recorded_only_away_from_its_old_behaviour():
    """Folders recorded before answer_docs_up_to existed behave as 0: at 0 the field stays out
    of the fingerprint (they resume), any other value enters it (they are refused)."""
    assert "answer_docs_up_to" in asdict(ControlConfig())
    assert "answer_docs_up_to" not in budget_record(ControlConfig())
    assert budget_record(ControlConfig(answer_docs_up_to=6))["answer_docs_up_to"] == 6
