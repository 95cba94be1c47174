"""Experiment tooling built on the core: evaluation runs into resumable folders (with the
diagnostics every run records), run fingerprints, policy artifacts and the command line.

Reading results is the lab's (:mod:`dynakrag_lab.report`)."""
