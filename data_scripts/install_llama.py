"""Install llama-cpp-python built for *this family of CPUs*, never for "native".

Why this exists: pip compiles llama-cpp-python with ``-march=native``. On a virtual machine whose
CPU advertises AMX (cpuid lists amx_tile) but whose hypervisor does not enable it, that build
dies at the first decode with "Illegal instruction". And pip's wheel cache is keyed by the sdist
only, so a wheel built on another machine with other flags would be reused silently.

What it does:

* ``portable`` (default): an x86-64 baseline of AVX, AVX2, FMA, F16C and BMI2 (every x86 CPU
  since about 2015), with ``GGML_NATIVE=OFF`` and every AVX-512/AMX option off. On other
  architectures (arm64) ``GGML_NATIVE=OFF`` alone, which builds llama.cpp's generic baseline.
* ``avx512``: the portable flags plus AVX-512 (F, BW, DQ, VL, VBMI, VNNI, BF16), still no AMX.
  Used only when a subprocess has proved it runs here: the wheel is installed into a scratch
  folder and a child Python decodes with it. If the child dies (SIGILL) or fails, the portable
  build is installed instead. cpuid flags alone prove nothing.
* ``auto`` (``make install``'s default): ``avx512`` if the CPU lists avx512f and the proof
  passes, else ``portable``. Measured 1.8x faster prompt reading for the 1.5B reader, the same
  greedy replies on 12 short prompts (``results/benchmarks/llama_builds.json``) but not over
  whole runs (README), so a paired comparison keeps one build.

Wheels are built with ``--no-cache-dir`` into ``.cache/wheels/<version>-<variant>-<flags hash>``
(a folder named by exactly the flags), so only a wheel built with the same flags is ever reused.
Before anything is built, the installed llama_cpp (if any) is asked what it was compiled with
(``llama_print_system_info``): a build with AMX, or with AVX-512 when the portable variant is
wanted, is replaced; a matching one is kept and nothing is compiled.

Usage::

    python data_scripts/install_llama.py --variant auto   # what `make install` runs
    python data_scripts/install_llama.py                  # portable
    python data_scripts/install_llama.py --check          # report the installed build, exit 1 if unsafe
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

VERSION = "0.3.36"
ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / ".cache" / "wheels"

X86_PORTABLE = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
                "-DGGML_F16C=ON", "-DGGML_BMI2=ON", "-DGGML_AVX512=OFF",
                "-DGGML_AVX512_VBMI=OFF", "-DGGML_AVX512_VNNI=OFF", "-DGGML_AVX512_BF16=OFF",
                "-DGGML_AVX_VNNI=OFF", "-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF",
                "-DGGML_AMX_BF16=OFF"]
X86_AVX512 = [f for f in X86_PORTABLE if "AVX512" not in f] + [
    "-DGGML_AVX512=ON", "-DGGML_AVX512_VBMI=ON", "-DGGML_AVX512_VNNI=ON",
    "-DGGML_AVX512_BF16=ON"]
GENERIC = ["-DGGML_NATIVE=OFF"]

# The smallest bundled model, used for the proof when it is installed; otherwise the proof
# only loads the library and queries it (which still executes code compiled with the flags).
PROOF_MODEL = "smollm2-135m"


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


def cmake_flags(variant: str) -> list[str]:
    if not is_x86():
        return GENERIC
    return {"portable": X86_PORTABLE, "avx512": X86_AVX512}[variant]


def wheel_dir(variant: str) -> Path:
    flags = " ".join(cmake_flags(variant))
    tag = hashlib.sha256(f"{VERSION} {platform.machine()} {sys.version_info[:2]} {flags}"
                         .encode()).hexdigest()[:12]
    return WHEELS / f"llama_cpp_python-{VERSION}-{variant}-{tag}"


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


# Runs in a child process: a build compiled for instructions this CPU lacks kills the child
# (SIGILL), never the caller.
_PROBE = r"""
import json, sys
sys.path[:0] = [p for p in sys.argv[2:] if p]
import llama_cpp
info = llama_cpp.llama_print_system_info()
info = info.decode() if isinstance(info, bytes) else str(info)
out = {"version": llama_cpp.__version__, "path": llama_cpp.__file__, "system_info": info}
model = sys.argv[1]
if model:
    from llama_cpp import Llama
    llm = Llama(model_path=model, n_ctx=256, n_threads=1, verbose=False)
    r = llm.create_completion("The capital of France is", max_tokens=4, temperature=0.0)
    out["decoded"] = r["choices"][0]["text"]
    llm.close()
