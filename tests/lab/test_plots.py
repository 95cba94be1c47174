"""The result plots (dynakrag_lab.report.plots): λ sweeps with their Pareto fronts and
labels that never overlap, the stop-rule sweeps of python -m dynakrag_lab.studies.stop_rule reports,
paired forest plots; each returns a Figure holding the labelled elements it promises."""
import math
from pathlib import Path

import matplotlib
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from dynakrag_lab.report import annotate as A
from dynakrag_lab.report import plots as P

matplotlib.use("Agg")


def texts(fig: Figure) -> list[str]:
    """Every string drawn in the figure (texts, tick labels, titles)."""
    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def render(fig: Figure) -> None:
    fig.canvas.draw()  # layout and mathtext must render without error


# -- the lambda sweep as a cost/quality curve ------------------------------------------------
def _sweep_frame(**extra):
    """A lambda_sweep-shaped frame (same columns): lambda 0 and 1e-5 stop at the same places,
    3e-4 is dominated in F1 by 1e-4, and the SR front keeps every point but none."""
    import pandas as pd
    frame = pd.DataFrame({
        "lam": [0.0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3],
        "veto_threshold": 0.05,
        "f1": [0.40, 0.40, 0.41, 0.35, 0.30, 0.20],
        "sr": [0.80, 0.80, 0.75, 0.70, 0.72, 0.50],
        "tokens": [3000.0, 3000.0, 2600.0, 2000.0, 2100.0, 1200.0],
        "early": 0.5, "vetoes": 0.1, "n_questions": 30,
        "best": [False, False, True, False, False, False], "metric": "f1"})
    return frame.assign(**extra)


def _by_gid(fig: Figure, gid: str) -> list:
    return [a for a in fig.findobj() if a.get_gid() == gid]


def _lambdas_in(texts_: list[str]) -> list[float]:
    return [float(v) for t in texts_ if t.startswith("λ=") for v in t[2:].split(", ")]


def test_pareto_front_keeps_undominated_points_sorted_by_cost():
    pts = [(3000, .40), (3000, .40), (2600, .41), (2000, .35), (2100, .30), (1200, .20)]
    assert P.pareto_front(pts) == [5, 3, 2]
    assert P.pareto_front([(1, .5), (1, .5)]) == [0, 1]  # equal points dominate neither
    assert P.pareto_front([]) == []


def test_lambda_sweep_figure_connects_the_pareto_points_in_cost_order():
    fig = P.lambda_sweep_figure(_sweep_frame())
    render(fig)
    (f1_line,) = _by_gid(fig, "pareto:f1")
    assert list(f1_line.get_xdata()) == [1200.0, 2000.0, 2600.0]
    assert list(f1_line.get_ydata()) == [0.20, 0.35, 0.41]
    (sr_line,) = _by_gid(fig, "pareto:sr")  # a second panel, since the frame has SR
    assert list(sr_line.get_xdata()) == [1200.0, 2000.0, 2100.0, 2600.0, 3000.0, 3000.0]
    assert list(sr_line.get_ydata()) == [0.50, 0.70, 0.72, 0.75, 0.80, 0.80]
    (points,) = _by_gid(fig, "sweep:f1")  # every lambda is drawn, dominated or not
    assert sorted(map(tuple, points.get_offsets().tolist())) == sorted(
        zip([3000.0, 3000.0, 2600.0, 2000.0, 2100.0, 1200.0],
            [0.40, 0.40, 0.41, 0.35, 0.30, 0.20]))
    (best,) = _by_gid(fig, "best:f1")
    assert best.get_offsets().tolist() == [[2600.0, 0.41]]


def test_lambda_sweep_annotations_carry_every_lambda_at_its_point():
    fig = P.lambda_sweep_figure(_sweep_frame(), show_sr=False)
    (ax,) = fig.axes
    labels = {t.get_text(): tuple(t.xy) for t in ax.texts}
    assert sorted(_lambdas_in(list(labels))) == [0.0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3]
    assert labels["λ=0, 1e-05"] == (3000.0, 0.40)  # same stopping points, one label
    assert labels["λ=0.001"] == (1200.0, 0.20)
    assert labels["λ=3e-05"] == (2600.0, 0.41)
    assert "mean tokens per question" in ax.get_xlabel() and ax.get_ylabel() == "F1"


