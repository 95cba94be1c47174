"""Every method, registered once, run one way: ``run_method(settings, question, env, policy,
demos)`` runs one question with ``settings.method`` (chapter 11; ``evaluate``, the command line,
the book and the tests all call it).

The three controllers (:func:`~dynakrag_lite.controller.run_controller` with the learned
policy, the uniform-valid chooser or the oracle) and the baselines of :mod:`dynakrag_lite.baselines`
share one environment and differ only in how they choose; each runner reads the settings it
needs (``fixed_k``, ``seed``, ``stop_after``).
"""
from __future__ import annotations

from typing import Callable

from .baselines import run_fixed_k, run_ircot, run_self_ask
from .config import Environment, RunSettings
from .controller import Chooser, MethodResult, UniformChooser, run_controller
from .data.corpus import gold_titles
from .data.schema import Question
from .demonstrations import Demonstrations
from .oracle import OracleChooser

Runner = Callable[[RunSettings, Question, Environment, "Chooser | None",
                   "Demonstrations | None"], MethodResult]


def _dynakrag(s: RunSettings, q: Question, env: Environment, policy, demos) -> MethodResult:
    if policy is None:
        raise ValueError("method 'dynakrag' needs a policy")
    return run_controller(q.question, env, policy, q.id, method="dynakrag")


# The registry, in the order the command line lists the names (``evaluate --method``).
METHODS: dict[str, Runner] = {
    "dynakrag": _dynakrag,
    "fixed_k": lambda s, q, env, policy, demos: run_fixed_k(q.question, env, k=s.fixed_k,
                                                            qid=q.id),
    "ircot": lambda s, q, env, policy, demos: run_ircot(q.question, env, qid=q.id,
                                                        demos=demos),
    "self_ask": lambda s, q, env, policy, demos: run_self_ask(q.question, env, qid=q.id),
    "uniform": lambda s, q, env, policy, demos: run_controller(
        q.question, env, UniformChooser(s.seed, s.stop_after), q.id, method="uniform"),
    "oracle": lambda s, q, env, policy, demos: run_controller(
        q.question, env, OracleChooser(env, gold_titles(q)), q.id, method="oracle"),
}


def run_method(settings: RunSettings, question: Question, env: Environment,
               policy: Chooser | None = None, demos: Demonstrations | None = None
               ) -> MethodResult:
    """One question with ``settings.method`` on ``env``. ``policy``: the learned policy
    (``dynakrag`` needs one; the others ignore it). ``demos``: IRCoT's few-shot
    demonstrations (:func:`~dynakrag_lite.demonstrations.build_ircot_demos` of the training
    split); None runs IRCoT zero-shot, not the faithful baseline."""
    runner = METHODS.get(settings.method or "")
    if runner is None:
        raise ValueError(f"unknown method {settings.method!r}; choose from "
                         f"{', '.join(METHODS)}")
    return runner(settings, question, env, policy, demos)
