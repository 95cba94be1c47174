"""Training the extractive compressor's sentence selector (chapter 10), and measuring a
compression against gold answers.

The data labels paragraphs, not sentences. Labels (:func:`label_sentences`): a sentence of a
gold paragraph is positive when it contains a gold answer string (:func:`answer_in`) or shares
at least :data:`LABEL_Q_OVERLAP` of the question's content words; every other sentence (of gold
paragraphs or distractors) is negative. Each question's documents are its top-k retrieved
documents (what a final state holds) or given ones; the features are
:func:`dynakrag_lite.compression.sentence_features`, which read no gold. Model: logistic
regression or gradient boosting (scikit-learn, :func:`make_model`), saved with joblib and its
metadata (:meth:`~dynakrag_lite.compression.SentenceSelector.save`).

``python -m dynakrag_lab.studies.selector`` trains the committed selectors with these
functions and measures them with :func:`snippet_stats` (the numbers are in
:mod:`dynakrag_lite.compression`'s docstring). The core only loads a trained selector
(``build_setup(..., selector=FILE)``); training one is the lab's.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from dynakrag_lite.compression import (FEATURES, Compression, SentenceRows, SentenceSelector,
                                      render_evidence, sentence_features)
from dynakrag_lite.data.corpus import normalize_title
from dynakrag_lite.experiments import artifacts
from dynakrag_lite.retriever import DenseRetriever
from dynakrag_lite.state import RetrievedDoc
from dynakrag_lite.storage import register_in_manifest
from dynakrag_lite.text import content_words, normalize_phrase

__all__ = ["LABEL_Q_OVERLAP", "answer_in", "label_sentences", "make_model", "training_rows",
           "train_sentence_selector", "register_selector", "snippet_stats"]

LABEL_Q_OVERLAP = 0.5
"""A gold paragraph's sentence without the answer string is positive when it holds at least
this share of the question's content words."""


def answer_in(answer: str, text: str) -> bool:
    """The normalized answer string occurs in the normalized text on word boundaries
    (yes/no answers never count)."""
    a = normalize_phrase(answer)
    if not a or a in ("yes", "no"):
        return False
    return f" {a} " in f" {normalize_phrase(text)} "


def label_sentences(question: str, answers: Sequence[str], docs: Sequence,
                    gold_titles: Sequence[str], rows: SentenceRows) -> np.ndarray:
    """Training labels of ``rows`` (see the module docstring). Gold is read here only."""
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


def make_model(kind: str, seed: int):
    """An unfitted selector model: ``logreg`` (scaled logistic regression) or ``gbt``
    (histogram gradient boosting), both with balanced class weights."""
    if kind == "logreg":
        return make_pipeline(StandardScaler(), LogisticRegression(
            C=1.0, max_iter=2000, class_weight="balanced", random_state=seed))
    if kind == "gbt":
        return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05,
                                              max_leaf_nodes=15, min_samples_leaf=20,
                                              class_weight="balanced", random_state=seed)
    raise ValueError(f"unknown selector model {kind!r} (logreg | gbt)")


def training_rows(questions: Sequence, retriever: DenseRetriever | None = None,
                  k_docs: int = 9, use_embeddings: bool = True,
                  docs_for: Callable[[object], Sequence] | None = None
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """(X, y, group) of every sentence of each question's documents, plus the per-question
    (question, docs, rows, labels). Documents: ``docs_for(question)`` when given, else the
    question's top-``k_docs`` documents from ``retriever`` (what a final state holds)."""
    if docs_for is not None:
        all_docs = [list(docs_for(q)) for q in questions]
    else:
        hits = retriever.search_many([q.question for q in questions], k_docs)
        all_docs = [[RetrievedDoc(h.doc.id, h.doc.title, h.doc.text, h.score, "retrieve_more",
                                  0) for h in hs] for hs in hits]
    if use_embeddings and retriever is None:
        raise ValueError("use_embeddings needs a retriever with an encode method")
    encode = retriever.encode if use_embeddings else None
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


def train_sentence_selector(questions: Sequence, retriever: DenseRetriever | None = None,
                            k_docs: int = 9, model: str = "logreg", seed: int = 13,
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
    clf = make_model(model, seed)
    clf.fit(X, y)
    return SentenceSelector(clf, FEATURES, {
        "model": model, "seed": seed, "k_docs": k_docs, "use_embeddings": use_embeddings,
        "embedder": retriever.embedder_name if use_embeddings else None,
        "label_rule": f"gold paragraph sentence with an answer string or >= {LABEL_Q_OVERLAP} "
                      "of the question's content words",
        "documents": "docs_for" if docs_for is not None else f"top-{k_docs} retrieved",
        "n_questions": len(questions), "n_sentences": int(len(y)),
        "n_positive": int(y.sum()), "train_ids": [q.id for q in questions],
        "seconds": round(time.perf_counter() - t0, 1), **(meta or {})})


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


def register_selector(path: str | Path) -> Path | None:
    """After training: record a just-saved sentence selector (only it) in its folder's
    manifest when that folder is the project's ``results/selectors`` or already keeps a
    manifest; returns the manifest path (None for a folder without one, where
    :func:`~dynakrag_lite.compression.load_selector` trusts the user's own files)."""
    return register_in_manifest(path, artifacts.SELECTORS_DIR)  # read now: tests move it
