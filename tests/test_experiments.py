"""experiments.evaluate: runs that never lose or mix results, and diagnostics that make
degenerate behaviour visible.

Kills, torn lines, corrupt lines, failing generators, a second process on the same folder and
a changed setup are all exercised for real (SIGKILL of a real evaluating process, a real
second process holding the lock). Generators are scripted (tests/helpers.py) because model
quality does not matter here. Tests that run in subprocesses use a small word-overlap
retriever over the library corpus so each process starts in well under a second; the
diagnostics tests use the real dense retriever of conftest.py.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import ScriptedGenerator

import dynakrag_lite.pipeline as pipeline_mod
from dynakrag_lite.config import ControlConfig, Environment, RunSettings
from dynakrag_lite.data.corpus import Corpus
from dynakrag_lite.experiments.fingerprint import (FingerprintError, corpus_sha256, prompts_digest,
    run_fingerprint)
from dynakrag_lite.experiments.folder import (ResultsError, latest_rows, read_predictions,
    repair_predictions)
from dynakrag_lite.experiments.cli import main as cli_main
from dynakrag_lite.experiments.run import SUMMARY_KEYS, evaluate
from dynakrag_lite.experiments.selection import question_selection
from dynakrag_lite.experiments.diagnostics import diagnostics, trace_diagnostics
from dynakrag_lite.generators.base import GeneratorError
from dynakrag_lite.state import RETRIEVAL_ACTIONS
from dynakrag_lite.storage import LockedError

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


# -- a fast retriever for tests whose subject is the file handling, not retrieval ----------
@dataclass(frozen=True)
class _Hit:
    doc: object
    score: float
    rank: int


class LexicalRetriever:
    """Word-overlap ranking over a corpus: deterministic and instant to build."""
    embedder_name = "lexical-test"

    def __init__(self, corpus: Corpus):
        self.corpus = corpus
        self._words = [set(d.render().lower().split()) for d in corpus.documents]

    def search(self, query: str, k: int, exclude=()):
        q = set(query.lower().split())
        excl = set(exclude)
        scored = sorted(((len(q & w) / (len(w) ** 0.5 + 1), i)
                         for i, w in enumerate(self._words)
                         if self.corpus.documents[i].id not in excl), key=lambda x: (-x[0], x[1]))
        return [_Hit(self.corpus.documents[i], s, r) for r, (s, i) in enumerate(scored[:k])]


def lexical_env(generator=None, **config) -> tuple[list, Environment]:
    from dynakrag_lite.data.library import build_library
    qs = build_library()
    cfg = ControlConfig(use_spacy=False, **config)
    return qs, Environment(LexicalRetriever(Corpus.from_questions(qs, name="library")),
                           generator or ScriptedGenerator(), cfg)


class FailingGenerator(ScriptedGenerator):
    """Raises GeneratorError (as a dead server would) for prompts naming one question."""

    def __init__(self, fail_on: str, exc: type[BaseException] = GeneratorError, **replies):
        super().__init__(**replies)
        self.fail_on, self.exc = fail_on, exc

    def generate(self, messages, max_tokens: int = 64, stop=None):
        if self.fail_on in messages[-1]["content"]:
            raise self.exc("server said 503")
        return super().generate(messages, max_tokens, stop)


def lines_of(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def run(qs, env, out, method="fixed_k", fixed_k=None, seed=13, **kw):
    s = RunSettings(method=method, generator="scripted", fixed_k=fixed_k, seed=seed)
    return evaluate(qs, s, env, out, dataset="library", progress=False, **kw)


# -- subprocess helpers -----------------------------------------------------------------
CHILD = """
import os, signal, sys, time
sys.path[:0] = [{tests!r}, {repo!r}]
from pathlib import Path
from helpers import ScriptedGenerator
from test_experiments import lexical_env
from dynakrag_lite.config import RunSettings
from dynakrag_lite.experiments.run import evaluate

class Gen(ScriptedGenerator):
    # kill_at: SIGKILL this process on that call (a crash mid-question, no cleanup at all);
    # wait_for: block on the first call until that file exists (hold the folder's lock).
    def generate(self, messages, max_tokens=64, stop=None):
        n = len(self.calls) + 1
        if {kill_at} and n == {kill_at}:
            os.kill(os.getpid(), signal.SIGKILL)
        if {wait_for!r}:
            while not Path({wait_for!r}).exists():
                time.sleep(0.05)
        return super().generate(messages, max_tokens, stop)

