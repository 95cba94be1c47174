"""DynaKRAG-lab: the research log around :mod:`dynakrag_lite`, kept out of the method.

:mod:`dynakrag_lite` is the method (the controller, its training and the ``evaluate`` /
``train`` command line); the lab is what reads what it produced and what was measured to
decide how it should be built:

* :mod:`dynakrag_lab.report`: reading ``results/`` (the shared names of datasets, readers and
  runs in :mod:`~dynakrag_lab.report.names`, tables, paired comparisons, the paper's numbers,
  result plots, the headline and the claims, answer labels, the trace explorer) and the
  concept figures the book draws;
* :mod:`dynakrag_lab.studies`: one package per offline study of the controller, each with its
  code, its report section, its command line (``python -m dynakrag_lab.studies.<study>``) and a
  README.md giving the question, the answer and where its results are;
* :mod:`dynakrag_lab.readme`: the writer of ``results/README.md``
  (``python -m dynakrag_lab.readme``).

The layers (import-linter contracts in pyproject.toml): the readme writer builds on the
studies, the studies on the report, the report on the core; the core never imports the lab,
so the method can be read, installed and tested without it.
"""
