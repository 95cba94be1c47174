"""Points and labels on a cost/quality axes: the Pareto front of a set of points, lambda labels
beside the points of a sweep, and label placement that keeps nearby labels apart
(:func:`place_labels`; :func:`overlapping_labels` checks it). :mod:`.plots` draws with them."""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from matplotlib.axes import Axes
from matplotlib.text import Annotation
from matplotlib.transforms import Bbox

# Candidate spots around a point, in points: the label's corner sits LABEL_GAP from the point,
# and each further level moves it one label height (plus LABEL_PAD) away.
LABEL_GAP, LABEL_PAD, LABEL_LEVELS = 4.0, 1.0, 10


def finite(*values: Any) -> bool:
    """Every value is a finite number."""
    try:
        return all(math.isfinite(float(v)) for v in values)
    except (TypeError, ValueError):
        return False


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point dominates (cost, quality): none is at most as
    costly and at least as good while strictly better in one of the two. Sorted by cost,
    then by quality descending, then by index (ties: equal points are all kept)."""
    def dominated(i: int) -> bool:
        ci, qi = points[i]
        return any(cj <= ci and qj >= qi and (cj < ci or qj > qi)
                   for j, (cj, qj) in enumerate(points) if j != i)
    keep = [i for i in range(len(points)) if not dominated(i)]
    return sorted(keep, key=lambda i: (points[i][0], -points[i][1], i))


def lambda_label(*lams: float) -> str:
    """The annotation of one sweep point, e.g. ``λ=0``, ``λ=3e-05``, ``λ=0.001``; lambdas
    that land on the same point share one label (``λ=0, 1e-05``)."""
    return "λ=" + ", ".join(f"{float(lam):g}" for lam in lams)
LABEL_COLOR = "#08306b"


def annotate_lambdas(ax: Axes, points: Iterable[tuple[float, float]], lams: Iterable[float],
                     *, color: str = LABEL_COLOR, fontsize: float = 7.5, below: bool = False,
                     clearance: float = 3.0, gid: str | None = None,
                     avoid: Iterable[tuple[float, ...]] = (),
                     inside: bool = False, nearest: bool = False) -> list[Annotation]:
    """Label each sweep point with its lambda, without labels overlapping.

    Lambdas on the same point share one :func:`lambda_label`; points that are close on screen
    get their labels staggered by :func:`place_labels`, which also keeps clear of labels
    already on ``ax`` (so two curves on one axes can be labelled by two calls, ``below=True``
    for the second to put its labels under its points first). Placement is measured in
    display space: call it once the axes limits and the layout are final (after
    ``fig.tight_layout()``). ``clearance``: the half-width in points, around every labelled
    point, that labels keep free (the marker's radius; raise it for big markers; below
    ``LABEL_GAP - LABEL_PAD`` a label can sit at the nearest spot); ``avoid``: further points
    in data coordinates kept free too (another curve's points, a ring around a point), as
    ``(x, y)`` with the same half-width or ``(x, y, half-width in points)``; ``inside``:
    keep the labels within the axes (at the price of moving them further out); ``nearest``:
    keep each label no nearer to another point than to its own (see :func:`place_labels`).
    Non-finite points are skipped. Returns the annotations."""
    at: dict[tuple[float, float], list[float]] = {}
    for (x, y), lam in zip(points, lams):
        if finite(x, y):
            at.setdefault((float(x), float(y)), []).append(float(lam))
    anns = [ax.annotate(lambda_label(*ls), (x, y), xytext=(4, 4), textcoords="offset points",
                        fontsize=fontsize, color=color, gid=gid)
            for (x, y), ls in at.items()]
    place_labels(anns, below=below, clearance=clearance, avoid=avoid, inside=inside,
                 nearest=nearest)
    return anns


def place_labels(annotations: Sequence[Annotation], below: bool = False,
                 clearance: float = 3.0, avoid: Iterable[tuple[float, ...]] = (),
                 inside: bool = False, nearest: bool = False) -> None:
    """Move each annotation (text offset in points from its point) to the first free spot.

    Spots are tried nearest first: right of the point above (``below``: under) it, then on
    the other vertical side, then left of the point, then one label height further out, and
    so on. A spot is free when its box, padded by ``LABEL_PAD`` points, overlaps no label
    placed before it, no other text on the same axes and no annotated point, nor any point of
    ``avoid`` (a square of half-width ``clearance`` points around each; an ``avoid`` point
    given as ``(x, y, half-width)`` in data coordinates and points brings its own),
    and (``inside``) lies within the axes, and (``nearest``) lies no nearer to another point,
    annotated or avoided, than to its own (so that a label under a neighbour is not read as
    the neighbour's). Annotations are placed left to right; one with no free spot keeps the
    spot of least overlap (a spot outside the axes or nearer to another point counted as
    overlapping by the label's area outside, or by its whole area).
    Call again after the axes are resized (the offsets are in points, the distances between
    points are not)."""
    anns = [a for a in annotations if a.get_text()]
    if not anns:
        return
    ax = anns[0].axes
    ax.get_xlim()  # the view limits are computed lazily; transData needs them now
    fig = ax.figure
    to_px = fig.dpi / 72.0
    mine = set(map(id, anns))
    obstacles = [t.get_window_extent() for t in ax.texts
                 if id(t) not in mine and t.get_visible() and t.get_text()]
    dots = [ax.transData.transform(a.xy) for a in anns]
    r = clearance * to_px
    squares = [(x, y, r) for x, y in dots]
    for p in avoid:
        if finite(*p):
            x, y = ax.transData.transform(p[:2])
            squares.append((x, y, float(p[2]) * to_px if len(p) > 2 else r))
    obstacles += [Bbox.from_extents(x - h, y - h, x + h, y + h) for x, y, h in squares]
    frame = ax.get_window_extent() if inside else None
    vertical = (-1, 1) if below else (1, -1)
    order = sorted(range(len(anns)), key=lambda i: (dots[i][0], dots[i][1]))
    for i in order:
        ann = anns[i]
        ann.set_ha("left")
        ann.set_va("bottom")
        ann.xyann = (LABEL_GAP, LABEL_GAP)
        step = ann.get_window_extent().height / to_px + LABEL_PAD
        best, best_cost = None, math.inf
        for spot in _spots(step, vertical):
            drawn = _set_spot(ann, spot)
            box = drawn.padded(to_px * LABEL_PAD)
            cost = sum(_overlap_area(box, o) for o in obstacles)
            if frame is not None:  # the part of the label outside the axes
                cost += drawn.width * drawn.height - _overlap_area(drawn, frame)
            if nearest:
                own = _box_distance(drawn, *dots[i])
                if any(_box_distance(drawn, x, y) < own - 0.5 for x, y, _ in squares):
                    cost += drawn.width * drawn.height
            if cost < best_cost:
                best, best_cost = spot, cost
                if cost == 0:
                    break
        obstacles.append(_set_spot(ann, best))


def _box_distance(box: Bbox, x: float, y: float) -> float:
    """Distance from the point (x, y) to the box, 0 inside it (display units)."""
    return math.hypot(max(box.x0 - x, 0.0, x - box.x1), max(box.y0 - y, 0.0, y - box.y1))


def _spots(step: float, vertical: tuple[int, int]):
    """(offset in points, ha, va) nearest first: per level, right then left of the point."""
    for level in range(LABEL_LEVELS):
        dy = LABEL_GAP + level * step
        for side in (1, -1):
            for up in vertical:
                yield ((LABEL_GAP * side, dy * up), "left" if side > 0 else "right",
                       "bottom" if up > 0 else "top")


def _set_spot(ann: Annotation, spot: tuple) -> Bbox:
    (dx, dy), ha, va = spot
    ann.xyann = (dx, dy)
    ann.set_ha(ha)
    ann.set_va(va)
    return ann.get_window_extent()


def _overlap_area(a: Bbox, b: Bbox) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def overlapping_labels(annotations: Sequence[Annotation]) -> list[tuple[int, int]]:
    """Index pairs of the annotations whose drawn boxes overlap (empty when all are apart)."""
    boxes = [a.get_window_extent() for a in annotations]
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes))
            if _overlap_area(boxes[i], boxes[j]) > 0]
