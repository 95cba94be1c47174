"""Portable against native llama.cpp builds: prompt and decode tokens/s per bundled model.

Each build is a wheel; it is unpacked into a scratch folder and put first on ``PYTHONPATH`` of
a child process running ``benchmarks/bench_generators.py`` for one model, so the installed
llama_cpp is never touched and a build that crashes (SIGILL) only kills its child.

    python data_scripts/install_llama.py                  # builds the portable wheel
    CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
        pip wheel --no-deps --no-cache-dir -w .cache/wheels/native llama-cpp-python==0.3.36
    DYNAKRAG_N_THREADS=1 python benchmarks/bench_llama_builds.py \
        --wheel portable=.cache/wheels/llama_cpp_python-0.3.36-portable-*/*.whl \
        --wheel native=.cache/wheels/native/*.whl

``--agreement N`` also decodes N RAG-shaped answer prompts (the embedded library's questions
with their paragraphs, greedy, 32 tokens) with every build and counts the identical replies:
a faster build is only a drop-in replacement if greedy decoding gives the same text, since run
folders resume from the LLM call cache and committed rows were decoded by the portable build.

Writes ``results/benchmarks/llama_builds.json`` with the CPU model (``lscpu``), each build's
``llama_print_system_info`` and the per-model figures (medians over ``--repeats``). Builds are
measured alternately per model so that a change in machine load hits both alike.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "benchmarks", ROOT / "data_scripts"):
    if str(p) not in sys.path:  # run as a script from anywhere
        sys.path.insert(0, str(p))

from benchlib import cpu_model, loadavg, utc_date  # noqa: E402
from install_llama import cpu_flags, probe  # noqa: E402
from dynakrag_lite.generators import models  # noqa: E402
from dynakrag_lite.storage import atomic_write_json  # noqa: E402


def unpack(whl: Path, into: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile",
                    "--quiet", "--target", str(into), str(whl)], check=True)


def bench(scratch: Path, model: str, repeats: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "r.json"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(scratch), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
        p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_generators.py"),
                            "--only", f"llama.cpp:{model}", "--repeats", str(repeats),
                            "--threads", str(threads), "--out", str(out)],
                           capture_output=True, text=True, env=env)
        if p.returncode != 0:
            return {"error": f"exit {p.returncode}", "stderr": p.stderr[-1500:]}
        r = json.loads(out.read_text())["results"][0]
        return {k: r.get(k) for k in ("prompt_tokens", "prompt_tok_s", "decode_tok_s",
                                       "load_s", "error") if k in r}


# Runs in a child with the build's scratch folder first on sys.path: one JSON list of replies.
_AGREE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from dynakrag_lite.data.sources import load_dataset
from dynakrag_lite.generators import models
from dynakrag_lite.generators.llamacpp import LlamaCppGenerator
from dynakrag_lite.prompts import SYSTEM, answer_instruction, wiki_paragraphs
name, n, threads = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
gen = LlamaCppGenerator(models.gguf_path(name), spec=name, n_threads=threads)
out = []
for q in load_dataset("library")[:n]:
    user = (wiki_paragraphs(q.paragraphs, 600) + "\n\nQuestion: " + q.question + "\n"
            + answer_instruction(q.question))
    out.append(gen.generate([{"role": "system", "content": SYSTEM},
                             {"role": "user", "content": user}], max_tokens=32).text)
print("AGREE " + json.dumps(out))
"""


def replies(scratch: Path, model: str, n: int, threads: int) -> list[str] | dict:
    """Greedy replies of the build in ``scratch`` to the first ``n`` library answer prompts."""
    p = subprocess.run([sys.executable, "-c", _AGREE, str(scratch), model, str(n), str(threads)],
                       capture_output=True, text=True, cwd=ROOT)
    for line in p.stdout.splitlines():
        if line.startswith("AGREE "):
            return json.loads(line[6:])
    return {"error": f"exit {p.returncode}", "stderr": p.stderr[-1500:]}


def agreement(texts: dict[str, list[str] | dict]) -> dict:
    """Per build, how many replies equal the first build's, and the first that does not."""
    ref_name, ref = next(iter(texts.items()))
    out: dict = {"reference": ref_name, "prompts": len(ref) if isinstance(ref, list) else 0}
    for name, t in list(texts.items())[1:]:
        if not isinstance(t, list) or not isinstance(ref, list):
            out[name] = {"error": (t if isinstance(t, dict) else ref).get("error")}
            continue
        diff = [i for i, (a, b) in enumerate(zip(ref, t)) if a != b]
        out[name] = {"identical": len(ref) - len(diff),
                     "first_difference": ({"prompt": diff[0], ref_name: ref[diff[0]],
                                           name: t[diff[0]]} if diff else None)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", action="append", required=True, help="NAME=path/to.whl")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("DYNAKRAG_N_THREADS", 1)))
    ap.add_argument("--agreement", type=int, default=0, metavar="N",
                    help="also compare the builds' greedy replies to N answer prompts")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "results" / "benchmarks" / "llama_builds.json")
    args = ap.parse_args(argv)
    names = args.models or [m for m in models.list_models() if models.is_installed(m)]
    builds = {}
    with tempfile.TemporaryDirectory() as root:
        for spec in args.wheel:
            name, path = spec.split("=", 1)
            scratch = Path(root) / name
            unpack(Path(path), scratch)
            info = probe(str(scratch))
            builds[name] = {"wheel": Path(path).name, "scratch": scratch,
                            "system_info": info.get("system_info"), "runs": info.get("ok"),
                            "results": {}}
        report = {"date": utc_date(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
                  "cpu_has_avx512f": "avx512f" in cpu_flags(),
                  "cpu_lists_amx": any(f.startswith("amx") for f in cpu_flags()),
                  "loadavg_start": loadavg(None), "threads": args.threads,
                  "repeats": args.repeats, "command": "python benchmarks/bench_llama_builds.py "
                  + " ".join(f"--wheel {s.split('=', 1)[0]}=..." for s in args.wheel)
                  + (f" --models {' '.join(args.models)}" if args.models else "")
                  + f" --repeats {args.repeats}"
                  + (f" --agreement {args.agreement}" if args.agreement else ""),
                  "builds": {}}
        for model in names:
            for name, b in builds.items():
                if not b["runs"]:
                    b["results"][model] = {"error": "build does not run on this CPU"}
                    continue
                b["results"][model] = r = bench(b["scratch"], model, args.repeats, args.threads)
                print(f"{model:22s} {name:10s} prompt {r.get('prompt_tok_s')} tok/s, "
                      f"decode {r.get('decode_tok_s')} tok/s", flush=True)
        if args.agreement:
            report["agreement"] = {}
            for model in names:
                texts = {name: replies(b["scratch"], model, args.agreement, args.threads)
                         for name, b in builds.items() if b["runs"]}
                report["agreement"][model] = a = agreement(texts)
                print(f"{model:22s} agreement {json.dumps(a)[:300]}", flush=True)
        report["loadavg_end"] = loadavg(None)
        report["builds"] = {n: {k: v for k, v in b.items() if k != "scratch"}
                            for n, b in builds.items()}
        atomic_write_json(args.out, report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
