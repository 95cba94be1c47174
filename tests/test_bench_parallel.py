"""benchmarks/bench_parallel.py: how questions are dealt to workers and how a configuration's
figures are combined from its workers' reports (pure helpers; the benchmark itself needs a
quiet machine and is not run here)."""
import pytest

from helpers import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("bench_parallel", folder="benchmarks")


def test_shares_deal_every_question_to_exactly_one_worker(bench):
    ids = [f"q{i}" for i in range(7)]
    parts = bench.shares(ids, 2)
    assert parts == [["q0", "q2", "q4", "q6"], ["q1", "q3", "q5"]]
    assert sorted(sum(parts, [])) == sorted(ids)
    assert bench.shares(ids, 1) == [ids]
    with pytest.raises(ValueError, match="processes"):
        bench.shares(ids, 0)


def _row(i, f1=0.5, llm=1.0):
    return {"id": i, "error": None, "llm_seconds": llm, "prompt_tokens_evaluated": 100,
            "completion_tokens": 10, "f1": f1}


def test_combine_measures_loop_wall_from_first_start_to_last_end(bench):
    w1 = {"loop_start": 100.0, "loop_end": 160.0, "setup_seconds": 5.0,
          "methods": {"fixed_k": {"rows": [_row("a"), _row("c")]}}}
    w2 = {"loop_start": 101.0, "loop_end": 190.0, "setup_seconds": 7.0,
          "methods": {"fixed_k": {"rows": [_row("b")]}}}
    c = bench.combine([w1, w2], spawn_wall=99.0)
    assert c["questions_x_methods"] == 3
    assert c["loop_wall_seconds"] == 90.0  # 100 -> 190, model loading excluded
    assert c["per_hour"] == pytest.approx(120.0)
    assert c["setup_seconds_max"] == 7.0 and c["llm_seconds"] == 3.0
    with pytest.raises(ValueError):
        bench.combine([], 1.0)


def test_agreement_counts_pairs_with_equal_f1(bench):
    a = {"workers": [{"methods": {"fixed_k": {"rows": [_row("a", 1.0), _row("b", 0.0)]}}}]}
    b = {"workers": [{"methods": {"fixed_k": {"rows": [_row("b", 0.5)]}}},
                     {"methods": {"fixed_k": {"rows": [_row("a", 1.0)]}}}]}
    assert bench.agreement(a, b) == {"pairs": 2, "same_f1": 1}


# -- the evaluation questions, listed without a setup ------------------------------------------
def _workers_eval_ids(bench, monkeypatch, dataset, data_dir, n):
    """setup.eval[:n] of build_setup called as the workers call it, with the retriever stubbed
    (only the split is compared; no embedder or index is built)."""
    import dynakrag_lite.pipeline as pipeline_mod
    with monkeypatch.context() as mp:
        mp.setattr(pipeline_mod, "DenseRetriever", lambda corpus, **kw: None)
        setup = pipeline_mod.build_setup(dataset, generator=None, data_dir=data_dir,
                                         n_eval=bench.N_EVAL, split_seed=bench.SPLIT_SEED,
                                         show_progress=False)
    return [q.id for q in setup.eval[:n]]


def _ids_without_setup(bench, monkeypatch, dataset, data_dir, n):
    import dynakrag_lite.pipeline as pipeline_mod

    def forbidden(*a, **kw):
        raise AssertionError("the parent built a setup")
    with monkeypatch.context() as mp:
        mp.setattr(pipeline_mod, "build_setup", forbidden)
        mp.setattr(pipeline_mod, "DenseRetriever", forbidden)
        return bench.evaluation_ids(dataset, data_dir, n)


@pytest.mark.parametrize("n", [1, 2, 6, 10_000])
def test_parent_lists_the_workers_evaluation_questions_from_the_data_alone(bench, monkeypatch,
                                                                          n):
    """The library has fewer than 2 x N_EVAL questions, so build_setup's half-the-data cap
    decides its split size: a parent that only called split_questions(N_EVAL) would differ."""
    ids = _ids_without_setup(bench, monkeypatch, "library", None, n)
    assert ids and ids == _workers_eval_ids(bench, monkeypatch, "library", None, n)


def test_parent_lists_the_hotpotqa_questions_the_recorded_benchmark_ran(bench, monkeypatch,
                                                                        shared_data_dir):
    import json
    from pathlib import Path
    recorded = Path(__file__).resolve().parents[1] / "results" / "benchmarks" / "parallel.json"
    ids = _ids_without_setup(bench, monkeypatch, "hotpotqa", str(shared_data_dir), 6)
    assert ids == _workers_eval_ids(bench, monkeypatch, "hotpotqa", str(shared_data_dir), 6)
    if recorded.exists():
        settings = json.loads(recorded.read_text())["settings"]
        if settings["dataset"] == "hotpotqa" and len(settings["question_ids"]) == 6:
            assert ids == settings["question_ids"]


def test_parent_refuses_no_questions(bench):
    with pytest.raises(ValueError, match="--n"):
        bench.evaluation_ids("library", None, 0)
