"""Terminal compression that keeps the evidence (chapter 10).

The paper's compressor asks the generator for "mutually supporting snippets". With a small
generator that lost evidence (qwen2.5-coder-0.5b, 30 HotpotQA questions: 22 of 90 snippets
matched no document, the answer string was lost for 6 of 24), so here it is checked:

**LLM compressor, validated** (:func:`validate_snippets`): each snippet is matched to the
documents as a fuzzy quote (share of its tokens in runs of :data:`MIN_RUN` tokens copied from one
document); weak, short, template and duplicate snippets are dropped with a reason. The answerer
reads the *source sentences* a match covers, so a snippet cut before the answer gets it back.

**Fallback to the documents** (:func:`decide_fallback`): too few valid snippets, or from too few
documents for a multi-hop answer, and answer() reads the documents themselves.

**Extractive compressor** (:class:`ExtractiveCompressor`): a learned sentence selector, no LLM
calls, trained by :mod:`dynakrag_lab.studies.selector` and checked against its folder's
``MANIFEST.sha256`` before unpickling. The LLM compressor stays the library default."""
from __future__ import annotations

import difflib
import io
import math
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import joblib
import numpy as np

from .prompts import is_yes_no_question
from .storage import atomic_write_bytes, verified_sha256
from .text import STOPWORDS, content_words, normalize_phrase, paragraph_sentences, word_tokens
from .threads import openmp_limit

__all__ = [
    "QUOTE_THRESHOLD", "DROP_REASONS", "MIN_RUN", "MIN_SNIPPET_TOKENS", "FEATURES",
    "Snippet", "Compression", "quote_match", "fact_match", "validate_snippets",
    "render_evidence", "decide_fallback", "build_compression", "SentenceRows",
    "sentence_features", "SentenceSelector", "load_selector", "ExtractiveCompressor",
]


# -- the compression record ---------------------------------------------------------------
@dataclass(frozen=True)
class Snippet:
    """One kept piece of evidence: the model's snippet (or the selected sentence) and where it
    is in the state's documents."""
    text: str  # the model's snippet without its marker (extractive: the sentence)
    doc_index: int  # 0-based position in state.docs
    doc_id: str
    title: str
    sentence_ids: tuple[int, ...]  # sentences of that document it covers
    sentences: tuple[str, ...]
    score: float  # quote ratio (LLM) or selector probability (extractive)


@dataclass(frozen=True)
class Compression:
    """What compress_answer_evidence produced: ``snippets``, what the answer reads (one
    ``"Title: sentence sentence"`` line per source document, or ``()`` when
    ``fallback_to_docs``); ``valid_snippets`` with their source; ``dropped`` as (text, reason)."""
    snippets: tuple[str, ...]
    raw: str
    generation: object | None  # Generation of the LLM call; None for the extractive compressor
    method: str = "llm"
    valid_snippets: tuple[Snippet, ...] = ()
    dropped: tuple[tuple[str, str], ...] = ()
    fallback_to_docs: bool = False
    fallback_reason: str = ""
    n_parsed: int = 0

    @property
    def source_docs(self) -> tuple[int, ...]:
        return tuple(sorted({s.doc_index for s in self.valid_snippets}))

    @property
    def note(self) -> str:
        """One-line summary for a trace."""
        n = len(self.snippets)
        s = (f"{n} snippets ({self.method}; {len(self.valid_snippets)}/{self.n_parsed} valid "
             f"from docs {[i + 1 for i in self.source_docs]})")
        if self.fallback_to_docs:
            s += f"; fallback_to_docs: {self.fallback_reason}"
        return s

    @property
    def stats(self) -> dict:
        """The counts of :attr:`note` as plain JSON values, for the trace step (``dropped``:
        count per reason of :data:`DROP_REASONS`, zeros included)."""
        dropped = dict.fromkeys(DROP_REASONS, 0)
        for _, reason in self.dropped:
            key = reason.split(" (")[0]  # "no_match (0.42)" -> "no_match"
            dropped[key] = dropped.get(key, 0) + 1
        return {"method": self.method, "n_parsed": int(self.n_parsed),
                "n_valid": len(self.valid_snippets), "dropped": dropped,
                "fallback_to_docs": bool(self.fallback_to_docs),
                "fallback_reason": str(self.fallback_reason)}


