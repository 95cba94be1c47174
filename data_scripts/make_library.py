#!/usr/bin/env python
"""Write the embedded fictional "library" dataset to a JSONL file for inspection.

    python data_scripts/make_library.py --out library.jsonl [--n 60] [--seed 0]
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dynakrag_lite.data.sources import write_questions  # noqa: E402
from dynakrag_lite.data.library import build_library  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the embedded library to JSONL.")
    ap.add_argument("--out", type=Path, default=Path("library.jsonl"))
    ap.add_argument("--n", type=int, default=60, help="number of questions")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    qs = build_library(args.n, args.seed)
    write_questions(qs, args.out)
    types = ", ".join(f"{t}={c}" for t, c in sorted(Counter(q.type for q in qs).items()))
    print(f"wrote {len(qs)} questions ({types}) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
