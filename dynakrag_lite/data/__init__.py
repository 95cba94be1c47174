"""Questions, paragraphs and the corpus they pool into.

``schema`` (:class:`Question`, validation), ``sources`` (names, loading, the split),
``raw_formats`` (the official benchmark files), ``library`` (the embedded synthetic set) and
``corpus`` (the document collection the retriever indexes)."""
from .corpus import Corpus, Document, gold_titles, normalize_title
from .schema import DataError, Paragraph, Question, iter_jsonl, question_from_dict
from .sources import (DATA_ENV, DATASET_FILES, data_dir, load_dataset, load_questions,
                      resolve_data, split_questions, write_questions)

__all__ = ["Corpus", "Document", "gold_titles", "normalize_title", "DataError", "Paragraph",
           "Question", "iter_jsonl", "question_from_dict", "DATA_ENV", "DATASET_FILES",
           "data_dir", "load_dataset", "load_questions", "resolve_data", "split_questions",
           "write_questions"]
