"""The names every reader of results shares, defined once: the datasets and their labels, the
reader, the run names (baselines, controllers, schedules, the grid asked of every reader), and
the two functions that list what a results folder holds (:func:`run_names`, :func:`readers`).

A run folder is ``<root>/<dataset>/<generator>/<run>``; a generator folder named
``<answer>-policy-<policy>`` holds runs of one reader with another reader's policy
(:func:`transfer_folder`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from dynakrag_lite.experiments.artifacts import EXPERIMENTS_DIR, PROJECT_ROOT

READER = "qwen2.5-coder-1.5b"  # the larger reader, whose runs the claims read
DATASETS = ("hotpotqa", "2wikimultihopqa", "musique")  # the paper's order
LABELS = {"hotpotqa": "HotpotQA", "2wikimultihopqa": "2Wiki", "musique": "MuSiQue"}

# The paper's baselines (uniform-valid included); the oracle reads gold labels and the
# dynakrag-* runs are ablations, so neither can be "the best baseline".
BASELINES = ("fixed_k3", "fixed_k6", "ircot", "self_ask", "uniform")
CONTINUATION = "dynakrag-cont"
SCHEDULES = tuple(f"dynakrag-cont-stop{k}" for k in (1, 2, 3, 4))
# The same learned choices, never stopping early.
ALWAYS_CONTINUE = SCHEDULES[-1]
# The runs issue 24 asks of every reader on every dataset: the controllers, the controls,
# the baselines and the stop-at-k schedules.
GRID = ("dynakrag", CONTINUATION, *SCHEDULES, "uniform", "oracle", "fixed_k3", "fixed_k6",
        "ircot", "self_ask")
# The question-level router's two strategies: answer after the first retrieval, or walk on.
ONE_SHOT_RUN = SCHEDULES[0]
MULTI_STEP_RUN = CONTINUATION
# The core runs of the grid of results/README.md's plan (every dataset and reader), and the
# ablations beside them.
GRID_METHODS = ("fixed_k3", "fixed_k6", "dynakrag", "uniform", "oracle", "ircot", "self_ask")
ABLATIONS = ("dynakrag-no_compression", "dynakrag-no_sufficiency", "dynakrag-cap1",
             "dynakrag-cap2", "dynakrag-cap3")
# The stop reasons a prediction row records: the controller chose to stop, or hit the cap.
STOP_CHOSEN = "stop_answer_chosen"
STEP_CAP = "max_steps"
# Table order of the runs (others follow by name).
RUN_ORDER = ("fixed_k", "fixed_k3", "fixed_k6", "ircot", "self_ask", "uniform", "dynakrag",
             "oracle")


def label(dataset: str) -> str:
    """The dataset's short label (HotpotQA, 2Wiki, MuSiQue), or its name when it has none."""
    return LABELS.get(dataset, dataset)


def locate(root: str | Path) -> Path:
    """``root`` as given; a relative root that does not exist is also tried from the parent
    folders of the working directory (a chapter runs from ``book/``), then from the project
    (a command run from anywhere). The one way the chapters find a file or folder under
    ``results/`` (``locate("results/diagnostics")``)."""
    p = Path(root)
    if p.is_absolute() or p.exists():
        return p
    for parent in (*Path.cwd().resolve().parents, PROJECT_ROOT):
        cand = parent / p
        if cand.exists():
            return cand
    return p


def transfer_folder(generator: str) -> tuple[str, str] | None:
    """(answer generator, policy generator) of a transfer folder ``<A>-policy-<P>``; None for
    a generator's own folder."""
    answer, sep, policy = str(generator).partition("-policy-")
    return (answer, policy) if sep else None


def run_names(dataset: str, generator: str, root: str | Path) -> list[str]:
    """Run folders holding a predictions file, in :data:`RUN_ORDER` (then by name)."""
    folder = locate(root) / dataset / generator
    if not folder.exists():
        return []
    order = {r: i for i, r in enumerate(RUN_ORDER)}
    return sorted((p.name for p in folder.iterdir() if (p / "predictions.jsonl").exists()),
                  key=lambda r: (order.get(r, len(order)), r))


def readers(root: str | Path = EXPERIMENTS_DIR) -> list[tuple[str, str]]:
    """(dataset, reader) of every generator folder that is not a transfer folder, in the
    paper's dataset order, then by reader."""
    base = locate(root)
    if not base.is_dir():
        return []
    found = [(p.parent.name, p.name) for p in base.glob("*/*") if p.is_dir()
             and transfer_folder(p.name) is None and run_names(p.parent.name, p.name, root)]
    order = {d: i for i, d in enumerate(DATASETS)}
    return sorted(found, key=lambda dg: (order.get(dg[0], len(order)), dg[0], dg[1]))


def short_names(names: Iterable[str]) -> dict[str, str]:
    """Each name without the stem all of them share, cut at a hyphen
    (``qwen2.5-coder-0.5b`` -> ``0.5b`` beside ``qwen2.5-coder-1.5b``); a lone name stays."""
    names = sorted(set(names))
    stem = os.path.commonprefix(names) if len(names) > 1 else ""
    stem = stem[:stem.rfind("-") + 1]
    return {n: n[len(stem):] or n for n in names}


def join_words(items: Iterable[str], empty: str = "none") -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = [str(x) for x in items]
    if not items:
        return empty
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
