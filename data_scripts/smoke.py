"""Smoke check: every installed bundled model decodes a few tokens, each in its own process.

``python data_scripts/smoke.py`` runs before the test suite (``make test``, ``.ci/run``). A
llama.cpp build compiled for instructions this CPU does not execute dies with SIGILL at the
first decode; inside pytest that kills the whole test runner at some unrelated test. Here the
crash happens in a child process and becomes a named failure with a hint.

Exit code 0 when every installed model decoded; 1 when one failed, or when ``--require``
names a model that is not installed (CI requires the models the tests use).
"""
from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time

from dynakrag_lite.generators import models

_CHILD = r"""
import json, sys, time
from llama_cpp import Llama
t0 = time.perf_counter()
llm = Llama(model_path=sys.argv[1], n_ctx=256, n_threads=1, verbose=False)
r = llm.create_completion("The capital of France is", max_tokens=4, temperature=0.0)
llm.close()
print("SMOKE " + json.dumps({"text": r["choices"][0]["text"],
                             "tokens": r["usage"]["completion_tokens"],
                             "seconds": round(time.perf_counter() - t0, 2)}))
"""

HINT = ("llama-cpp-python was compiled for instructions this CPU does not run (often "
        "-march=native on a VM that hides AVX-512/AMX). Rebuild it portable: "
        "python data_scripts/install_llama.py --variant portable")


def check_model(name: str, timeout: float = 300.0) -> dict:
    """Decode 4 tokens with bundled model ``name`` in a child process."""
    try:
        path = models.gguf_path(name)
    except models.ModelError as e:
        return {"model": name, "ok": False, "error": str(e)}
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "ok": False, "error": f"no reply within {timeout:.0f} s"}
    if p.returncode < 0:
        sig = signal.Signals(-p.returncode).name
        err = f"killed by {sig}" + (f": {HINT}" if sig in ("SIGILL", "SIGSEGV") else "")
        return {"model": name, "ok": False, "error": err}
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {"model": name, "ok": False, "error": f"exit code {p.returncode}: {tail}"}
    line = next((l for l in p.stdout.splitlines() if l.startswith("SMOKE ")), None)
    if line is None:
        return {"model": name, "ok": False, "error": "no output from the child process"}
    out = json.loads(line[6:])
    ok = out["tokens"] > 0
    return {"model": name, "ok": ok, "text": out["text"], "tokens": out["tokens"],
            "seconds": round(time.perf_counter() - t0, 2),
            **({} if ok else {"error": "decoded no token"})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python data_scripts/smoke.py", description=__doc__)
    ap.add_argument("--require", nargs="*", default=[],
                    help="models that must be installed (a missing one fails)")
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args(argv)
    try:
        import llama_cpp  # noqa: F401  (importing alone runs no compiled kernel)
    except ImportError as e:
        print(f"smoke: FAIL llama-cpp-python is not installed ({e}); "
              "run: python data_scripts/install_llama.py")
        return 1
    failed = 0
    names = [n for n in models.list_models() if models.is_installed(n)]
    for name in args.require:
        if name not in names:
            print(f"smoke: FAIL {name}: not installed; {models.install_command(name)}")
            failed += 1
    for name in names:
        r = check_model(name, args.timeout)
        if r["ok"]:
            print(f"smoke: ok   {name}: {r['tokens']} tokens {r['text']!r} in {r['seconds']} s")
        else:
            print(f"smoke: FAIL {name}: {r['error']}")
            failed += 1
    if not names:
        print("smoke: no bundled model installed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
