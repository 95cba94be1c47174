"""DynaKRAG-lab: the research log around :mod:`dynakrag_lite`, kept out of the method.

:mod:`dynakrag_lite` is the method (the controller, its training and the ``evaluate`` /
``train`` command line); the lab is what reads what it produced and what was measured to
decide how it should be built:

* :mod:`dynakrag_lab.report`: reading ``results/`` (tables, paired comparisons, the paper's
  numbers, result plots, the headline and the claims, the trace explorer) and the
  concept figures the book draws;
* :mod:`dynakrag_lab.studies`: offline studies of the controller (the control diagnosis, the
  horizon and stop-target studies, answer labels, the answer stage, run behaviour);
* :mod:`dynakrag_lab.studies.answer_labels.files`: answer labels merged into saved trajectories, and
  training a policy with them;
* ``dynakrag_lab/scripts/``: their command lines, run from the checkout's root as
  ``python dynakrag_lab/scripts/<name>.py``.

The lab imports the core; the core never imports the lab (an import-linter contract in
pyproject.toml), so the method can be read, installed and tested without it.
"""