qs, env = lexical_env(Gen())
evaluate(qs[:{n}], RunSettings(method={method!r}, generator="scripted"), env, {out!r},
         dataset="library", progress=False)
"""


def child(out: Path, n: int, method: str = "uniform", kill_at: int = 0,
          wait_for: str = "") -> subprocess.Popen:
    code = CHILD.format(tests=str(TESTS), repo=str(REPO), kill_at=kill_at, wait_for=wait_for,
                        n=n, method=method, out=str(out))
    env = {**os.environ, "DYNAKRAG_N_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


# -- kills and torn lines ---------------------------------------------------------------
def test_resume_after_sigkill_mid_run_finishes_every_question_once(tmp_path):
    out = tmp_path / "run"
    # uniform: several generator calls per question, so call 9 dies inside a question
    p = child(out, n=5, kill_at=9)
    _, err = p.communicate(timeout=120)
    assert p.returncode == -signal.SIGKILL, err
    before = lines_of(out / "predictions.jsonl")
    assert 0 < len(before) < 5  # some questions finished, the one in flight is lost
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == len(before) and summary["run"]["complete"] is False
    assert summary["run"]["n_expected"] == 5

    p = child(out, n=5)  # the same command again resumes (the dead process held no lock)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    rows = lines_of(out / "predictions.jsonl")
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)) == 5  # every question once, nothing redone twice
    assert rows[:len(before)] == before  # finished rows were kept byte for byte
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n"] == 5 and summary["run"]["complete"] is True


def test_torn_final_line_is_dropped_by_the_writer_and_its_question_redone(tmp_path):
    qs, env = lexical_env()
    out = tmp_path / "run"
    run(qs[:3], env, out)
    path = out / "predictions.jsonl"
    full = path.read_bytes()
    lines = full.splitlines(keepends=True)
    torn = b"".join(lines[:2]) + lines[2][: len(lines[2]) // 2]  # killed mid-write
    path.write_bytes(torn)
    # a reader ignores the torn line and never writes
    assert [r["id"] for r in read_predictions(path)] == [qs[0].id, qs[1].id]
    assert path.read_bytes() == torn
    gen = ScriptedGenerator()
    env.generator = gen
    with pytest.warns(RuntimeWarning, match="torn final line"):
        summary = run(qs[:3], env, out)
    assert gen.calls == ["answer"]  # only the torn question was run again
    rows = lines_of(path)
    assert [r["id"] for r in rows] == [q.id for q in qs[:3]]
    assert path.read_bytes().startswith(b"".join(lines[:2]))
    assert summary["n"] == 3 and summary["run"]["complete"]


def test_append_after_missing_final_newline_starts_a_fresh_line(tmp_path):
    qs, env = lexical_env()
    out = tmp_path / "run"
    run(qs[:2], env, out)
    path = out / "predictions.jsonl"
    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # a complete row, newline missing
    assert len(read_predictions(path)) == 2  # complete: kept
    gen = ScriptedGenerator()
    env.generator = gen
    run(qs[:4], env, out)
    assert gen.calls == ["answer", "answer"]  # questions 3 and 4 only
    text = path.read_text()
    assert text.endswith("\n") and len(text.splitlines()) == 4
    assert [r["id"] for r in lines_of(path)] == [q.id for q in qs[:4]]


@pytest.mark.parametrize("bad, problem", [('{"id": "q-broken", "em": ', "invalid JSON"),
                                          ('{"em": 1.0, "f1": 1.0}', 'without an "id"'),
                                          ('["q1"]', "not an object")])
def test_bad_middle_line_is_an_error_naming_file_and_line_and_nothing_changes(
        tmp_path, bad, problem):
    qs, env = lexical_env()
    out = tmp_path / "run"
    run(qs[:3], env, out)
    path = out / "predictions.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = bad + "\n"
    damaged = "".join(lines).encode()
    path.write_bytes(damaged)
    summary_before = (out / "summary.json").read_bytes()
    gen = ScriptedGenerator()
    env.generator = gen
    for attempt in (lambda: read_predictions(path), lambda: repair_predictions(path),
                    lambda: run(qs[:5], env, out)):
        with pytest.raises(ResultsError, match=r"predictions\.jsonl, line 2: .*" + problem):
            attempt()
        assert path.read_bytes() == damaged  # byte-identical: nothing cut, nothing appended
    assert gen.calls == []  # the run refused to start
    assert (out / "summary.json").read_bytes() == summary_before


# -- failing questions ------------------------------------------------------------------
def test_generator_error_becomes_error_row_run_goes_on_and_rerun_retries_it(tmp_path):
    qs, _ = lexical_env()
    qs = qs[:4]
    _, env = lexical_env(FailingGenerator(fail_on=qs[1].question))
    out = tmp_path / "run"
    with pytest.warns(RuntimeWarning, match="1 of 4 questions failed"):
        summary = run(qs, env, out)
    rows = lines_of(out / "predictions.jsonl")
    assert [r["id"] for r in rows] == [q.id for q in qs]  # the run went on after the error
    err = rows[1]
    assert err["error"] == {"type": "GeneratorError", "message": "server said 503"}
    assert err["method"] == "fixed_k" and "em" not in err
    assert summary["n"] == 3 and summary["errors"] == 1
    assert summary["diagnostics"]["errors"] == 1
    assert summary["diagnostics"]["error_types"] == {"GeneratorError": 1}
    assert summary["run"]["complete"] is False and summary["run"]["n_expected"] == 4
    ok = [r for r in rows if "error" not in r]
    assert summary["f1"] == pytest.approx(sum(r["f1"] for r in ok) / 3)  # errors not in means

    gen = ScriptedGenerator()
    env.generator = gen
    summary = run(qs, env, out)
    assert gen.calls == ["answer"]  # only the failed question was retried
    rows = lines_of(out / "predictions.jsonl")
    assert len(rows) == 5 and rows[-1]["id"] == qs[1].id and "error" not in rows[-1]
    latest = latest_rows(rows)
    assert [r["id"] for r in latest] == [q.id for q in qs]  # last row per id wins
    assert not any("error" in r for r in latest)
    assert summary["n"] == 4 and summary["errors"] == 0 and summary["run"]["complete"]


def test_keyboard_interrupt_still_stops_the_run(tmp_path):
    qs, _ = lexical_env()
    _, env = lexical_env(FailingGenerator(fail_on=qs[1].question, exc=KeyboardInterrupt))
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run(qs[:3], env, out)
    assert [r["id"] for r in lines_of(out / "predictions.jsonl")] == [qs[0].id]
    env.generator = ScriptedGenerator()
    assert run(qs[:3], env, out)["n"] == 3  # the lock was released on the way out


# -- one writer per folder, one setup per folder ----------------------------------------
def test_second_evaluate_process_into_one_folder_fails_fast_with_lock_message(tmp_path):
    out = tmp_path / "run"
    go = tmp_path / "go"
    p = child(out, n=2, method="fixed_k", wait_for=str(go))
    try:
        deadline = time.time() + 60
        while not (out / "run.json").exists():  # written under the lock
            assert p.poll() is None, p.communicate()[1]
            assert time.time() < deadline
            time.sleep(0.05)
        qs, env = lexical_env()
        gen = ScriptedGenerator()
        env.generator = gen
        t0 = time.perf_counter()
        with pytest.raises(LockedError, match=rf"in use by another process \(pid {p.pid}\)"):
            run(qs[:2], env, out)
        assert time.perf_counter() - t0 < 5 and gen.calls == []
    finally:
        go.touch()
        _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert len(lines_of(out / "predictions.jsonl")) == 2  # the holder was not disturbed


def test_resuming_with_another_setup_is_refused_listing_the_fields(tmp_path):
    qs, env = lexical_env()
    out = tmp_path / "run"
    run(qs[:2], env, out, fixed_k=4)
    path = out / "predictions.jsonl"
    before, run_json = path.read_bytes(), (out / "run.json").read_bytes()
    _, other = lexical_env(max_docs=8)
    with pytest.raises(FingerprintError) as e:
        run(qs[:3], other, out, fixed_k=5, seed=7)
    msg = str(e.value)
    for field in ("budgets.max_docs: 12 -> 8", "fixed_k: 4 -> 5", "seed: 13 -> 7"):
        assert field in msg
    assert "another --out folder" in msg and "per_action" not in msg
    assert path.read_bytes() == before and (out / "run.json").read_bytes() == run_json
    # the same setup resumes, and run.json is written once
    run(qs[:3], env, out, fixed_k=4)
    assert (out / "run.json").read_bytes() == run_json
    assert len(lines_of(path)) == 3


def test_rerunning_a_complete_folder_answers_nothing_and_keeps_its_summary(tmp_path):
    qs, env = lexical_env()
    out = tmp_path / "run"
    run(qs[:2], env, out, fixed_k=4)
    done = json.loads((out / "summary.json").read_text())
    done["run"]["finished_at"] = "2000-01-01T00:00:00+00:00"  # finished long ago
    (out / "summary.json").write_text(json.dumps(done))
    summary = (out / "summary.json").read_bytes()
    # a lane that walks its finished runs again must not re-date them as finished now
    assert run(qs[:2], env, out, fixed_k=4) == done
    assert (out / "summary.json").read_bytes() == summary


def test_fingerprint_records_the_setup(tmp_path, monkeypatch):
    qs, env = lexical_env()
    out = tmp_path / "run"
    summary = run(qs[:1], env, out, data_sha256="d" * 64)
    fp = json.loads((out / "run.json").read_text())["fingerprint"]
    assert summary["fingerprint"] == fp
    assert fp["method"] == "fixed_k" and fp["generator"] == {"spec": "scripted",
                                                             "model_id": "scripted"}
    assert fp["embedder"] == "lexical-test" and fp["data_sha256"] == "d" * 64
    assert fp["budgets"]["max_docs"] == 12 and fp["policy"] is None
    assert fp["prompts_sha256"] == prompts_digest() and len(fp["prompts_sha256"]) == 64
    assert fp["corpus_sha256"] == corpus_sha256(env.retriever.corpus)
    assert fp["version"] == 2 and fp["selector_sha256"] is None
    # credentials in a generator spec never reach the record
    env.generator.spec = "openai:gpt-4o-mini@https://user:s3cret@host/v1"
    env.generator.model_id = "gpt-4o-mini@https://user:s3cret@host/v1"
    assert "s3cret" not in json.dumps(run_fingerprint(RunSettings(method="fixed_k"), env))
    # a prompt that reads otherwise is another setup
    import dynakrag_lite.prompts as prompts
    monkeypatch.setattr(prompts, "SYSTEM", prompts.SYSTEM + " Be brief.")
    env.generator.spec, env.generator.model_id = "scripted", "scripted"
    with pytest.raises(FingerprintError, match="prompts_sha256"):
        run(qs[:1], env, out, data_sha256="d" * 64)


def test_lost_run_json_is_restored_from_the_summary_and_still_guards_the_folder(tmp_path):
    qs, env = lexical_env()
    out = tmp_path / "run"
    run(qs[:2], env, out, fixed_k=5)
    recorded = json.loads((out / "run.json").read_text())["fingerprint"]
    (out / "run.json").unlink()
    before = (out / "predictions.jsonl").read_bytes()
    with pytest.raises(FingerprintError, match="summary.json.*fixed_k: 5 -> 3"):
        run(qs[:3], env, out, fixed_k=3)
    assert (out / "predictions.jsonl").read_bytes() == before
    assert not (out / "run.json").exists()
    with pytest.warns(RuntimeWarning, match="restored from"):
        assert run(qs[:3], env, out, fixed_k=5)["n"] == 3
    assert json.loads((out / "run.json").read_text())["fingerprint"] == recorded


def test_predictions_without_any_fingerprint_are_refused(tmp_path):
    qs, env = lexical_env()
    out = tmp_path / "run"
    run(qs[:2], env, out)
    (out / "run.json").unlink()
    (out / "summary.json").unlink()
    with pytest.raises(FingerprintError, match="no fingerprint"):
        run(qs[:2], env, out)


# -- which questions a folder is for: its split, checked apart from the fingerprint ----------
# Through the command line (in this process): the split flags are what a resume must repeat.
# fixed_k with the scripted generator on the library (60 questions; 10 held out).
SPLIT_RUN = ["evaluate", "--data", "library", "--method", "fixed_k", "--generator", "scripted",
             "--n-eval", "10"]


@pytest.fixture
def split_cli(monkeypatch, capsys, tmp_path):
    """``go(*flags)``: (exit code, stderr) of ``evaluate`` into tmp_path/run with SPLIT_RUN's
    flags, then ``flags`` (argparse: the last value of a flag counts)."""
    monkeypatch.setattr(pipeline_mod, "make_generator",
                        lambda spec, cache=True, **kw: ScriptedGenerator())

    def go(*flags: str) -> tuple[int, str]:
        capsys.readouterr()
        code = cli_main([*SPLIT_RUN, *flags, "--out", str(tmp_path / "run")])
        return code, capsys.readouterr().err
    return go


# -- uniform-valid stop-after-K schedules (evaluate --method uniform --stop-after K) ----------
UNIFORM_RUN = ["evaluate", "--data", "library", "--method", "uniform", "--generator", "scripted",
               "--n-eval", "10", "--limit", "3"]


def test_uniform_stop_after_stops_at_k_and_enters_only_its_own_fingerprint(
        monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(pipeline_mod, "make_generator",
                        lambda spec, cache=True, **kw: ScriptedGenerator())
    assert cli_main([*UNIFORM_RUN, "--out", str(tmp_path / "plain")]) == 0
    assert cli_main([*UNIFORM_RUN, "--stop-after", "1", "--out", str(tmp_path / "stop1")]) == 0
    plain = json.loads((tmp_path / "plain" / "run.json").read_text())["fingerprint"]
    stop1 = json.loads((tmp_path / "stop1" / "run.json").read_text())["fingerprint"]
    # without the flag, the fingerprint committed uniform folders record: no stop_after
    assert "stop_after" not in plain and stop1 == {**plain, "stop_after": 1}
    for row in lines_of(tmp_path / "stop1" / "predictions.jsonl"):
        acts = [t["action"] for t in row["trace"] if t["action"] != "compress_answer_evidence"]
        assert acts[-1] == "stop_answer" and row["trace"][len(acts) - 1]["scores"] == {
            "stop_answer": {"schedule": 1.0}}
        assert sum(a in RETRIEVAL_ACTIONS for a in acts) == 1
    capsys.readouterr()
    assert cli_main([*UNIFORM_RUN, "--out", str(tmp_path / "stop1")]) == 2  # another setup
    assert "stop_after: 1 -> '(absent)'" in capsys.readouterr().err
    code = cli_main(["evaluate", "--data", "library", "--method", "fixed_k", "--stop-after", "2",
                     "--generator", "scripted", "--out", str(tmp_path / "fk")])
    assert code == 2 and "--stop-after is for dynakrag and uniform, not fixed_k" in \
        capsys.readouterr().err and not (tmp_path / "fk").exists()


def folder_files(folder: Path) -> dict[str, bytes]:
    """Every file of a run folder with its bytes, the lock file aside (it holds the pid)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != ".lock"}