# -- validating LLM snippets --------------------------------------------------------------
# Why validate_snippets drops a snippet (its reasons start with one of these).
DROP_REASONS = ("template", "too_short", "no_match", "duplicate")
QUOTE_THRESHOLD = 0.6
"""Minimum share of a snippet's tokens in runs of >= MIN_RUN tokens copied from one document.
On a HotpotQA paragraph an exact copy scores 1.0, one word changed 0.92, a restatement in the
paragraph's words 0.73, a paraphrase 0.38, an invention 0.29: 0.6 keeps copies and close
restatements and drops what the paragraph does not say in its own words."""
MIN_RUN = 2
MIN_SNIPPET_TOKENS = 3

_MARKER = re.compile(r"^\s*(?:[-*\u2022]\s*)?(?:\[\s*(\d+)\s*\]|\(\s*(\d+)\s*\)|"
                     r"doc(?:ument)?\s*(\d+)\s*[:.\-]?)\s*", re.I)
_TRAILING_REF = re.compile(r"\s*[\[(]\s*(?:doc(?:ument)?\s*)?(\d+)\s*[\])]\s*\.?\s*$", re.I)
# Template text copied from the prompt: a "<...>" placeholder, "doc number", the word
# "snippet" anywhere ("Lucie Hradecká snippet" was a real reply), or a bare label line.
_TEMPLATE = re.compile(r"<[^>]*>|\bdoc(?:ument)? number\b|\bsnippets?\b|^\s*(?:facts?|"
                       r"evidence|entity \| relation \| value|\.\.\.|…)\s*[.:]?\s*$", re.I)


def _strip_marker(snippet: str) -> tuple[str, int | None]:
    """(text without a leading/trailing document reference, that document number or None)."""
    s = snippet.strip()
    hint = None
    m = _MARKER.match(s)
    if m:
        hint = int(next(g for g in m.groups() if g))
        s = s[m.end():]
    m = _TRAILING_REF.search(s)
    if m:
        hint = hint if hint is not None else int(m.group(1))
        s = s[:m.start()]
    return s.strip().strip('"\'*` '), hint


@dataclass
class _DocTokens:
    tokens: list[str]
    sent_of: list[int]  # sentence index of each token
    sentences: list[str]
    title_tokens: list[str]


def _doc_tokens(doc) -> _DocTokens:
    sents = paragraph_sentences(doc.text)
    toks: list[str] = []
    sent_of: list[int] = []
    for i, s in enumerate(sents):
        t = word_tokens(s)
        toks += t
        sent_of += [i] * len(t)
    return _DocTokens(toks, sent_of, sents, word_tokens(doc.title))


def quote_match(snippet_tokens: Sequence[str], doc: _DocTokens) -> tuple[float, tuple[int, ...]]:
    """(quote ratio, sentence ids covered) of a snippet against one document. A leading copy
    of the document's title ("Title: text") is not held against the snippet."""
    toks = list(snippet_tokens)
    tt = doc.title_tokens
    if tt and toks[:len(tt)] == tt and len(toks) > len(tt):
        toks = toks[len(tt):]
    if not toks or not doc.tokens:
        return 0.0, ()
    m = difflib.SequenceMatcher(None, toks, doc.tokens, autojunk=False)
    blocks = [b for b in m.get_matching_blocks() if b.size >= min(MIN_RUN, len(toks))]
    matched = sum(b.size for b in blocks)
    per_sent: dict[int, int] = {}
    for b in blocks:
        for j in range(b.b, b.b + b.size):
            per_sent[doc.sent_of[j]] = per_sent.get(doc.sent_of[j], 0) + 1
    if not per_sent:
        return 0.0, ()
    # The sentence holding most of the match, plus those a run of >= 3 tokens touches (a quote
    # may cross a boundary: "Born in St. | Louis"); a stray 2-token run adds nothing.
    sents = {max(per_sent, key=lambda i: (per_sent[i], -i))}
    for b in blocks:
        if b.size >= 3:
            sents.update(doc.sent_of[j] for j in range(b.b, b.b + b.size))
    return matched / len(toks), tuple(sorted(sents))


def _render(title: str, sentences: Sequence[str]) -> str:
    return f"{title}: {' '.join(sentences)}"


