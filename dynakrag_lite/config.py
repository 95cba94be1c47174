"""Budgets, switches and the environment the actions run in (chapters 4-5).

:class:`ControlConfig` holds the paper's budgets (top-3 new documents per retrieval action,
at most 12 documents and 4 steps, optional retrieval cap) and the ablation switches.
:class:`Environment` carries what actions use but a state must not hold, as loaded objects
(never paths): the retriever, the generator, the config, the learned sufficiency estimator and
the extractive compressor (:func:`dynakrag_lite.pipeline.build_setup` loads them once). Gold
labels are never in either.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .compression import ExtractiveCompressor
from .generators.base import Generation, Generator
from .retriever import Retriever
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
    # Terminal compression (see dynakrag_lite.compression): "llm" (the paper's: the generator
    # copies snippets, each validated against the documents) or "extractive" (a learned sentence
    # selector, Environment.compressor, no LLM call). Fewer than min_valid_snippets valid
    # snippets, or snippets from fewer than min_snippet_docs documents on a state holding that
    # many: the answer reads the documents instead.
    compressor: str = "llm"
    min_valid_snippets: int = 1
    min_snippet_docs: int = 2
    # The answer stage: a final state with at most this many documents is answered from the
    # documents, uncompressed (0: always compress, the paper's; dynakrag_lab/scripts/answer_stage.py
    # chooses it on training questions).
    answer_docs_up_to: int = 0
    # The sufficiency probe's signal (see dynakrag_lite.sufficiency): "text" (the parsed reply,
    # the original probe), "margin" (log P(SUFFICIENT) - log P(INSUFFICIENT)), "learned" (a
    # state-feature classifier, Environment.sufficiency_estimator) or "answer_conf"; verdict
    # "sufficient" iff score >= threshold (None: the signal's default). gates=False: the verdict
    # gates nothing (a gap is always written), for a signal measured to be at chance.
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