def test_lambda_sweep_baselines_are_distinct_unconnected_markers():
    baselines = {"Fixed-K": (1500.0, 0.30), "IRCoT": (4000.0, 0.38, 0.85)}
    fig = P.lambda_sweep_figure(_sweep_frame(), baselines=baselines)
    render(fig)
    fk, ircot = _by_gid(fig, "baseline:Fixed-K"), _by_gid(fig, "baseline:IRCoT")
    assert len(fk) == 1  # no SR given: the F1 panel only
    assert fk[0].get_offsets().tolist() == [[1500.0, 0.30]]
    assert sorted(c.get_offsets().tolist()[0][1] for c in ircot) == [0.38, 0.85]
    f1_marker = [c for c in ircot if c.get_offsets().tolist()[0][1] == 0.38][0]
    assert not (fk[0].get_paths()[0].vertices.shape == f1_marker.get_paths()[0].vertices.shape
                and (fk[0].get_paths()[0].vertices == f1_marker.get_paths()[0].vertices).all())
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert {"Fixed-K", "IRCoT", "Pareto front"} <= set(legend)
    (line,) = _by_gid(fig, "pareto:f1")  # the baselines never join the policy's front
    assert 1500.0 not in list(line.get_xdata())


def test_lambda_sweep_figure_selects_one_threshold_and_rejects_bad_frames():
    import pandas as pd
    grid = pd.concat([_sweep_frame(), _sweep_frame(veto_threshold=0.2, f1=0.1)])
    with pytest.raises(ValueError, match="veto thresholds"):
        P.lambda_sweep_figure(grid)
    fig = P.lambda_sweep_figure(grid, veto_threshold=0.2, show_sr=False)
    (line,) = _by_gid(fig, "pareto:f1")
    assert list(line.get_ydata()) == [0.1]  # all tie in F1: only the cheapest is on the front
    with pytest.raises(ValueError, match="lacks"):
        P.lambda_sweep_figure(_sweep_frame().drop(columns="tokens"))
    with pytest.raises(ValueError, match="no 'sr'"):
        P.lambda_sweep_figure(_sweep_frame().drop(columns="sr"), show_sr=True)
    nan_row = _sweep_frame().assign(f1=[float("nan"), 0.4, 0.41, 0.35, 0.30, 0.20])
    (points,) = _by_gid(P.lambda_sweep_figure(nan_row), "sweep:f1")
    assert len(points.get_offsets()) == 5  # the NaN row is dropped, not drawn at 0


def _assert_labels_apart(anns: list) -> None:
    boxes = [a.get_window_extent() for a in anns]
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            assert not boxes[i].overlaps(boxes[j]), (anns[i].get_text(), anns[j].get_text())


def _crowded_frame():
    """The gain-rule curve of the appendix (results/diagnostics/...-stop-rule.json): five lambdas
    a few dozen tokens apart at one F1, plus two lambdas on one identical point."""
    import pandas as pd
    return pd.DataFrame({
        "lam": [0.0, 1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2],
        "veto_threshold": 0.02,
        "f1": [0.3253, 0.3253, 0.3253, 0.3253, 0.3253, 0.3164, 0.3472, 0.3793, 0.3793],
        "sr": [0.781, 0.769, 0.769, 0.769, 0.769, 0.725, 0.688, 0.675, 0.675],
        "tokens": [1868.4, 1815.0, 1792.8, 1773.5, 1739.2, 1365.6, 835.5, 573.5, 573.5]})


