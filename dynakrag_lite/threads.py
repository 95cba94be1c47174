"""$DYNAKRAG_N_THREADS: one thread count for every compute library a run uses.

Read by llama.cpp, torch (the encoder) and scikit-learn's OpenMP code (:func:`openmp_limit`).
On two busy cores OpenMP's spinning threads made the selector's predict 0.23 s per question;
with one thread a warm 2Wiki re-run went from 45 s to 7 s (benchmarks/bench_warm_rerun.py).
Results do not depend on it. Unset, every library keeps its default."""
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
