"""The offline parts of data_scripts/colab_live_check.py and colab_serve.py, in seconds.

The live check itself (a fresh venv, real pip, chapters 05, 11 and 12 executed) takes minutes
and the network, so `make colab-live-check` runs it by hand; its committed report is checked
last. Tested here: the served repository is the checkout's HEAD and `git clone --depth 1` works
over the loopback smart-HTTP server (the dumb protocol cannot do shallow clones); the server
listens on 127.0.0.1 only, stops in bounded time and serves the mirror's files by exact name
only; a missing repository is an HTTP error, not a hang; a command that outlives its timeout is
ended with its children; steps and report are recorded with machine paths replaced; the
HotpotQA file rebuilt in its official layout normalizes back to the data folder's questions;
a failed step skips only what depends on it; a whole three-chapter run with pip, venv and
papermill faked; and the readers of pip's output, of the executed notebook and of the wheel
folder.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import git, load_script

live = load_script("colab_live_check")
serve = load_script("colab_serve")  # what the check serves on 127.0.0.1
REPO = Path(__file__).resolve().parents[1]
GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0"}


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A repository whose HEAD is a branch other than main, one commit ahead of it."""
    src = tmp_path / "checkout"
    src.mkdir()
    git("init", "-q", str(src))
    (src / "a.txt").write_text("on main\n")
    git("add", "a.txt", cwd=src)
    git("commit", "-q", "-m", "main", cwd=src)
    git("checkout", "-q", "-b", "work", cwd=src)
    (src / "b.txt").write_text("only at HEAD\n")
    git("add", "b.txt", cwd=src)
    git("commit", "-q", "-m", "head", cwd=src)
    (src / "a.txt").write_text("uncommitted\n")  # not served: only commits are
    return src


def test_head_commit_is_served_as_the_branch_and_clones_shallow_over_http(checkout, tmp_path):
    served = tmp_path / "served"
    sha = serve.make_bare(checkout, served / "r.git", "main")
    assert sha == git("rev-parse", "HEAD", cwd=checkout)
    with serve.GitHTTPServer(served) as srv:
        url = srv.url("r.git")
        p = subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "main", url,
                            str(tmp_path / "clone")], capture_output=True, text=True,
                           env=GIT_ENV, timeout=60)
        assert p.returncode == 0, p.stderr
    clone = tmp_path / "clone"
    assert (clone / ".git" / "shallow").exists()
    assert git("rev-parse", "HEAD", cwd=clone) == sha
    assert git("rev-list", "--count", "HEAD", cwd=clone) == "1"
    assert (clone / "b.txt").read_text() == "only at HEAD\n"
    assert (clone / "a.txt").read_text() == "on main\n"
    assert any("git-upload-pack" in r and r.endswith(" 200") for r in srv.requests), srv.requests


def test_the_commit_resolved_first_is_served_even_if_head_moves_meanwhile(checkout, tmp_path):
    resolved = git("rev-parse", "HEAD", cwd=checkout)
    git("commit", "-q", "-am", "another engineer's commit", cwd=checkout)
    assert serve.make_bare(checkout, tmp_path / "r.git", "main", resolved) == resolved
    assert git("rev-parse", "HEAD", cwd=checkout) != resolved


def test_server_listens_on_loopback_only_and_stops_within_its_bound(tmp_path):
    srv = serve.GitHTTPServer(tmp_path).start()
    assert srv.server_address[0] == "127.0.0.1"
    socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
    t0 = time.monotonic()
    assert srv.stop(timeout=5.0)
    assert time.monotonic() - t0 < 5.0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()


def test_missing_repository_is_an_http_error_not_a_hang(tmp_path):
    with serve.GitHTTPServer(tmp_path) as srv:
        p = subprocess.run(["git", "ls-remote", srv.url("nothing.git")], capture_output=True,
                           text=True, env=GIT_ENV, timeout=30)
    assert p.returncode != 0
    assert srv.requests and all(not r.endswith(" 200") for r in srv.requests)


def test_scrub_names_the_work_folder_even_inside_the_checkout():
    places = {"/w/main": "<checkout>", "/w/main/.cache/run": "<work>"}
    obj = {"/w/main/.cache/run/venv": ["/w/main/book", ("python /w/main/.cache/run/x",)], "n": 3}
    assert live.scrub(obj, places) == {"<work>/venv": ["<checkout>/book", ["python <work>/x"]],
                                       "n": 3}


