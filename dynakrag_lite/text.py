"""Words and sentences: the one tokenizer, stopword list, content-word set, sentence splitters
and longest common run that the rest of the package shares.

Two variants exist on purpose, each because a committed artifact was fitted on it: the value
model's features use :func:`feature_content_words` (:func:`ascii_words` and the shorter
:data:`FEATURE_STOPWORDS`, no accent folding), on which the committed policies were trained;
and :func:`paragraph_sentences` (the dataset's own sentence breaks, no abbreviation rule,
unlike :func:`split_sentences`), on which the committed sentence selectors were trained."""
from __future__ import annotations

import difflib
import re
import unicodedata
from functools import lru_cache
from typing import Sequence

__all__ = ["STOPWORDS", "FEATURE_STOPWORDS", "fold_accents", "word_tokens", "content_words",
           "normalize_phrase", "ascii_words", "feature_content_words", "split_sentences",
           "paragraph_sentences", "longest_common_run"]

# -- the tokenizer and the stopword list ----------------------------------------------------
STOPWORDS = frozenset("""a an the and or but if of at by for with about against between into
through during before after above below to from up down in out on off over under again further
then once here there when where why how all any both each few more most other some such no nor
not only own same so than too very s t can will just don should now is are was were be been
being have has had having do does did doing i me my we our you your he him his she her it its
they them their what which who whom whose this that these those am would could might must shall
may as also while until because what's which's one first same than many much""".split())

_WORD = re.compile(r"\w+", re.UNICODE)
_PUNCT = re.compile(r"[^\w\s]")


def fold_accents(text: str) -> str:
    """Lowercased, accents removed ("Jähn" -> "jahn")."""
    t = unicodedata.normalize("NFKD", text)
    return "".join(c for c in t if not unicodedata.combining(c)).lower()


def word_tokens(text: str) -> list[str]:
    """Lowercased word tokens, accents folded ("Jähn" -> "jahn")."""
    return _WORD.findall(fold_accents(text))


def content_words(text: str) -> frozenset[str]:
    """The distinct word tokens of ``text`` that are not :data:`STOPWORDS`."""
    return frozenset(w for w in word_tokens(text) if w not in STOPWORDS)


def normalize_phrase(text: str) -> str:
    """Accents folded, lowercased, punctuation as spaces, single spaces: the form in which an
    answer string or a title is looked for inside a sentence."""
    return " ".join(_PUNCT.sub(" ", fold_accents(text)).split())


# -- the value model's variant (see the module docstring: committed policies depend on it) ---
FEATURE_STOPWORDS = frozenset(
    "a an the of in on at to for by with from and or is was were are be been who what which "
    "when where why how whose whom did does do that this it its as than same both".split())

_ASCII_WORD = re.compile(r"[a-z0-9]+")


def ascii_words(text: str) -> list[str]:
    """Runs of ASCII letters and digits of the lowercased text ("Jähn" -> "j", "hn")."""
    return _ASCII_WORD.findall(text.lower())


@lru_cache(maxsize=65536)
def feature_content_words(text: str) -> frozenset[str]:
    """The distinct :func:`ascii_words` of ``text`` that are not :data:`FEATURE_STOPWORDS`
    (the value model's lexical-overlap features)."""
    return frozenset(w for w in ascii_words(text) if w not in FEATURE_STOPWORDS)


# -- sentences ------------------------------------------------------------------------------
# Sentence boundary: end punctuation, space, then an opening capital/quote/bracket/digit.
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z0-9\"'(\[])")
# Not after an initial or a common abbreviation ('J. R. R. Tolkien', 'St. Louis', 'U.S. Army').
_ABBREV = re.compile(r"(?:\b[A-Z]|\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|Mt|Ft|Gen|Col|Lt|Sgt|Capt|Rev|"
                     r"Prof|Inc|Ltd|Co|No|vs|etc|U\.S|U\.K|D\.C))\.$")


def split_sentences(text: str) -> list[str]:
    """Sentences of one line of prose (a simple rule-based splitter, no model): whitespace is
    collapsed, and a period after an initial or a common abbreviation ends no sentence."""
    text = " ".join(text.split())
    out, start = [], 0
    for m in _BOUNDARY.finditer(text):
        head = text[start:m.start()].rstrip("\"')]")
        if _ABBREV.search(head):
            continue
        out.append(text[start:m.start()].strip() if text[m.start()] == " "
                   else text[start:m.end()].strip())
        start = m.end()
    if text[start:].strip():
        out.append(text[start:].strip())
    return [s for s in out if s]


def paragraph_sentences(text: str) -> list[str]:
    """Sentences of a dataset paragraph. HotpotQA paragraphs are the dataset's sentences joined
    with a double space, which is used when present; otherwise the punctuation rule of
    :func:`split_sentences` without its abbreviation exceptions (see the module docstring)."""
    text = text.strip()
    if not text:
        return []
    if re.search(r"\S  \S", text):
        parts = [p.strip() for p in re.split(r"(?<=\S)\s{2,}(?=\S)", text)]
    else:
        parts = [p.strip() for p in _BOUNDARY.split(text)]
    return [p for p in parts if p]


def longest_common_run(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common contiguous token run of two token lists."""
    if not a or not b:
        return 0
    m = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return m.find_longest_match(0, len(a), 0, len(b)).size
