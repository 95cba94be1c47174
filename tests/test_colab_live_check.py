"""The offline parts of data_scripts/colab_live_check.py, in seconds.

The live check itself (a fresh venv, real pip, chapter 5 executed) takes minutes and the
network, so `make colab-live-check` runs it by hand. Tested here: the served repository is the
checkout's HEAD and `git clone --depth 1` works over the loopback smart-HTTP server (the dumb
protocol cannot do shallow clones); the server listens on 127.0.0.1 only and stops in bounded
time; a missing repository is an HTTP error, not a hang; a command that outlives its timeout is
ended with its children; steps and report are recorded with machine paths replaced; and the
readers of pip's output, of the executed notebook and of the wheel folder.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import git, load_script

live = load_script("colab_live_check")
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
    sha = live.make_bare(checkout, served / "r.git", "main")
    assert sha == git("rev-parse", "HEAD", cwd=checkout)
    with live.GitHTTPServer(served) as srv:
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
    assert live.make_bare(checkout, tmp_path / "r.git", "main", resolved) == resolved
    assert git("rev-parse", "HEAD", cwd=checkout) != resolved


def test_server_listens_on_loopback_only_and_stops_within_its_bound(tmp_path):
    srv = live.GitHTTPServer(tmp_path).start()
    assert srv.server_address[0] == "127.0.0.1"
    socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
    t0 = time.monotonic()
    assert srv.stop(timeout=5.0)
    assert time.monotonic() - t0 < 5.0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()


def test_missing_repository_is_an_http_error_not_a_hang(tmp_path):
    with live.GitHTTPServer(tmp_path) as srv:
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
