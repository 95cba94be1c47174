"""Generator speed per backend and model: prompt tokens/s, decode tokens/s, cached call time.

For each (backend, model) the script loads the model, warms it up, then per repeat:

* calls with ``max_tokens=1`` on a fresh prompt: prompt reading time (one decode step included);
* calls with ``max_tokens=48`` on another fresh prompt: decode rate =
  (completion_tokens - 1) / (t_48 - t_1);

"Fresh" means a different first line (a run tag), so llama.cpp cannot reuse the KV cache of the
previous prompt. Medians over repeats are reported. Last, a call through :class:`CachedGenerator`
on a temporary cache file is timed cold (real generation) and warm (median of 5 hits).

The prompt is RAG-shaped (four passages, then question, then instruction) and about 400 tokens.

Usage::

    nice -n 10 python benchmarks/bench_generators.py            # default grid
    python benchmarks/bench_generators.py --only llama.cpp:smollm2-135m --repeats 1

transformers on qwen2.5-coder-1.5b is skipped unless ``--with-hf-1.5b``: the GGUF is
dequantised to fp32 (about 9 GB of RAM) and decodes at a few tokens/s.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks"):
    if str(p) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(p))

from benchlib import cpu_model, loadavg, recorded_command, versions  # noqa: E402
from dynakrag_lite.generators import (CachedGenerator, CallCache,  # noqa: E402
                                      LlamaCppGenerator, TransformersGenerator, models,
                                      unload_models)
from dynakrag_lite.storage import atomic_write_json  # noqa: E402

NEW_TOKENS = 48
VERSIONS = ("llama_cpp", "transformers", "torch", "gguf", "openai")  # the backends' stacks

PASSAGES = [
    ("Harbor Bridge (Lakeport)",
     "The Harbor Bridge is a steel arch bridge in Lakeport that carries four lanes of traffic "
     "across the Mill River estuary. Construction began in 1927 under the direction of the "
     "engineer Clara Voss, and the bridge opened to traffic in 1932 after delays caused by a "
     "flood that destroyed the temporary works. It was the longest arch span in the region until "
     "1958."),
    ("Clara Voss",
     "Clara Voss (1889-1971) was a civil engineer born in Rotterdam who emigrated in 1911 and "
     "later became the first woman to lead the Lakeport public works department. Besides the "
     "Harbor Bridge she designed the North Pier grain terminal and wrote a widely used textbook "
     "on riveted steel structures. She retired in 1949 and spent her last years in Ashford."),
    ("Ashford",
     "Ashford is a market town on the upper Mill River, about forty kilometres inland from "
     "Lakeport. Its economy grew around wool trading in the nineteenth century; today it is "
     "known for its annual river festival held every September and for the Ashford Museum of "
     "Engineering, which holds the papers of several regional engineers and architects."),
    ("Mill River",
     "The Mill River rises in the Grey Hills and flows roughly east for 120 kilometres before "
     "reaching the sea at Lakeport, where it forms a broad tidal estuary. Floods were frequent "
     "until a series of weirs was completed in 1936. The river was an important route for "
     "timber and wool, and several towns, including Ashford, grew up along its banks."),
]
QUESTION = ("In which town did the engineer who led the construction of the Harbor Bridge spend "
            "her last years, and which museum in that town holds engineers' papers?")
INSTRUCTION = ("Using only the documents above, explain your reasoning step by step in two or "
               "three sentences, naming the documents you use, and then give the final answer.")


def rag_messages(tag: str) -> list[dict]:
    docs = "\n\n".join(f"Document {i + 1}: {t}\n{x}" for i, (t, x) in enumerate(PASSAGES))
    return [
        {"role": "system", "content": f"[{tag}] You answer questions from retrieved documents."},
        {"role": "user", "content": f"{docs}\n\nQuestion: {QUESTION}\n\n{INSTRUCTION}"},
    ]


def build(backend: str, name: str, threads: int):
    path = models.gguf_path(name)
    if backend == "llama.cpp":
        return LlamaCppGenerator(path, spec=name, model_id=models.REGISTRY[name].sha256,
                                 n_threads=threads)
    import torch
    torch.set_num_threads(threads)
    return TransformersGenerator(str(path.parent), gguf_file=path.name,
                                 spec=f"hf:{path.parent}#{path.name}")


def bench_one(backend: str, name: str, repeats: int, threads: int) -> dict:
    t0 = time.perf_counter()
    gen = build(backend, name, threads)
    load_s = time.perf_counter() - t0
    gen.generate([{"role": "user", "content": "Say hi."}], max_tokens=4)  # warm-up

    rows = []
    for r in range(repeats):
        g1 = gen.generate(rag_messages(f"p{r}"), max_tokens=1)
        g48 = gen.generate(rag_messages(f"d{r}"), max_tokens=NEW_TOKENS)
        decode_s = g48.seconds - g1.seconds
        rows.append({
            "prompt_tokens": g1.prompt_tokens, "t_1_token_s": g1.seconds,
            "completion_tokens": g48.completion_tokens, "t_48_tokens_s": g48.seconds,
            "prompt_tok_s": g1.prompt_tokens / g1.seconds,
            "decode_tok_s": (g48.completion_tokens - 1) / decode_s if decode_s > 0 else None,
        })

    with tempfile.TemporaryDirectory() as d:
        cache = CallCache(Path(d) / "bench.sqlite")
        cg = CachedGenerator(gen, cache)
        cold = cg.generate(rag_messages("cache"), max_tokens=NEW_TOKENS)
        warm = [cg.generate(rag_messages("cache"), max_tokens=NEW_TOKENS) for _ in range(5)]
        assert not cold.cached and all(w.cached for w in warm)
        cache.close()

    def med(key: str, digits: int = 1) -> float | None:
        """Median over the repeats that measured ``key``; None when none did (a reply that
        ended after one token measures no decode rate)."""
        have = [x[key] for x in rows if x[key] is not None]
        return round(statistics.median(have), digits) if have else None

    return {
        "backend": backend, "model": name, "load_s": round(load_s, 2), "repeats": repeats,
        "prompt_tokens": rows[0]["prompt_tokens"],
        "completion_tokens": [x["completion_tokens"] for x in rows],
        "prompt_tok_s": med("prompt_tok_s"),
        "decode_tok_s": med("decode_tok_s"),
        "t_48_tokens_s": med("t_48_tokens_s", 2),
        "cached_cold_s": round(cold.seconds, 3),
        "cached_warm_ms": round(1000 * statistics.median(w.seconds for w in warm), 2),
        "sample_output": warm[0].text[:200],
        "runs": rows,
    }


def _num(x: float | None, width: int, digits: int) -> str:
    return f"{x:>{width}.{digits}f}" if x is not None else f"{'-':>{width}}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="compute threads (on a CPU shared with other jobs, 1 can beat 2)")
    ap.add_argument("--only", nargs="*", help="backend:model pairs, e.g. llama.cpp:smollm2-135m")
    ap.add_argument("--with-hf-1.5b", dest="hf15", action="store_true",
                    help="also run transformers on qwen2.5-coder-1.5b (~9 GB RAM, slow)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "benchmarks" / "generators.json")
    args = ap.parse_args(argv)
    command = recorded_command(sys.argv[1:] if argv is None else argv, __file__)

    grid = [("llama.cpp", n) for n in models.REGISTRY] + \
        [("transformers", "smollm2-135m"), ("transformers", "qwen2.5-coder-0.5b")]
    skipped = []
    if args.hf15:
        grid.append(("transformers", "qwen2.5-coder-1.5b"))
    else:
        skipped.append({"backend": "transformers", "model": "qwen2.5-coder-1.5b",
                        "reason": "fp32 dequantisation needs ~9 GB RAM and decodes at a few "
                                  "tok/s; run with --with-hf-1.5b"})
    if args.only:
        chosen = [tuple(x.split(":", 1)) for x in args.only]
        skipped += [{"backend": b, "model": m, "reason": "not selected (--only)"}
                    for b, m in grid if (b, m) not in chosen]
        grid = chosen

    load_start = loadavg(None)
    results: list[dict] = []

    def write_report() -> None:
        # Rewritten after every model so an interrupted run keeps what it measured.
        report = {
            "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "command": command,
            "machine": {"cpu_count": os.cpu_count(), "cpu": cpu_model(),
                        "platform": platform.platform(),
                        # other jobs share the CPU: the load says how far to trust the speeds
                        "loadavg_start": load_start, "loadavg_end": loadavg(None)},
            "versions": versions(VERSIONS),
            "settings": {"new_tokens": NEW_TOKENS, "repeats": args.repeats, "greedy": True,
                         "threads": args.threads, "llama_n_ctx": 4096,
                         "transformers_dtype": "float32 (dequantised GGUF)"},
            "results": results,
            "skipped": skipped,
        }
        atomic_write_json(args.out, report)  # unique temp name: never a torn report

    for backend, name in grid:
        if not models.is_installed(name):
            skipped.append({"backend": backend, "model": name,
                            "reason": f"not installed: {models.install_command(name)}"})
            continue
        print(f"... {backend} {name}", flush=True)
        results.append(bench_one(backend, name, args.repeats, args.threads))
        unload_models()  # one model in RAM at a time
        write_report()
    write_report()

    hdr = (f"{'backend':<13}{'model':<21}{'load s':>7}{'prompt tok':>11}{'prompt tok/s':>13}"
           f"{'decode tok/s':>13}{'48-tok call s':>14}{'cold s':>8}{'warm ms':>9}")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        print(f"{r['backend']:<13}{r['model']:<21}{r['load_s']:>7.1f}{r['prompt_tokens']:>11}"
              f"{_num(r['prompt_tok_s'], 13, 1)}{_num(r['decode_tok_s'], 13, 1)}"
              f"{_num(r['t_48_tokens_s'], 14, 2)}"
              f"{r['cached_cold_s']:>8.2f}{r['cached_warm_ms']:>9.2f}")
    for s in skipped:
        print(f"skipped {s['backend']} {s['model']}: {s['reason']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
