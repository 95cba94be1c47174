"""Test doubles and the one gate for tests that need real models.

The library has no fake generator; tests that check control logic (not model quality) use the
scripted one below so that thousands of states can be explored in seconds. Tests of real
behaviour use the bundled models (see test_generators, test_baselines) and must reach them
through :func:`require_model` / :func:`require_llama` / :func:`require_modules`: on a developer
machine a missing piece skips the test, under CI (``$CI`` set) it fails the run, so a broken
install can never turn the real-model tests into silent skips.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dynakrag_lite.generators.base import Generation

# The bundled models `make test` installs (Makefile: SMALL_MODELS, and the smoke check's
# --require list). Only these are mandatory under CI; qwen2.5-coder-1.5b comes from the
# optional `make models-large` and is skipped when absent, CI or not.
CI_MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b")


def in_ci() -> bool:
    """True when $CI is set to anything but an explicit false (GitHub/GitLab set CI=true)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no", "off")


def missing(reason: str, required_in_ci: bool = True) -> None:
    """Skip the calling test, or fail it under CI when the missing piece is mandatory there."""
    if required_in_ci and in_ci():
        pytest.fail(f"CI must run this test, but {reason}", pytrace=False)
    pytest.skip(reason)


def load_script(name: str, folder: str = "data_scripts"):
    """Import ``<folder>/<name>.py`` (a script folder, not a package) as a module."""
    path = Path(__file__).resolve().parents[1] / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"dynakrag_script_{name}", path)
    mod = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def git(*args: str, cwd: Path | None = None) -> str:
    """Run git with a test identity, no system config and no prompt; its stdout, stripped."""
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org",
                           "-c", "init.defaultBranch=main", *args], cwd=cwd, check=True,
                          capture_output=True, text=True,
                          env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1",
                               "GIT_TERMINAL_PROMPT": "0"}).stdout.strip()


def require_llama() -> None:
    """llama-cpp-python must be importable (a broken build still fails at import, loudly)."""
    if importlib.util.find_spec("llama_cpp") is None:
        missing("llama-cpp-python is not installed (make llama)")


def require_modules(*names: str) -> None:
    """Every named module must be importable (they are all in requirements/`make install`)."""
    absent = [n for n in names if importlib.util.find_spec(n) is None]
    if absent:
        missing(f"modules not installed: {', '.join(absent)} (make install)")


def require_llama_server() -> None:
    """``python -m llama_cpp.server`` must be runnable: llama-cpp-python with its [server]
    extra (data_scripts/install_llama.py puts it in) and the openai client. Importing the
    server's entry module checks every dependency it needs, not a list that may go stale."""
    require_llama()
    require_modules("openai")
    try:
        importlib.import_module("llama_cpp.server.__main__")
    except ImportError as e:
        missing(f"llama_cpp.server cannot be imported ({e}); install "
                "llama-cpp-python[server] (make llama)")


def require_model(name: str, llama: bool = True) -> None:
    """Bundled model ``name`` must be installed, and llama.cpp too unless ``llama=False``."""
    from dynakrag_lite.generators import models
    if llama:
        require_llama()
    if not models.is_installed(name):
        missing(f"bundled model {name} is not installed: {models.install_command(name)}",
                required_in_ci=name in CI_MODELS)


# -- run folders written with and without evaluate --workers (test_workers*.py) -------------------
TIMING = ("seconds",)  # the only row fields that depend on wall-clock time
SUMMARY_TIMING = ("seconds_mean",)


def untimed(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in TIMING}


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def assert_same_run(seq_dir: Path, seq: dict, par_dir: Path, par: dict, ids: list[str],
                    workers: int) -> None:
    """The folder ``par_dir`` (summary ``par``, written with ``workers``) is the one the
    sequential run wrote to ``seq_dir`` (summary ``seq``) except for timing fields: the same
    rows in question order, byte for byte once ``seconds`` is dropped; the same summary and
    fingerprint."""
    from dynakrag_lite.experiments.folder import read_predictions
    a = read_predictions(seq_dir / "predictions.jsonl")
    b = read_predictions(par_dir / "predictions.jsonl")
    assert [r["id"] for r in b] == [r["id"] for r in a] == list(ids)
    assert [untimed(r) for r in b] == [untimed(r) for r in a]
    assert not any("error" in r for r in b) and all(r["llm_calls"] > 0 for r in b)
    strip = [json.dumps(untimed(json.loads(x)), ensure_ascii=False)
             for x in lines(seq_dir / "predictions.jsonl")]
    assert strip == [json.dumps(untimed(json.loads(x)), ensure_ascii=False)
                     for x in lines(par_dir / "predictions.jsonl")]
    keep = [k for k in seq if k not in SUMMARY_TIMING + ("run",)]
    assert {k: par[k] for k in keep} == {k: seq[k] for k in keep}
    assert par["run"]["workers"] == workers and par["run"]["complete"]
    assert json.loads((par_dir / "run.json").read_text())["fingerprint"] == \
        json.loads((seq_dir / "run.json").read_text())["fingerprint"]


