"""The trajectory explorer: replay of a predictions.jsonl record (SR per step, chosen actions,
gold marks), the static HTML (every step, the answer, escaping), the comparison view, the
widget built without a display, and a record from a real evaluate() run on the library.

The explorer is three modules behind one facade (``dynakrag_lab.report.explorer``): replay
(``explorer_replay``), static rendering (``explorer_render``) and the widget
(``explorer_widget``). The tests at the end check each layer on its own: the layers import
without the heavier ones, and the facade exports the very objects of the layers."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dynakrag_lab.report.explorer import (Explorer, answer_from_record, load_records, load_runs,
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

    from dynakrag_lite.config import ControlConfig, Environment, RunSettings
    from dynakrag_lite.data.sources import split_questions
    from dynakrag_lite.experiments.run import evaluate
    from dynakrag_lite.policy import train_policy
    from dynakrag_lite.trajectories import collect

    env = Environment(library_retriever, ScriptedGenerator(), ControlConfig())
    train, evals = split_questions(library_questions, 30, 0)
    policy = train_policy(collect(train[:8], env, progress=False), n_estimators=20,
                          min_samples_leaf=2, n_jobs=1)
    root = tmp_path_factory.mktemp("runs")
    for m in ("dynakrag", "uniform", "oracle"):
        evaluate(evals[:3], RunSettings(method=m, generator="scripted"), env, root / m,
                 policy=policy, dataset="library", progress=False)
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


# -- the split: each layer on its own ------------------------------------------------------
from dynakrag_lab.report import explorer
from dynakrag_lab.report.explorer import (render as explorer_render,  # noqa: E402
                                          replay as explorer_replay, widget as explorer_widget)

REPO = Path(__file__).resolve().parents[2]
# Every name the book imports from dynakrag_lab.report.explorer (grep "explorer" book/*.ipynb).
BOOK_NAMES = ("Explorer", "load_runs", "plot_sr_curve", "render_html", "steps_from_record",
              "find_result_sets", "sr_curve")


def test_facade_reexports_the_layers_objects():
    layers = (explorer_replay, explorer_render, explorer_widget)
    for name in explorer.__all__:
        owners = [m for m in layers if name in m.__all__]
        assert len(owners) == 1, name  # each public name lives in exactly one layer
        assert getattr(explorer, name) is getattr(owners[0], name)
    assert set(BOOK_NAMES) <= set(explorer.__all__)
    assert set(explorer.__all__) == {n for m in layers for n in m.__all__}


@pytest.mark.parametrize("module, forbidden", [
    ("dynakrag_lab.report.explorer.replay", ("ipywidgets", "matplotlib", "IPython")),
    ("dynakrag_lab.report.explorer.render", ("ipywidgets", "matplotlib", "IPython")),
    ("dynakrag_lab.report.explorer.widget", ("ipywidgets", "matplotlib", "IPython")),
    ("dynakrag_lab.report.explorer", ("ipywidgets", "matplotlib", "IPython")),
])
def test_layers_import_without_heavier_dependencies(module, forbidden):
    """Replay needs neither HTML nor widgets; nothing imports ipywidgets or matplotlib until a
    widget is built or a plot drawn (a fresh interpreter, so other tests' imports do not
    count)."""
    code = (f"import sys, {module}\n"
            f"print(','.join(m for m in {forbidden!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout.strip()
    assert out == "", f"{module} imported {out}"


def test_replay_needs_no_html():
    """Replay's own imports hold no HTML (the package facade imports render, so importing the
    submodule in a fresh interpreter loads ``html`` anyway: read the source instead)."""
    tree = ast.parse(Path(explorer_replay.__file__).read_text(encoding="utf-8"))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.level == 0}
    assert not imported & {"html", "ipywidgets", "matplotlib", "IPython"}


def test_replay_option_order_primary_number_and_missing_actions():
    entry = {"action": "gap_query", "valid": ["retrieve_more"],
             "scores": {"retrieve_more": {"value": 0.2, "p": 0.5},
                        "stop_answer": {"true_gain": 0.1, "true_sr": 0.4}}}
    rec = {"id": "q", "n_gold": 2, "docs": [], "trace": [entry]}
    (step,) = explorer_replay.steps_from_record(rec)
    # "valid" first, then actions that only have numbers, then the chosen action.
    assert step.valid == ("retrieve_more", "stop_answer", "gap_query")
    assert [o.chosen for o in step.options] == [False, False, True]
    assert step.options[0].primary == pytest.approx(0.2)  # value beats p
    assert step.options[1].primary == pytest.approx(0.1)  # true_gain beats true_sr
    assert step.options[2].primary is None and step.options[0].raw == {"value": 0.2, "p": 0.5}
    assert step.sr == 0.0 and step.n_docs == 0 and step.continue_gain is None
    # A doc id the record does not list is shown, unmarked, but not counted as gold.
    rec["trace"][0]["added"] = ["ghost"]
    (step,) = explorer_replay.steps_from_record(rec)
    assert step.added[0].gold is None and step.added[0].title == "ghost" and step.n_docs == 1


def test_replay_loading_errors_and_result_sets(tmp_path):
    with pytest.raises(FileNotFoundError):
        explorer_replay.load_records(tmp_path)
    assert explorer_replay.find_result_sets(tmp_path / "missing") == []
    for ds, runs in (("hotpotqa", ("dynakrag", "fixed_k")), ("musique", ("fixed_k",))):
        for run in runs:
            d = tmp_path / ds / "gen" / run
            d.mkdir(parents=True)
            (d / "predictions.jsonl").write_text(json.dumps(hand_record(run)) + "\n\n")
    assert explorer_replay.find_result_sets(tmp_path) == [tmp_path / "hotpotqa" / "gen"]
    assert explorer_replay.find_result_sets(tmp_path, need=("fixed_k",)) == [
        tmp_path / "hotpotqa" / "gen", tmp_path / "musique" / "gen"]
    assert list(explorer_replay.load_runs(tmp_path / "hotpotqa" / "gen")) == ["dynakrag",
                                                                            "fixed_k"]


def test_replay_reads_predictions_with_the_runs_own_reader(tmp_path):
    """One reader for predictions files (experiments.folder.read_predictions): a torn final
    line (a run still writing) is left out, the last successful row of an id wins over an
    earlier one and over an error row, and a bad line before the end is an error naming file
    and line, not a record silently dropped."""
    from dynakrag_lite.experiments import folder
    assert explorer_replay.read_predictions is folder.read_predictions
    assert not hasattr(explorer_replay, "_read_jsonl")
    first, retried = hand_record(question="first try"), hand_record(question="retried")
    q2 = {**hand_record(), "id": "q2"}

    def error(qid):
        return {"id": qid, "question": "?", "method": "dynakrag",
                "error": {"type": "GeneratorError", "message": "boom"}, "seconds": 0.1}
    run = tmp_path / "dynakrag"
    run.mkdir()
    f = run / "predictions.jsonl"
    rows = (first, error("q2"), error("q3"), q2, retried)
    f.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"id": "q4", "pred')
    recs = explorer_replay.load_records(f)
    assert list(recs) == ["q1", "q2"] and recs["q1"]["question"] == "retried"
    assert "error" not in recs["q2"]  # q3 never succeeded: nothing to replay
    f.write_text(json.dumps(first) + "\n" + '{"id": "q2", "tor\n' + json.dumps(q2) + "\n")
    with pytest.raises(folder.ResultsError,
                       match=r"predictions\.jsonl, line 2: invalid JSON"):
        explorer_replay.load_records(run)
    f.write_text(json.dumps(first) + "\n" + json.dumps({"no": "id"}) + "\n"
                 + json.dumps(q2) + "\n")
    with pytest.raises(folder.ResultsError, match=r"line 2: a row without an \"id\""):
        explorer_replay.load_runs(tmp_path)


def test_render_edge_cases_and_chip_colors():
    a, b = hand_record("dynakrag"), hand_record("fixed_k")
    assert "no record" in explorer_render.render_comparison_html(None, None)
    assert explorer_render.render_comparison_html(a, None) == explorer_render.render_html(a)
    b["id"] = "q2"
    assert "different questions" in explorer_render.render_comparison_html(a, b)
    assert "different questions" not in explorer_render.render_comparison_html(a, a)
    named = explorer_render.render_comparison_html(a, a, names=["Left run", "Right run"])
    assert named.count(">Left run</div>") == 1 and named.count(">Right run</div>") == 1
    # The best option of a step is the greenest; a vetoed one is struck through.
    out = explorer_render.render_html(a)
    assert explorer_render._chip_color(1.0) in out and "line-through" in out
    assert explorer_render._chip_color(None) == "#eeeeee"
    assert explorer_render._fmt(None) == "–" and explorer_render._fmt(0.5) == "0.5"
    assert "continuation estimate 0.2" in out
    assert explorer_render.render_html(a) == explorer_render.render_html(hand_record())


def test_widget_layer_without_ipywidgets_calls():
    """Everything but :meth:`Explorer.widget` works without building a widget."""
    with pytest.raises(ValueError):
        explorer_widget.Explorer({"dynakrag": {}})
    same, other = hand_record("dynakrag"), hand_record("fixed_k")
    other["support_recall"] = 1.0
    q0 = dict(hand_record("dynakrag"), id="q0", question="Q" * 120)
    ex = explorer_widget.Explorer({"dynakrag": {"q0": q0, "q1": same},
                                   "fixed_k": {"q0": dict(q0, method="fixed_k"), "q1": other},
                                   "oracle": {"q1": hand_record("oracle")}},
                                  method="dynakrag", compare="dynakrag")
    assert ex.compare == "fixed_k"  # compare falls back to another method
    assert ex.question_ids == ["q1", "q0"]  # the question every method has comes first
    assert ex.default_question() == "q1"  # SR differs there
    assert ex.question_label("q0").endswith("...") and len(ex.question_label("q0")) < 110
    assert ex.n_steps("q1") == 5 and ex.n_steps("nope") == 0
    assert "oracle has no record" in ex.html("q0", compare="oracle")
    assert "no record for nope" in ex.html("nope")
    assert ex.html("q1", compare="") == explorer_render.render_html(same)
    assert ex._widget is None  # no widget was built by any of this