def test_steps_record_commands_and_a_failed_step_fails_the_report(tmp_path):
    check = live.Check(tmp_path, os.environ, echo=lambda s: None)
    with check.step("good", "prints") as rec:
        rec["found"]["out"] = check.run([sys.executable, "-c", "print('hello')"]).strip()
    with check.step("bad", "exits 3"):
        check.run([sys.executable, "-c", "import sys; print('why'); sys.exit(3)"])
    check.skip("later", "needs bad", "an earlier step failed")
    assert not check.ok
    good, bad, later = check.steps
    assert good["ok"] and good["exit_code"] == 0 and good["found"]["out"] == "hello"
    assert good["commands"][0]["command"].endswith("-c 'print('\"'\"'hello'\"'\"')'")
    assert not bad["ok"] and bad["exit_code"] == 3 and "exit code 3" in bad["error"]
    assert bad["commands"][0]["tail"] == ["why"] and bad["seconds"] >= 0
    assert later["skipped"]
    out = live.write_report({"steps": check.steps}, tmp_path / "r" / "report.json",
                            {tmp_path: "<work>"})
    text = out.read_text()
    assert str(tmp_path) not in text and "<work>/bad-1.log" in text
    assert json.loads(text)["steps"][1]["exit_code"] == 3
    assert not list(out.parent.glob("*.tmp"))


def test_a_command_past_its_timeout_is_ended_with_its_children(tmp_path):
    check = live.Check(tmp_path, os.environ, echo=lambda s: None)
    t0 = time.monotonic()
    # A shell that starts a child ignoring TERM, then waits: the shell ends on TERM, the
    # child only on the KILL that follows.
    with check.step("slow", "sleeps"):
        check.run(["sh", "-c", "trap '' TERM; sleep 60 & echo $!; trap - TERM; sleep 60"],
                  timeout=2.0)
    assert time.monotonic() - t0 < 15
    step = check.steps[0]
    assert not step["ok"] and "no exit within 2 s" in step["error"]
    assert step["commands"][0]["exit_code"] is None
    grandchild = int((tmp_path / "slow-1.log").read_text().split()[0])
    for _ in range(50):  # ended, and reaped by init: gone from the process table
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the command's child {grandchild} outlived the timeout")


def test_notebook_check_finds_errors_nan_and_the_install_cells_log():
    marker = "# dynakrag-colab-setup"
    nb = {"cells": [
        {"cell_type": "code", "source": [marker + "\n", "x"], "execution_count": 1,
         "outputs": [{"output_type": "stream", "name": "stdout",
                      "text": ["[colab setup] requirements already installed\n",
                               "pip says hi\n", "[colab setup] done. restart?\n"]}]},
        {"cell_type": "markdown", "source": "NaN in prose is not an output"},
        {"cell_type": "code", "source": "t", "execution_count": 2,
         "outputs": [{"output_type": "execute_result",
                      "data": {"text/plain": "   F1\n0  NaN\n1  Nanjing banana",
                               "text/html": "<td>nan</td>"}},
                     {"output_type": "stream", "name": "stderr", "text": "a warning\n"}]},
        {"cell_type": "code", "source": "boom", "execution_count": None,
         "outputs": [{"output_type": "error", "ename": "ValueError", "evalue": "bad"}]}]}
    found = live.check_notebook(nb, marker)
    assert found["code_cells"] == 3 and found["executed"] == 2
    assert found["errors"] == [{"code_cell": 2, "error": "ValueError: bad"}]
    assert [n["code_cell"] for n in found["nan"]] == [1]  # not Nanjing, banana, nor the html
    assert found["stderr_outputs"] == 1
    assert found["install_cell"] == ["[colab setup] requirements already installed",
                                     "[colab setup] done. restart?"]
    clean = live.check_notebook({"cells": nb["cells"][:1]}, marker)
    assert clean["errors"] == [] and clean["nan"] == []