print("PROBE " + json.dumps(out))
"""


def probe(extra_path: str = "", model: str = "", python: str = sys.executable,
          timeout: float = 300) -> dict:
    """Load llama_cpp (optionally from ``extra_path``) in a child and decode a few tokens."""
    try:
        p = subprocess.run([python, "-c", _PROBE, model, extra_path], capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"probe timed out after {timeout:.0f} s"}
    if p.returncode != 0:
        sig = -p.returncode if p.returncode < 0 else None
        why = {4: "SIGILL: compiled for instructions this CPU does not execute"}.get(
            sig, f"exit code {p.returncode}")
        # The child's last stderr line names the cause (a missing module, a bad flag).
        last = next((ln.strip() for ln in reversed(p.stderr.splitlines()) if ln.strip()), "")
        return {"ok": False, "error": f"{why}: {last}" if last else why,
                "stderr": p.stderr[-2000:]}
    for line in p.stdout.splitlines():
        if line.startswith("PROBE "):
            return {"ok": True, **json.loads(line[6:])}
    return {"ok": False, "error": "no probe output", "stderr": p.stderr[-2000:]}


def features(system_info: str) -> dict[str, bool]:
    """``AVX2 = 1 | AMX_INT8 = 1 | ...`` -> {"AVX2": True, "AMX_INT8": True, ...}."""
    out = {}
    for part in system_info.replace("\n", "|").split("|"):
        if "=" in part:
            k, v = part.rsplit("=", 1)
            k = k.split(":")[-1].strip()
            if k and v.strip() in ("0", "1"):
                out[k] = v.strip() == "1"
    return out


def acceptable(info: dict, variant: str) -> tuple[bool, str]:
    """Does an installed build match ``variant`` and run here?"""
    if not info.get("ok"):
        return False, info.get("error", "not importable")
    if info.get("version") != VERSION:
        return False, f"version {info.get('version')} (want {VERSION})"
    feats = features(info.get("system_info", ""))
    amx = sorted(k for k, v in feats.items() if v and k.startswith("AMX"))
    if amx:
        return False, f"built with {', '.join(amx)} (never wanted: VMs may not enable AMX)"
    if is_x86():
        if not feats.get("AVX2"):
            return False, "built without AVX2 (slow generic build)"
        has512 = any(v for k, v in feats.items() if k.startswith("AVX512"))
        if variant == "portable" and has512:
            return False, "built with AVX-512, but the portable build is wanted"
        if variant == "avx512" and not has512:
            return False, "built without AVX-512, but the avx512 build is wanted"
    return True, "matches"


def model_for_proof() -> str:
    try:
        sys.path.insert(0, str(ROOT))
        from dynakrag_lite.generators import models
        return str(models.gguf_path(PROOF_MODEL))
    except Exception:  # model package not installed yet: probe without decoding
        return ""


def build_wheel(variant: str, log=print) -> Path:
    out = wheel_dir(variant)
    found = sorted(out.glob("llama_cpp_python-*.whl")) if out.is_dir() else []
    if found:
        log(f"reusing {found[-1].relative_to(ROOT)} (built with exactly these flags)")
        return found[-1]
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CMAKE_ARGS": " ".join(cmake_flags(variant)), "FORCE_CMAKE": "1"}
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    log(f"compiling llama-cpp-python {VERSION} ({variant}: {env['CMAKE_ARGS']}); "
        "this takes 5-10 minutes on 2 cores")
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir",
                        "--no-binary", "llama-cpp-python", "-w", tmp,
                        f"llama-cpp-python=={VERSION}"], check=True, env=env)
        whl = next(Path(tmp).glob("llama_cpp_python-*.whl"))
        final = out / whl.name
        shutil.move(str(whl), final)  # only a finished wheel ever lands in the flags folder
    return final


def wheel_requirements(whl: Path) -> list[str]:
    """The wheel's own runtime dependencies (``Requires-Dist`` without an extra)."""
    with zipfile.ZipFile(whl) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode("utf-8").splitlines()
    return [ln.split(":", 1)[1].strip() for ln in lines
            if ln.startswith("Requires-Dist:") and "extra ==" not in ln]


