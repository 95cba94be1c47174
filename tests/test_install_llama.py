"""The portable llama.cpp installer: which builds it keeps, which it replaces, and the smoke check.

The real compile takes minutes and runs in `make install`; these tests check the decisions on
recorded ``llama_print_system_info`` strings and probe the build that is installed here.
"""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers import missing, require_llama, require_model

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("install_llama",
                                              ROOT / "data_scripts" / "install_llama.py")
install_llama = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install_llama)

# Recorded from real builds of llama-cpp-python 0.3.36 (portable here; native on an AVX-512
# machine; the AMX line is what -march=native gives on a Xeon that lists amx_tile).
PORTABLE = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
            "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | ")
AVX512 = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
          "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | LLAMAFILE = 1 | ")
AMX = AVX512 + "AMX_INT8 = 1 | "
GENERIC = "CPU : SSE3 = 1 | SSSE3 = 1 | LLAMAFILE = 1 | "


def probe_result(info: str, version: str = install_llama.VERSION) -> dict:
    return {"ok": True, "version": version, "system_info": info}


def test_features_parses_system_info_flags():
    f = install_llama.features(AMX)
    assert f["AVX2"] and f["AVX512_VNNI"] and f["AMX_INT8"]
    assert "LLAMAFILE" in f and "AVX512" not in install_llama.features(PORTABLE)


@pytest.mark.parametrize("info,variant,keep", [
    (PORTABLE, "portable", True),
    (AVX512, "portable", False),   # a wheel built elsewhere with AVX-512 is not reused silently
    (AVX512, "avx512", True),
    (PORTABLE, "avx512", False),
    (AMX, "avx512", False),        # AMX is never wanted: VMs list it without enabling it
    (AMX, "portable", False),
])
def test_acceptable_keeps_only_the_wanted_build(info, variant, keep):
    if not install_llama.is_x86():
        pytest.skip("x86 flag rules")
    ok, why = install_llama.acceptable(probe_result(info), variant)
    assert ok is keep, why


def test_acceptable_rejects_wrong_version_generic_build_and_crashed_probe():
    if install_llama.is_x86():
        assert not install_llama.acceptable(probe_result(GENERIC), "portable")[0]
    assert not install_llama.acceptable(probe_result(PORTABLE, "0.3.1"), "portable")[0]
    crashed = {"ok": False, "error": "SIGILL: compiled for instructions this CPU does not execute"}
    ok, why = install_llama.acceptable(crashed, "portable")
    assert not ok and "SIGILL" in why


def test_portable_flags_turn_native_and_avx512_and_amx_off():
    if not install_llama.is_x86():
        pytest.skip("x86 flags")
    flags = install_llama.cmake_flags("portable")
    assert "-DGGML_NATIVE=OFF" in flags and "-DGGML_AVX2=ON" in flags
    assert not any(f.endswith("=ON") and ("AVX512" in f or "AMX" in f) for f in flags)
    fast = install_llama.cmake_flags("avx512")
    assert "-DGGML_AVX512=ON" in fast and not any("AMX" in f and f.endswith("=ON") for f in fast)


def test_wheel_folders_differ_by_flags():
    assert install_llama.wheel_dir("portable") != install_llama.wheel_dir("avx512")


def test_probe_reports_a_child_killed_by_sigill(tmp_path):
    # A fake llama_cpp whose import raises SIGILL, as a wrongly compiled build does.
    pkg = tmp_path / "llama_cpp"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGILL)\n")
    r = install_llama.probe(str(tmp_path))
    assert not r["ok"] and "SIGILL" in r["error"]


def test_installed_build_is_proven_portable_here():
    require_llama()
    r = install_llama.probe()
    assert r["ok"], r
    ok, why = install_llama.acceptable(
        r, "avx512" if install_llama.features(r["system_info"]).get("AVX512") else "portable")
    assert ok, why