def test_wheel_source_reads_what_pip_installed_llama_from():
    out = ("Looking in links: /opt/wheels, /w/.cache/wheels/llama_cpp_python-0.3.36-portable-x\n"
           "Processing /w/.cache/wheels/llama_cpp_python-0.3.36-portable-x/"
           "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl\n"
           "Collecting numpy\n")
    assert live.wheel_source(out) == ("Processing /w/.cache/wheels/llama_cpp_python-0.3.36-"
                                      "portable-x/llama_cpp_python-0.3.36-py3-none-"
                                      "linux_x86_64.whl")
    assert live.wheel_source("  Downloading llama_cpp_python-0.3.36.tar.gz (50.6 MB)\n") == \
        "Downloading llama_cpp_python-0.3.36.tar.gz"
    assert live.wheel_source("Collecting numpy\n") is None


def test_index_failures_are_the_failed_requests_to_that_index_only():
    out = ("llama-cpp-python: trying a prebuilt CPU wheel from https://ex.io/whl/cpu\n"
           "Looking in indexes: https://pypi.org/simple, https://ex.io/whl/cpu\n"
           "WARNING: Retrying (Retry(total=0)) after connection broken by 'NewConnectionError("
           "[Errno -2] Name or service not known)': /whl/cpu/llama-cpp-python/\n"
           "WARNING: Retrying (Retry(total=0)) after connection broken by 'x': /simple/numpy/\n"
           "ERROR: Could not fetch URL https://ex.io/whl/cpu/diskcache/: connection error\n")
    failed = live.index_failures(out, "https://ex.io/whl/cpu")
    assert len(failed) == 2
    assert failed[0].endswith("/whl/cpu/llama-cpp-python/") and "ex.io" in failed[1]
    assert live.index_failures("Collecting numpy\n", "https://ex.io/whl/cpu") == []


