"""The trajectory explorer: replay of a predictions.jsonl record (SR per step, chosen actions,
gold marks), the static HTML (every step, the answer, escaping), the comparison view, the
widget built without a display, and a record from a real evaluate() run on the library."""
from __future__ import annotations

import json

import pytest

from dynakrag_lite.explorer import (Explorer, answer_from_record, load_records, load_runs,
                                    n_gold_of, plot_sr_curve, render_comparison_html,
                                    render_html, sr_curve, steps_from_record)


def _scores(valid, best, veto=False, gain=None):
    out = {}
    for i, a in enumerate(valid):
        v = 0.9 if a == best else 0.1 * i
        out[a] = {"value": v, "cost": 0.0, "score": v}
        if gain is not None:
            out[a]["continue_gain"] = gain
    if veto:
        out["stop_answer"]["vetoed"] = 1.0
    return out


def hand_record(method="dynakrag", title_b="Orlen Vasko", question="Who founded Velmora?"):
    """3 gold docs; step 1 brings gold A and a distractor, step 2 nothing, step 3 gold B
    (plus a second copy of gold A's title, differently spelled: counted once), then stop."""
    v1 = ["retrieve_more", "gap_query", "stop_answer"]
    v2 = ["retrieve_more", "sufficiency_check", "stop_answer"]
    return {
        "id": "q1", "question": question, "type": "bridge", "method": method,
        "prediction": "Tarvel", "answers": ["Tarvel", "Tarvel town"], "em": 1.0, "f1": 1.0,
        "support_recall": 2 / 3, "all_support": 0.0, "n_gold": 3,
        "docs": [
            {"id": "dA", "title": "Velmora Records", "score": 0.8, "source": "retrieve_more",
             "gold": True},
            {"id": "dX", "title": "Velmora Studios", "score": 0.7, "source": "retrieve_more",
             "gold": False},
            {"id": "dB", "title": title_b, "score": 0.6, "source": "bridge_entity_expand",
             "gold": True},
            {"id": "dA2", "title": "velmora records!", "score": 0.5,
             "source": "bridge_entity_expand", "gold": True},
        ],
        "n_docs": 4, "tokens": 321, "llm_calls": 2, "retrieval_calls": 3, "seconds": 0.5,
        "snippets": ["[1] Orlen Vasko founded Velmora Records"],
        "trace": [
            {"step": 0, "action": "retrieve_more", "valid": ["retrieve_more"],
             "scores": {"retrieve_more": {"value": 0.3, "cost": 0.0, "score": 0.3}},
             "added": ["dA", "dX"], "query": question, "gap": "", "sufficient": None,
             "note": ""},
            {"step": 1, "action": "sufficiency_check", "valid": v2,
             "scores": _scores(v2, "sufficiency_check", veto=True, gain=0.2), "added": [],
             "query": question, "gap": "the founder's birthplace", "sufficient": False,
             "note": ""},
            {"step": 2, "action": "gap_query", "valid": v1, "scores": _scores(v1, "gap_query"),
             "added": ["dB", "dA2"], "query": "founder birthplace", "gap": "", "sufficient": None,
             "note": ""},
            {"step": 3, "action": "stop_answer", "valid": ["stop_answer"], "scores": {},
             "added": [], "query": "", "gap": "", "sufficient": None, "note": "max_steps"},
            {"step": 4, "action": "compress_answer_evidence",
             "valid": ["compress_answer_evidence"], "scores": {}, "added": [], "query": "",
             "gap": "", "sufficient": None, "note": "1 snippets"},
        ],
    }


def test_steps_replay_sr_actions_and_gold_marks():
    rec = hand_record()
    steps = steps_from_record(rec)
    assert [s.action for s in steps] == ["retrieve_more", "sufficiency_check", "gap_query",
                                         "stop_answer", "compress_answer_evidence"]
    assert [s.chosen for s in steps] == [s.action for s in steps]
    assert [s.sr for s in steps] == pytest.approx([1 / 3, 1 / 3, 2 / 3, 2 / 3, 2 / 3])
    assert sr_curve(rec) == pytest.approx([0.0, 1 / 3, 1 / 3, 2 / 3, 2 / 3, 2 / 3])
    assert steps[-1].sr == pytest.approx(rec["support_recall"])
    assert [d.gold for d in steps[0].added] == [True, False]
    assert [d.title for d in steps[2].added] == ["Orlen Vasko", "velmora records!"]
    assert [s.gold_found for s in steps] == [1, 1, 2, 2, 2]
    assert [s.n_docs for s in steps] == [2, 2, 4, 4, 4]
    # A(s) with its numbers; the chosen one flagged; veto and continuation estimate kept.
    s2 = steps[1]
    assert s2.valid == ("retrieve_more", "sufficiency_check", "stop_answer")
    assert [o.chosen for o in s2.options] == [False, True, False]
    assert s2.vetoed == ("stop_answer",) and s2.continue_gain == pytest.approx(0.2)
    assert s2.options[1].value == pytest.approx(0.9)
    assert s2.sufficient is False and s2.gap == "the founder's birthplace"
    a = answer_from_record(rec)
    assert a.prediction == "Tarvel" and a.em == 1.0 and a.answers == ("Tarvel", "Tarvel town")


