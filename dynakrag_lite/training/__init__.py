"""Training tooling built on the core: sufficiency calibration, continuation tuning, the
sentence selector's training, trajectory files and the training recipe.
Imports the core, never :mod:`dynakrag_lite.experiments`."""
