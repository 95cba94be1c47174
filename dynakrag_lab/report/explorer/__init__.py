"""The trajectory explorer: replay a predictions.jsonl record step by step.

A record (one line of ``results/experiments/<dataset>/<generator>/<run>/predictions.jsonl``,
built by :func:`dynakrag_lite.experiments.run.score`) holds the whole trajectory of one method
on one question: at every step the valid set A(s), the chooser's numbers for each valid action,
the chosen action, the documents it brought, the gap and the sufficiency verdict; then the
final answer. The explorer (chapter 15) turns it into something to read, in three layers:

* :mod:`dynakrag_lab.report.explorer.replay` -- pure replay (no widgets, no HTML, no
  kernel): :func:`steps_from_record` -> :class:`StepView` per trace step with the support
  recall (SR) *after* it, :func:`sr_curve`, :func:`answer_from_record` -> :class:`AnswerView`, and the
  readers :func:`load_records`, :func:`load_runs`, :func:`find_result_sets`.
* :mod:`dynakrag_lab.report.explorer.render` -- static views: :func:`render_html` /
  :func:`render_comparison_html` (self-contained HTML, inline styles, no JavaScript: the
  fallback where no kernel runs) and :func:`plot_sr_curve` (matplotlib).
* :mod:`dynakrag_lab.report.explorer.widget` -- :class:`Explorer`, the ipywidgets front
  end (question and method dropdowns, a step slider with prev/next buttons). Without a live
  kernel it still shows the static HTML of the full trajectory.

This module gathers the three layers' public names: the book imports them from
``dynakrag_lab.report.explorer``.
"""
from __future__ import annotations

from .render import plot_sr_curve, render_comparison_html, render_html
from .replay import (AnswerView, DocView, OptionView, StepView, answer_from_record,
                     find_result_sets, load_records, load_runs, n_gold_of, sr_curve,
                     steps_from_record)
from .widget import Explorer

__all__ = [
    # replay
    "DocView", "OptionView", "StepView", "AnswerView", "n_gold_of", "steps_from_record",
    "sr_curve", "answer_from_record", "load_records", "load_runs", "find_result_sets",
    # static rendering
    "render_html", "render_comparison_html", "plot_sr_curve",
    # widget
    "Explorer",
]
