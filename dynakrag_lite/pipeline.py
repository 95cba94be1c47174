"""One call from a dataset name to a ready environment (questions, corpus, retriever,
generator, budgets, extractive compressor): what the CLI, the experiments and every chapter
start from. Everything is loaded here, once: the actions never read a file.

    setup = build_setup("hotpotqa", generator="qwen2.5-coder-0.5b")
    setup.env, setup.questions, setup.train, setup.eval"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from .ann import DEFAULT_EF_SEARCH, DEFAULT_NPROBE
from .compression import ExtractiveCompressor, SentenceSelector, load_selector
from .config import ControlConfig, Environment, RunSettings
from .data.corpus import Corpus
from .data.schema import Question
from .data.sources import load_dataset, split_questions
from .generators.spec import make_generator
from .retriever import DEFAULT_EMBEDDER, DenseRetriever

QUICK_GENERATOR = "smollm2-135m"  # fastest bundled model: the tests, build_setup's default
DEFAULT_GENERATOR = "qwen2.5-coder-0.5b"  # the experiments' generator on 2 CPU cores


@dataclass
class Setup:
    dataset: str
    questions: list[Question]
    corpus: Corpus
    env: Environment
    train: list[Question] = field(default_factory=list)
    eval: list[Question] = field(default_factory=list)

    @property
    def retriever(self) -> DenseRetriever:
        return self.env.retriever


def extractive_compressor(selector: SentenceSelector, retriever: DenseRetriever
                          ) -> ExtractiveCompressor:
    """The extractive compressor of ``selector`` with the retriever's (cached) encoder for its
    embedding features; ValueError when the selector was trained with another embedder."""
    want, have = selector.meta.get("embedder"), retriever.embedder_name
    if selector.meta.get("use_embeddings") and want and have and want != have:
        raise ValueError(f"the sentence selector was trained with embedder {want!r}, the "
                         f"retriever uses {have!r}")
    return ExtractiveCompressor(selector, retriever.encode_cached)


def build_setup(dataset: str = "library", generator: str | None = QUICK_GENERATOR,
                config: ControlConfig | None = None, data_dir: str | Path | None = None,
                embedder: str = DEFAULT_EMBEDDER, n_eval: int = 100, split_seed: int = 0,
                corpus_file: str | Path | None = None, show_progress: bool = True,
                cache: bool | str = True, index_dir: str | Path | None = None,
                index_factory: str | None = None, index_mmap: bool = False,
                nprobe: int = DEFAULT_NPROBE, ef_search: int = DEFAULT_EF_SEARCH,
                vectors_path: str | Path | None = None,
                selector: str | Path | None = None) -> Setup:
    """Load ``dataset`` (a name or a path), make and check the generator (None: retrieval
    only), pool or read the corpus, index it and split the questions into disjoint train/eval
    parts as the CLI does. ``selector`` is loaded into ``env.compressor``; the ``index_*``,
    ``nprobe``, ``ef_search`` and ``vectors_path`` options default to the exact flat index."""
    questions = load_dataset(dataset, data_root=data_dir)
    name = questions[0].dataset
    # First and checked: a wrong spec is one error before indexing, not an error per question
    gen = make_generator(generator, cache=cache) if generator else None
    if callable(getattr(gen, "check", None)):
        gen.check()
    corpus = Corpus.from_jsonl(corpus_file) if corpus_file else \
        Corpus.from_questions(questions, name=name)
    retriever = DenseRetriever(corpus, embedder=embedder, index_dir=index_dir,
                               show_progress=show_progress, index_factory=index_factory,
                               mmap=index_mmap, nprobe=nprobe, ef_search=ef_search,
                               vectors_path=vectors_path)
    compressor = extractive_compressor(load_selector(selector), retriever) if selector else None
    env = Environment(retriever, gen, config or ControlConfig.for_dataset(name),
                      compressor=compressor)
    train, evals = split_questions(questions, min(n_eval, len(questions) // 2), split_seed)
    return Setup(name, questions, corpus, env, train, evals)


def _cut(qs: list, split: str, offset: int | None, limit: int | None) -> list:
    """``qs`` (the ``split`` part) from ``offset``, at most ``limit``; ValueError for an
    offset outside it, or an empty split (a file too small to hold questions out)."""
    if not qs:
        raise ValueError(f"--split {split}: no questions in that part of the file (--n-eval "
                         "holds out at most half of it)")
    offset = offset or 0
    if offset < 0 or (offset and offset >= len(qs)):
        raise ValueError(f"--offset {offset}: the {split} split has {len(qs)} questions")
    qs = qs[offset:]
    return qs[:limit] if limit else qs


def run_setup(s: RunSettings) -> tuple[Setup, list[Question]]:
    """(setup, the run's questions): :func:`build_setup` from the settings, configured by
    ``s.control_config``, and the ``split`` part cut by ``offset`` and ``limit``."""
    setup = build_setup(s.data, generator=s.generator, data_dir=s.data_dir,
                        embedder=s.embedder, n_eval=s.n_eval, split_seed=s.split_seed,
                        corpus_file=s.corpus, index_dir=s.index_dir,
                        index_factory=s.index_factory, index_mmap=s.index_mmap,
                        nprobe=s.nprobe, ef_search=s.ef_search, vectors_path=s.vectors,
                        selector=s.selector if s.compressor == "extractive" else None)
    setup.env.config = s.control_config(setup.dataset)
    if s.split != "all" and s.n_eval > len(setup.eval):  # capped at half: say so
        print(f"note: --n-eval {s.n_eval} is more than half of the {len(setup.questions)} "
              f"questions of {s.data}; {len(setup.eval)} are held out for evaluation",
              file=sys.stderr)
    qs = {"train": setup.train, "eval": setup.eval, "all": setup.questions}[s.split]
    if s.unseen_by_selector:
        if setup.env.compressor is None:
            raise ValueError("--unseen-by-selector needs the extractive compressor's --selector")
        fit = set(map(str, setup.env.compressor.selector.meta.get("train_ids") or ()))
        qs = [q for q in qs if q.id not in fit]
    return setup, _cut(qs, s.split, s.offset, s.limit)


def split_ids(questions: list[Question], split: str, n_eval: int, split_seed: int,
              offset: int | None, limit: int | None) -> tuple[list[str], list[str]]:
    """(ids of the questions a run with these split options takes, in order; ids of the
    split's evaluation questions): the split build_setup makes, then offset/limit as
    :func:`run_setup` cuts it; from the questions alone (no index, no model)."""
    train, evals = split_questions(questions, min(n_eval, len(questions) // 2), split_seed)
    qs = {"train": train, "eval": evals, "all": questions}[split]
    return [q.id for q in _cut(qs, split, offset, limit)], [q.id for q in evals]
