"""Questions, paragraphs and the corpus they pool into.

* :mod:`~dynakrag_lite.data.schema`: :class:`Question`, :class:`Paragraph`, validation;
* :mod:`~dynakrag_lite.data.sources`: dataset names, the data folder, loading and the split;
* :mod:`~dynakrag_lite.data.raw_formats`: the official HotpotQA / 2Wiki / MuSiQue files;
* :mod:`~dynakrag_lite.data.library`: the embedded synthetic set (no download needed);
* :mod:`~dynakrag_lite.data.corpus`: the document collection the retriever indexes.
"""
from .corpus import Corpus, Document, gold_titles, normalize_title
from .schema import DataError, Paragraph, Question, iter_jsonl, question_from_dict
from .sources import (DATA_ENV, DATASET_FILES, data_dir, load_dataset, load_questions,
                      resolve_data, split_questions, write_questions)

__all__ = ["Corpus", "Document", "gold_titles", "normalize_title", "DataError", "Paragraph",
           "Question", "iter_jsonl", "question_from_dict", "DATA_ENV", "DATASET_FILES",
           "data_dir", "load_dataset", "load_questions", "resolve_data", "split_questions",
           "write_questions"]
