"""$DYNAKRAG_N_THREADS: one thread count for every compute library a run uses.

llama.cpp reads it in :class:`~dynakrag_lite.generators.llamacpp.LlamaCppGenerator`, torch (the
query/sentence encoder) in :func:`~dynakrag_lite.retriever.limit_torch_threads`, and
scikit-learn's OpenMP code (the gradient-boosting sentence selector's ``predict_proba``)
through :func:`openmp_limit`. On two cores shared with another process, OpenMP's default of
one spinning thread per core made the selector's predict 0.23 s per question; with one thread
the whole warm 2Wiki re-run loop went from 45 s to 7 s (benchmarks/bench_warm_rerun.py). The
results do not depend on it (each row is predicted on its own, trees summed in order).
Unset, every library keeps its default.
"""
from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from typing import Iterator

__all__ = ["env_threads", "openmp_limit"]


def env_threads() -> int | None:
    """$DYNAKRAG_N_THREADS as a positive int, or None when unset, empty or not one."""
    raw = os.environ.get("DYNAKRAG_N_THREADS", "").strip()
    try:
        n = int(raw)
    except ValueError:
        return None
    return n if n > 0 else None


@contextmanager
def openmp_limit() -> Iterator[int | None]:
    """Within the block, OpenMP thread pools (scikit-learn's) use $DYNAKRAG_N_THREADS threads
    when it is set; a no-op when unset. Yields the limit (or None)."""
    n = env_threads()
    if n is None:
        with nullcontext():
            yield None
        return
    from threadpoolctl import threadpool_limits
    with threadpool_limits(limits=n, user_api="openmp"):
        yield n