def test_lambda_sweep_labels_of_close_points_do_not_overlap():
    fig = P.lambda_sweep_figure(_crowded_frame(),
                                baselines={"Fixed-K": (700.0, 0.36, 0.70)})
    render(fig)
    for ax, metric in zip(fig.axes, ("f1", "sr")):
        anns = [t for t in ax.texts if t.get_text().startswith("λ=")]
        # the fixture is crowded: the closest points lie nearer than a label is wide
        dots = sorted(ax.transData.transform(a.xy)[0] for a in anns)
        assert min(b - a for a, b in zip(dots, dots[1:])) < \
            min(a.get_window_extent().width for a in anns)
        _assert_labels_apart(anns)
        assert len(anns) == 8 and anns == _by_gid(fig, f"lambda:{metric}")
        for a in anns:  # each label stays next to its own point
            x, y = ax.transData.transform(a.xy)
            box = a.get_window_extent().padded(30 * fig.dpi / 72)  # three label heights
            assert box.contains(x, y), a.get_text()
    assert sorted(_lambdas_in([a.get_text() for a in _by_gid(fig, "lambda:f1")])) == \
        sorted(_crowded_frame().lam)
    assert "λ=0.005, 0.01" in [a.get_text() for a in _by_gid(fig, "lambda:f1")]


def test_annotate_lambdas_keeps_two_curves_on_one_axes_apart():
    """Chapter 9 labels two stop rules on one axes: the second call avoids the first's labels."""
    fig = Figure(figsize=(5.5, 4.4))
    ax = fig.add_subplot()
    level = [(573.5, 0.3793)] * 6
    gain = list(zip(_crowded_frame().tokens, _crowded_frame().f1))
    ax.plot(*zip(*level), "s")
    ax.plot(*zip(*gain), "o-")
    fig.tight_layout()
    first = P.annotate_lambdas(ax, gain, _crowded_frame().lam)
    second = P.annotate_lambdas(ax, level, [0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3], below=True,
                                color="#e6550d")
    assert [a.get_text() for a in second] == ["λ=0, 1e-05, 3e-05, 0.0001, 0.0003, 0.001"]
    render(fig)
    _assert_labels_apart(first + second)
    assert P.overlapping_labels(first + second) == []
    assert second[0].get_position()[1] < 0  # below its point, as asked


# -- the lambda sweeps of python -m dynakrag_lab.studies.stop_rule reports, one panel per dataset ----
REPO = Path(__file__).resolve().parents[2]
STOP_RULE_DATASETS = ("hotpotqa", "2wikimultihopqa", "musique")


def _stop_rule_report(dataset: str = "toyqa", shift: float = 0.0) -> dict:
    """A report shaped like python -m dynakrag_lab.studies.stop_rule's: each rule's grid at two veto
    thresholds, the chosen pair marked ``best``. The level rule stops at one point for every
    lambda; the gain rule walks from the costly to the cheap end."""
    def row(rule, lam, tau, f1, tokens, best=False):
        return {"lam": lam, "veto_threshold": tau, "f1": f1 + shift, "sr": 0.6 + f1,
                "tokens": tokens, "early": 0.5, "vetoes": 0.1, "n_questions": 20,
                "best": best, "metric": "f1", "stop_rule": rule}
    level = [row("level", lam, tau, 0.30 if tau == 0.05 else 0.25, 600.0,
                 best=(lam, tau) == (0.0, 0.05))
             for tau in (0.0, 0.05) for lam in (0.0, 1e-5, 1e-4, 1e-3)]
    gain_curve = [(0.0, 0.22, 1900.0), (1e-4, 0.24, 1800.0), (1e-3, 0.33, 1100.0),
                  (5e-3, 0.30, 600.0)]
    gain = [row("gain", lam, tau, f1 - (0.05 if tau == 0.0 else 0.0), tok,
                best=(lam, tau) == (1e-3, 0.05))
            for tau in (0.0, 0.05) for lam, f1, tok in gain_curve]
    return {"trajectories": f"results/trajectories/{dataset}-qwen2.5-coder-0.5b.npz",
            "questions": 50, "samples": 900, "metric": "f1", "folds": 5,
            "rules": {"level": {"lam": 0.0, "veto_threshold": 0.05, "grid": level},
                      "gain": {"lam": 1e-3, "veto_threshold": 0.05, "grid": gain}}}


