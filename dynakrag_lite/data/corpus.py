"""The retrieval corpus: a pooled, deduplicated set of documents with stable ids.

The paper retrieves from one corpus shared by every method. Here the corpus of a benchmark
file is the pool of all candidate paragraphs of all its questions (gold and distractors), so
each question competes with every other question's paragraphs, not only its own ten. A user's
own corpus is a JSONL file of ``{"title", "text"}`` (``"id"`` optional) objects."""
from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from .schema import DataError, Question, iter_jsonl


def normalize_title(title: str) -> str:
    """Key for title-level dedup: NFKC, lowercase, punctuation and extra spaces removed."""
    t = unicodedata.normalize("NFKC", title).lower()
    t = re.sub(r"[^\w\s]", " ", t)
    return " ".join(t.split())


def doc_id_for(title: str, text: str) -> str:
    """Stable id: the same title and text give the same id on every machine and run."""
    key = normalize_title(title) + "\n" + " ".join(text.split())
    return "d" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str

    def render(self, max_chars: int | None = None) -> str:
        body = self.text if max_chars is None else self.text[:max_chars]
        return f"{self.title}: {body}"


class Corpus:
    """An ordered collection of documents; order and ids are deterministic."""

    def __init__(self, documents: Sequence[Document], name: str = "corpus"):
        self.name = name
        self.documents: list[Document] = list(documents)
        self._by_id = {d.id: i for i, d in enumerate(self.documents)}
        if len(self._by_id) != len(self.documents):
            raise ValueError("duplicate document ids in corpus")

    def __len__(self) -> int:
        return len(self.documents)

    def __getitem__(self, doc_id: str) -> Document:
        return self.documents[self._by_id[doc_id]]

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._by_id

    def content_hash(self) -> str:
        """16 hex digits of the documents' ids, titles and texts, in order: the key of the
        corpus's index on disk, so an edited text never reuses a stale index."""
        h = hashlib.sha256()
        for d in self.documents:
            for part in (d.id, d.title, d.text):
                h.update(part.encode("utf-8"))
                h.update(b"\0")
        return h.hexdigest()[:16]

    @classmethod
    def from_questions(cls, questions: Iterable[Question], name: str = "pooled") -> "Corpus":
        """Pool every candidate paragraph of every question, dedup by title + text."""
        docs: dict[str, Document] = {}
        for q in questions:
            for p in q.paragraphs:
                did = doc_id_for(p.title, p.text)
                if did not in docs:
                    docs[did] = Document(did, p.title, p.text)
        return cls(list(docs.values()), name=name)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> "Corpus":
        docs: dict[str, Document] = {}
        for lineno, obj in iter_jsonl(path):
            if not isinstance(obj, dict):
                raise DataError(path, lineno, None, "expected a JSON object")
            for key in ("title", "text"):
                if not isinstance(obj.get(key), str):
                    raise DataError(path, lineno, key, "missing or not a string")
            if not obj["text"].strip():
                raise DataError(path, lineno, "text", "empty text")
            raw_id = obj.get("id")
            if raw_id is not None and (isinstance(raw_id, bool) or
                                       not isinstance(raw_id, (str, int)) or
                                       not str(raw_id).strip()):
                raise DataError(path, lineno, "id", "expected a non-empty string or an "
                                f"integer (or no id), got {json.dumps(raw_id)}")
            did = str(raw_id) if raw_id is not None else doc_id_for(obj["title"], obj["text"])
            if did in docs:
                raise DataError(path, lineno, "id", f"duplicate id {did!r}")
            docs[did] = Document(did, obj["title"], obj["text"])
        if not docs:
            raise DataError(path, None, None, "no documents")
        return cls(list(docs.values()), name=Path(path).stem)


def gold_titles(question: Question) -> list[str]:
    return [p.title for p in question.paragraphs if p.is_supporting]
