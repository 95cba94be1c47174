"""The checkout's committed artifacts: where ``results/`` keeps policies, selectors,
trajectories and runs, how a policy file is named, and the ``MANIFEST.sha256`` files that vouch
for committed pickles. The only code of dynakrag_lite that knows ``results/`` (the rest takes
paths); :func:`update_policy_manifest` and :func:`manifest_problems` back ``policy-manifest``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..policy import PolicyError, check_policy_file
from ..storage import (MANIFEST_NAME, read_manifest, register_in_manifest, relative_command,
                       sha256_file, update_manifest)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
RESULTS = PROJECT_ROOT / "results"
POLICIES_DIR = RESULTS / "policies"  # keeps a MANIFEST.sha256
SELECTORS_DIR = RESULTS / "selectors"  # keeps a MANIFEST.sha256
EXPERIMENTS_DIR = RESULTS / "experiments"


def display_path(path: str | Path) -> str:
    """A path worth recording: relative to the project or the working directory, never a
    machine's absolute path when either contains it."""
    p = Path(path).resolve()
    for base in (PROJECT_ROOT, Path.cwd().resolve()):
        try:
            return p.relative_to(base).as_posix()
        except ValueError:
            continue
    try:
        return os.path.relpath(p, Path.cwd().resolve())
    except ValueError:  # another drive (Windows)
        return p.name


def policy_file_name(dataset: str, generator: str) -> str:
    """``<dataset>-<generator>.joblib``, the generator spec made file-name safe."""
    return f"{dataset}-{generator.replace('/', '_').replace(':', '_')}.joblib"


# Variant policies beside the main one: <dataset>-<generator><suffix>.joblib (main_experiment.py).
POLICY_VARIANT_SUFFIXES = ("-gain_stop", "-continuation")


def default_policy_path(dataset: str, generator: str, folder: Path | None = None) -> Path:
    """``results/policies/<dataset>-<generator>.joblib``, the policy trained with this very
    generator; nothing else is picked up silently (:class:`PolicyError` otherwise)."""
    folder = POLICIES_DIR if folder is None else Path(folder)
    exact = folder / policy_file_name(dataset, generator)
    if exact.exists():
        return exact
    shown = relative_command([str(exact)], prefix="")
    raise PolicyError(
        f"no policy for dataset '{dataset}' and generator '{generator}': looked for {shown}. "
        f"Train it (python -m dynakrag_lite train --data {dataset} --generator {generator} "
        f"--out {shown}) or pass --policy FILE (a policy trained with another generator is "
        "allowed: that is generator transfer)")


def register_policy(path: str | Path) -> Path | None:
    """After training: record a just-saved policy (only it) in its folder's manifest when that
    folder is ``results/policies`` or already keeps one; returns the manifest path or None."""
    return register_in_manifest(path, POLICIES_DIR)


def update_policy_manifest(folder: str | Path | None = None,
                           files: Iterable[str | Path] | None = None) -> Path:
    """Record the sha256 of policies in ``folder/MANIFEST.sha256`` (default: results/policies),
    as :func:`dynakrag_lite.storage.update_manifest`; PolicyError, with nothing written, when a
    file is missing or is not what :meth:`Policy.save` writes."""
    return update_manifest(POLICIES_DIR if folder is None else folder, files,
                           check=check_policy_file)


def manifest_problems(folder: str | Path | None = None, pattern: str = "*.joblib") -> list[str]:
    """What ``sha256sum -c MANIFEST.sha256`` and a complete listing would complain about in
    ``folder`` (default: results/policies); [] when it vouches for exactly its ``pattern`` files."""
    folder = POLICIES_DIR if folder is None else Path(folder)
    manifest = folder / MANIFEST_NAME
    if not manifest.exists():
        return [f"{display_path(manifest)}: no manifest"]
    entries = read_manifest(folder)
    files = {f.name for f in folder.glob(pattern)}
    out = [f"{name}: not listed in {MANIFEST_NAME}" for name in sorted(files - set(entries))]
    for name, digest in sorted(entries.items()):
        if not (folder / name).exists():
            out.append(f"{name}: listed in {MANIFEST_NAME}, but there is no such file")
        elif sha256_file(folder / name) != digest:
            out.append(f"{name}: sha256 differs from {MANIFEST_NAME}")
    return out