def test_stop_rule_table_is_one_row_per_rule_and_lambda_at_the_chosen_threshold():
    from dynakrag_lab.report.records import STOP_RULE_COLUMNS, stop_rule_table
    t = stop_rule_table(_stop_rule_report())
    assert tuple(t.columns) == STOP_RULE_COLUMNS
    assert set(t.dataset) == {"toyqa"} and set(t.generator) == {"qwen2.5-coder-0.5b"}
    assert list(t.rule) == ["level"] * 4 + ["gain"] * 4  # the report's rule order
    assert (t.veto_threshold == 0.05).all()  # only the threshold each rule chose
    assert list(t[t.rule == "gain"].lam) == [0.0, 1e-4, 1e-3, 5e-3]  # sorted by lambda
    chosen = t[t.chosen]
    assert list(zip(chosen.rule, chosen.lam)) == [("level", 0.0), ("gain", 1e-3)]
    assert chosen.set_index("rule").loc["gain", ["f1", "tokens"]].tolist() == [0.33, 1100.0]
    assert t.attrs["questions"] == 50 and t.attrs["folds"] == 5
    every = stop_rule_table(_stop_rule_report(), dataset="renamed", all_thresholds=True)
    assert len(every) == 16 and set(every.dataset) == {"renamed"}
    assert every.chosen.sum() == 2  # still one chosen pair per rule


def test_stop_rule_table_refuses_a_report_whose_choice_is_not_in_its_grid():
    from dynakrag_lab.report.records import stop_rule_table
    report = _stop_rule_report()
    report["rules"]["gain"]["lam"] = 0.02
    with pytest.raises(ValueError, match="missing from"):
        stop_rule_table(report)
    with pytest.raises(ValueError, match="not a stop-rule report"):
        stop_rule_table({"questions": 3})


def test_stop_rule_sweeps_draw_one_panel_per_dataset_with_each_rules_line_choice_and_front():
    reports = [_stop_rule_report("aqa"), _stop_rule_report("bqa", shift=0.1)]
    fig = P.stop_rule_sweeps_figure(reports)
    render(fig)
    assert len(fig.axes) == 2  # side by side, the legend under them
    for ds, ax, shift in (("aqa", fig.axes[0], 0.0), ("bqa", fig.axes[1], 0.1)):
        assert ax.get_title().startswith(f"{ds}: F1 on 20 of 50 training questions")
        assert "level τ=0.05, gain τ=0.05" in ax.get_title()
        (gain,) = _by_gid(fig, f"sweep:{ds}:gain")
        assert list(gain.get_xdata()) == [1900.0, 1800.0, 1100.0, 600.0]  # by lambda
        assert list(gain.get_ydata()) == pytest.approx([0.22 + shift, 0.24 + shift,
                                                        0.33 + shift, 0.30 + shift])
        (level,) = _by_gid(fig, f"sweep:{ds}:level")
        assert list(level.get_xdata()) == [600.0] * 4
        (ring,) = _by_gid(fig, f"chosen:{ds}:gain")
        assert (ring.get_xdata()[0], ring.get_ydata()[0]) == pytest.approx((1100.0,
                                                                           0.33 + shift))
        (ring,) = _by_gid(fig, f"chosen:{ds}:level")
        assert (ring.get_xdata()[0], ring.get_ydata()[0]) == pytest.approx((600.0,
                                                                           0.30 + shift))
        # both rules' points make one front: the level point (it ties gain's cheapest
        # point) and the gain rule's best F1
        (front,) = _by_gid(fig, f"pareto:{ds}")
        assert list(front.get_xdata()) == [600.0] * 5 + [1100.0]
        labels = _by_gid(fig, f"lambda:{ds}:level")
        assert [a.get_text() for a in labels] == ["λ=0, 1e-05, 0.0001, 0.001"]
        assert sorted(_lambdas_in([a.get_text() for a in _by_gid(fig, f"lambda:{ds}:gain")])) \
            == [0.0, 1e-4, 1e-3, 5e-3]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[0] == "Pareto front (both rules)" and len(legend) == 5


def _panel_labels(fig: Figure, ax) -> list:
    return [t for t in ax.texts if t.get_text().startswith("λ=")]


def _panels(fig: Figure) -> list:
    """The axes that draw a dataset (a spare grid slot is switched off, holding the legend)."""
    return [ax for ax in fig.axes if ax.axison]


