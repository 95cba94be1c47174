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
