"""Bridge candidates before/after the type and title rules, on the TRAINING split (no LLM).

    python data_scripts/bridge_diagnostics.py --dataset hotpotqa --limit 100 \
        --old-ref 5e584a9 --out results/diagnostics/bridge.json

For each of the first ``--limit`` training questions (the CLI's split: --n-eval 100,
--split-seed 0): the state after the first retrieve_more (top-3 documents); its bridge
candidates from the old rules (bridge.py at git ``--old-ref``) and the current ones; a search
for the first candidate (what bridge_entity_expand does) and for every candidate, counting
the gold paragraphs each search adds. Same questions, for scale: the gold paragraphs still
missing after top-3, what retrieve_more's next 3 add, what a search with the question adds,
and what rewrite_query's fallback query (question + first candidate) adds.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dynakrag_lite.actions import retrieve_more, rewrite_fallback  # noqa: E402
from dynakrag_lite.bridge import bridge_candidates, corpus_title_keys  # noqa: E402
from dynakrag_lite.data.corpus import normalize_title  # noqa: E402
from dynakrag_lite.evidence import search_new  # noqa: E402
from dynakrag_lite.pipeline import build_setup  # noqa: E402
from dynakrag_lite.state import initial_state  # noqa: E402

DEMONYMS = {"american", "german", "british", "english", "french", "italian", "swedish",
            "spanish", "japanese", "chinese", "canadian", "australian", "russian"}


def old_module(ref: str):
    src = subprocess.run(["git", "show", f"{ref}:dynakrag_lite/bridge.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "old_bridge.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("dynakrag_lite._old_bridge", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="hotpotqa")
    ap.add_argument("--limit", type=int, default=100)
    ap.add_argument("--old-ref", default="5e584a9")  # the last commit with the old rules
    ap.add_argument("--out", default="results/diagnostics/bridge.json")
    args = ap.parse_args()
    t0 = time.perf_counter()
    old = old_module(args.old_ref)
    setup = build_setup(args.dataset, generator=None, show_progress=False)
    env = setup.env
    titles = corpus_title_keys(env.retriever.corpus)
    qs = setup.train[:args.limit]
    states = [retrieve_more(initial_state(q.question), env) for q in qs]
    golds = [{normalize_title(t) for t in q.supporting_titles} for q in qs]
    out = {"command": "python " + " ".join(sys.argv), "dataset": setup.dataset,
           "questions": len(qs), "old_ref": args.old_ref}
    rules = {f"old ({args.old_ref})": lambda q, d: old.bridge_candidates(q, d, max_candidates=5),
             "new": lambda q, d: bridge_candidates(q, d, max_candidates=5, titles=titles)}
    for name, fn in rules.items():
        st = {"candidates": 0, "demonym_candidates": 0, "first_docs": 0, "first_gold": 0,
              "all_searches": 0, "all_docs": 0, "all_gold": 0}
        for q, s, gold in zip(qs, states, golds):
            cands = fn(q.question, s.docs)
            st["candidates"] += len(cands)
            st["demonym_candidates"] += sum(c.lower() in DEMONYMS for c in cands)
            for i, c in enumerate(cands):
                added = search_new(s, env, c, 3)
                g = sum(normalize_title(d.title) in gold for d in added)
                st["all_searches"] += 1
                st["all_docs"] += len(added)
                st["all_gold"] += g
                if i == 0:
                    st["first_docs"] += len(added)
                    st["first_gold"] += g
        st["first_gold_per_doc"] = round(st["first_gold"] / max(1, st["first_docs"]), 4)
        st["all_gold_per_doc"] = round(st["all_gold"] / max(1, st["all_docs"]), 4)
        out[name] = st
    base = {"missing_gold_after_top3": 0, "retrieve_more_next3_gold": 0,
            "question_search_gold": 0, "rewrite_fallback_query_gold": 0, "fallback_kinds": {}}
    for q, s, gold in zip(qs, states, golds):
        base["missing_gold_after_top3"] += len(gold - {normalize_title(d.title) for d in s.docs})
        s2 = retrieve_more(s, env)
        base["retrieve_more_next3_gold"] += sum(normalize_title(d.title) in gold
                                                for d in s2.docs[len(s.docs):])
        base["question_search_gold"] += sum(normalize_title(d.title) in gold
                                            for d in search_new(s, env, q.question, 3))
        fq, how = rewrite_fallback(s)
        kind = how.split(":")[0]
        base["fallback_kinds"][kind] = base["fallback_kinds"].get(kind, 0) + 1
        base["rewrite_fallback_query_gold"] += sum(normalize_title(d.title) in gold
                                                   for d in search_new(s, env, fq, 3))
    out["same_questions"] = base
    out["seconds"] = round(time.perf_counter() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
