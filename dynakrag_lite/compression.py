"""Terminal compression that keeps the evidence.

The paper's compressor asks the generator for "mutually supporting snippets" and answers from
them. With a small generator that step lost evidence (30 HotpotQA questions,
qwen2.5-coder-0.5b): 22 of 90 snippets matched no document, 4 were the template word
"snippet", the gold answer string survived into the snippets for 18 of the 24 questions whose
documents held it, 61 of 68 matched snippets came from documents 1-3, and on 10 questions with
exactly Fixed-K's documents compression cost 8 F1 points. This module makes both halves of
that step checkable:

**LLM compressor, validated** (:func:`validate_snippets`). Each parsed snippet is matched to
the documents as a fuzzy quote: its word tokens are aligned to each document's tokens
(``difflib.SequenceMatcher`` on token lists, matching runs of at least
:data:`MIN_RUN` tokens count) and the *quote ratio* is the share of the snippet's tokens inside
such runs. The best document wins (ties: the document number the model wrote, then the
earlier document). A snippet is valid when its ratio is at least :data:`QUOTE_THRESHOLD`
(0.6: a copy with a few words changed or cut passes, a paraphrase or an invention does not;
see the docstring of the constant) and it has at least :data:`MIN_SNIPPET_TOKENS` tokens.
Dropped, with a reason: template text ("snippet", "<...>", "[doc number]"), too short, no
match, duplicates (same source sentences as an earlier snippet). What the answerer then reads
is not the model's wording but the *source sentences* the match covers, prefixed with the
document title, one line per document in document order: a snippet cut before the answer
string gets its whole sentence back, and the title names the entity.

**Fallback to the documents.** When fewer than ``min_valid_snippets`` snippets survive, or the
survivors come from fewer than ``min_snippet_docs`` documents while the state holds at least
that many (a multi-hop answer needs its hops: one document's snippets usually are one hop), the
compression is marked ``fallback_to_docs`` and its ``snippets`` are empty, so the controller's
answer() reads the documents themselves.

**Extractive compressor** (:class:`ExtractiveCompressor`): a sentence selector learned on the
training split, zero LLM calls. Labels (the data labels paragraphs, not sentences): a
sentence of a gold paragraph is positive when it contains a gold answer string or shares at
least :data:`LABEL_Q_OVERLAP` of the question's content words; every other sentence (of gold
paragraphs or distractors) is negative. Features use no gold: lexical and entity overlap with
the question, mentions of the document's own title and of other documents' titles (bridge
cue), position in the paragraph, the paragraph's retrieval rank and score, sentence length,
number/year cues against the question's wh-word, and the embedding cosine to the question
(the retriever's own embedder). Model: logistic regression or gradient boosting
(scikit-learn), saved with joblib and its metadata.

**Measured** (``data_scripts/compression_diagnostics.py --n-eval 150``, HotpotQA *training*
split, each question's top-6 retrieved documents; results/diagnostics/compression.json).
Extractive selector (gradient boosting, chosen over logistic regression on a dev part: average
precision .685 vs .590), 174 held-out training questions: the answer string survives into the
evidence for 102 of the 114 questions whose documents hold it (89%), 264 of the 268 gold
paragraphs in the states contribute a sentence, 36% of the sentences are kept. LLM compressor
(qwen2.5-coder-0.5b, 15 questions): 31 of 37 parsed snippets valid (4 duplicates, 2 quoting no
document), but the model copies whole leading documents, so the answer string reaches the
snippets for only 5 of the 8 questions whose documents hold it; the fallback sends 7 of 15
questions to the documents, after which the reader sees the answer string for 7 of 8. Answer
F1 on those 15: documents .150, raw LLM snippets .283, validated LLM .217, extractive .277; on
25 more: documents .332, extractive .339 (small samples: indicative, not decisive; the paper's
LLM compressor stays the library default).
"""
from __future__ import annotations

import difflib
import math
import re
import time
import unicodedata
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "QUOTE_THRESHOLD", "DROP_REASONS", "MIN_RUN", "MIN_SNIPPET_TOKENS", "LABEL_Q_OVERLAP",
    "Snippet",
    "Compression", "word_tokens", "content_words", "split_sentences", "longest_common_run",
    "quote_match", "validate_snippets", "render_evidence", "sentence_features",
    "label_sentences", "SentenceSelector", "train_sentence_selector",
    "ExtractiveCompressor", "answer_in", "snippet_stats",
]