def test_n_gold_fallback_for_records_without_it():
    rec = hand_record()
    del rec["n_gold"]
    assert n_gold_of(rec) == 3  # 2 distinct gold found, SR 2/3
    assert steps_from_record(rec)[-1].sr == pytest.approx(2 / 3)
    rec["support_recall"], rec["docs"] = 0.0, [dict(d, gold=False) for d in rec["docs"]]
    assert n_gold_of(rec) is None
    assert all(s.sr == 0.0 for s in steps_from_record(rec))


def test_render_html_has_every_step_and_the_answer_and_escapes():
    rec = hand_record(title_b="<script>alert(1)</script>", question="Is <b>this</b> & that?")
    out = render_html(rec)
    for entry in rec["trace"]:
        assert entry["action"] in out
    assert "Tarvel town" in out and "EM 1" in out
    assert "<script>" not in out and "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert "<b>this</b>" not in out and "Is &lt;b&gt;this&lt;/b&gt; &amp; that?" in out
    assert "✓" in out and "veto" in out and "the founder&#x27;s birthplace" in out
    assert "<script" not in out.lower() and "http" not in out  # no JS, no external assets
    partial = render_html(rec, upto=1)
    assert "gap_query" not in partial and "revealed after the last step" in partial


def test_comparison_html_has_both_method_names():
    a, b = hand_record("dynakrag"), hand_record("fixed_k")
    out = render_comparison_html(a, b)
    assert "dynakrag" in out and "fixed_k" in out
    assert out.count("<b>Q:</b>") == 1  # the question once, above both columns


def test_explorer_widget_without_display_and_static_fallback(tmp_path):
    recs = {"dynakrag": {"q1": hand_record("dynakrag")},
            "uniform": {"q1": hand_record("uniform")}}
    ex = Explorer(recs)
    w = ex.widget
    assert w is ex.widget  # built once
    assert ex.w_step.value == 5 and ex.w_compare.value == "uniform"
    assert "compress_answer_evidence" in ex.w_html.value
    ex.w_prev.click()
    assert ex.w_step.value == 4 and "1 more step" in ex.w_html.value
    ex.w_step.value = 0
    assert "5 more step(s) hidden" in ex.w_html.value
    assert "revealed after the last step" in ex.w_html.value
    ex.w_next.click()
    assert ex.w_step.value == 1 and "4 more step(s) hidden" in ex.w_html.value
    ex.w_compare.value = ""  # single view; a new selection starts fully revealed
    assert ex.w_step.value == 5
    assert ex.w_html.value == render_html(recs["dynakrag"]["q1"], upto=5)
    static = ex.static_html()
    assert "dynakrag" in static and "uniform" in static and "Tarvel" in static
    assert ex._repr_html_() == static
    # load_records / load_runs round trip
    for m, rs in recs.items():
        (tmp_path / m).mkdir()
        (tmp_path / m / "predictions.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rs.values()) + '{"torn')
    assert load_records(tmp_path / "dynakrag")["q1"]["method"] == "dynakrag"
    assert set(load_runs(tmp_path)) == {"dynakrag", "uniform"}
    assert list(load_runs(tmp_path, ["uniform", "oracle"])) == ["uniform"]


def test_plot_sr_curve():
    import matplotlib
    matplotlib.use("Agg")
    ax = plot_sr_curve({"dynakrag": hand_record(), "uniform": hand_record("uniform")})
    assert len(ax.get_lines()) == 2
    assert ax.get_lines()[0].get_xdata()[-1] == 5


@pytest.fixture(scope="module")
def real_runs(library_questions, library_retriever, tmp_path_factory):
    from helpers import ScriptedGenerator

    from dynakrag_lite.actions import ControlConfig, Environment
    from dynakrag_lite.data import split_questions
    from dynakrag_lite.experiments import evaluate
    from dynakrag_lite.policy import train_policy
    from dynakrag_lite.trajectories import collect

    env = Environment(library_retriever, ScriptedGenerator(), ControlConfig())
    train, evals = split_questions(library_questions, 30, 0)
    policy = train_policy(collect(train[:8], env, progress=False), n_estimators=20,
                          min_samples_leaf=2, n_jobs=1)
    root = tmp_path_factory.mktemp("runs")
    for m in ("dynakrag", "uniform", "oracle"):
        evaluate(evals[:3], m, env, root / m, policy=policy, dataset="library",
                 generator="scripted", progress=False)
    return load_runs(root), evals[:3]


def test_real_evaluate_records_render(real_runs):
    runs, qs = real_runs
    assert set(runs) == {"dynakrag", "oracle", "uniform"}
    for m, recs in runs.items():
        assert set(recs) == {q.id for q in qs}
        for rec in recs.values():
            assert rec["n_gold"] >= 1
            steps = steps_from_record(rec)
            assert steps and steps[-1].sr == pytest.approx(rec["support_recall"])
            out = render_html(rec)
            assert all(s.action in out for s in steps)
    ex = Explorer(runs, method="dynakrag", compare="oracle")
    assert ex.widget is not None
    qid = ex.default_question()
    html_ = ex.static_html(qid)
    assert "dynakrag" in html_ and "oracle" in html_
    # The learned policy's numbers appear on its steps.
    dyn = runs["dynakrag"][qid]
    assert any(o.value is not None for s in steps_from_record(dyn) for o in s.options)
