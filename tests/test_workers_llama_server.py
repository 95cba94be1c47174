"""evaluate --workers 2 against a real llama.cpp server on loopback writes the run folder a
sequential run writes (timing fields aside).

The server is the OpenAI-compatible one shipped with llama-cpp-python (``python -m
llama_cpp.server``) serving the bundled SmolLM2-135M with one thread and a fixed seed; the
library asks it greedily (temperature 0). Each run has its own empty LLM cache, so both runs
really ask the server. The method is ``uniform`` (seeded): several calls per question (query
rewrites, sufficiency probes, the answer). Terminal compression is off, for speed only: it
decodes up to 256 tokens per question (the 135M model uses them all), which would double the
test's time on a shared CPU without exercising anything --workers does differently.

Concurrency is measured client-side: every request's start and end are recorded around the
server backend, and the run with two workers must have had two requests in flight at once,
from two threads. llama_cpp.server holds one model behind a lock (``get_llama_proxy`` in
llama_cpp/server/app.py) and so computes one request at a time: the second request waits in
the server's queue (the line printed with -s shows it: with two workers the request latencies
sum to more than the time any request was open). That is fine: what ``--workers`` controls,
and what this test checks, is that the client sends them concurrently and that the server's
answers do not depend on the order in which they arrive (the server reuses the KV prefix of
its previous prompt, which differs between the two runs).
"""
from __future__ import annotations

import importlib
import threading
import time
from types import SimpleNamespace

import pytest

from dynakrag_lite.generators.cache import CallCache
from dynakrag_lite.config import ControlConfig, Environment, RunSettings
from dynakrag_lite.experiments.run import evaluate
from dynakrag_lite.generators.spec import make_generator

import helpers
from helpers import (assert_same_run, require_llama_server, require_model,
                     start_llama_server, stop_process)

MODEL = "smollm2-135m"  # the smallest bundled model: keeps the test to seconds of CPU
METHOD = "uniform"
N_QUESTIONS = 3
CONFIG = ControlConfig(use_compression=False)  # see the module docstring


@pytest.fixture(scope="module")
def llama_server(request, tmp_path_factory):
    require_model(MODEL)
    require_llama_server()
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    proc, base = start_llama_server(MODEL, log_path)
    request.addfinalizer(lambda: stop_process(proc))
    return SimpleNamespace(spec=f"openai:{MODEL}@{base}", log=log_path)


class Timed:
    """Wraps the server backend (inside the call cache, so only real requests count) and
    records each request's client-side (start, end, thread). ``inner`` keeps it recognisable
    as a server generator; every other attribute is the backend's, so cache keys are too."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls: list[tuple[float, float, str]] = []  # list.append is atomic

    def __getattr__(self, name: str):
        if name == "inner":  # not set yet (copy/pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def generate(self, messages, max_tokens: int = 64, stop=None):
        t0 = time.monotonic()
        try:
            return self.inner.generate(messages, max_tokens=max_tokens, stop=stop)
        finally:
            self.calls.append((t0, time.monotonic(), threading.current_thread().name))


def busy_seconds(calls) -> float:
    """Wall time during which at least one request was open (the union of the intervals)."""
    total, end = 0.0, float("-inf")
    for s, e, _ in sorted(calls):
        total += max(0.0, e - max(s, end))
        end = max(end, e)
    return total


def max_in_flight(calls) -> int:
    """Most requests open at one instant (an end sorts before a start at the same time)."""
    events = sorted([(s, 1) for s, _, _ in calls] + [(e, -1) for _, e, _ in calls])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


@pytest.mark.slow
def test_two_workers_against_llama_server_write_what_a_sequential_run_writes(
        llama_server, library_questions, library_retriever, tmp_path):
    qs = library_questions[:N_QUESTIONS]
    summaries, calls = {}, {}
    for workers in (1, 2):
        # A fresh cache per run: the run with workers asks the server instead of replaying.
        gen = make_generator(llama_server.spec, cache=CallCache(tmp_path / f"w{workers}.sqlite"),
                             max_retries=0)
        gen.inner = timed = Timed(gen.inner)
        env = Environment(library_retriever, gen, CONFIG)
        s = RunSettings(method=METHOD, generator=MODEL, workers=workers)
        summaries[workers] = evaluate(qs, s, env, tmp_path / f"w{workers}", dataset="library",
                                      progress=False)
        calls[workers] = timed.calls
        # Shown with -s or on failure: with a server that computes one request at a time,
        # the latencies add up to more than the busy time once requests wait in its queue.
        print(f"workers={workers}: {len(timed.calls)} requests, peak {max_in_flight(timed.calls)} "
              f"in flight, busy {busy_seconds(timed.calls):.1f} s, latencies sum to "
              f"{sum(e - s for s, e, _ in timed.calls):.1f} s")
    assert_same_run(tmp_path / "w1", summaries[1], tmp_path / "w2", summaries[2],
                    [q.id for q in qs], workers=2)
    assert summaries[1]["llm_calls_mean"] >= 2  # several server calls per question
    # Both runs sent every call to the server (nothing replayed), the same number of them.
    assert len(calls[2]) == len(calls[1]) >= 2 * N_QUESTIONS
    assert max_in_flight(calls[1]) == 1 and len({t for *_, t in calls[1]}) == 1
    # Two workers each sent requests, and two requests were open at once.
    assert len({t for *_, t in calls[2]}) == 2, f"server log: {llama_server.log}"
    assert max_in_flight(calls[2]) == 2, f"server log: {llama_server.log}"


@pytest.mark.parametrize("ci, outcome", [("", pytest.skip.Exception),
                                         ("true", pytest.fail.Exception)])
def test_missing_llama_server_skips_or_fails_under_ci(monkeypatch, ci, outcome):
    """The gate above: a llama-cpp-python without its [server] extra skips the test on a
    developer machine and fails it under CI, as every other missing dependency does."""
    monkeypatch.setattr(helpers, "require_llama", lambda: None)  # only the server is missing
    monkeypatch.setattr(helpers, "require_modules", lambda *names: None)
    real = importlib.import_module

    def no_server(name, *args):
        if name.startswith("llama_cpp.server"):
            raise ImportError("No module named 'fastapi'")
        return real(name, *args)
    monkeypatch.setattr(importlib, "import_module", no_server)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=r"llama_cpp.server cannot be imported .*fastapi.*\[server\]"):
        require_llama_server()
