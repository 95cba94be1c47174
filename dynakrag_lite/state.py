"""The evidence state s_t: everything the controller may look at, and nothing gold (no gold
answers, support labels, support recall or answer scores). A state is an immutable dataclass;
every action returns a new one, so the trainer branches into each valid action's outcome
without copying and a trace keeps every s_t."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from .data.corpus import normalize_title

ACTIONS: tuple[str, ...] = (
    "retrieve_more", "gap_query", "bridge_entity_expand", "rewrite_query",
    "sufficiency_check", "stop_answer", "compress_answer_evidence",
)
RETRIEVAL_ACTIONS = ("retrieve_more", "gap_query", "bridge_entity_expand", "rewrite_query")
LLM_ACTIONS = ("rewrite_query", "sufficiency_check", "compress_answer_evidence")
# Actions that count towards the step budget (the paper's "acquisition/control steps").
STEP_ACTIONS = RETRIEVAL_ACTIONS + ("sufficiency_check",)


@dataclass(frozen=True)
class RetrievedDoc:
    id: str
    title: str
    text: str
    score: float
    source: str  # the action that brought it
    step: int  # index of that action in the history

    def render(self, max_chars: int | None = None) -> str:
        body = self.text if max_chars is None or len(self.text) <= max_chars else \
            self.text[:max_chars].rsplit(" ", 1)[0] + " ..."
        return f"{self.title}: {body}"


@dataclass(frozen=True)
class Sufficiency:
    """A sufficiency probe's verdict. ``parsed`` is False when the model's reply did not follow
    the format and the defined fallback (insufficient, no gap) was used."""
    sufficient: bool
    gap: str
    raw: str
    parsed: bool
    doc_ids: tuple[str, ...]  # the evidence it judged: a later probe on the same set is redundant
    # Which signal decided (see dynakrag_lite.sufficiency), its score and threshold; gates=False:
    # the verdict is only recorded (the signal is at chance), features treat it as unknown.
    score: Optional[float] = None
    threshold: Optional[float] = None
    signal: str = "text"
    gates: bool = True


@dataclass(frozen=True)
class Ledger:
    """The state's cost ledger (observable, so features may read it)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_calls: int = 0
    retrieval_calls: int = 0
    seconds: float = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def plus_generation(self, gen) -> "Ledger":
        return replace(self, prompt_tokens=self.prompt_tokens + gen.prompt_tokens,
                       completion_tokens=self.completion_tokens + gen.completion_tokens,
                       llm_calls=self.llm_calls + 1, seconds=self.seconds + gen.seconds)

    def plus_retrieval(self, n: int = 1) -> "Ledger":
        return replace(self, retrieval_calls=self.retrieval_calls + n)


@dataclass(frozen=True)
class RankedEntry:
    id: str
    title: str
    text: str
    score: float


@dataclass(frozen=True)
class EvidenceState:
    question: str
    qid: str = ""
    docs: tuple[RetrievedDoc, ...] = ()
    # The initial ranking of the question (filled by the first retrieve_more) and the frontier
    # cursor: how far down that list retrieve_more has read.
    initial_ranking: Optional[tuple[RankedEntry, ...]] = None
    frontier: int = 0
    query: str = ""
    gap: str = ""
    sufficiency: Optional[Sufficiency] = None
    bridge_candidates: tuple[str, ...] = ()
    expanded_bridges: tuple[str, ...] = ()
    history: tuple[str, ...] = ()
    ledger: Ledger = field(default_factory=Ledger)
    stopped: bool = False
    stop_reason: str = ""
    note: str = ""  # what the last action reports about itself (e.g. a rewrite fallback)

    # -- derived views -----------------------------------------------------------------
    @property
    def doc_ids(self) -> tuple[str, ...]:
        return tuple(d.id for d in self.docs)

    @property
    def titles(self) -> tuple[str, ...]:
        return tuple(d.title for d in self.docs)

    @property
    def title_keys(self) -> frozenset[str]:
        return frozenset(normalize_title(d.title) for d in self.docs)

    @property
    def steps(self) -> int:
        return sum(1 for a in self.history if a in STEP_ACTIONS)

    def count(self, action: str) -> int:
        return self.history.count(action)

    @property
    def unexpanded_bridges(self) -> tuple[str, ...]:
        done = set(self.expanded_bridges)
        return tuple(b for b in self.bridge_candidates if b not in done)

    @property
    def frontier_left(self) -> int | None:
        """Unread entries of the initial ranking; None before the first retrieval."""
        if self.initial_ranking is None:
            return None
        return len(self.initial_ranking) - self.frontier


def initial_state(question: str, qid: str = "") -> EvidenceState:
    """s_0: the question alone."""
    if not question or not question.strip():
        raise ValueError("question is empty")
    return EvidenceState(question=question.strip(), qid=qid, query=question.strip())