class ScriptedGenerator:
    """Replies by prompt kind; ``replies`` overrides a kind (e.g. to send garbage)."""
    spec = "scripted"
    model_id = "scripted"

    def __init__(self, **replies: str):
        self.replies = {"sufficiency": "INSUFFICIENT: birthplace of the founder",
                        "rewrite": "founder of the label", "compress": "- [1] a fact\n- [2] b",
                        "answer": "Answer: Paris", **replies}
        self.calls: list[str] = []

    def generate(self, messages, max_tokens: int = 64, stop=None) -> Generation:
        user = messages[-1]["content"]
        if "contain every fact" in user:
            kind = "sufficiency"
        elif "new search query" in user:
            kind = "rewrite"
        elif "Snippets:" in user or "Facts:" in user:
            kind = "compress"
        else:
            kind = "answer"
        self.calls.append(kind)
        return Generation(self.replies[kind], len(user) // 4, 7, 0.0)


class HashEmbedder:
    """A deterministic bag-of-words sentence embedder (64 dims, normalized): enough to test
    indexes and their persistence without a model. Counts the texts it encodes."""

    dim = 64

    def __init__(self) -> None:
        self.encoded = 0

    def get_embedding_dimension(self) -> int:
        return self.dim

    def encode(self, texts, batch_size=64, show_progress_bar=False, convert_to_numpy=True,
               normalize_embeddings=True):
        self.encoded += len(texts)
        out = np.zeros((len(texts), self.dim), dtype="float32")
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1.0
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
        return out


# -- a real llama.cpp OpenAI-compatible server on loopback ---------------------------------
LLAMA_SERVER_READY_TIMEOUT = 120.0  # model load on a loaded 2-core machine takes seconds


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_process(proc, timeout: float = 20.0) -> None:
    """Terminate, then kill a process that ignores it; always reaped."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except Exception:  # subprocess.TimeoutExpired
        proc.kill()
        proc.wait()


def start_llama_server(model: str, log_path: Path, alias: str | None = None):
    """Start ``python -m llama_cpp.server`` on a free loopback port serving the bundled
    ``model`` with one thread (other processes share the cores) and a fixed seed, and wait
    until it answers /v1/models. Returns (process, base_url); the caller stops it with
    :func:`stop_process`. A server that exits or does not answer in time fails the test with
    the end of its output (it logs to ``log_path``: a pipe would fill up)."""
    import time
    import urllib.request
    from dynakrag_lite.generators import models
    port = free_port()
    base = f"http://127.0.0.1:{port}/v1"
    with open(log_path, "wb") as log:  # the child keeps its own handle
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(models.gguf_path(model)),
             "--model_alias", alias or model, "--host", "127.0.0.1", "--port", str(port),
             # logits_all false: only the last token's logits are needed
             "--n_threads", "1", "--n_threads_batch", "1", "--n_ctx", "2048", "--seed", "0",
             "--logits_all", "false"],
            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + LLAMA_SERVER_READY_TIMEOUT
    while True:
        try:
            with urllib.request.urlopen(base + "/models", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            pass
        problem = (f"exited with code {proc.returncode}" if proc.poll() is not None else
                   f"did not answer within {LLAMA_SERVER_READY_TIMEOUT:g} s"
                   if time.monotonic() > deadline else None)
        if problem:
            stop_process(proc)
            tail = Path(log_path).read_text(encoding="utf-8", errors="replace")[-3000:]
            pytest.fail(f"llama_cpp.server {problem} before answering {base}/models; its "
                        f"output ends with:\n{tail}", pytrace=False)
        time.sleep(0.25)