@pytest.mark.parametrize("change, field, recorded, new", [
    (["--n-eval", "12"], "n_eval (--n-eval)", "10", "12"),
    (["--split-seed", "1"], "split_seed (--split-seed)", "0", "1"),
    (["--offset", "1"], "offset (--offset)", "0", "1")])
def test_resume_that_selects_other_questions_is_refused_and_leaves_the_folder_byte_identical(
        split_cli, tmp_path, change, field, recorded, new):
    assert split_cli("--limit", "2")[0] == 0
    out = tmp_path / "run"
    before = folder_files(out)
    code, err = split_cli("--limit", "2", *change)
    assert code == 2
    assert str(out / "run.json") in err and 'field "selection"' in err
    assert f"selection.{field}: recorded {recorded}, this command {new}" in err
    assert "only --limit may change" in err
    assert folder_files(out) == before


def test_resume_with_only_a_larger_limit_extends_the_run(split_cli, tmp_path):
    out = tmp_path / "run"
    assert split_cli("--limit", "2")[0] == 0
    first, run_json = lines_of(out / "predictions.jsonl"), (out / "run.json").read_bytes()
    assert json.loads(run_json)["selection"] == {"split": "eval", "n_eval": 10,
                                                 "split_seed": 0, "offset": 0}  # no limit
    assert split_cli("--limit", "4")[0] == 0
    rows = lines_of(out / "predictions.jsonl")
    assert len(rows) == 4 and rows[:2] == first
    assert (out / "run.json").read_bytes() == run_json
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["n_expected"] == 4 and summary["run"]["complete"]


