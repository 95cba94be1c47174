"""Few-shot demonstrations for the IRCoT and Self-Ask baselines.

IRCoT (Trivedi et al. 2023) shows a question with its gold and distractor paragraphs and a chain
of thought ending in 'So the answer is: X.'. :func:`build_ircot_demos` draws them from *training*
questions of the same dataset (never evaluation ones: :class:`DemoLeakError`). The originals'
hand-written CoTs are not in our data, so the chain is a template (:func:`template_chain`), and
k = 2 demonstrations with 1 distractor each (not up to 15) fit n_ctx 4096 beside a test turn of
up to 12 paragraphs.

Self-Ask (Press et al. 2023) used four hand-written demonstrations; ours (:data:`SELF_ASK_DEMOS`)
are about well-known real facts (the 0.5B model copied a fictional name into real follow-ups)
and mirror HotpotQA's question types."""
from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from .text import split_sentences

__all__ = ["Demonstration", "Demonstrations", "DemoLeakError", "SelfAskDemo",
           "SELF_ASK_DEMOS", "build_ircot_demos", "template_chain", "check_disjoint"]


class DemoLeakError(ValueError):
    """A demonstration would come from (or be run on) an evaluation question."""


@dataclass(frozen=True)
class Demonstration:
    """One IRCoT demonstration: shown paragraphs (title, text), question, CoT sentences."""
    id: str
    question: str
    paragraphs: tuple[tuple[str, str], ...]
    chain: tuple[str, ...]  # the last one is 'So the answer is: <answer>.'
    answer: str
    type: str | None = None

    @property
    def cot(self) -> str:
        return " ".join(self.chain)