def _assert_labels_readable(fig: Figure) -> None:
    """In every panel: labels apart, inside the axes, clear of every point's centre, and no
    nearer to another point than to their own (a label is read as its nearest point's)."""
    for ax in _panels(fig):
        anns = _panel_labels(fig, ax)
        _assert_labels_apart(anns)
        frame = ax.get_window_extent()
        dots = [ax.transData.transform(p) for line in ax.get_lines()
                if str(line.get_gid()).startswith("sweep:")
                for p in zip(line.get_xdata(), line.get_ydata())]
        for a in anns:
            box = a.get_window_extent()
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1, a.get_text()
            assert frame.y0 <= box.y0 and box.y1 <= frame.y1, a.get_text()
            assert not any(box.contains(x, y) for x, y in dots), a.get_text()
            own = A._box_distance(box, *ax.transData.transform(a.xy))
            assert all(A._box_distance(box, x, y) >= own - 0.5 for x, y in dots), a.get_text()


def test_stop_rule_sweeps_keep_crowded_labels_apart_inside_their_panel():
    report = _stop_rule_report()
    # four more lambdas a few dozen tokens from the gain rule's 1800-token point, at its F1
    crowded = [(2e-4, 1792.8), (3e-4, 1773.5), (5e-4, 1739.2), (7e-4, 1715.0)]
    report["rules"]["gain"]["grid"] += [
        {**report["rules"]["gain"]["grid"][0], "lam": lam, "tokens": tok, "f1": 0.24,
         "veto_threshold": 0.05} for lam, tok in crowded]
    fig = P.stop_rule_sweeps_figure([report], datasets=["crowded"])
    render(fig)
    _assert_labels_readable(fig)
    # labels moved away from their point get a leader line back to it
    far = [a for a in _by_gid(fig, "lambda:crowded:gain") if abs(a.xyann[1]) > P.LABEL_GAP + 1]
    assert far and len(_by_gid(fig, "leader:crowded:gain")) == len(far)


def test_stop_rule_sweeps_refuse_mismatched_or_ambiguous_input():
    from dynakrag_lab.report.records import stop_rule_table
    with pytest.raises(ValueError, match="no stop-rule reports"):
        P.stop_rule_sweeps_figure([])
    with pytest.raises(ValueError, match="2 dataset names for 1 reports"):
        P.stop_rule_sweeps_figure([_stop_rule_report()], datasets=["a", "b"])
    every = stop_rule_table(_stop_rule_report(), all_thresholds=True)
    with pytest.raises(ValueError, match="veto thresholds"):
        P.stop_rule_sweeps_figure([every])
    import pandas as pd
    two = pd.concat([stop_rule_table(_stop_rule_report("aqa")),
                     stop_rule_table(_stop_rule_report("bqa"))])
    with pytest.raises(ValueError, match="several datasets"):
        P.stop_rule_sweeps_figure([two])
    # a tidy table draws like its report
    fig = P.stop_rule_sweeps_figure([stop_rule_table(_stop_rule_report())])
    assert fig.axes[0].get_title().startswith("toyqa: F1 on 20 of 50")


def test_place_labels_keeps_off_avoided_points_inside_the_axes_and_nearest_its_own():
    fig = Figure(figsize=(3, 2))
    ax = fig.add_subplot()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    fig.tight_layout()
    (a,) = P.annotate_lambdas(ax, [(0.99, 0.99)], [0.001], inside=True)
    box, frame = a.get_window_extent(), ax.get_window_extent()
    assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and box.y1 <= frame.y1
    (b,) = P.annotate_lambdas(ax, [(0.3, 0.5)], [0.002])
    assert b.xyann == (P.LABEL_GAP, P.LABEL_GAP)  # the nearest spot, right above
    x, y = b.get_window_extent().x0 + 6, b.get_window_extent().y0 + 3  # under that label
    other = ax.transData.inverted().transform((x, y))
    half = 4.0 * fig.dpi / 72
    square = Bbox.from_extents(x - half, y - half, x + half, y + half)
    assert b.get_window_extent().overlaps(square)
    P.place_labels([b], avoid=[(*other, 4.0)])  # another point, 4 pt wide each way
    assert not b.get_window_extent().overlaps(square)
    # nearest: a label right under a neighbour is moved to its own point's side
    (c,) = P.annotate_lambdas(ax, [(0.5, 0.2)], [0.003], below=True)
    assert c.xyann == (P.LABEL_GAP, -P.LABEL_GAP)  # right of its point, under it
    neighbour = ax.transData.inverted().transform(
        ax.transData.transform((0.5, 0.2)) + (25 * fig.dpi / 72, 0))
    assert A._box_distance(c.get_window_extent(), *ax.transData.transform(neighbour)) < \
        A._box_distance(c.get_window_extent(), *ax.transData.transform((0.5, 0.2)))
    P.place_labels([c], below=True, avoid=[tuple(neighbour)], nearest=True)
    box = c.get_window_extent()
    assert A._box_distance(box, *ax.transData.transform(neighbour)) >= \
        A._box_distance(box, *ax.transData.transform((0.5, 0.2)))


