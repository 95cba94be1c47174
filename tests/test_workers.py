"""evaluate --workers N: questions run concurrently against an OpenAI-compatible server, and the
run folder is the one a sequential run writes (same rows, same order; only ``seconds`` differs).

The server is a stdlib HTTP server on loopback whose replies are a function of the prompt, with
a short sleep so requests overlap; it records how many requests were in flight at once. The
retriever is the real dense one (sentence-transformers + FAISS) and bridge extraction uses
spaCy when installed, so the parts that must not run concurrently are really exercised.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dynakrag_lite.generators.cache import CallCache
from dynakrag_lite.experiments.cli import main
from dynakrag_lite.config import ControlConfig, Environment, RunSettings
from dynakrag_lite.training.concurrency import check_workers
from dynakrag_lite.experiments.run import evaluate
from dynakrag_lite.experiments.folder import read_predictions
from dynakrag_lite.generators.spec import make_generator

from helpers import ScriptedGenerator, assert_same_run, lines, require_modules, untimed

FAIL_MARK = "FAIL-THIS-QUESTION"


# -- a deterministic OpenAI-compatible server on loopback ----------------------------------
def reply_for(prompt: str) -> str:
    """A reply of the prompt's kind (as helpers.ScriptedGenerator), the answer a hash of it."""
    if "contain every fact" in prompt:
        return "INSUFFICIENT: birthplace of the founder"
    if "new search query" in prompt:
        return "founder of the label"
    if "Snippets:" in prompt or "Facts:" in prompt:
        return "- [1] a fact\n- [2] b"
    return "Answer: " + hashlib.sha256(prompt.encode()).hexdigest()[:8]