def _as_written_before_the_selection_field(out: Path, summary_command: str | None = None):
    """The folder as an earlier version left it: no "selection" in run.json or the summary
    (``summary_command``: the latest run's command, when it differed from the first's)."""
    record = json.loads((out / "run.json").read_text())
    record.pop("selection", None)
    (out / "run.json").write_text(json.dumps(record))
    summary = json.loads((out / "summary.json").read_text())
    summary["run"].pop("selection", None)
    if summary_command is not None:
        summary["run"]["command"] = summary_command
    (out / "summary.json").write_text(json.dumps(summary))


def test_folder_written_before_the_selection_field_resumes_and_its_command_guards_it(
        split_cli, tmp_path):
    out = tmp_path / "run"
    assert split_cli("--limit", "2")[0] == 0
    _as_written_before_the_selection_field(out)
    run_json = (out / "run.json").read_bytes()
    assert split_cli("--limit", "3")[0] == 0
    assert len(lines_of(out / "predictions.jsonl")) == 3
    assert (out / "run.json").read_bytes() == run_json  # not rewritten to add the field
    # its recorded command stands for the field: another --n-eval is still refused
    before = folder_files(out)
    code, err = split_cli("--limit", "3", "--n-eval", "12")
    assert code == 2 and "derived from its command" in err and str(out / "run.json") in err
    assert "selection.n_eval (--n-eval): recorded 10, this command 12" in err
    assert folder_files(out) == before


