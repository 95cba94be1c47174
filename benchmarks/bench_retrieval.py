"""Retrieval speed and quality on the benchmark folder: encoding passages/s (cold index),
index load time (warm), query latency, and one-shot SR@3/6/12 per dataset.

    python benchmarks/bench_retrieval.py [--datasets hotpotqa,2wikimultihopqa,musique]

Writes results/benchmarks/retrieval.json (with date, CPU count and versions) and prints it.
A cold index is forced by building into a fresh temporary folder.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(p))

from benchlib import utc_date, versions  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--datasets", default="hotpotqa,2wikimultihopqa,musique")
    ap.add_argument("--embedder", default="all-MiniLM-L6-v2")
    ap.add_argument("--ks", default="3,6,12")
    args = ap.parse_args()
    from dynakrag_lite.data.corpus import Corpus, gold_titles
    from dynakrag_lite.data.sources import load_dataset
    from dynakrag_lite.metrics import support_recall
    from dynakrag_lite.retriever import DenseRetriever
    ks = [int(k) for k in args.ks.split(",")]
    out = {"date": utc_date(), "cpus": os.cpu_count(),
           **versions(("faiss", "sentence_transformers")),
           "embedder": args.embedder, "command": "python benchmarks/bench_retrieval.py",
           "datasets": {}}
    for name in args.datasets.split(","):
        qs = load_dataset(name)
        corpus = Corpus.from_questions(qs, name=name)
        with tempfile.TemporaryDirectory() as tmp:
            cold = DenseRetriever(corpus, embedder=args.embedder, index_dir=tmp,
                                  show_progress=False)
            t0 = time.perf_counter()
            warm = DenseRetriever(corpus, embedder=args.embedder, index_dir=tmp,
                                  show_progress=False)
            load_s = time.perf_counter() - t0
            assert warm.loaded_from_disk
            t0 = time.perf_counter()
            hits = warm.search_many([q.question for q in qs], max(ks))
            query_ms = (time.perf_counter() - t0) / len(qs) * 1000
        row = {"questions": len(qs), "documents": len(corpus),
               "encode_seconds": round(cold.encode_seconds, 1),
               "passages_per_second": round(len(corpus) / cold.encode_seconds, 1),
               "index_load_seconds": round(load_s, 3),
               "retriever_construct_seconds_warm": round(load_s, 3),
               "query_ms_batched": round(query_ms, 2)}
        for k in ks:
            row[f"SR@{k}"] = round(sum(support_recall([h.doc.title for h in hs[:k]],
                                                      gold_titles(q))
                                       for q, hs in zip(qs, hits)) / len(qs), 4)
        out["datasets"][name] = row
        print(name, json.dumps(row), flush=True)
    dest = ROOT / "results" / "benchmarks" / "retrieval.json"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
