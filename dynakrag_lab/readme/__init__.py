"""The writer of ``results/README.md`` (``python -m dynakrag_lab.readme``): the run tables
(:mod:`.runs`), the cost plan (:mod:`.plan`), the speed figures (:mod:`.speed`), and each
study's own section, taken from its package under :mod:`dynakrag_lab.studies`."""
