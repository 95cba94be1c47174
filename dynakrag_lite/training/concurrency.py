"""Concurrent work against a server generator (``--workers N``): N items wait on the server at
once in threads. A worker holds one lock per run except while its server call is in flight
(:func:`locked_runner`, :class:`ReleasingGenerator`), so non-thread-safe parts never overlap and
results, returned in item order (:func:`run_in_order`), do not depend on scheduling. In-process
backends are CPU-bound and not thread-safe: ``workers > 1`` with them is refused."""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence, TypeVar

from ..config import Environment
from ..generators.server import OpenAIGenerator
from ..generators.spec import parse_spec
from ..storage import redact

__all__ = ["WINDOW_PER_WORKER", "is_server_generator", "check_workers", "ReleasingGenerator",
           "released", "locked_runner", "run_in_order"]

T = TypeVar("T")
R = TypeVar("R")

# Items started ahead of the first unfinished one, per worker: bounds the results in memory.
WINDOW_PER_WORKER = 4


def is_server_generator(generator: Any) -> bool:
    """True for an OpenAI-compatible server backend, also behind wrappers (the call cache)."""
    g, depth = generator, 0
    while g is not None and depth < 10:
        if isinstance(g, OpenAIGenerator):
            return True
        g, depth = getattr(g, "inner", None), depth + 1
    return False


def check_workers(workers: int, generator: Any, items: str = "questions") -> None:
    """Refuse ``workers`` < 1, and > 1 unless ``generator`` (a spec string or a generator
    object) is a server backend. ``items`` names what runs concurrently, for the message."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"--workers must be an integer >= 1, got {workers!r}")
    if workers == 1:
        return
    if isinstance(generator, str):
        server, spec = parse_spec(generator)[0] == "openai", generator
    else:
        server = is_server_generator(generator)
        spec = getattr(generator, "spec", None) or type(generator).__name__
    if not server:
        raise ValueError(
            f"--workers {workers} runs {items} concurrently and needs a server generator "
            f"(openai:<model>@<base_url>, e.g. vLLM or a llama.cpp server); generator "
            f"{redact(str(spec))!r} runs in-process (CPU-bound, not thread-safe). "
            "Use --workers 1")


class ReleasingGenerator:
    """A worker's generator: gives up the shared lock while the server call is in flight, so
    server calls overlap and everything else runs one thread at a time. Every other attribute
    (spec, model_id, backend, cache) is the wrapped generator's, so cache keys are unchanged."""

    def __init__(self, inner: Any, shared: threading.Lock) -> None:
        self.inner = inner
        self._shared = shared

    def __getattr__(self, name: str) -> Any:
        if name in ("inner", "_shared"):  # not set yet (copy/pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def generate(self, messages, max_tokens: int = 64, stop=None):
        with released(self):
            return self.inner.generate(messages, max_tokens=max_tokens, stop=stop)

    def option_logprobs(self, messages, options, mode: str = "auto"):
        with released(self):  # a server's log-prob request (or a cache lookup)
            return self.inner.option_logprobs(messages, options, mode)


@contextmanager
def released(generator: Any) -> Iterator[None]:
    """Within the block the calling worker does not hold the shared lock when ``generator`` is
    its :class:`ReleasingGenerator` (the block must be a server call only); else a no-op."""
    if not isinstance(generator, ReleasingGenerator):
        yield
        return
    generator._shared.release()  # held by this worker: see locked_runner
    try:
        yield
    finally:
        generator._shared.acquire()


def locked_runner(fn: Callable[[T, Any], R], env: Any, workers: int) -> Callable[[T], R]:
    """The function that runs ``fn(item, env)``; for workers > 1 under a shared lock, with a copy
    of ``env`` whose generator releases it during server calls."""
    if workers == 1:
        return lambda item: fn(item, env)
    shared = threading.Lock()
    worker_env = replace(env, generator=ReleasingGenerator(env.generator, shared))

    def locked(item: T) -> R:
        with shared:
            return fn(item, worker_env)
    return locked


def run_in_order(items: Sequence[T], run: Callable[[T], R], workers: int,
                 emit: Callable[[T, R], None], name: str = "worker") -> None:
    """Run every item of ``items`` and ``emit(item, result)`` in ``items`` order, from this
    (the calling) thread only; with workers > 1 up to ``workers`` items run at once (threads
    named ``name``). An item's exception is raised here, at its turn."""
    if workers == 1:
        for item in items:
            emit(item, run(item))
        return
    window = workers * WINDOW_PER_WORKER
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name) as pool:
        futures: dict[int, Future] = {}
        submitted = 0
        try:
            for i, item in enumerate(items):
                while submitted < min(len(items), i + window):
                    futures[submitted] = pool.submit(run, items[submitted])
                    submitted += 1
                emit(item, futures.pop(i).result())  # waits for the head: results in order
        finally:
            # Queued items never start; running ones finish and are dropped.
            for f in futures.values():
                f.cancel()


def collect_in_parallel(workers: int, generator: Any
                        ) -> Callable[[list, Callable, Callable, Environment], None]:
    """A runner for :func:`dynakrag_lite.trajectories.collect`: ``workers`` training questions
    at once under this module's scheme (checked against ``generator`` now), results emitted
    in question order, so the trajectories are a sequential run's."""
    check_workers(workers, generator)

    def runner(items: list, one: Callable, emit: Callable, env: Environment) -> None:
        run_in_order(items, locked_runner(one, env, workers), workers, emit, name="trajectories")
    return runner