def test_folder_extended_under_another_split_by_an_earlier_version_resumes_with_either(
        split_cli, tmp_path):
    """As four committed HotpotQA folders were: started with the default --n-eval, extended
    with --n-eval 150 (their summary.json says so). Both commands still resume them."""
    out = tmp_path / "run"
    assert split_cli("--limit", "2")[0] == 0
    latest = json.loads((out / "summary.json").read_text())["run"]["command"]
    _as_written_before_the_selection_field(out, latest.replace("--n-eval 10", "--n-eval 12"))
    assert split_cli("--limit", "2", "--n-eval", "12")[0] == 0  # the latest command's
    before = folder_files(out)
    code, err = split_cli("--limit", "2", "--n-eval", "14")  # neither
    assert code == 2 and "recorded 10, this command 14" in err and \
        "recorded 12, this command 14" in err
    assert folder_files(out) == before
    assert split_cli("--limit", "2")[0] == 0  # the first command's (run.json)


def test_folder_that_records_no_selection_nor_command_is_not_checked(tmp_path):
    """A run started from Python without split options: as before the field existed."""
    qs, env = lexical_env()
    out = tmp_path / "run"
    run(qs[:1], env, out)
    assert "selection" not in json.loads((out / "run.json").read_text())
    assert run(qs[:2], env, out, selection=question_selection("eval", 10, 0, 0))["n"] == 2