@dataclass(frozen=True)
class Demonstrations:
    """The demonstrations of one run, with where they came from."""
    dataset: str
    seed: int
    items: tuple[Demonstration, ...]

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(d.id for d in self.items)

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def digest(self) -> str:
        """sha256 of the demonstrations' content (for a run fingerprint)."""
        blob = json.dumps([[d.id, d.question, d.paragraphs, d.chain] for d in self.items],
                          ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def check_disjoint(self, ids: Iterable[str]) -> None:
        check_disjoint(self.ids, ids)


def check_disjoint(demo_ids: Iterable[str], eval_ids: Iterable[str]) -> None:
    """Raise :class:`DemoLeakError` if a demonstration id is among ``eval_ids``."""
    both = sorted(set(demo_ids) & set(eval_ids))
    if both:
        raise DemoLeakError(f"{len(both)} demonstration question(s) are evaluation questions "
                            f"({', '.join(both[:5])}{' ...' if len(both) > 5 else ''}); "
                            "build demonstrations from the training split only")


# -- the template chain of thought ------------------------------------------------------
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("the a an of in on at to and or is was were are what which who whom whose "
                  "when where how did does do for by with from as that this its it his her "
                  "their be been".split())


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def _norm(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def _is_yes_no(answer: str) -> bool:
    return _norm(answer) in ("yes", "no")


def template_chain(question: str, gold: Sequence[tuple[str, str]], answer: str,
                   max_sentence_chars: int = 300) -> tuple[str, ...] | None:
    """The deterministic CoT of one training question (None when a gold paragraph has no
    usable sentence): per gold paragraph the sentence holding the answer (placed last), else
    the one sharing most words with the other gold titles and the question."""
    if not gold:
        return None
    ans = _norm(answer)
    titles = [t for t, _ in gold]
    picked: list[tuple[bool, int, str]] = []  # (holds answer, original order, sentence)
    for i, (title, text) in enumerate(gold):
        sents = split_sentences(text)
        if not sents:
            return None
        with_answer = [s for s in sents if ans and not _is_yes_no(answer)
                       and f" {ans} " in f" {_norm(s)} "]
        if with_answer:
            picked.append((True, i, with_answer[0]))
            continue
        # the bridge (another gold title) counts twice as much as a question word
        link = set().union(*(_words(t) for t in titles if t != title))
        cue = _words(question)
        best = max(range(len(sents)), key=lambda j: (
            2 * len(_words(sents[j]) & link) + len(_words(sents[j]) & cue), -j))
        picked.append((False, i, sents[best]))
    picked.sort(key=lambda x: (x[0], x[1]))  # the answer's paragraph last
    chain = []
    for _, _, s in picked:
        if len(s) > max_sentence_chars:
            return None
        s = s if s.endswith((".", "!", "?")) else s + "."
        if s not in chain:
            chain.append(s)
    final = answer.strip().rstrip(".")
    return tuple(chain) + (f"So the answer is: {final}.",)


def _shown_text(text: str, sentence: str, max_chars: int) -> str:
    """Clip a demonstration paragraph to ``max_chars`` but never before its chain sentence."""
    flat = " ".join(text.split())
    end = flat.find(sentence.rstrip("."))
    keep = max(max_chars, end + len(sentence) if end >= 0 else 0)
    if len(flat) <= keep:
        return flat
    return flat[:keep].rsplit(" ", 1)[0] + " ..."


def _eligible(q, max_sentence_chars: int) -> tuple[str, ...] | None:
    gold = [(p.title, p.text) for p in q.paragraphs if p.is_supporting]
    answer = q.answers[0]
    if not 1 <= len(gold) <= 3 or len(q.question) > 200 or len(answer) > 60:
        return None
    if not _is_yes_no(answer) and not any(f" {_norm(answer)} " in f" {_norm(t)} " for _, t in gold):
        return None
    return template_chain(q.question, gold, answer, max_sentence_chars)


_CACHE: dict[tuple, Demonstrations] = {}


def build_ircot_demos(pool: Sequence, k: int = 2, seed: int = 0, n_distractors: int = 1,
                      max_chars: int = 400, eval_ids: Iterable[str] = (),
                      max_sentence_chars: int = 300) -> Demonstrations:
    """``k`` cached IRCoT demonstrations from ``pool``, questions of the *training* split (gold
    labels are read here only): gold paragraphs plus ``n_distractors``, clipped to ``max_chars``
    (never before the chain's sentence), and the template chain. A pool overlapping
    ``eval_ids`` raises :class:`DemoLeakError`; fewer than ``k`` usable questions, ValueError."""
    pool = list(pool)
    check_disjoint((q.id for q in pool), eval_ids)
    if k <= 0:
        return Demonstrations(pool[0].dataset if pool else "", seed, ())
    pool_key = hashlib.sha256("\n".join(sorted(q.id for q in pool)).encode()).hexdigest()
    dataset = pool[0].dataset if pool else ""
    key = (dataset, seed, k, n_distractors, max_chars, max_sentence_chars, pool_key)
    if key in _CACHE:
        return _CACHE[key]

    def order(q) -> str:
        return hashlib.sha256(f"{seed}:{q.id}".encode()).hexdigest()
    chosen: list[tuple[object, tuple[str, ...]]] = []
    by_type: dict[object, list] = {}
    for q in sorted(pool, key=order):
        by_type.setdefault(q.type, []).append(q)
    # Round-robin over question types (named types first, in a fixed order), so HotpotQA's
    # two demonstrations are one bridge and one comparison question.
    types = sorted(by_type, key=lambda t: (t is None, str(t)))
    cursors = {t: 0 for t in types}
    while len(chosen) < k and any(cursors[t] < len(by_type[t]) for t in types):
        for t in types:
            if len(chosen) >= k:
                break
            qs = by_type[t]
            while cursors[t] < len(qs):
                q = qs[cursors[t]]
                cursors[t] += 1
                chain = _eligible(q, max_sentence_chars)
                if chain is not None:
                    chosen.append((q, chain))
                    break
    if len(chosen) < k:
        raise ValueError(f"only {len(chosen)} usable demonstration questions in a pool of "
                         f"{len(pool)}; need {k}")
    items = []
    for q, chain in chosen:
        rng = random.Random(f"{seed}:{q.id}")
        gold = [p for p in q.paragraphs if p.is_supporting]
        others = [p for p in q.paragraphs if not p.is_supporting]
        rng.shuffle(others)
        shown = gold + others[:n_distractors]
        rng.shuffle(shown)
        paras = []
        for p in shown:
            sent = next((s for s in chain if s.rstrip(".") in " ".join(p.text.split())), "")
            paras.append((p.title, _shown_text(p.text, sent, max_chars)))
        items.append(Demonstration(q.id, q.question, tuple(paras), chain, q.answers[0], q.type))
    demos = Demonstrations(dataset, seed, tuple(items))
    _CACHE[key] = demos
    return demos


# -- Self-Ask ---------------------------------------------------------------------------
@dataclass(frozen=True)
class SelfAskDemo:
    """One Self-Ask demonstration: the documents found for the question, the steps
    (follow-up, intermediate answer, documents that follow-up added) and the final answer."""
    question: str
    docs: tuple[tuple[str, str], ...]
    steps: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...]
    answer: str

    @property
    def follow_ups(self) -> tuple[str, ...]:
        return tuple(s[0] for s in self.steps)


# Shaped like test dialogues: the question's documents hold one hop, a follow-up's the next.
SELF_ASK_DEMOS: tuple[SelfAskDemo, ...] = (
    SelfAskDemo(
        "In which country was the composer of the opera Carmen born?",
        (("Carmen", "Carmen is an opera in four acts by Georges Bizet. It was first performed "
          "in Paris in 1875."),),
        (("Who composed the opera Carmen?", "Georges Bizet", ()),
         ("In which country was Georges Bizet born?", "France",
          (("Georges Bizet", "Georges Bizet (1838-1875) was a composer of the Romantic era, "
            "born in Paris, France."),))),
        "France"),
    SelfAskDemo(
        "Which is older, the Eiffel Tower or the Statue of Liberty?",
        (("Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower in Paris. It was "
          "completed in 1889."),),
        (("When was the Eiffel Tower completed?", "1889", ()),
         ("When was the Statue of Liberty dedicated?", "1886",
          (("Statue of Liberty", "The Statue of Liberty is a statue on Liberty Island in New "
            "York Harbor. It was dedicated on October 28, 1886."),))),
        "the Statue of Liberty"),
    SelfAskDemo(
        "Are the Louvre and the Prado both art museums?",
        (("Louvre", "The Louvre is the world's most-visited art museum, in Paris, France."),),
        (("What kind of institution is the Louvre?", "an art museum", ()),
         ("What kind of institution is the Prado?", "an art museum",
          (("Museo del Prado", "The Museo del Prado in Madrid is the main Spanish national "
            "art museum."),))),
        "yes"),
    SelfAskDemo(
        "When was the university where Alan Turing earned his PhD founded?",
        (("Alan Turing", "Alan Turing was an English mathematician. He earned his PhD at "
          "Princeton University in 1938."),),
        (("At which university did Alan Turing earn his PhD?", "Princeton University", ()),
         ("When was Princeton University founded?", "1746",
          (("Princeton University", "Princeton University is a private Ivy League university "
            "in New Jersey, founded in 1746."),))),
        "1746"),
)
