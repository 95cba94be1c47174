"""results.transfer_paired_table: a transferred DynaKRAG run paired per question with runs of
other generator folders (its policy's native run, the answer generator's own policy and
baselines), on synthetic results folders."""
from __future__ import annotations

import json
import math

import pytest

from dynakrag_lab.report.results import (NO_COMMON, NOT_RUN, STARTED, TRANSFER_COMPARISONS,
                                         TRANSFER_PAIRED_COLUMNS, transfer_paired_table)

A, P = "big", "small"  # answer generator, policy generator
MOVED = f"{A}-policy-{P}"


def _run(root, generator, run, scores, n_expected=None):
    """A run folder as experiments.evaluate leaves it: predictions (id -> F1 = EM = SR), and a
    summary recording how many questions were requested once a question is answered."""
    d = root / "hotpotqa" / generator / run
    d.mkdir(parents=True)
    rows = [{"id": q, "f1": v, "em": v, "support_recall": v} for q, v in scores.items()]
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if rows:
        expected = len(rows) if n_expected is None else n_expected
        (d / "summary.json").write_text(json.dumps(
            {"method": run, "n": len(rows),
             "run": {"command": "x", "n_expected": expected, "complete": len(rows) == expected}}))


def _row(t, generator, run, metric="f1"):
    sel = t[(t.other_generator == generator) & (t.other_run == run) & (t.metric == metric)]
    assert len(sel) == 1
    return sel.iloc[0]


def test_pairs_across_generator_folders_on_the_common_questions_only(tmp_path):
    _run(tmp_path, MOVED, "dynakrag", {f"q{i}": 1.0 for i in range(10)})
    # the native run shares q2..q9 (F1 .5 there) and has questions the transfer lacks (F1 0):
    # a mean over all its rows would not be the paired one
    _run(tmp_path, P, "dynakrag", {**{f"q{i}": 0.5 for i in range(2, 10)},
                                   **{f"x{i}": 0.0 for i in range(5)}})
    t = transfer_paired_table("hotpotqa", root=tmp_path)
    native = _row(t, P, "dynakrag")
    assert native.comparison == TRANSFER_COMPARISONS[0][0]
    assert (native.generator, native.answer_generator, native.policy_generator) == (MOVED, A, P)
    assert native.n == 8
    assert native.transferred == pytest.approx(1.0) and native.other == pytest.approx(0.5)
    assert native["diff"] == pytest.approx(0.5)
    assert native.verdict == "A better" and native.wins == 8
    assert native.status == "complete" and native.transferred_status == "complete"


def test_the_difference_is_transferred_minus_the_other_run(tmp_path):
    _run(tmp_path, MOVED, "dynakrag", {f"q{i}": 0.25 for i in range(8)})
    _run(tmp_path, A, "fixed_k3", {f"q{i}": 0.75 for i in range(8)})
    _run(tmp_path, A, "dynakrag", {f"q{i}": 0.25 for i in range(8)})
    t = transfer_paired_table("hotpotqa", root=tmp_path, metrics=("f1",))
    k3 = _row(t, A, "fixed_k3")
    assert k3["diff"] == pytest.approx(-0.5) and k3.hi < 0
    assert k3.verdict == "A worse" and k3.losses == 8
    own = _row(t, A, "dynakrag")
    assert own.comparison == "answer generator's own policy"
    assert own["diff"] == pytest.approx(0.0) and own.verdict == "no measurable difference"


def test_a_partial_transferred_run_reports_its_n_and_status(tmp_path):
    _run(tmp_path, MOVED, "dynakrag", {f"q{i}": 1.0 for i in range(6)}, n_expected=10)
    _run(tmp_path, A, "fixed_k6", {f"q{i}": 0.5 for i in range(10)})
    t = transfer_paired_table("hotpotqa", root=tmp_path)
    k6 = _row(t, A, "fixed_k6", "em")
    assert k6.n == 6 and k6["diff"] == pytest.approx(0.5)
    assert k6.transferred_status == "partial: 6 of 10" and k6.status == "complete"
    assert set(t.transferred_status) == {"partial: 6 of 10"}