def test_smoke_check_names_a_crashing_build(tmp_path):
    """The smoke check turns a SIGILL in the child into a named failure with a hint."""
    require_model("smollm2-135m")
    pkg = tmp_path / "llama_cpp"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import os, signal\nclass Llama:\n"
                                     "    def __init__(self, *a, **k):\n"
                                     "        os.kill(os.getpid(), signal.SIGILL)\n")
    code = ("import sys; sys.path[:0] = [%r, %r]; import smoke; "
            "r = smoke.check_model('smollm2-135m'); print(r['ok'], r['error'])"
            % (str(tmp_path), str(ROOT / "data_scripts")))
    # The child of the child imports the fake llama_cpp through PYTHONPATH.
    env = {**os.environ, "PYTHONPATH": str(tmp_path) + os.pathsep + str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.stdout.startswith("False killed by SIGILL"), out.stdout + out.stderr
    assert "install_llama.py" in out.stdout


def _fake_wheel(path: Path, requires: list[str]) -> Path:
    import zipfile
    whl = path / "llama_cpp_python-0.0.0-py3-none-any.whl"
    meta = "Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: 0.0.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("llama_cpp_python-0.0.0.dist-info/METADATA", meta)
    return whl


def test_wheel_requirements_are_the_runtime_ones_without_extras(tmp_path):
    whl = _fake_wheel(tmp_path, ["typing-extensions>=4.5.0", "numpy>=1.20.0",
                                 "diskcache>=5.6.1", "jinja2>=2.11.3",
                                 'uvicorn>=0.22.0; extra == "server"'])
    assert install_llama.wheel_requirements(whl) == [
        "typing-extensions>=4.5.0", "numpy>=1.20.0", "diskcache>=5.6.1", "jinja2>=2.11.3"]


def test_a_failed_proof_names_the_childs_reason(tmp_path):
    # What a fresh venv used to show as a bare "exit code 1": the import of a dependency fails.
    pkg = tmp_path / "llama_cpp"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import diskcache_not_installed_here\n")
    r = install_llama.probe(str(tmp_path))
    assert not r["ok"]
    assert "exit code 1" in r["error"] and "diskcache_not_installed_here" in r["error"]


def _built_wheels() -> list[Path]:
    return sorted(install_llama.WHEELS.glob("llama_cpp_python-*/llama_cpp_python-*.whl"))


def _wheel_of_installed(dest: Path) -> Path:
    """The installed llama_cpp_python packed back into a wheel (its RECORD's files, its own
    METADATA and WHEEL tag): the same binaries and Requires-Dist a built wheel carries. Used
    when `make llama` kept an installed build and compiled nothing, as on a machine whose
    interpreter already had a proven build."""
    dist = importlib.metadata.distribution("llama_cpp_python")
    root = Path(dist.locate_file(""))
    info = next(f for f in dist.files if f.name == "WHEEL").parent
    tag = next(ln.split(":", 1)[1].strip() for ln in dist.read_text("WHEEL").splitlines()
               if ln.startswith("Tag:"))
    whl = dest / f"llama_cpp_python-{dist.version}-{tag}.whl"
    skip = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
    record = []
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_DEFLATED) as z:
        for f in dist.files:
            if ".." in f.parts or "__pycache__" in f.parts or (
                    f.parent == info and f.name in skip):
                continue
            data = (root / f).read_bytes()
            z.writestr(f.as_posix(), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{f.as_posix()},sha256={digest.decode()},{len(data)}")
        record.append(f"{info.as_posix()}/RECORD,,")
        z.writestr(f"{info.as_posix()}/RECORD", "\n".join(record) + "\n")
    return whl


def test_a_built_variant_is_proved_in_a_fresh_venv_without_its_dependencies(tmp_path):
    """The proof `make install` runs, in a venv that has none of the wheel's dependencies (no
    numpy, no diskcache): it installs them itself and decodes. Before, every fresh AVX-512
    machine lost the fast build here to a missing diskcache."""
    require_model("smollm2-135m")
    require_llama()
    wheels = _built_wheels() or [_wheel_of_installed(tmp_path)]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    has = subprocess.run([py, "-c", "import diskcache"], capture_output=True)
    assert has.returncode != 0, "the fresh venv must start without the wheel's dependencies"
    for whl in wheels:  # every variant this machine built: each must run here or say why
        info = install_llama.prove_wheel(whl, log=lambda _: None, python=py)
        if not info["ok"]:
            assert "SIGILL" in info["error"], info  # only the CPU may refuse a build
            continue
        assert info.get("decoded") is not None and info["version"] == install_llama.VERSION


def test_the_installed_build_packs_into_a_wheel_with_its_binaries_and_dependencies(tmp_path):
    """The fallback of the fresh-venv proof: what it proves is the installed build itself."""
    require_llama()
    whl = _wheel_of_installed(tmp_path)
    assert any(r.startswith("diskcache") for r in install_llama.wheel_requirements(whl))
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
    assert any(n.startswith("llama_cpp/") and ".so" in n for n in names), names[:20]
