"""Experiment tooling built on the core: evaluation runs into resumable folders, result tables,
paired comparisons, diagnostics, result plots, the command line and the trace explorer.

Nothing in the core (:mod:`dynakrag_lite`) or in :mod:`dynakrag_lite.training` imports this
package; it is the only code that knows the checkout's ``results/`` folder.
"""