# -- text utilities ---------------------------------------------------------------------
STOPWORDS = frozenset("""a an the and or but if of at by for with about against between into
through during before after above below to from up down in out on off over under again further
then once here there when where why how all any both each few more most other some such no nor
not only own same so than too very s t can will just don should now is are was were be been
being have has had having do does did doing i me my we our you your he him his she her it its
they them their what which who whom whose this that these those am would could might must shall
may as also while until because what's which's one first same than many much""".split())

_WORD = re.compile(r"\w+", re.UNICODE)


def _fold(text: str) -> str:
    t = unicodedata.normalize("NFKD", text)
    return "".join(c for c in t if not unicodedata.combining(c)).lower()


def word_tokens(text: str) -> list[str]:
    """Lowercased word tokens, accents folded ("Jähn" -> "jahn")."""
    return _WORD.findall(_fold(text))


def content_words(text: str) -> set[str]:
    return {w for w in word_tokens(text) if w not in STOPWORDS}


_SENT_SPLIT = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z0-9\"'(\[])")


def split_sentences(text: str) -> list[str]:
    """Sentences of a paragraph. HotpotQA paragraphs are the dataset's sentences joined with a
    double space, which is used when present; otherwise a punctuation rule."""
    text = text.strip()
    if not text:
        return []
    if re.search(r"\S  \S", text):
        parts = [p.strip() for p in re.split(r"(?<=\S)\s{2,}(?=\S)", text)]
    else:
        parts = [p.strip() for p in _SENT_SPLIT.split(text)]
    return [p for p in parts if p]