def prove_wheel(whl: Path, log=print, python: str = sys.executable) -> dict:
    """Unpack ``whl`` into a scratch folder and decode with it in a child process.

    The wheel's dependencies (numpy, diskcache, jinja2, ...) go into ``python``'s environment
    first: any llama_cpp install needs them, and without them a fresh venv's proof failed on
    ``import llama_cpp`` (diskcache) rather than on the CPU question it is there to answer.
    """
    reqs = wheel_requirements(whl)
    if reqs:
        subprocess.run([python, "-m", "pip", "install", "--quiet", *reqs], check=True)
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-compile",
                        "--quiet", "--target", scratch, str(whl)], check=True)
        info = probe(scratch, model_for_proof(), python=python)
    log(f"proof of {whl.name}: {'ran' if info.get('ok') else 'FAILED: ' + info['error']}")
    return info


def install_wheel(whl: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall",
                    str(whl)], check=True)
    # The [server] extra's dependencies (the OpenAI-compatible server used in tests); the
    # installed version satisfies the requirement, so nothing is rebuilt.
    subprocess.run([sys.executable, "-m", "pip", "install", f"llama-cpp-python[server]=={VERSION}"],
                   check=True)


def ensure(variant: str = "portable", log=print) -> dict:
    """Make the installed llama_cpp a proven build of ``variant``; return a report."""
    want = variant
    if variant == "auto":
        want = "avx512" if is_x86() and "avx512f" in cpu_flags() else "portable"
    installed = probe(model=model_for_proof())
    ok, why = acceptable(installed, want)
    if ok:
        log(f"llama-cpp-python {VERSION} ({want}) already installed and proven: keeping it")
        return {"variant": want, "action": "kept", "probe": installed}
    log(f"installed llama_cpp: {why}; installing the {want} build")
    whl = build_wheel(want, log)
    if want != "portable":
        proof = prove_wheel(whl, log)
        if not proof.get("ok") or not acceptable(proof, want)[0]:
            log("falling back to the portable build")
            return ensure("portable", log)
    install_wheel(whl)
    after = probe(model=model_for_proof())
    ok, why = acceptable(after, want)
    if not ok:
        raise SystemExit(f"llama-cpp-python was installed but does not run here: {why}\n"
                         f"{after.get('stderr', '')}")
    return {"variant": want, "action": "installed", "wheel": whl.name, "probe": after}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variant", choices=("portable", "avx512", "auto"),
                    default=os.environ.get("DYNAKRAG_LLAMA_VARIANT", "portable"))
    ap.add_argument("--check", action="store_true",
                    help="only report on the installed build; exit 1 if it is missing or unsafe")
    args = ap.parse_args(argv)
    if args.check:
        info = probe(model=model_for_proof())
        ok, why = acceptable(info, "avx512" if features(info.get("system_info", "")).get(
            "AVX512") else "portable")
        print(json.dumps({"cpu": cpu_model(), "ok": ok, "why": why,
                          "system_info": info.get("system_info"), "error": info.get("error")},
                         indent=2))
        return 0 if ok else 1
    report = ensure(args.variant)
    print(json.dumps({"cpu": cpu_model(), "variant": report["variant"],
                      "action": report["action"],
                      "system_info": report["probe"].get("system_info")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
