"""The interactive trajectory explorer: :class:`Explorer`, an ipywidgets front end.

A question dropdown (question text and type), a method dropdown and a second method for the
side-by-side view, a step slider with prev/next buttons that reveals the trajectory step by
step, and an HTML pane. ipywidgets is imported only when the widget is first built; without a
live kernel (a static book build, nbval) the object still shows the static HTML view of
:mod:`dynakrag_lab.report.explorer.render`.
"""
from __future__ import annotations

from typing import Mapping, Sequence

from .render import _E, _FONT, render_comparison_html, render_html

__all__ = ["Explorer"]


# -- widget --------------------------------------------------------------------------------
class Explorer:
    """Interactive explorer over ``{method: {question id: record}}``.

    A question dropdown (question text and type), a method dropdown and a second method for the
    side-by-side view, a step slider with prev/next buttons that reveals the trajectory step by
    step, and an HTML pane. Without a live kernel, :meth:`static_html` (shown by
    ``_ipython_display_`` / ``_repr_html_`` under the widget) has the full trajectory.
    """

    def __init__(self, records_by_method: Mapping[str, Mapping[str, Mapping]],
                 method: str | None = None, compare: str | None = None):
        self.records = {m: dict(r) for m, r in records_by_method.items() if r}
        if not self.records:
            raise ValueError("no records")
        self.methods = list(self.records)
        self.method = method if method in self.records else self.methods[0]
        others = [m for m in self.methods if m != self.method]
        self.compare = compare if (compare in self.records and compare != self.method) else \
            (others[0] if others else None)
        # Questions in the first method's order; those every method has come first.
        order: list[str] = []
        for m in self.methods:
            for qid in self.records[m]:
                if qid not in order:
                    order.append(qid)
        common = [q for q in order if all(q in self.records[m] for m in self.methods)]
        self.question_ids = common + [q for q in order if q not in common]
        self._widget = None

    # -- data access
    def record(self, method: str | None, question_id: str) -> dict | None:
        if method is None:
            return None
        return self.records.get(method, {}).get(question_id)

    def any_record(self, question_id: str) -> dict:
        for m in self.methods:
            if question_id in self.records[m]:
                return self.records[m][question_id]
        raise KeyError(question_id)

    def default_question(self) -> str:
        """The first question both shown methods have, preferring one where their support
        recall differs (the interesting case)."""
        both = [q for q in self.question_ids
                if self.record(self.method, q) and (self.compare is None
                                                    or self.record(self.compare, q))]
        for q in both:
            a, b = self.record(self.method, q), self.record(self.compare, q)
            if b is not None and a.get("support_recall") != b.get("support_recall"):
                return q
        return (both or self.question_ids)[0]

    def question_label(self, qid: str) -> str:
        r = self.any_record(qid)
        q = str(r.get("question", ""))
        q = q if len(q) <= 90 else q[:87] + "..."
        return f"[{r.get('type', '?')}] {q}"

    def n_steps(self, question_id: str, methods: Sequence[str | None] = ()) -> int:
        ms = methods or (self.method, self.compare)
        return max((len(r.get("trace", [])) for m in ms
                    if (r := self.record(m, question_id)) is not None), default=0)

    def html(self, question_id: str | None = None, method: str | None = None,
             compare: str | None = None, upto: int | None = None) -> str:
        qid = question_id or self.default_question()
        m = method or self.method
        c = compare if compare is not None else self.compare
        c = None if c in ("", m) else c
        a, b = self.record(m, qid), self.record(c, qid)
        if a is None and b is None:
            return f'<div style="{_FONT}">no record for {_E(qid)}</div>'
        if a is None or (c is not None and b is None):
            missing = m if a is None else c
            note = (f'<div style="{_FONT};color:#a00">{_E(missing)} has no record for this '
                    f'question</div>')
            return note + render_html(a or b, upto)
        return render_comparison_html(a, b, upto, names=[m, c]) if b is not None else \
            render_html(a, upto)

    def static_html(self, question_id: str | None = None) -> str:
        """The full trajectory (both methods side by side) of one question, no kernel needed."""
        return self.html(question_id)

    # -- widget
    def _build(self):
        import ipywidgets as w  # heavy optional dependency
        opts = [(self.question_label(q), q) for q in self.question_ids]
        self.w_question = w.Dropdown(options=opts, value=self.default_question(),
                                     description="question", layout=w.Layout(width="95%"))
        self.w_method = w.Dropdown(options=self.methods, value=self.method,
                                   description="method")
        self.w_compare = w.Dropdown(options=[("(none)", "")] + [(m, m) for m in self.methods],
                                    value=self.compare or "", description="vs")
        n = self.n_steps(self.w_question.value)
        self.w_step = w.IntSlider(value=n, min=0, max=max(n, 1), description="step",
                                  continuous_update=False)
        self.w_prev = w.Button(description="◀ prev", layout=w.Layout(width="80px"))
        self.w_next = w.Button(description="next ▶", layout=w.Layout(width="80px"))
        self.w_html = w.HTML()
        self.w_question.observe(self._on_change, names="value")
        self.w_method.observe(self._on_change, names="value")
        self.w_compare.observe(self._on_change, names="value")
        self.w_step.observe(self._on_step, names="value")
        self.w_prev.on_click(lambda _: self._move(-1))
        self.w_next.on_click(lambda _: self._move(+1))
        self._render()
        return w.VBox([self.w_question, w.HBox([self.w_method, self.w_compare]),
                       w.HBox([self.w_step, self.w_prev, self.w_next]), self.w_html])

    def _move(self, delta: int) -> None:
        self.w_step.value = min(self.w_step.max, max(0, self.w_step.value + delta))

    def _on_change(self, _change=None) -> None:
        methods = (self.w_method.value, self.w_compare.value or None)
        n = self.n_steps(self.w_question.value, methods)
        self.w_step.max = max(n, 1)
        self.w_step.value = n  # a new question or method starts fully revealed
        self._render()

    def _on_step(self, _change=None) -> None:
        self._render()

    def _render(self) -> None:
        self.w_html.value = self.html(self.w_question.value, self.w_method.value,
                                      self.w_compare.value or "", self.w_step.value)

    @property
    def widget(self):
        if self._widget is None:
            self._widget = self._build()
        return self._widget

    def display(self) -> None:
        from IPython.display import display  # heavy optional dependency
        display(self)

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display  # heavy optional dependency
        display(self.widget)
        display(HTML('<details open><summary style="color:#666;font-size:12px">static view '
                     '(full trajectory; shown without a live kernel too)</summary>'
                     + self.static_html() + "</details>"))

    def _repr_html_(self) -> str:
        return self.static_html()
