"""A run's settings, budgets, switches and the environment the actions run in (chapters 4-5).

:class:`RunSettings` holds every setting of one ``train`` or ``evaluate`` run, passed whole to
the setup, the choosers, the evaluation loop, the fingerprint and the training recipe.
:class:`ControlConfig` holds the paper's budgets and the ablation switches. :class:`Environment`
carries what actions use but a state must not hold, as loaded objects (retriever, generator,
config, sufficiency estimator, compressor); gold labels are never in either."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from .ann import DEFAULT_EF_SEARCH, DEFAULT_NPROBE
from .compression import ExtractiveCompressor
from .generators.base import Generation, Generator
from .retriever import DEFAULT_EMBEDDER, Retriever
from .state import EvidenceState


@dataclass(frozen=True)
class ControlConfig:
    """Budgets and switches; defaults are the paper's settings."""
    per_action: int = 3
    max_docs: int = 12
    max_steps: int = 4
    retrieval_cap: int | None = None  # no explicit cap in the paper's main runs
    ranking_depth: int = 50  # length of the initial ranking the frontier walks
    doc_chars: int | None = 600  # per-document text shown to the generator (None: whole text)
    use_sufficiency: bool = True
    use_compression: bool = True
    fact_table: bool = False  # MuSiQue-style compression prompt
    max_snippets: int = 8
    max_bridges: int = 5
    use_spacy: bool = True
    # Terminal compression (dynakrag_lite.compression): "llm" (the paper's, validated) or
    # "extractive" (Environment.compressor, no LLM call); below min_valid_snippets or
    # min_snippet_docs, the answer reads the documents instead.
    compressor: str = "llm"
    min_valid_snippets: int = 1
    min_snippet_docs: int = 2
    # The answer stage: a final state with at most this many documents is answered from the
    # documents, uncompressed (0: always compress, the paper's; the lab's answer-stage study,
    # python -m dynakrag_lab.studies.answer_stage, chooses it on training questions).
    answer_docs_up_to: int = 0
    # The probe's signal (dynakrag_lite.sufficiency): "text", "margin", "learned", "answer_conf";
    # "sufficient" iff score >= threshold (None: its default); gates=False: it gates nothing.
    sufficiency_signal: str = "text"
    sufficiency_threshold: float | None = None
    sufficiency_gates: bool = True

    @classmethod
    def for_dataset(cls, dataset: str, **kw) -> "ControlConfig":
        """Paper: MuSiQue compresses into a fact table (<=12 snippets, 384 tokens)."""
        if dataset == "musique":
            kw.setdefault("fact_table", True)
            kw.setdefault("max_snippets", 12)
        return cls(**kw)


@dataclass(frozen=True)
class RunSettings:
    """Every setting of one run: one field per flag of ``train`` and ``evaluate``, named as
    the flag's argparse destination; the defaults are the flags' defaults."""
    # which questions and which index (--data ... --limit)
    data: str | None = None  # a JSONL path or a dataset name
    data_dir: str | None = None
    corpus: str | None = None  # own corpus JSONL (default: pooled from the data)
    embedder: str = DEFAULT_EMBEDDER
    index_dir: str | None = None
    index_factory: str | None = None
    index_mmap: bool = False
    nprobe: int = DEFAULT_NPROBE
    ef_search: int = DEFAULT_EF_SEARCH
    vectors: str | None = None
    split: str = "eval"  # train | eval | all
    n_eval: int = 100
    split_seed: int = 0
    offset: int = 0
    unseen_by_selector: bool = False  # leave out the sentence selector's fit questions
    limit: int | None = None
    # the environment's budgets and switches (control_config)
    no_compression: bool = False
    no_sufficiency: bool = False
    retrieval_cap: int | None = None
    max_steps: int = 4
    max_docs: int = 12
    per_action: int = 3
    doc_chars: int = 600  # 0: whole documents
    compressor: str = "llm"
    selector: str | None = None  # the extractive compressor's sentence selector file
    answer_docs_up_to: int = 0
    generator: str | None = None
    seed: int = 13
    workers: int = 1  # questions run at once (not part of a run's fingerprint)
    # evaluate: the method and its decision settings (None: the policy's own)
    method: str | None = None
    policy: str | None = None
    out: str | None = None  # evaluate's run folder; train's policy file
    fixed_k: int | None = None
    lam: float | None = None  # train: fixed, no tuning
    veto_threshold: float | None = None  # train: fixed, no tuning
    stop_after: int | None = None  # dynakrag and uniform: stop after K acquisitions
    policy_train_questions: bool = False  # evaluate --split train on the policy's own questions
    # train (dynakrag_lite.training.recipe)
    trees: int = 300
    min_leaf: int = 8
    continuation_target: str = "f1"  # f1 | sr | onestep
    continuation_questions: int = 0  # answer calls on the first N questions (0 = all)
    sufficiency_signal: str = "auto"
    sufficiency_rule: str = "youden"
    calibration_questions: int = 100  # questions whose states score the LLM signals (0 = all)
    tune_folds: int = 5  # 0 or 1: no cross-validation
    tune_metric: str | None = None  # f1 | sr (default: f1 for the f1 target, else sr)
    lambdas: tuple[float, ...] = ()  # (): the stop rule's grid
    veto_thresholds: tuple[float, ...] = ()  # (): VETO_GRID
    stop_rule: str = "level"
    token_price: float = 0.0  # tuning objective: metric - token_price * tokens
    save_data: str | None = None  # also write the trajectories here
    from_data: str | None = None  # collect nothing: read them from here
    argv: tuple[str, ...] = ()  # the command line, for the records

    @classmethod
    def from_args(cls, args: Any) -> "RunSettings":
        """The settings of a parsed command line (an ``argparse.Namespace``): each field it
        has; a command without the flag (``index`` has no budgets) keeps the default."""
        given = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
        return cls(**{**given, "argv": tuple(given.get("argv", ()))})

    def control_config(self, dataset: str) -> "ControlConfig":
        """The environment's budgets and switches for ``dataset``."""
        return ControlConfig.for_dataset(
            dataset, use_compression=not self.no_compression,
            use_sufficiency=not self.no_sufficiency, retrieval_cap=self.retrieval_cap,
            max_steps=self.max_steps, max_docs=self.max_docs, per_action=self.per_action,
            doc_chars=self.doc_chars or None, compressor=self.compressor,
            answer_docs_up_to=self.answer_docs_up_to)


class StateEstimator(Protocol):
    """The fitted estimator of a "learned" sufficiency signal
    (:class:`dynakrag_lite.sufficiency.SufficiencyEstimator`): P(sufficient | state)."""

    def predict_state(self, state: EvidenceState) -> float: ...


@dataclass
class Environment:
    retriever: Retriever
    generator: Generator | None
    config: ControlConfig = field(default_factory=ControlConfig)
    # Set by SufficiencySignal.configure for the "learned" signal, else None.
    sufficiency_estimator: StateEstimator | None = None
    # The extractive compressor (config.compressor == "extractive"), else None.
    compressor: ExtractiveCompressor | None = None

    def generate(self, messages, max_tokens: int) -> Generation:
        if self.generator is None:
            raise RuntimeError("this action needs a generator, and the environment has none")
        return self.generator.generate(messages, max_tokens=max_tokens)
