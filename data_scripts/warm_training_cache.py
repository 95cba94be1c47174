"""Fill the LLM call cache for a slice of a training run's questions from a second process,
so that the training process (``python -m dynakrag_lite train``, same arguments) replays those
questions from the cache instead of waiting for the model.

    python data_scripts/warm_training_cache.py --start 180 -- \
        --data hotpotqa --data-dir ../shared/data --generator qwen2.5-coder-0.5b \
        --out results/policies/hotpotqa-qwen2.5-coder-0.5b.joblib --limit 300 \
        --continuation-questions 80 --sufficiency-signal learned

Everything after ``--`` is the training command's own arguments. The trajectories are
deterministic (seeded per question), and the sufficiency signal is calibrated exactly as
``train`` calibrates it, so this process makes the very calls the training process will make
for questions ``start`` .. ``stop`` of its list. Nothing is written but cache entries (the
cache is SQLite in WAL mode, safe for two processes); the policy still comes from ``train``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("usage: warm_training_cache.py --start N [--stop M] -- <train args>")
    cut = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--start", type=int, required=True)
    ap.add_argument("--stop", type=int, default=None)
    own = ap.parse_args(argv[:cut])
    from dynakrag_lite.cli import build_parser, training_setup
    from dynakrag_lite.trajectories import collect
    args = build_parser().parse_args(["train"] + argv[cut + 1:])
    setup, train_qs, _ = training_setup(args)  # as cmd_train builds it
    env = setup.env
    n_answer = args.continuation_questions or None
    t0 = time.perf_counter()
    for i in range(own.start, min(own.stop or len(train_qs), len(train_qs))):
        # One question at a time, with its position in the training list: the answer calls
        # depend on it (--continuation-questions).
        collect([train_qs[i]], env, seed=args.seed, progress=False,
                continuation=args.continuation_target,
                answer_questions=None if n_answer is None else (1 if i < n_answer else 0))
        print(f"warmed question {i} ({train_qs[i].id}) at {time.perf_counter() - t0:.0f} s",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