def test_default_policy_is_only_the_exact_file(tmp_path):
    from dynakrag_lite.experiments.artifacts import default_policy_path
    from dynakrag_lite.policy import PolicyError
    (tmp_path / "library-qwen2.5-coder-0.5b.joblib").write_bytes(b"x")
    with pytest.raises(PolicyError) as e:
        default_policy_path("library", "smollm2-135m", folder=tmp_path)
    assert "library-smollm2-135m.joblib" in str(e.value) and "--policy" in str(e.value)
    assert default_policy_path("library", "qwen2.5-coder-0.5b", folder=tmp_path).name == \
        "library-qwen2.5-coder-0.5b.joblib"


# -- diagnostics ------------------------------------------------------------------------
def _library_env(retriever, **replies) -> Environment:
    return Environment(retriever, ScriptedGenerator(**replies), ControlConfig(use_spacy=False))


@pytest.mark.parametrize("reply, verdict", [("SUFFICIENT", "sufficient"),
                                            ("INSUFFICIENT: the founder's city", "insufficient"),
                                            ("the model rambles on", "unparsed")])
def test_diagnostics_count_verdicts_stops_and_actions(library_questions, library_retriever,
                                                      tmp_path, reply, verdict):
    env = _library_env(library_retriever, sufficiency=reply)
    qs = library_questions[:3]
    summary = evaluate(qs, RunSettings(method="uniform"), env, tmp_path, progress=False)
    d = summary["diagnostics"]
    for key in ("questions", "errors", "error_types", "stop_reasons", "actions_mean",
                "sufficiency", "parse_fallbacks", "vetoes"):
        assert key in d
    assert set(SUMMARY_KEYS) <= set(summary)
    rows = lines_of(tmp_path / "predictions.jsonl")
    probes = sum(t["action"] == "sufficiency_check" for r in rows for t in r["trace"])
    assert probes > 0  # uniform tries every valid action sooner or later
    assert d["sufficiency"][verdict] == probes
    assert sum(d["sufficiency"].values()) == probes
    assert d["parse_fallbacks"].get("sufficiency", 0) == (probes if verdict == "unparsed" else 0)
    # uniform never chooses stop_answer: every question ends at a cap
    assert set(d["stop_reasons"]) <= {"max_steps", "max_docs", "only_stop_valid"}
    assert sum(d["stop_reasons"].values()) == 3 == d["questions"]
    for a, mean in d["actions_mean"].items():
        assert mean == pytest.approx(sum(t["action"] == a for r in rows
                                         for t in r["trace"]) / 3, abs=1e-4)
    assert d["vetoes"] == {"total": 0, "questions": 0}