def logprobs_for(prompt: str) -> dict:
    """First-token log-probs of SUFFICIENT ("S") and INSUFFICIENT ("INS"), a hash of the prompt,
    in the shape of the OpenAI API (what OpenAIGenerator.option_logprobs reads)."""
    h = int(hashlib.sha256(prompt.encode()).hexdigest()[:8], 16)
    top = [{"token": "S", "logprob": -(h % 997) / 300, "bytes": None},
           {"token": "INS", "logprob": -((h // 997) % 991) / 300, "bytes": None}]
    return {"content": [{**top[0], "top_logprobs": top}]}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        prompt = body["messages"][-1]["content"]
        with srv.guard:
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
            srv.requests += 1
            srv.arrived.notify_all()
            # In a run with workers, hold the request until a second one is in flight (or
            # peer_wait passes): overlap then does not depend on how busy the machine is, and
            # a run that never overlaps still ends (and fails the max_in_flight check).
            # With peer_wait_once, only until two have been in flight once: a run whose tail
            # has one item left (train's last question) then does not wait at every call.
            if srv.peer_wait and not (srv.peer_wait_once and srv.max_in_flight >= 2):
                srv.arrived.wait_for(lambda: srv.in_flight >= 2, timeout=srv.peer_wait)
        # The reply is built, then the request counted as finished, then the reply sent: a
        # client cannot send its next request before it has read this reply, so in_flight
        # never counts a finished request next to its successor (a decrement after the send
        # once raced the next request and reported 3 in flight for 2 workers).
        try:
            time.sleep(srv.sleep)
            if srv.fail_on and srv.fail_on in prompt:
                status, reply = 500, {"error": {"message": "boom"}}
            else:
                text = reply_for(prompt)
                choice = {"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": text}}
                if body.get("logprobs"):  # the margin signal's scoring request
                    choice["logprobs"] = logprobs_for(prompt)
                status, reply = 200, {
                    "id": "chatcmpl-1", "object": "chat.completion", "created": 0,
                    "model": "m", "choices": [choice],
                    "usage": {"prompt_tokens": len(prompt) // 4,
                              "completion_tokens": len(text.split()),
                              "total_tokens": len(prompt) // 4 + len(text.split())}}
        finally:
            with srv.guard:
                srv.in_flight -= 1
        self._send(status, reply)

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    require_modules("openai")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.guard = threading.Lock()
    srv.arrived = threading.Condition(srv.guard)
    srv.in_flight = srv.max_in_flight = srv.requests = 0
    srv.sleep, srv.fail_on, srv.peer_wait, srv.peer_wait_once = 0.03, "", 0.0, False
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    srv.spec = f"openai:m@http://127.0.0.1:{srv.server_address[1]}/v1"
    yield srv
    srv.shutdown()
    srv.server_close()


def reset(srv) -> None:
    # Handlers count a request as finished before replying, so nothing is in flight once the
    # client has its replies: the counters can be zeroed at once.
    with srv.guard:
        srv.in_flight = srv.max_in_flight = srv.requests = 0


def server_env(srv, retriever, cache_file: Path) -> Environment:
    """A fresh call cache per run, so every run really asks the server."""
    gen = make_generator(srv.spec, cache=CallCache(cache_file), max_retries=0, timeout=10)
    return Environment(retriever, gen, ControlConfig())


def run(qs, method, env, out, workers):
    return evaluate(qs, RunSettings(method=method, generator="m", workers=workers), env, out,
                    dataset="library", progress=False)


# -- same rows, same order, real overlap ---------------------------------------------------
@pytest.mark.parametrize("method, n", [("fixed_k", 6), ("uniform", 4)])
def test_two_workers_write_what_a_sequential_run_writes(server, library_questions,
                                                        library_retriever, tmp_path, method, n):
    qs = library_questions[:n]
    seq = run(qs, method, server_env(server, library_retriever, tmp_path / "a.sqlite"),
              tmp_path / "seq", workers=1)
    assert server.max_in_flight == 1
    reset(server)
    server.peer_wait = 5.0
    par = run(qs, method, server_env(server, library_retriever, tmp_path / "b.sqlite"),
              tmp_path / "par", workers=2)
    assert server.max_in_flight == 2  # two questions really were at the server at once
    assert_same_run(tmp_path / "seq", seq, tmp_path / "par", par, [q.id for q in qs], workers=2)


def test_error_row_keeps_its_place_and_the_run_goes_on(server, library_questions,
                                                       library_retriever, tmp_path):
    qs = library_questions[:5]
    server.fail_on = qs[1].question  # every prompt of question 2 gets HTTP 500
    with pytest.warns(RuntimeWarning, match="1 of 5 questions failed"):
        summary = run(qs, "fixed_k", server_env(server, library_retriever,
                                                tmp_path / "c.sqlite"), tmp_path / "run",
                      workers=2)
    rows = read_predictions(tmp_path / "run" / "predictions.jsonl")
    assert [r["id"] for r in rows] == [q.id for q in qs]
    assert ["error" in r for r in rows] == [False, True, False, False, False]
    assert "HTTP 500" in rows[1]["error"]["message"]
    assert summary["n"] == 4 and summary["errors"] == 1 and not summary["run"]["complete"]
    server.fail_on = ""  # the server recovers: a re-run retries only that question
    summary = run(qs, "fixed_k", server_env(server, library_retriever, tmp_path / "c.sqlite"),
                  tmp_path / "run", workers=2)
    rows = read_predictions(tmp_path / "run" / "predictions.jsonl")
    assert [r["id"] for r in rows] == [q.id for q in qs] + [qs[1].id]
    assert summary["n"] == 5 and summary["errors"] == 0 and summary["run"]["complete"]


# -- resume ----------------------------------------------------------------------------------
def test_resume_with_workers_skips_finished_rows_and_redoes_a_torn_one(
        server, library_questions, library_retriever, tmp_path):
    qs = library_questions[:5]
    run(qs, "fixed_k", server_env(server, library_retriever, tmp_path / "a.sqlite"),
        tmp_path / "full", workers=1)
    full = lines(tmp_path / "full" / "predictions.jsonl")
    # A run killed while writing question 2: row 1 on disk, row 2 half written.
    out = tmp_path / "resumed"
    out.mkdir()
    shutil.copy(tmp_path / "full" / "run.json", out / "run.json")
    (out / "predictions.jsonl").write_text(full[0] + "\n" + full[1][: len(full[1]) // 2])
    reset(server)
    server.peer_wait = 5.0
    with pytest.warns(RuntimeWarning, match="torn final line"):
        summary = run(qs, "fixed_k", server_env(server, library_retriever, tmp_path / "b.sqlite"),
                      out, workers=2)
    got = lines(out / "predictions.jsonl")
    assert got[0] == full[0]  # kept byte for byte, question 1 not asked again
    assert [json.loads(x)["id"] for x in got] == [q.id for q in qs]  # each question once
    assert [untimed(json.loads(x)) for x in got] == [untimed(json.loads(x)) for x in full]
    assert summary["n"] == 5 and summary["run"]["complete"]
    assert server.max_in_flight == 2
    # Resuming a finished folder (with any number of workers) asks nothing and writes nothing.
    reset(server)
    run(qs, "fixed_k", server_env(server, library_retriever, tmp_path / "b.sqlite"), out,
        workers=2)
    assert lines(out / "predictions.jsonl") == got and server.requests == 0


class Interrupting:
    """A server generator (behind ``inner``) that raises KeyboardInterrupt for one question."""

    def __init__(self, inner, on: str):
        self.inner, self.on = inner, on
        self.spec, self.model_id = inner.spec, inner.model_id

    def generate(self, messages, max_tokens: int = 64, stop=None):
        if self.on in messages[-1]["content"]:
            raise KeyboardInterrupt
        return self.inner.generate(messages, max_tokens=max_tokens, stop=stop)


def test_keyboard_interrupt_in_a_worker_stops_the_run_keeping_the_rows_before_it(
        server, library_questions, library_retriever, tmp_path):
    qs = library_questions[:5]
    env = server_env(server, library_retriever, tmp_path / "a.sqlite")
    plain = env.generator
    env.generator = Interrupting(plain, on=qs[2].question)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run(qs, "fixed_k", env, out, workers=2)
    # Rows before the interrupted question are written in order; none after it.
    assert [r["id"] for r in read_predictions(out / "predictions.jsonl")] == \
        [qs[0].id, qs[1].id]
    env.generator = plain  # the folder lock was released: the same command resumes
    assert run(qs, "fixed_k", env, out, workers=2)["n"] == 5
    assert [r["id"] for r in read_predictions(out / "predictions.jsonl")] == [q.id for q in qs]


# -- refusals ------------------------------------------------------------------------------------
def test_workers_with_an_in_process_generator_are_refused(library_questions, library_retriever,
                                                          tmp_path, capsys):
    env = Environment(library_retriever, ScriptedGenerator(), ControlConfig())
    with pytest.raises(ValueError, match=r"--workers 2 .*'scripted' runs in-process"):
        run(library_questions[:2], "fixed_k", env, tmp_path / "o", workers=2)
    assert not (tmp_path / "o").exists()  # refused before the folder is made
    with pytest.raises(ValueError, match="--workers must be an integer >= 1"):
        check_workers(0, "openai:m@http://127.0.0.1:1/v1")
    check_workers(4, "openai:m@http://127.0.0.1:1/v1")  # a server spec is fine
    # The command line refuses from the spec alone, before loading any model or index.
    code = main(["evaluate", "--data", "library", "--method", "fixed_k", "--generator",
                 "smollm2-135m", "--workers", "2", "--out", str(tmp_path / "cli")])
    err = capsys.readouterr().err
    assert code == 2 and "--workers 2" in err and "'smollm2-135m' runs in-process" in err
    assert not (tmp_path / "cli").exists()


def test_cli_evaluate_with_workers_against_a_server(server, tmp_path, capsys):
    out = tmp_path / "cli"
    server.peer_wait = 5.0
    code = main(["evaluate", "--data", "library", "--method", "fixed_k", "--generator",
                 server.spec, "--workers", "2", "--limit", "4", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0 and json.loads(printed.splitlines()[-1])["n"] == 4
    assert server.max_in_flight == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["workers"] == 2 and "--workers 2" in summary["run"]["command"]
    assert len(read_predictions(out / "predictions.jsonl")) == 4
