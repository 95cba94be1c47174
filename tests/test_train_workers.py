"""train --workers N: trajectory collection (and the sufficiency calibration's LLM scoring) runs
N training questions (states) at once against an OpenAI-compatible server, and yields exactly
the TrainingData (scores) of a sequential run.

The server is test_workers.py's loopback one (replies a function of the prompt, a short sleep,
a record of the requests in flight at once). The retriever is the real dense one and bridge
extraction uses spaCy when installed, so the parts that must not run concurrently are really
exercised.
"""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from dynakrag_lite.experiments.cli import main
from dynakrag_lite.config import ControlConfig, Environment
from dynakrag_lite.policy import Policy
from dynakrag_lite.training.calibration import calibration_states, signal_scores
from dynakrag_lite.training.files import load_training_data
from dynakrag_lite.trajectories import TrainingData, collect
from dynakrag_lite.training.concurrency import collect_in_parallel

from helpers import ScriptedGenerator
from test_workers import reset, server, server_env  # noqa: F401  (server: the fixture)

N_QUESTIONS = 4
ANSWER_QUESTIONS = 2  # answer calls on the first 2 only: the flag must follow the position


# -- comparing TrainingData field by field ------------------------------------------------------
def same_value(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def assert_same_records(got: list, want: list, what: str) -> None:
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        for f in dataclasses.fields(w):
            assert same_value(getattr(g, f.name), getattr(w, f.name)), \
                f"{what}[{i}].{f.name}: {getattr(g, f.name)!r} != {getattr(w, f.name)!r}"


def assert_same_data(got: TrainingData, want: TrainingData) -> None:
    assert got.questions == want.questions
    assert got.continuation_target == want.continuation_target
    assert_same_records(got.samples, want.samples, "samples")
    assert_same_records(got.prefixes, want.prefixes, "prefixes")


# -- collect -------------------------------------------------------------------------------------
def test_two_workers_collect_what_a_sequential_run_collects(server, library_questions,
                                                            library_retriever, tmp_path):
    qs = library_questions[:N_QUESTIONS]

    def run(workers: int, cache: str) -> TrainingData:
        env = server_env(server, library_retriever, tmp_path / cache)  # a fresh call cache
        runner = None if workers == 1 else collect_in_parallel(workers, env.generator)
        return collect(qs, env, seed=13, progress=False, continuation="f1",
                       answer_questions=ANSWER_QUESTIONS, runner=runner)
    seq = run(1, "a.sqlite")
    assert server.max_in_flight == 1
    n_requests = server.requests
    reset(server)
    server.peer_wait, server.peer_wait_once = 5.0, True
    par = run(2, "b.sqlite")
    assert server.max_in_flight == 2  # two questions really were at the server at once
    assert server.requests == n_requests  # the same calls, none replayed from a shared cache
    assert seq.questions == [q.id for q in qs]
    assert_same_data(par, seq)
    # Non-trivial data: LLM branches were executed, and answer F1s exist exactly for the
    # prefixes of the first ANSWER_QUESTIONS questions, whichever worker ran them.
    assert any(s.action == "rewrite_query" and s.executed and s.cost_tokens > 0
               for s in par.samples)
    with_f1 = {p.qid for p in par.prefixes if not math.isnan(p.f1_now)}
    assert with_f1 == {q.id for q in qs[:ANSWER_QUESTIONS]}


# -- the calibration's LLM scoring ---------------------------------------------------------------
def test_two_workers_score_calibration_states_as_a_sequential_run(server, library_questions,
                                                                  library_retriever, tmp_path):
    env = Environment(library_retriever, None, ControlConfig())
    states = calibration_states(library_questions[:3], env, seed=13)  # retrieval only
    assert len(states) >= 4

    def run(workers: int, cache: str, kinds: list[str]):
        return signal_scores(states, server_env(server, library_retriever, tmp_path / cache),
                             kinds, seed=13, workers=workers)
    seq = run(1, "a.sqlite", ["text", "margin"])
    assert server.max_in_flight == 1
    reset(server)
    server.peer_wait, server.peer_wait_once = 5.0, True
    par = run(2, "b.sqlite", ["text", "margin"])
    assert server.max_in_flight == 2
    for kind in ("text", "margin"):
        assert np.array_equal(par[kind]["score"], seq[kind]["score"])
    assert np.array_equal(par["text"]["extra"], seq["text"]["extra"])
    assert len(set(seq["margin"]["score"])) > 1  # the margins differ between states
    # The margin's log-prob request bypasses generate(): it gives up the lock too.
    reset(server)
    margin = run(2, "c.sqlite", ["margin"])
    assert server.max_in_flight == 2
    assert np.array_equal(margin["margin"]["score"], seq["margin"]["score"])


# -- refusals ------------------------------------------------------------------------------------
def test_train_workers_with_an_in_process_generator_are_refused(library_questions,
                                                                library_retriever, tmp_path,
                                                                capsys):
    gen = ScriptedGenerator()
    env = Environment(library_retriever, gen, ControlConfig())
    with pytest.raises(ValueError, match=r"--workers 2 runs questions .*'scripted' runs in-proc"):
        collect_in_parallel(2, env.generator)
    # The message names what would run concurrently: here the calibration states.
    with pytest.raises(ValueError,
                       match=r"--workers 2 runs calibration states .*'scripted' runs in-proc"):
        signal_scores(calibration_states(library_questions[:1], env), env, ["text"], workers=2)
    with pytest.raises(ValueError, match="--workers must be an integer >= 1"):
        collect_in_parallel(0, env.generator)
    assert gen.calls == []  # refused before any call
    # The command line refuses from the spec alone, before loading any model or index.
    out = tmp_path / "p.joblib"
    code = main(["train", "--data", "library", "--generator", "smollm2-135m", "--workers", "2",
                 "--out", str(out), "--save-data", str(tmp_path / "t.npz")])
    err = capsys.readouterr().err
    assert code == 2 and "--workers 2" in err and "'smollm2-135m' runs in-process" in err
    assert not out.exists() and not (tmp_path / "t.npz").exists()


# -- the command line ----------------------------------------------------------------------------
# Small but complete (as test_training_data.py's BASE): 4 training questions, the auto signal
# (the text and margin probes are LLM calls, so the calibration runs with workers too), answer
# F1s on the first 2, a 2x2 tuning grid, 10 trees.
TRAIN = ["train", "--data", "library", "--seed", "13", "--n-eval", "10", "--limit", "4",
         "--trees", "10", "--min-leaf", "2", "--tune-folds", "2", "--lambdas", "0,0.0001",
         "--veto-thresholds", "0,1", "--sufficiency-signal", "auto",
         "--calibration-questions", "3", "--continuation-questions", "2"]


def test_cli_train_with_workers_against_a_server_writes_the_sequential_policy(
        server, tmp_path, capsys, monkeypatch):
    def train(workers: int, name: str) -> dict:
        # A fresh LLM call cache per run: both really ask the server.
        monkeypatch.setenv("DYNAKRAG_LLM_CACHE", str(tmp_path / f"{name}.sqlite"))
        code = main([*TRAIN, "--generator", server.spec, "--workers", str(workers),
                     "--out", str(tmp_path / f"{name}.joblib"),
                     "--save-data", str(tmp_path / f"{name}.npz")])
        printed = capsys.readouterr().out
        assert code == 0
        return json.loads(printed.splitlines()[-1])
    server.peer_wait, server.peer_wait_once = 5.0, True
    par = train(2, "par")
    assert server.max_in_flight == 2
    assert (tmp_path / "par.joblib").exists() and par["questions"] == 4
    reset(server)
    server.peer_wait = 0.0
    seq = train(1, "seq")
    assert server.max_in_flight == 1
    assert_same_data(load_training_data(tmp_path / "par.npz"),
                     load_training_data(tmp_path / "seq.npz"))
    assert {k: par[k] for k in par if k != "seconds" and k != "policy"} == \
        {k: seq[k] for k in seq if k != "seconds" and k != "policy"}
    pol = Policy.load(tmp_path / "par.joblib")
    assert "--workers 2" in pol.meta["command"]
    assert pol.meta["sufficiency"] == Policy.load(tmp_path / "seq.joblib").meta["sufficiency"]