def test_portable_wheel_folder_exact_name_first_then_any_portable_build(tmp_path):
    wheels = tmp_path / ".cache" / "wheels"
    exact = wheels / "llama_cpp_python-0.3.36-portable-aaa"
    other = wheels / "llama_cpp_python-0.3.36-portable-bbb"
    fake = SimpleNamespace(ROOT=tmp_path, VERSION="0.3.36", wheel_dir=lambda variant: exact)
    assert live.portable_wheel_dir(tmp_path, fake) is None
    other.mkdir(parents=True)
    (other / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").write_bytes(b"")
    assert live.portable_wheel_dir(tmp_path, fake) == other
    exact.mkdir()
    assert live.portable_wheel_dir(tmp_path, fake) == other  # an empty folder is no wheel
    (exact / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl").write_bytes(b"")
    assert live.portable_wheel_dir(tmp_path, fake) == exact


def test_children_get_no_host_project_settings(tmp_path):
    base = {"PATH": "/usr/bin", "HOME": "/h", "PYTHONPATH": "/x", "DYNAKRAG_DATA_DIR": "/d",
            "DYNAKRAG_LLM_CACHE": "/c", "DYNAKRAG_COLAB_PIP": "fake", "DYNAKRAG_N_THREADS": "1",
            "PIP_FIND_LINKS": "/opt/wheels"}
    env, dropped = live.child_env(base, tmp_path / "venv" / "bin", tmp_path / "cache")
    assert dropped == ["DYNAKRAG_COLAB_PIP", "DYNAKRAG_DATA_DIR", "DYNAKRAG_LLM_CACHE",
                       "PYTHONPATH"]
    assert env["PATH"].split(os.pathsep)[0] == str(tmp_path / "venv" / "bin")
    assert env["DYNAKRAG_N_THREADS"] == "1" and env["PIP_FIND_LINKS"] == "/opt/wheels"
    assert env["DYNAKRAG_CACHE_DIR"].startswith(str(tmp_path / "cache"))
    assert env["HOME"] == "/h"


def test_the_runtime_gets_the_torch_requirements_txt_pins():
    pin = live._pin((REPO / "requirements.txt").read_text(), "torch")
    assert pin.startswith("torch==") and pin in (REPO / "requirements.txt").read_text()


# -- the benchmark file it serves -------------------------------------------------------------
def _question(qid: str, texts: list[str], supporting: tuple[int, ...] = (0, 1), qtype=None):
    return {"id": qid, "dataset": "hotpotqa", "question": f"Question {qid}?",
            "answers": [f"answer {qid}"], "type": qtype,
            "paragraphs": [{"title": f"{qid} title {i}", "text": t,
                            "is_supporting": i in supporting} for i, t in enumerate(texts)]}


@pytest.fixture
def data_folder(tmp_path: Path) -> Path:
    """A data folder as ../shared/data lays it out: normalized questions, provenance."""
    folder = tmp_path / "data"
    folder.mkdir()
    qs = [_question("q1", ["One sentence.  Two sentences.", "Plain text.", "Other."],
                    qtype="bridge"),
          _question("q2", ["Trailing space. ", "Inner.", "Third."]),
          _question("q3", ["Ostrel.", "Kaviss.", "Dorn."], qtype="comparison")]
    (folder / "hotpotqa.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    prov = [{"id": "q1", "source": "x", "level": "hard",
             "supporting_facts": [["q1 title 0", 1], ["q1 title 1", 0]]},
            {"id": "q2", "source": "y", "format": "processed (sentence ids not kept)"},
            {"id": "q3", "source": "z", "level": "easy", "id_note": "original _id not kept"}]
    (folder / "hotpotqa.provenance.jsonl").write_text("".join(json.dumps(p) + "\n" for p in prov))
    return folder


def test_rebuilt_official_hotpotqa_file_normalizes_back_to_the_data_folders_questions(
        data_folder, tmp_path):
    src = data_folder / "hotpotqa.jsonl"
    records, notes = serve.official_hotpotqa(src, data_folder / "hotpotqa.provenance.jsonl")
    q1, q2, q3 = records
    assert [r["_id"] for r in records] == ["q1", "q2", "q3"]  # the file's order: its split
    assert q1["context"][0] == ["q1 title 0", ["One sentence.  Two sentences."]]
    assert q1["supporting_facts"] == [["q1 title 0", 1], ["q1 title 1", 0]]  # provenance's
    assert q2["supporting_facts"] == [["q2 title 0", 0], ["q2 title 1", 0]]  # titles only
    assert (q1["level"], q1["type"]) == ("hard", "bridge") and "level" not in q2
    assert q2["type"] is None and q2["answer"] == "answer q2"
    assert notes == {"questions": 3, "paragraphs": 9, "sentence_ids_from_provenance": 1,
                     "sentence_ids_unknown_written_as_0": 2, "type_unknown": 1,
                     "level_unknown": 1, "ids_not_official": 1, "answers_dropped": 0,
                     "paragraphs_with_surrounding_whitespace": 1,
                     "paragraphs_with_a_double_space": 1, "questions_with_a_double_space": 1}
    raw = tmp_path / "hotpot_dev_distractor_v1.json"
    raw.write_text(json.dumps(records))
    out = serve.prepare_data.prepare("hotpotqa", tmp_path / "out", raw=raw)
    same = serve.compare_questions(out, src)
    # prepare_data.py strips a paragraph: the one change the official layout makes here
    assert same == {"questions": 3, "of": 3, "same_ids_in_order": True,
                    "questions_that_differ": 1, "fields_that_differ": {"paragraphs.text": 1},
                    "first_differing_ids": ["q2"]}


def test_mirror_serves_files_of_its_folder_by_exact_name_only(tmp_path):
    files = tmp_path / "files"
    files.mkdir()
    (files / "hotpot_dev_distractor_v1.json").write_bytes(b"[]" * 1000)
    (files / ".hidden").write_text("no")
    (tmp_path / "secret.txt").write_text("no")
    (files / "sub").mkdir()
    (files / "sub" / "x.json").write_text("no")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with serve.GitHTTPServer(tmp_path / "repos", files=files) as srv:
        base = srv.url("mirror")
        with opener.open(f"{base}/hotpot_dev_distractor_v1.json", timeout=10) as resp:
            assert resp.read() == b"[]" * 1000
        for name in ("../secret.txt", "%2e%2e/secret.txt", ".hidden", "sub/x.json", "nothing"):
            with pytest.raises(urllib.error.HTTPError) as e:
                opener.open(f"{base}/{name}", timeout=10)
            assert e.value.code == 404, name
    assert srv.requests[0] == "GET /mirror/hotpot_dev_distractor_v1.json 200"
    assert len(srv.requests) == 6


def test_the_default_chapters_are_named_by_their_file_names_in_the_book():
    assert [p.name for p in live.resolve_chapters(list(live.CHAPTERS), REPO / "book")] == \
        list(live.CHAPTERS)


@pytest.mark.parametrize("chapter, said", [("05,nope", "'nope'"), ("", "no chapter named")])
def test_an_unknown_chapter_stops_the_command_before_any_step(tmp_path, capsys, chapter, said):
    with pytest.raises(SystemExit) as e:
        live.main(["--chapter", chapter, "--work", str(tmp_path / "w")])
    assert e.value.code == 2 and said in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


# -- the order of steps and the per-chapter results ---------------------------------------------
def _step(name: str, found: dict | None = None, fails: bool = False):
    def body(rec: dict) -> None:
        rec["found"].update(found or {})
        if fails:
            raise live.StepFailed(f"{name} failed")
    return (name, f"does {name}", body)


def test_a_failed_chapter_step_skips_only_the_rest_of_that_chapter(tmp_path):
    check = live.Check(tmp_path, os.environ, echo=lambda s: None)
    ran = {"code_cells": 4, "executed": 4, "errors": [], "nan": [], "live_model_calls": 0}
    recs = live.run_steps(check, [_step("venv"), _step("serve")], {
        "05_a.ipynb": [_step("cell:05_a", {"models": ["m: 1 weight package(s)"]}),
                       _step("decode"), _step("chapter:05_a", ran)],
        "11_b.ipynb": [_step("cell:11_b", fails=True), _step("chapter:11_b", ran)],
        "12_c.ipynb": [_step("cell:12_c", {"data": {"needed": ["hotpotqa"]}}),
                       _step("chapter:12_c", ran)]})
    assert [s["name"] for s in check.steps] == [
        "venv", "serve", "cell:05_a", "decode", "chapter:05_a", "cell:11_b", "chapter:11_b",
        "cell:12_c", "chapter:12_c"]
    assert "skipped" in check.steps[6] and "11_b.ipynb" in check.steps[6]["skipped"]
    assert check.steps[7]["ok"] and check.steps[8]["ok"]  # the next chapter still ran
    assert not check.ok
    a, b, c = (live.chapter_result(ch, colab_needs, recs[ch]) for ch, colab_needs in (
        ("05_a.ipynb", live.colab.Needs(("m",))), ("11_b.ipynb", live.colab.Needs()),
        ("12_c.ipynb", live.colab.Needs((), ("hotpotqa",)))))
    assert a["ok"] and a["cells"] == {"code": 4, "executed": 4} and a["live_model_calls"] == 0
    assert a["models"] == ["m: 1 weight package(s)"] and a["needs"]["models"] == ["m"]
    assert not b["ok"] and b["failed_steps"] == ["cell:11_b"]
    assert b["skipped_steps"] == ["chapter:11_b"] and b["cells"]["code"] is None
    assert c["ok"] and c["data"] == {"needed": ["hotpotqa"]}
    assert {s["chapter"] for s in recs["12_c.ipynb"]} == {"12_c.ipynb"}


def test_a_failed_shared_step_skips_every_chapter(tmp_path):
    check = live.Check(tmp_path, os.environ, echo=lambda s: None)
    recs = live.run_steps(check, [_step("venv", fails=True), _step("serve")],
                          {"05_a.ipynb": [_step("cell:05_a")], "11_b.ipynb": [_step("cell:11_b")]})
    assert [s.get("skipped") for s in check.steps] == [
        None, "an earlier step failed", "a shared step failed", "a shared step failed"]
    assert not live.chapter_result("05_a.ipynb", live.colab.Needs(), recs["05_a.ipynb"])["ok"]


# -- a whole run, with the commands that need a network or minutes faked -----------------------
class FakeRuntime:
    """Answers the commands of run_check without pip, venv or papermill. Kept real: git (the
    bare repository, the server, the clone), the served data file and prepare_data.py, which
    the fake cell runs against the mirror as colab.setup does."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, live_calls: dict[str, int],
                 failing: str = ""):
        self.monkeypatch, self.live_calls, self.failing = monkeypatch, live_calls, failing

    def __call__(self, check, cmd, *, extra_env=None, cwd=None, timeout=600.0, check_rc=True):
        cmd = [str(c) for c in cmd]
        env = {**check.env, **(extra_env or {})}
        rc, out = self.answer(cmd, env)
        check.steps[-1]["commands"].append({"command": live.colab.command_line(cmd, extra_env),
                                            "exit_code": rc, "seconds": 0.0, "log": "fake"})
        if check_rc and rc:
            raise live.StepFailed(f"exit code {rc}: {cmd}")
        return out

    def answer(self, cmd: list[str], env: dict) -> tuple[int, str]:
        if cmd[0] == "git":
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
            return p.returncode, p.stdout + p.stderr
        if cmd[1:3] == ["-m", "venv"]:
            return 0, ""
        if cmd[1:3] == ["-m", "ipykernel"]:
            spec = Path(cmd[cmd.index("--prefix") + 1]) / "share" / "jupyter" / "kernels" / \
                cmd[cmd.index("--name") + 1] / "kernel.json"
            spec.parent.mkdir(parents=True)
            spec.write_text("{}")
            return 0, ""
        if cmd[1:3] == ["-m", "pip"]:
            return 0, "Successfully installed torch ipykernel papermill\n"
        if cmd[1:3] == ["-m", "papermill"]:
            return self.papermill(Path(cmd[3]), Path(cmd[4]), env)
        if cmd[1] == "-c":
            code = cmd[2]
            if code.startswith("import sys, pip"):
                return 0, "3.11.7 24.0\n"
            if "m.version(d) for d in" in code:  # the versions of the distributions named
                known = {"torch": "2.13.0", "ipykernel": "7.0", "papermill": "2.7.0"}
                return 0, json.dumps({d: v for d, v in known.items() if f"'{d}'" in code}) + "\n"
            if code == live.DECODE:
                return 0, "DECODE " + json.dumps({
                    "model": "qwen2.5-coder-0.5b", "text": " Paris.", "tokens": 3,
                    "system_info": "AVX = 1 | AVX2 = 1 | AVX512 = 0"}) + "\n"
        if cmd[1].endswith(".py") and "cell-" in cmd[1]:
            return self.cell(Path(cmd[1]).read_text(), env)
        raise AssertionError(f"unexpected command {cmd}")

    def cell(self, source: str, env: dict) -> tuple[int, str]:
        """What colab.setup() prints and leaves, for a clone made from the served repository."""
        clone = Path(env["DYNAKRAG_COLAB_HOME"]) / "dynakrag-lite"
        if not (clone / ".git").is_dir():
            subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "main",
                            env["DYNAKRAG_COLAB_REPO"], str(clone)], check=True, env=env,
                           capture_output=True, timeout=120)
            (clone / ".cache").mkdir()
            sqlite3.connect(clone / ".cache" / "llm_calls.sqlite").execute(
                "CREATE TABLE calls (key TEXT PRIMARY KEY, value TEXT)").connection.commit()
        lines = ["[colab setup] Hugging Face hub unreachable: HF_HUB_OFFLINE=1"]
        models = json.loads(re.search(r"models=(\[.*?\])", source).group(1))
        lines += [f"[colab setup] model {m}: 2 weight package(s)" for m in models]
        data_dir = None
        for ds in json.loads(re.search(r"data=(\[.*?\])", source).group(1)):
            target = clone / ".cache" / "data" / f"{ds}.jsonl"
            if target.exists():
                lines.append(f"[colab setup] {ds}: {target.name} already prepared")
            else:
                lines.append(f"[colab setup] {ds}: downloading and normalizing")
                for var in (live.prepare_data.MIRROR_ENV, "no_proxy", "NO_PROXY"):
                    self.monkeypatch.setenv(var, env[var])  # as the cell's environment has them
                printed = io.StringIO()
                with contextlib.redirect_stdout(printed):
                    live.prepare_data.prepare(ds, target.parent)
                lines += printed.getvalue().splitlines()
            data_dir = str(target.parent)
        lines.append("[colab setup] done. If Colab asks to restart the runtime")
        state = {"cwd": str(clone / "book"), "path0": str(clone), "env": {
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DYNAKRAG_DATA_DIR": data_dir,
            "DYNAKRAG_LLM_CACHE": str(clone / ".cache" / "llm_calls.sqlite")}}
        return 0, "\n".join(lines) + "\nSTATE " + json.dumps(state) + "\n"

    def papermill(self, notebook: Path, out: Path, env: dict) -> tuple[int, str]:
        cache = notebook.parents[1] / ".cache" / "llm_calls.sqlite"
        with contextlib.closing(sqlite3.connect(cache)) as db:
            for i in range(self.live_calls.get(notebook.name, 0)):
                db.execute("INSERT INTO calls VALUES (?, ?)", (f"{notebook.name}-{i}", "x"))
            db.commit()
        failed = notebook.name == self.failing
        out.write_text(json.dumps({"cells": [
            {"cell_type": "code", "source": live.colab.MARKER + "\n", "execution_count": 1,
             "outputs": [{"output_type": "stream", "name": "stdout",
                          "text": "[colab setup] done. restart?\n"}]},
            {"cell_type": "code", "source": "x", "execution_count": 2, "outputs": [
                {"output_type": "error", "ename": "KeyError", "evalue": "'f1'"} if failed else
                {"output_type": "stream", "name": "stdout", "text": "F1 0.5\n"}]}]}))
        return (1 if failed else 0), ""


@pytest.fixture
def small_checkout(tmp_path: Path, monkeypatch) -> Path:
    """A committed checkout holding three chapters whose install cells are the generated ones
    (as `make colab-cells` leaves them), and the files run_check reads. The third ("12_c")
    fetches HotpotQA, as the second does, to show a second cell finding the data prepared."""
    monkeypatch.setitem(live.colab.CHAPTER_NEEDS, "12", live.colab.Needs((), ("hotpotqa",)))
    src = tmp_path / "checkout"
    (src / "book").mkdir(parents=True)
    for f in ("_config.yml", "requirements.txt"):
        (src / f).write_text((REPO / f).read_text())
    repo = live.colab.read_repo(src / "_config.yml")
    for name in ("05_a.ipynb", "11_b.ipynb", "12_c.ipynb"):
        nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# A title\n"]}],
              "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        (src / "book" / name).write_text(live.colab.dumps_notebook(
            live.colab.rewrite_notebook(nb, name, repo)))
    git("init", "-q", str(src))
    git("add", "-A", cwd=src)
    git("commit", "-q", "-m", "three chapters", cwd=src)
    return src


def test_a_three_chapter_run_reports_each_chapter_and_what_stood_in(
        small_checkout, data_folder, tmp_path, monkeypatch):
    fake = FakeRuntime(monkeypatch, live_calls={"05_a.ipynb": 2}, failing="12_c.ipynb")
    monkeypatch.setattr(live, "ROOT", small_checkout)
    monkeypatch.setattr(live.Check, "run", lambda self, cmd, check=True, **kw: fake(
        self, cmd, check_rc=check, **kw))
    monkeypatch.setattr(live, "portable_wheel_dir", lambda checkout, builds: None)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    said: list[str] = []
    chapters = ["05_a.ipynb", "11_b.ipynb", "12_c.ipynb"]
    report = live.run_check(tmp_path / "work", chapters, data_folder, echo=said.append,
                            probe=lambda url: False)  # no network in a test

    # Said before the first step: no wheel, so the first cell compiles.
    assert said.index(next(s for s in said if "no portable llama-cpp-python wheel" in s)) < \
        said.index("== venv: a fresh virtual environment with pip")
    assert any("compile llama-cpp-python (several minutes" in w for w in report["warnings"])
    assert [s["name"] for s in report["steps"]] == [
        "venv", "runtime", "data", "serve", "cell:05_a", "decode", "chapter:05_a",
        "cell:11_b", "chapter:11_b", "cell:12_c", "chapter:12_c", "stop-server"]
    assert report["chapters_checked"] == chapters
    assert not report["ok"] and report["failed_steps"] == ["chapter:12_c"]
    a, b, c = report["chapters"]
    assert [r["chapter"] for r in report["chapters"]] == chapters
    assert a["ok"] and a["live_model_calls"] == 2 and a["data"]["needed"] == []
    assert a["cells"] == {"code": 2, "executed": 2} and a["needs"]["data"] == []

    # Chapter 11's cell fetched the rebuilt file from the mirror and normalized it.
    assert b["ok"] and b["live_model_calls"] == 0 and b["needs"]["data"] == ["hotpotqa"]
    data = b["data"]
    assert data["prepared"]["hotpotqa"]["is_the_served_file_normalized"]
    mirror = report["steps"][3]["found"]["data_mirror"]["url"]
    assert mirror.startswith("http://127.0.0.1:") and mirror.endswith("/mirror")
    assert f"hotpotqa: fetched {mirror}/hotpot_dev_distractor_v1.json (mirror: " \
           "$DYNAKRAG_DATA_MIRROR)" in data["lines"]
    assert data["DYNAKRAG_DATA_DIR"].endswith("/.cache/data")
    # Chapter 12, in the same runtime, found it prepared; its papermill run failed alone.
    assert "[colab setup] hotpotqa: hotpotqa.jsonl already prepared" in c["data"]["lines"]
    assert not c["ok"] and c["failed_steps"] == ["chapter:12_c"]
    assert c["errors"] == [{"code_cell": 1, "error": "KeyError: 'f1'"}]

    served = report["steps"][2]["found"]["served"]["hotpotqa"]
    assert served["normalized"]["vs_data_folder"]["questions_that_differ"] == 1
    assert served["layout"]["questions"] == 3
    stop = report["steps"][-1]["found"]
    assert stop["stopped"] and len(stop["mirror_requests"]) == 2  # the serve check, the cell
    stood_in = report["real_and_stood_in"]["stood_in"]
    note = next(s for s in stood_in if s.startswith("hotpotqa: "))
    assert "not reachable from this machine" in note and "rebuilt from" in note
    assert "its 3 questions" in note and "7,405" in note and "run live" in note
    assert "not the file the committed runs read" in note  # a made-up data folder
    assert any(s.startswith("GitHub: ") for s in stood_in)


def test_hotpotqa_served_from_the_shared_folder_gives_the_committed_runs_questions_in_order(
        shared_data_dir, tmp_path):
    src = shared_data_dir / "hotpotqa.jsonl"
    assert serve.sha256_file(src) in serve.committed_data_sha256("hotpotqa", REPO / "results")
    records, notes = serve.official_hotpotqa(src, shared_data_dir / "hotpotqa.provenance.jsonl")
    raw = tmp_path / "hotpot_dev_distractor_v1.json"
    raw.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    same = serve.compare_questions(serve.prepare_data.prepare("hotpotqa", tmp_path, raw=raw), src)
    # Same questions in the same order: a chapter's split (positions in the file) is the same.
    assert same["same_ids_in_order"] and same["questions"] == same["of"] == notes["questions"]
    # Only paragraphs with surrounding whitespace change (prepare_data.py strips them).
    assert set(same["fields_that_differ"]) <= {"paragraphs.text"}
    assert same["questions_that_differ"] <= notes["paragraphs_with_surrounding_whitespace"]


# -- the committed report ------------------------------------------------------------------------
REPORT = REPO / "results" / "diagnostics" / "colab-live-check.json"


def test_committed_report_ran_the_three_default_chapters_cleanly():
    """The report `make colab-live-check` wrote and was committed: every default chapter ran
    to the end without an error, replaying the recorded calls; chapter 11 got the HotpotQA file
    served from 127.0.0.1, and the report says what stood in for Colab."""
    report = json.loads(REPORT.read_text(encoding="utf-8"))
    assert report.get("chapters_checked") == list(live.CHAPTERS), \
        "the committed report predates the three-chapter check: run `make colab-live-check`"
    assert report["ok"] and not report["failed_steps"] and not report["skipped_steps"]
    results = {r["chapter"]: r for r in report["chapters"]}
    assert list(results) == list(live.CHAPTERS)
    for name, r in results.items():
        assert r["ok"] and not r["errors"] and not r["nan"], name
        assert r["cells"]["code"] and r["cells"]["executed"] == r["cells"]["code"], name
        assert r["live_model_calls"] == 0, name  # quick mode replays book/_llm_cache.sqlite
        assert r["needs"] == {"models": list(live.colab.needs_for(name).models),
                              "data": list(live.colab.needs_for(name).data)}, name
    assert results["05_atomic_actions.ipynb"]["data"]["needed"] == []
    data = results["11_baselines.ipynb"]["data"]
    assert data["prepared"]["hotpotqa"]["is_the_served_file_normalized"]
    assert any(ln.startswith("hotpotqa: fetched http://127.0.0.1:") for ln in data["lines"])
    stood_in = report["real_and_stood_in"]["stood_in"]
    assert any(s.startswith("hotpotqa: the official file") and "subset the committed runs read"
               in s for s in stood_in)