def render_evidence(kept: Sequence[Snippet]) -> tuple[str, ...]:
    """One line per source document, in document order, each sentence once, in text order."""
    by_doc: dict[int, dict[int, str]] = {}
    titles: dict[int, str] = {}
    for s in kept:
        titles[s.doc_index] = s.title
        d = by_doc.setdefault(s.doc_index, {})
        for i, t in zip(s.sentence_ids, s.sentences):
            d[i] = t
    return tuple(_render(titles[k], [v[i] for i in sorted(v)]) for k, v in sorted(by_doc.items()))


def fact_match(snippet_tokens: Sequence[str], doc: _DocTokens) -> tuple[float, tuple[int, ...]]:
    """Fact-table lines ("entity | relation | value") are not quotes: their ratio is the share of
    their content words in the document (title included), their sentences those holding most."""
    cw = {t for t in snippet_tokens if t not in STOPWORDS}
    if not cw or not doc.tokens:
        return 0.0, ()
    have = set(doc.tokens) | set(doc.title_tokens)
    ratio = len(cw & have) / len(cw)
    per: dict[int, int] = {}
    for t, si in zip(doc.tokens, doc.sent_of):
        if t in cw:
            per[si] = per.get(si, 0) + 1
    if not per:
        return ratio, ()
    best = max(per.values())
    return ratio, tuple(sorted(i for i, n in per.items() if n == best))


def validate_snippets(parsed: Sequence[str], docs: Sequence,
                      threshold: float = QUOTE_THRESHOLD, fact_table: bool = False
                      ) -> tuple[list[Snippet], list[tuple[str, str]], list[float]]:
    """Match each parsed snippet to the documents (as a quote or a fact-table line). Returns
    (kept in document order, dropped ``(snippet, reason)``, every matched snippet's best ratio)."""
    match = fact_match if fact_table else quote_match
    dts = [_doc_tokens(d) for d in docs]
    kept: list[tuple[int, int, Snippet]] = []
    dropped: list[tuple[str, str]] = []
    ratios: list[float] = []
    seen: set[tuple[int, tuple[int, ...]]] = set()
    for order, raw in enumerate(parsed):
        body, hint = _strip_marker(raw)
        if not body or _TEMPLATE.search(body):
            dropped.append((raw, "template"))
            continue
        toks = word_tokens(body)
        if len(toks) < MIN_SNIPPET_TOKENS:
            dropped.append((raw, "too_short"))
            continue
        best = (-1.0, 0, -1, ())  # (ratio, hinted, -index, sentence ids)
        for i, dt in enumerate(dts):
            ratio, sids = match(toks, dt)
            cand = (ratio, int(hint is not None and hint == i + 1), -i, sids)
            if cand[:3] > best[:3]:
                best = cand
        ratio, _, neg_i, sids = best
        ratios.append(max(ratio, 0.0))
        if ratio < threshold or not sids:
            dropped.append((raw, f"no_match ({max(ratio, 0.0):.2f})"))
            continue
        i = -neg_i
        if (i, sids) in seen:
            dropped.append((raw, "duplicate"))
            continue
        seen.add((i, sids))
        d = docs[i]
        kept.append((i, sids[0], Snippet(body, i, d.id, d.title, sids,
                                         tuple(dts[i].sentences[j] for j in sids),
                                         round(ratio, 4))))
    kept.sort(key=lambda x: (x[0], x[1]))
    return [k[2] for k in kept], dropped, ratios


def decide_fallback(kept: Sequence[Snippet], n_docs: int, min_valid: int, min_docs: int) -> str:
    """The reason to answer from the documents instead, or '' to use the snippets."""
    if len(kept) < min_valid:
        return f"{len(kept)} valid snippets < {min_valid}"
    covered = len({s.doc_index for s in kept})
    if n_docs >= min_docs and covered < min_docs:
        return f"snippets cover {covered} doc(s) < {min_docs}"
    return ""


def build_compression(parsed: Sequence[str], raw: str, generation, docs: Sequence,
                      min_valid: int = 1, min_docs: int = 2,
                      threshold: float = QUOTE_THRESHOLD, fact_table: bool = False
                      ) -> Compression:
    """The validated Compression record of an LLM compression reply."""
    kept, dropped, _ = validate_snippets(parsed, docs, threshold, fact_table)
    why = decide_fallback(kept, len(docs), min_valid, min_docs)
    return Compression(() if why else render_evidence(kept), raw, generation, "llm",
                       tuple(kept), tuple(dropped), bool(why), why, len(parsed))


# -- the extractive sentence selector -----------------------------------------------------
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")
_NUMBER = re.compile(r"\b\d[\d,.]*\b")
_CAPS = re.compile(r"\b[A-Z][\w'\-]+")