def test_diagnostics_of_baselines_and_fallbacks(library_questions, library_retriever, tmp_path):
    # a chain model that never follows the format: IRCoT and Self-Ask fallbacks, empty answers
    env = _library_env(library_retriever, answer="")
    qs = library_questions[:2]
    s = evaluate(qs, RunSettings(method="ircot"), env, tmp_path / "ircot",
                 progress=False)["diagnostics"]
    assert s["parse_fallbacks"]["answer"] == 2  # empty predictions
    assert sum(s["stop_reasons"].values()) == 2
    assert set(s["stop_reasons"]) <= {"concluded", "empty_thought", "max_steps", "max_docs",
                                      "retrieval_cap"}
    assert "empty_thought" in s["stop_reasons"]  # an empty CoT reply ends the chain
    s = evaluate(qs, RunSettings(method="fixed_k"), env, tmp_path / "fixed_k",
                 progress=False)["diagnostics"]
    assert s["stop_reasons"] == {"fixed_k": 2} and s["actions_mean"] == {"retrieve": 1.0}


def test_trace_diagnostics_counts_vetoes_notes_and_method_reports():
    trace = [
        {"action": "retrieve_more", "scores": {"stop_answer": {"value": 0.3, "vetoed": 1.0}}},
        {"action": "sufficiency_check", "sufficient": False, "gap": ""},
        {"action": "rewrite_query", "query": "Who  founded X?"},
        {"action": "cot_step", "note": "unparsed: '...'"},
        {"action": "sufficiency_check", "sufficient": False, "gap": ""},
        {"action": "stop_answer", "scores": {}, "note": ""},
        {"action": "compress_answer_evidence", "note": "0 snippets"},
    ]
    d = trace_diagnostics(trace, question="Who founded X?", prediction="Paris",
                          extra={"parse_fallbacks": {"answer": 2, "custom": 1}},
                          stop_reason="policy", last_probe_parsed=True)
    assert d["vetoes"] == 1 and d["stop_reason"] == "stop_answer_chosen"
    # the last probe parsed (a bare INSUFFICIENT); the earlier one looks like the fallback
    assert d["sufficiency"] == {"sufficient": 0, "insufficient": 1, "unparsed": 1}
    assert d["parse_fallbacks"] == {"sufficiency": 1, "rewrite": 1, "ircot": 1,
                                    "compress": 1, "answer": 2, "custom": 1}
    assert d["actions"]["sufficiency_check"] == 2
    # rows written before diagnostics existed are derived from their trace
    old = {"id": "a", "question": "Q?", "prediction": "", "trace": trace[:1] + [
        {"action": "stop_answer", "note": "max_docs"}]}
    agg = diagnostics([old, {"id": "b", "error": {"type": "GeneratorError", "message": ""}}])
    assert agg["stop_reasons"] == {"max_docs": 1} and agg["errors"] == 1
    assert agg["vetoes"] == {"total": 1, "questions": 1}
    assert agg["parse_fallbacks"] == {"answer": 1}