def test_a_comparison_it_cannot_make_is_an_n0_row_not_an_exception(tmp_path):
    _run(tmp_path, MOVED, "dynakrag", {f"q{i}": 1.0 for i in range(4)})
    _run(tmp_path, A, "fixed_k3", {})  # started: an empty predictions file
    _run(tmp_path, A, "fixed_k6", {"other": 0.5})  # no question in common
    t = transfer_paired_table("hotpotqa", root=tmp_path)
    assert tuple(t.columns) == TRANSFER_PAIRED_COLUMNS
    # every comparison is there, once per metric, in TRANSFER_COMPARISONS order
    assert list(zip(t.comparison, t.other_run))[::3] == [(c, r) for c, _, r in
                                                         TRANSFER_COMPARISONS]
    assert len(t) == 3 * len(TRANSFER_COMPARISONS)
    assert (t.n == 0).all() and t["diff"].isna().all() and t.lo.isna().all()
    why = {(r.other_generator, r.other_run): r.verdict for r in t.itertuples()}
    assert why == {(P, "dynakrag"): NOT_RUN, (A, "dynakrag"): NOT_RUN,
                   (A, "fixed_k3"): STARTED, (A, "fixed_k6"): NO_COMMON, (A, "ircot"): NOT_RUN}
    assert _row(t, A, "ircot").status == NOT_RUN


def test_a_transferred_run_that_has_answered_nothing_says_so(tmp_path):
    _run(tmp_path, MOVED, "dynakrag", {})
    _run(tmp_path, P, "dynakrag", {"q0": 1.0})
    t = transfer_paired_table("hotpotqa", root=tmp_path, metrics=("f1",))
    assert set(t.verdict) == {f"transferred dynakrag {STARTED}"} and (t.n == 0).all()
    assert set(t.transferred_status) == {STARTED}


def test_no_transfer_folder_gives_an_empty_table_with_its_columns(tmp_path):
    _run(tmp_path, P, "dynakrag", {"q0": 1.0})  # a native folder is not a transfer
    _run(tmp_path, f"{A}-policy-{P}", "fixed_k3", {"q0": 1.0})  # no transferred dynakrag
    for dataset in ("hotpotqa", "musique"):  # musique: no folder at all
        t = transfer_paired_table(dataset, root=tmp_path)
        assert t.empty and tuple(t.columns) == TRANSFER_PAIRED_COLUMNS
    assert transfer_paired_table("hotpotqa", root=tmp_path / "none").empty


def test_each_transfer_folder_gets_its_own_rows(tmp_path):
    _run(tmp_path, MOVED, "dynakrag", {f"q{i}": 1.0 for i in range(3)})
    _run(tmp_path, f"{P}-policy-{A}", "dynakrag", {f"q{i}": 0.0 for i in range(3)})
    _run(tmp_path, P, "dynakrag", {f"q{i}": 0.5 for i in range(3)})
    t = transfer_paired_table("hotpotqa", root=tmp_path, metrics=("f1",))
    assert list(t.generator.unique()) == [MOVED, f"{P}-policy-{A}"]  # by name
    native = t[t.comparison == "same policy, native generator"].set_index("generator")
    assert native.other_generator.to_dict() == {MOVED: P, f"{P}-policy-{A}": A}
    assert native.loc[MOVED, "diff"] == pytest.approx(0.5)
    assert native.loc[f"{P}-policy-{A}", "n"] == 0  # big/dynakrag was not run
    own = t[t.comparison == "answer generator's own policy"].set_index("generator")
    assert own.loc[f"{P}-policy-{A}", "diff"] == pytest.approx(-0.5)
    assert math.isnan(own.loc[MOVED, "diff"])


def test_restricting_to_one_folder_and_comparison_gives_the_full_tables_rows(tmp_path):
    _run(tmp_path, MOVED, "dynakrag", {f"q{i}": 1.0 for i in range(4)})
    _run(tmp_path, f"{P}-policy-{A}", "dynakrag", {f"q{i}": 0.0 for i in range(4)})
    _run(tmp_path, A, "fixed_k3", {f"q{i}": 0.5 for i in range(4)})
    _run(tmp_path, P, "fixed_k3", {f"q{i}": 0.25 for i in range(4)})
    full = transfer_paired_table("hotpotqa", root=tmp_path, metrics=("f1",))
    base = "answer generator's baseline"
    only = transfer_paired_table("hotpotqa", root=tmp_path, metrics=("f1",), generator=MOVED,
                                 against=[c for c in TRANSFER_COMPARISONS if c[0] == base])
    want = full[(full.generator == MOVED) & (full.comparison == base)].reset_index(drop=True)
    assert len(only) == 3  # fixed_k3, fixed_k6 and ircot of the answer generator only
    assert only.reset_index(drop=True).equals(want)
    assert transfer_paired_table("hotpotqa", root=tmp_path, generator="nope").empty
