"""One call from a dataset name to a ready environment (questions, corpus, retriever,
generator, budgets, and the extractive compressor when asked for): what the CLI, the
experiments and every chapter start from (chapter 4 first).

    setup = build_setup("hotpotqa", generator="qwen2.5-coder-0.5b")
    setup.env, setup.questions, setup.train, setup.eval

Everything the environment needs is loaded here, once: the actions never read a file.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .ann import DEFAULT_EF_SEARCH, DEFAULT_NPROBE
from .compression import ExtractiveCompressor, SentenceSelector, load_selector
from .config import ControlConfig, Environment
from .data.corpus import Corpus
from .data.schema import Question
from .data.sources import load_dataset, split_questions
from .generators.spec import make_generator
from .retriever import DEFAULT_EMBEDDER, DenseRetriever

QUICK_GENERATOR = "smollm2-135m"  # fastest bundled model: quick mode, tests
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
    """The extractive compressor of ``selector`` with the retriever's embedder for its
    embedding features, through the persistent embedding cache (a re-run reads the vectors
    its first run computed, bit for bit, instead of re-encoding every sentence). ValueError
    when the selector was trained with another embedder."""
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
    only), pool its corpus (or read ``corpus_file``), index it (loaded from disk when built
    before) and split the questions into disjoint train/eval parts exactly as the CLI does.

    ``selector``: a sentence selector file (:func:`~dynakrag_lite.compression.load_selector`,
    checked against its folder's manifest), loaded once into ``env.compressor``
    (:func:`extractive_compressor`); the config must then say ``compressor="extractive"`` for
    the actions to use it. ``index_factory``, ``index_mmap`` (:class:`DenseRetriever`'s
    ``mmap``), ``nprobe``, ``ef_search`` and ``vectors_path`` are the retriever's large-corpus
    options (:mod:`dynakrag_lite.ann`); their defaults give the exact flat index every earlier
    run used."""
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