def longest_common_run(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common contiguous token run of two token lists."""
    if not a or not b:
        return 0
    m = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return m.find_longest_match(0, len(a), 0, len(b)).size


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
    """What compress_answer_evidence produced.

    ``snippets`` is what the answer reads: one ``"Title: sentence sentence"`` line per source
    document in document order, or ``()`` when ``fallback_to_docs`` (then the answer reads the
    documents). ``valid_snippets`` are the kept snippets with their source, ``dropped`` the
    rejected ones as ``(text, reason)``."""
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
        """The counts of :attr:`note` as plain JSON values, for the trace step (so analyses
        need not parse the note): ``method``, ``n_parsed``, ``n_valid``, ``dropped`` (count
        per reason of :data:`DROP_REASONS`, zeros included), ``fallback_to_docs`` and
        ``fallback_reason``."""
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
"""Minimum share of a snippet's tokens that must sit in runs of >= MIN_RUN tokens copied from
one document. On the Mark Bowden paragraph (HotpotQA): an exact copy scores 1.0, one word
changed 0.92, a fact restated in the paragraph's words ("Bowden was born July 17, 1951 and is
an American writer") 0.73, a paraphrase in other words 0.38, an invention 0.29. So 0.6 keeps
copies and close restatements and drops what the paragraph does not say in its own words. On
37 real qwen2.5-coder-0.5b snippets (15 HotpotQA training questions,
results/diagnostics/compression.json) 31 scored >= 0.9, 4 in [0.6, 0.7), and the other 2 (in
[0.3, 0.4)) quoted no document: that model copies whole documents rather than paraphrasing."""
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
    sents = split_sentences(doc.text)
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
    # Sentences a run of >= 3 tokens touches (a quote may cross a sentence boundary:
    # "Born in St. | Louis, Missouri"), plus the one holding most of the match; a stray
    # 2-token run elsewhere adds nothing.
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
    """Fact-table lines ("entity | relation | value") are not quotes: their ratio is the share
    of their content words found in the document (title included); the sentences are those
    holding the most of them."""
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
    """Match each parsed snippet to the documents (as a quote, or as a fact-table line).
    Returns (kept snippets in document order, dropped ``(snippet, reason)``, the best ratio of
    every snippet that reached matching)."""
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


def decide_fallback(kept: Sequence[Snippet], n_docs: int, min_valid: int, min_docs: int
                    ) -> str:
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
LABEL_Q_OVERLAP = 0.5
"""A gold paragraph's sentence without the answer string is positive when it holds at least
this share of the question's content words."""

_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b")
_NUMBER = re.compile(r"\b\d[\d,.]*\b")
_CAPS = re.compile(r"\b[A-Z][\w'\-]+")
_NORM_PUNCT = re.compile(r"[^\w\s]")

FEATURES = (
    "q_overlap", "q_overlap_count", "q_caps_overlap", "new_caps", "title_in_sentence",
    "title_q_overlap", "other_title_mention", "position", "is_first", "rel_position",
    "n_sentences", "doc_rank", "doc_score", "doc_score_gap", "log_length", "has_year",
    "has_number", "when_x_year", "howmany_x_number", "yes_no_question", "emb_cos",
    "emb_cos_doc_rank", "emb_cos_gap",
)


def _norm(s: str) -> str:
    return " ".join(_NORM_PUNCT.sub(" ", _fold(s)).split())


def answer_in(answer: str, text: str) -> bool:
    """The normalized answer string occurs in the normalized text on word boundaries
    (yes/no answers never count)."""
    a = _norm(answer)
    if not a or a in ("yes", "no"):
        return False
    return f" {a} " in f" {_norm(text)} "


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
    """Feature rows of every sentence of ``docs`` (their order is the rank order used for
    ``doc_rank``; ``doc.score`` is the retrieval score). No gold label is read."""
    from .prompts import is_yes_no_question
    q_cw = content_words(question)
    q_caps = {w.lower() for w in _CAPS.findall(question)} - STOPWORDS
    ql = question.lower()
    q_when = float(bool(re.search(r"\b(when|what year|which year|born|founded|date)\b", ql)))
    q_howmany = float(bool(re.search(r"\bhow (many|much|long|old|tall)\b", ql)))
    yn = float(is_yes_no_question(question))
    titles = [(_norm(d.title), content_words(d.title)) for d in docs]
    scores = [float(getattr(d, "score", 0.0)) for d in docs]
    top = max(scores) if scores else 0.0
    di, si, sents, rows = [], [], [], []
    for i, d in enumerate(docs):
        ss = split_sentences(d.text)
        for j, s in enumerate(ss):
            cw = content_words(s)
            caps = {w.lower() for w in _CAPS.findall(s)} - STOPWORDS
            ns = _norm(s)
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


def label_sentences(question: str, answers: Sequence[str], docs: Sequence,
                    gold_titles: Sequence[str], rows: SentenceRows) -> np.ndarray:
    """Training labels of ``rows`` (see the module docstring). Gold is read here only."""
    from .data.corpus import normalize_title
    gold = {normalize_title(t) for t in gold_titles}
    q_cw = content_words(question)
    y = np.zeros(len(rows.sentences), dtype=int)
    for r, (i, s) in enumerate(zip(rows.doc_index, rows.sentences)):
        if normalize_title(docs[i].title) not in gold:
            continue
        if any(answer_in(a, s) for a in answers):
            y[r] = 1
        elif q_cw and len(content_words(s) & q_cw) / len(q_cw) >= LABEL_Q_OVERLAP:
            y[r] = 1
    return y


SELECTOR_FORMAT = "dynakrag-sentence-selector/1"


@dataclass
class SentenceSelector:
    """A trained sentence scorer and its metadata (training ids, label rule, scores)."""
    model: object
    features: tuple[str, ...] = FEATURES
    meta: dict = field(default_factory=dict)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        if len(X) == 0:
            return np.zeros(0)
        from .threads import openmp_limit
        with openmp_limit():  # $DYNAKRAG_N_THREADS: OpenMP's spinning threads, see threads.py
            return self.model.predict_proba(X)[:, 1]

    def save(self, path: str | Path) -> Path:
        import io
        import joblib
        from .storage import atomic_write_bytes
        buf = io.BytesIO()
        joblib.dump({"format": SELECTOR_FORMAT, "model": self.model,
                     "features": list(self.features), "meta": self.meta}, buf, compress=3)
        path = Path(path)
        atomic_write_bytes(path, buf.getvalue())
        return path

    @classmethod
    def load(cls, path: str | Path, *, trusted: bool | None = None,
             data: bytes | None = None) -> "SentenceSelector":
        """Load a selector saved by :meth:`save`. **A joblib file is code**: before unpickling,
        its bytes are checked against ``MANIFEST.sha256`` in its folder (see
        :func:`load_selector` for ``trusted``). ``data``: the file's bytes, already read."""
        import io
        import joblib
        path = Path(path)
        if data is None:
            data = path.read_bytes()  # hash and unpickle the same bytes (no swap in between)
        _check_selector(path, data, trusted)
        obj = joblib.load(io.BytesIO(data))
        if not isinstance(obj, dict) or obj.get("format") != SELECTOR_FORMAT:
            raise ValueError(f"{path}: not a sentence selector ({SELECTOR_FORMAT})")
        if tuple(obj["features"]) != FEATURES:
            raise ValueError(f"{path}: trained on other features; retrain it")
        return cls(obj["model"], tuple(obj["features"]), obj.get("meta", {}))


def _make_model(kind: str, seed: int):
    if kind == "logreg":
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        return make_pipeline(StandardScaler(), LogisticRegression(
            C=1.0, max_iter=2000, class_weight="balanced", random_state=seed))
    if kind == "gbt":
        from sklearn.ensemble import HistGradientBoostingClassifier
        return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05,
                                              max_leaf_nodes=15, min_samples_leaf=20,
                                              class_weight="balanced", random_state=seed)
    raise ValueError(f"unknown selector model {kind!r} (logreg | gbt)")