def test_stop_rule_sweeps_of_the_committed_reports():
    """The figure of the appendix on results/diagnostics/<dataset>-qwen2.5-coder-0.5b-stop-rule
    .json: three panels, at least four lambdas per rule and dataset, each rule's chosen point
    ringed where the report puts it, labels readable."""
    import json
    reports = [json.loads((REPO / "results" / "diagnostics" /
                           f"{ds}-qwen2.5-coder-0.5b-stop-rule.json").read_text("utf-8"))
               for ds in STOP_RULE_DATASETS]
    fig = P.stop_rule_sweeps_figure(reports)
    render(fig)
    assert len(_panels(fig)) == 3
    (spare,) = [ax for ax in fig.axes if not ax.axison]  # the fourth slot of the 2 x 2 grid
    assert len(spare.get_legend().get_texts()) == 5  # front, and line and ring per rule
    for ds, ax, report in zip(STOP_RULE_DATASETS, _panels(fig), reports):
        assert ax.get_title().startswith(f"{ds}: ")
        for rule, r in report["rules"].items():
            (line,) = _by_gid(fig, f"sweep:{ds}:{rule}")
            assert len(line.get_xdata()) >= 4
            labels = [a.get_text() for a in _by_gid(fig, f"lambda:{ds}:{rule}")]
            assert len(set(_lambdas_in(labels))) >= 4  # every lambda of the grid is named
            (ring,) = _by_gid(fig, f"chosen:{ds}:{rule}")
            best = r["best"]
            assert (ring.get_xdata()[0], ring.get_ydata()[0]) == pytest.approx(
                (best["tokens"], best["f1"]))
        assert _by_gid(fig, f"pareto:{ds}")
    _assert_labels_readable(fig)


# -- paired_forest_figure -----------------------------------------------------------------
def _pair_rows() -> list[dict]:
    """Rows shaped like results.paired_table's: two made pairs (one of them with a partial
    run), one not made yet, over two metrics."""
    rows = []
    for metric, shift in (("f1", 0.0), ("support_recall", 0.1)):
        rows += [
            {"run": "fixed_k3", "metric": metric, "n": 150, "diff": 0.08 + shift,
             "lo": 0.02 + shift, "hi": 0.14 + shift, "verdict": "A better",
             "status": "complete"},
            {"run": "ircot", "metric": metric, "n": 90, "diff": -0.01, "lo": -0.05,
             "hi": 0.03, "verdict": "no measurable difference",
             "status": "partial: 90 of 150"},
            {"run": "self_ask", "metric": metric, "n": 0, "diff": math.nan, "lo": math.nan,
             "hi": math.nan, "verdict": "not run yet", "status": "not run yet"}]
    return rows


def test_paired_forest_draws_each_made_pair_at_its_interval_and_leaves_unmade_pairs_out():
    fig = P.paired_forest_figure(_pair_rows(), difference="dynakrag minus run")
    render(fig)
    (ax,) = fig.axes  # F1 only by default
    top_down = [t.get_text() for _, t in sorted(zip(ax.get_yticks(), ax.get_yticklabels()),
                                                   key=lambda yt: -yt[0])]
    # the rows' order, the first on top; n in each label, the partial run marked
    assert top_down == ["fixed_k3 (n=150)", "ircot (n=90, partial)"]
    (interval,) = _by_gid(fig, "interval:f1:fixed_k3")
    assert list(interval.get_xdata()) == pytest.approx([0.02, 0.14])
    (dot,) = _by_gid(fig, "diff:f1:fixed_k3")
    assert list(dot.get_xdata()) == pytest.approx([0.08])
    assert dot.get_ydata()[0] > _by_gid(fig, "diff:f1:ircot")[0].get_ydata()[0]
    assert not _by_gid(fig, "interval:f1:self_ask")  # n 0: nothing to draw
    (zero,) = _by_gid(fig, "zero:f1")
    assert list(zero.get_xdata()) == [0, 0]
    assert ax.get_xlabel() == "F1: dynakrag minus run"


