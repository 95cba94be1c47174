"""Experiment tooling built on the core: evaluation runs into resumable folders (with the
diagnostics every run records), run fingerprints, policy artifacts and the command line.

Nothing in the core (:mod:`dynakrag_lite`) or in :mod:`dynakrag_lite.training` imports this
package. Reading results (tables, comparisons, plots, the explorer) is the lab's:
:mod:`dynakrag_lab.report`.
"""