FEATURES = (
    "q_overlap", "q_overlap_count", "q_caps_overlap", "new_caps", "title_in_sentence",
    "title_q_overlap", "other_title_mention", "position", "is_first", "rel_position",
    "n_sentences", "doc_rank", "doc_score", "doc_score_gap", "log_length", "has_year",
    "has_number", "when_x_year", "howmany_x_number", "yes_no_question", "emb_cos",
    "emb_cos_doc_rank", "emb_cos_gap",
)


@dataclass
class SentenceRows:
    """Sentences of a list of documents, with their features (rows align)."""
    doc_index: list[int]
    sent_index: list[int]
    sentences: list[str]
    X: np.ndarray


def sentence_features(question: str, docs: Sequence,
                      encode: Callable[[Sequence[str]], np.ndarray] | None = None
                      ) -> SentenceRows:
    """Feature rows of every sentence of ``docs`` (in rank order; ``doc.score`` is the
    retrieval score). No gold label is read: question overlap, title mentions (a bridge cue),
    position, rank, score, length, number cues against the wh-word, and embedding cosine."""
    q_cw = content_words(question)
    q_caps = {w.lower() for w in _CAPS.findall(question)} - STOPWORDS
    ql = question.lower()
    q_when = float(bool(re.search(r"\b(when|what year|which year|born|founded|date)\b", ql)))
    q_howmany = float(bool(re.search(r"\bhow (many|much|long|old|tall)\b", ql)))
    yn = float(is_yes_no_question(question))
    titles = [(normalize_phrase(d.title), content_words(d.title)) for d in docs]
    scores = [float(getattr(d, "score", 0.0)) for d in docs]
    top = max(scores) if scores else 0.0
    di, si, sents, rows = [], [], [], []
    for i, d in enumerate(docs):
        ss = paragraph_sentences(d.text)
        for j, s in enumerate(ss):
            cw = content_words(s)
            caps = {w.lower() for w in _CAPS.findall(s)} - STOPWORDS
            ns = normalize_phrase(s)
            tkey, tcw = titles[i]
            other = sum(1 for k, (t, _) in enumerate(titles)
                        if k != i and t and len(t) > 3 and f" {t} " in f" {ns} ")
            ntok = len(word_tokens(s))
            has_year = float(bool(_YEAR.search(s)))
            has_num = float(bool(_NUMBER.search(s)))
            rows.append([
                len(cw & q_cw) / max(1, len(q_cw)), float(len(cw & q_cw)),
                len(caps & q_caps) / max(1, len(q_caps)),
                len(caps - q_caps) / max(1, ntok),
                len(cw & tcw) / max(1, len(tcw)),
                len(tcw & q_cw) / max(1, len(tcw)),
                float(other), float(j), float(j == 0), j / max(1, len(ss)),
                float(len(ss)), float(i), scores[i], top - scores[i],
                math.log1p(ntok), has_year, has_num, q_when * has_year,
                q_howmany * has_num, yn, 0.0, 0.0, 0.0])
            di.append(i)
            si.append(j)
            sents.append(s)
    X = np.asarray(rows, dtype="float64").reshape(len(rows), len(FEATURES))
    if encode is not None and sents:
        vecs = np.asarray(encode([question] + sents), dtype="float64")
        qv, sv = vecs[0], vecs[1:]
        cos = sv @ qv / (np.linalg.norm(sv, axis=1) * np.linalg.norm(qv) + 1e-9)
        X[:, FEATURES.index("emb_cos")] = cos
        di_arr = np.asarray(di)
        for i in set(di):
            idx = np.where(di_arr == i)[0]
            order = np.argsort(-cos[idx])
            X[idx[order], FEATURES.index("emb_cos_doc_rank")] = np.arange(len(idx))
        X[:, FEATURES.index("emb_cos_gap")] = cos.max() - cos
    return SentenceRows(di, si, sents, X)


SELECTOR_FORMAT = "dynakrag-sentence-selector/1"
# How to vouch for a selector file that its folder's manifest does not list (in refusals).
MANIFEST_FIX = ("if you trained it yourself, record it in the manifest: python -c \"from "
                "dynakrag_lite.storage import register_in_manifest; "
                "register_in_manifest({path!r})\"; otherwise do not load it")