def test_paired_forest_colours_by_verdict_and_names_verdicts_in_the_legend():
    fig = P.paired_forest_figure(_pair_rows(), verdict_text={"A better": "DynaKRAG better"})
    (better,) = _by_gid(fig, "interval:f1:fixed_k3")
    (neither,) = _by_gid(fig, "interval:f1:ircot")
    assert better.get_color() == P.VERDICT_COLORS["A better"]
    assert neither.get_color() == P.VERDICT_COLORS["no measurable difference"]
    (legend,) = fig.legends  # one for all panels
    legend = [t.get_text() for t in legend.get_texts()]
    assert legend == ["DynaKRAG better", "worse", "inconclusive at this n"]


def test_paired_forest_gives_each_metric_a_panel_on_the_same_rows():
    fig = P.paired_forest_figure(_pair_rows(), metrics={"f1": "F1", "support_recall": "SR"})
    render(fig)
    assert [ax.get_title().split(",")[0] for ax in fig.axes] == ["F1", "SR"]
    (sr,) = _by_gid(fig, "interval:support_recall:fixed_k3")
    assert list(sr.get_xdata()) == pytest.approx([0.12, 0.24])
    f1_y = _by_gid(fig, "diff:f1:ircot")[0].get_ydata()[0]
    assert _by_gid(fig, "diff:support_recall:ircot")[0].get_ydata()[0] == f1_y


def test_paired_forest_refuses_nothing_to_draw_and_two_rows_on_one_tick():
    unmade = [r for r in _pair_rows() if r["n"] == 0]
    with pytest.raises(ValueError, match="no paired rows"):
        P.paired_forest_figure(unmade)
    twice = [r for r in _pair_rows() if r["run"] == "fixed_k3" and r["metric"] == "f1"] * 2
    with pytest.raises(ValueError, match="names two f1 rows"):
        P.paired_forest_figure(twice)


def _stop_report():
    curve = [{"tau": 1.0, "f1": 0.4, "tokens": 100.0, "stop_early": 1.0},
             {"tau": 0.0, "f1": 0.5, "tokens": 200.0, "stop_early": 0.5},
             {"tau": -1.0, "f1": 0.45, "tokens": 300.0, "stop_early": 0.0}]
    op = {**curve[1], "token_ratio": 0.67}
    st = {"n_questions": 50, "random_curve": [{"c": 0.0, "f1": 0.4, "tokens": 100.0},
                                              {"c": 1.0, "f1": 0.45, "tokens": 300.0}],
          "targets": {"f1/own": {"curve": curve, "operating_point": op},
                      "f1_now/own": {"curve": curve, "operating_point": None},
                      "f1/pooled": {"curve": curve, "operating_point": op}}}
    return {"results": {"hotpotqa/r": {"stop_targets": st}, "musique/r": {"stop_targets": st},
                        "musique/other": {"stop_targets": {"skipped": "too few"}}}}


def test_stop_targets_figure_draws_one_panel_per_dataset_of_the_reader():
    fig = P.stop_targets_figure(_stop_report(), "r")
    axes = fig.get_axes()
    assert [a.get_title() for a in axes] == ["hotpotqa (50 questions)", "musique (50 questions)"]
    # random + two own targets, and one ring (f1_now has no operating point)
    assert len(axes[0].get_lines()) == 4
    labels = [t.get_text() for t in axes[-1].get_legend().get_texts()]
    assert labels == ["random stop", "f1", "f1_now"]
    assert len(P.stop_targets_figure(_stop_report(), "r", pooled=True).get_axes()[0]
               .get_lines()) == 3
    with pytest.raises(ValueError, match="no stop-target results"):
        P.stop_targets_figure(_stop_report(), "other")