def training_rows(questions: Sequence, retriever=None, k_docs: int = 9,
                  use_embeddings: bool = True,
                  docs_for: Callable[[object], Sequence] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """(X, y, group) of every sentence of each question's documents, plus the per-question
    (question, docs, rows, labels). Documents: ``docs_for(question)`` when given, else the
    question's top-``k_docs`` documents from ``retriever`` (what a final state holds)."""
    from .state import RetrievedDoc
    if docs_for is not None:
        all_docs = [list(docs_for(q)) for q in questions]
    else:
        hits = retriever.search_many([q.question for q in questions], k_docs)
        all_docs = [[RetrievedDoc(h.doc.id, h.doc.title, h.doc.text, h.score, "retrieve_more",
                                  0) for h in hs] for hs in hits]
    encode = getattr(retriever, "encode", None) if use_embeddings else None
    if use_embeddings and encode is None:
        raise ValueError("use_embeddings needs a retriever with an encode method")
    Xs, ys, gs, per = [], [], [], []
    for g, (q, docs) in enumerate(zip(questions, all_docs)):
        rows = sentence_features(q.question, docs, encode)
        y = label_sentences(q.question, q.answers, docs, q.supporting_titles, rows)
        Xs.append(rows.X)
        ys.append(y)
        gs.append(np.full(len(y), g))
        per.append((q, docs, rows, y))
    return (np.vstack(Xs) if Xs else np.zeros((0, len(FEATURES))),
            np.concatenate(ys) if ys else np.zeros(0, dtype=int),
            np.concatenate(gs) if gs else np.zeros(0, dtype=int), per)


def train_sentence_selector(questions: Sequence, retriever=None, k_docs: int = 9,
                            model: str = "logreg", seed: int = 13,
                            use_embeddings: bool = True, meta: dict | None = None,
                            docs_for: Callable[[object], Sequence] | None = None
                            ) -> SentenceSelector:
    """Fit the sentence selector on ``questions`` (a training split: gold labels are read).

    Each question's documents are its top-``k_docs`` hits from ``retriever`` (or
    ``docs_for(question)``); ``use_embeddings`` adds the cosine features, computed with
    ``retriever.encode`` (the embedder the selector must later be used with)."""
    t0 = time.perf_counter()
    X, y, _, _ = training_rows(questions, retriever, k_docs, use_embeddings, docs_for)
    if len(set(y.tolist())) < 2:
        raise ValueError("training rows hold one class only: need gold sentences retrieved")
    clf = _make_model(model, seed)
    clf.fit(X, y)
    return SentenceSelector(clf, FEATURES, {
        "model": model, "seed": seed, "k_docs": k_docs, "use_embeddings": use_embeddings,
        "embedder": getattr(retriever, "embedder_name", None) if use_embeddings else None,
        "label_rule": f"gold paragraph sentence with an answer string or >= {LABEL_Q_OVERLAP} "
                      "of the question's content words",
        "documents": "docs_for" if docs_for is not None else f"top-{k_docs} retrieved",
        "n_questions": len(questions), "n_sentences": int(len(y)),
        "n_positive": int(y.sum()), "train_ids": [q.id for q in questions],
        "seconds": round(time.perf_counter() - t0, 1), **(meta or {})})


class ExtractiveCompressor:
    """Selects evidence sentences with a :class:`SentenceSelector`; zero LLM calls."""

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

    def select(self, question: str, docs: Sequence, max_snippets: int = 8
               ) -> tuple[Snippet, ...]:
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


# The project's committed selectors: loading from here is verified against the manifest.
SELECTORS_DIR = Path(__file__).resolve().parents[1] / "results" / "selectors"
_SELECTORS: dict[tuple[str, str], SentenceSelector] = {}


def register_selector(path: str | Path) -> Path | None:
    """After saving a selector: record it (only it) in its folder's ``MANIFEST.sha256`` when
    that folder is the project's ``results/selectors`` or already keeps a manifest. Returns the
    manifest path, or None for a folder without one (your own files, trusted by default)."""
    from .storage import register_in_manifest
    return register_in_manifest(path, SELECTORS_DIR)


def _check_selector(path: Path, data: bytes, trusted: bool | None) -> str:
    """sha256 of ``data``; ManifestError unless trusted or listed in the folder's manifest."""
    import hashlib
    from .storage import MANIFEST_NAME, in_folder, verify_manifest
    if trusted is None:
        trusted = not (in_folder(path, SELECTORS_DIR) or (path.parent / MANIFEST_NAME).exists())
    if trusted:
        return hashlib.sha256(data).hexdigest()
    fix = ("If you trained it yourself, register it: python -c \"from dynakrag_lite."
           f"compression import register_selector; register_selector({str(path)!r})\"; "
           "otherwise do not load it")
    return verify_manifest(path, data, what="sentence selector file", fix=fix)


def load_selector(path: str | Path, *, trusted: bool | None = None) -> SentenceSelector:
    """Load a saved selector (unpickled once per process for each content of the file).

    **A joblib file is code**: unpickling it runs whatever its author put in it. ``trusted``:

    * ``None`` (default): a file in the project's ``results/selectors/``, or in any folder that
      keeps a ``MANIFEST.sha256``, must be listed there with its sha256, else
      :class:`~dynakrag_lite.storage.ManifestError` (naming the file and how to register it)
      before anything is unpickled; a file in a folder without a manifest is your own and is
      trusted.
    * ``False``: always verify against the manifest of the file's folder.
    * ``True``: skip the manifest (you vouch for the file).

    Selectors saved into the project's folder are recorded by :func:`register_selector`.
    """
    path = Path(path)
    data = path.read_bytes()
    key = (str(path.resolve()), _check_selector(path, data, trusted))  # every call, cached or not
    if key not in _SELECTORS:
        _SELECTORS[key] = SentenceSelector.load(path, trusted=True, data=data)
    return _SELECTORS[key]


# -- measurement --------------------------------------------------------------------------
def snippet_stats(docs: Sequence, comp: Compression, answers: Sequence[str]) -> dict:
    """Per-question numbers of a compression against gold answers (measurement only):
    validity, answer-string survival (answer in the docs -> in the evidence lines) and which
    documents the evidence came from."""
    doc_text = " ".join(f"{d.title} {d.text}" for d in docs)
    ans_in_docs = any(answer_in(a, doc_text) for a in answers)
    evid = " ".join(render_evidence(comp.valid_snippets))
    in_evid = ans_in_docs and any(answer_in(a, evid) for a in answers)
    return {"parsed": comp.n_parsed, "valid": len(comp.valid_snippets),
            "dropped": [r.split(" (")[0] for _, r in comp.dropped],
            "fallback_to_docs": comp.fallback_to_docs,
            "answer_in_docs": ans_in_docs,
            "answer_in_snippets": in_evid,
            # what the answer call reads: the evidence lines, or the documents on fallback
            "answer_reaches_reader": in_evid or (ans_in_docs and comp.fallback_to_docs),
            "source_docs": [s.doc_index for s in comp.valid_snippets]}