@dataclass
class SentenceSelector:
    """A trained sentence scorer and its metadata (training ids, label rule, scores).
    ``sha256``: of the file it was loaded from ('' when made in memory)."""
    model: object
    features: tuple[str, ...] = FEATURES
    meta: dict = field(default_factory=dict)
    sha256: str = ""

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        if len(X) == 0:
            return np.zeros(0)
        with openmp_limit():  # $DYNAKRAG_N_THREADS: OpenMP's spinning threads, see threads.py
            return self.model.predict_proba(X)[:, 1]

    def save(self, path: str | Path) -> Path:
        buf = io.BytesIO()
        joblib.dump({"format": SELECTOR_FORMAT, "model": self.model,
                     "features": list(self.features), "meta": self.meta}, buf, compress=3)
        path = Path(path)
        atomic_write_bytes(path, buf.getvalue())
        return path

    @classmethod
    def load(cls, path: str | Path, *, trusted: bool | None = None) -> "SentenceSelector":
        """Load a selector saved by :meth:`save` (see :func:`load_selector`)."""
        path = Path(path)
        data = path.read_bytes()  # hash and unpickle the same bytes (no swap in between)
        digest = verified_sha256(path, data, trusted, what="sentence selector file",
                                 fix=MANIFEST_FIX.format(path=str(path)))
        obj = joblib.load(io.BytesIO(data))
        if not isinstance(obj, dict) or obj.get("format") != SELECTOR_FORMAT:
            raise ValueError(f"{path}: not a sentence selector ({SELECTOR_FORMAT})")
        if tuple(obj["features"]) != FEATURES:
            raise ValueError(f"{path}: trained on other features; retrain it")
        return cls(obj["model"], tuple(obj["features"]), obj.get("meta", {}), digest)


def load_selector(path: str | Path, *, trusted: bool | None = None) -> SentenceSelector:
    """Load a selector saved by :meth:`SentenceSelector.save`; its ``sha256`` is the file's.
    **A joblib file is code**: ``trusted`` as :func:`~dynakrag_lite.storage.verified_sha256`."""
    return SentenceSelector.load(path, trusted=trusted)


class ExtractiveCompressor:
    """Selects evidence sentences with a :class:`SentenceSelector`, no LLM calls; ``encode``: the
    retriever's encoder, for a selector trained with embedding features."""

    def __init__(self, selector: SentenceSelector,
                 encode: Callable[[Sequence[str]], np.ndarray] | None = None,
                 per_doc: int = 3):
        self.selector = selector
        self.encode = encode if selector.meta.get("use_embeddings", True) else None
        if selector.meta.get("use_embeddings", True) and encode is None:
            warnings.warn("the sentence selector was trained with embedding features but no "
                          "encoder was given: emb_cos features are 0", RuntimeWarning,
                          stacklevel=2)
        self.per_doc = per_doc

    def score(self, question: str, docs: Sequence) -> tuple[SentenceRows, np.ndarray]:
        rows = sentence_features(question, docs, self.encode)
        return rows, self.selector.predict_proba(rows.X)

    def select(self, question: str, docs: Sequence, max_snippets: int = 8) -> tuple[Snippet, ...]:
        """The best sentences (at most ``per_doc`` of one document), in document order."""
        if not docs or max_snippets <= 0:
            return ()
        rows, p = self.score(question, docs)
        picked: list[int] = []
        per: dict[int, int] = {}
        for r in np.argsort(-p, kind="stable"):
            i = rows.doc_index[r]
            if per.get(i, 0) >= self.per_doc:
                continue
            per[i] = per.get(i, 0) + 1
            picked.append(int(r))
            if len(picked) >= max_snippets:
                break
        picked.sort(key=lambda r: (rows.doc_index[r], rows.sent_index[r]))
        return tuple(Snippet(rows.sentences[r], rows.doc_index[r], docs[rows.doc_index[r]].id,
                             docs[rows.doc_index[r]].title, (rows.sent_index[r],),
                             (rows.sentences[r],), round(float(p[r]), 4)) for r in picked)

    def compress(self, question: str, docs: Sequence, max_snippets: int = 8,
                 min_valid: int = 1, min_docs: int = 2) -> Compression:
        kept = self.select(question, docs, max_snippets)
        why = decide_fallback(kept, len(docs), min_valid, min_docs)
        return Compression(() if why else render_evidence(kept), "", None, "extractive",
                           tuple(kept), (), bool(why), why, len(kept))
