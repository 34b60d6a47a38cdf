"""Trade-off explorer: pick a memory budget, P and N, see which methods fit (chapter 10).

The reader picks the pipeline (P stages, N microbatches per update) among the tables the
chapter computed, a per-device memory budget, and the methods whose trained quality they
accept; the figure (:func:`pipemare_lite.figures.viz.tradeoff_figure`) shows every method's busiest
device against the budget, and the line under it names the engine's pick
(:func:`pipemare_lite.methods.tradeoff.pick_method`): the highest utilization that fits.

The tables (:func:`pipemare_lite.methods.tradeoff.tradeoff_table`) are computed once, by the
chapter; a redraw only restyles a small bar chart, so it takes milliseconds.
:func:`tradeoff_explorer_static` is the HTML book's twin: one table, one slider step per
budget. Nothing here imports torch.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import ipywidgets as widgets
import plotly.graph_objects as go

from pipemare_lite.figures.viz.memory import byte_unit
from pipemare_lite.figures.viz.tradeoff import tradeoff_figure
from pipemare_lite.figures.widgets._explorer import Explorer, figure_widget, show_plotly_figure
from pipemare_lite.methods.tradeoff import pick_method


def _check_tables(tables: Mapping) -> None:
    if not tables:
        raise ValueError("tradeoff_explorer needs at least one table: {(P, N): rows}")
    for key, rows in tables.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise ValueError(f"table keys must be (P, N) pairs, got {key!r}")
        if not rows:
            raise ValueError(f"table {key}: no rows")


def _summary(P, N, rows, budget, candidates) -> str:
    pick = pick_method(rows, budget, candidates)
    unit, size = byte_unit(budget)
    shown = ", ".join(r.label for r in rows if r.method in candidates) or "none"
    label = next((r.label for r in rows if r.method == pick), None)
    answer = f"<b>{html.escape(label)}</b>" if label else "<b>nothing fits</b>"
    return (f"P = {P}, N = {N}, budget {budget / size:.4g} {unit} per device, quality "
            f"accepted for: {html.escape(shown)} &rarr; pick: {answer}")


class TradeoffExplorer(Explorer):
    """The widget returned by :func:`tradeoff_explorer` (see there)."""

    def __init__(self, tables: Mapping, P: int, N: int, budget: float) -> None:
        style = {"description_width": "initial"}
        methods = [r.method for r in next(iter(tables.values()))]
        labels = {r.method: r.label for rows in tables.values() for r in rows}
        peaks = [r.device_peak for rows in tables.values() for r in rows if r.device_peak]
        low, high = math.floor(math.log2(min(peaks))) - 1, math.ceil(math.log2(max(peaks))) + 1
        controls = {
            "P": widgets.ToggleButtons(options=sorted({p for p, _ in tables}), value=P,
                                       description="stages P", style=style),
            "N": widgets.ToggleButtons(options=sorted({n for _, n in tables}), value=N,
                                       description="microbatches N", style=style),
            "budget": widgets.FloatLogSlider(value=budget, base=2, min=low, max=high,
                                             step=0.05, description="budget (bytes)",
                                             readout_format=".3s", style=style),
            "candidates": widgets.SelectMultiple(
                options=[(labels[m], m) for m in methods], value=tuple(methods),
                description="quality accepted", rows=len(methods), style=style),
        }
        self.tables = tables
        self.figure = figure_widget()
        self.summary = widgets.HTML()
        self.pick: str | None = None
        self._drawn = None
        # one axis unit for every table, so bars of two tables compare by eye
        self._unit = byte_unit(max(peaks))[1]
        c = controls
        super().__init__(controls, [widgets.HBox([c["P"], c["N"]]), c["budget"],
                                    widgets.HBox([self.figure, c["candidates"]]), self.summary])
        self.update()

    def _redraw(self, P, N, budget, candidates) -> None:
        if (P, N) not in self.tables:
            have = ", ".join(f"P={p} N={n}" for p, n in self.tables)
            raise ValueError(f"no table for P={P}, N={N}; computed: {have}")
        rows = self.tables[P, N]
        self.pick = pick_method(rows, budget, candidates)
        new = tradeoff_figure(rows, budget, pick=self.pick, unit_bytes=self._unit,
                              title=f"P={P}, N={N}: the busiest device per method")
        if self._drawn != (P, N):  # other bars: draw anew (bars and markers do not restyle
            self.figure.data = []  # into each other)
            show_plotly_figure(self.figure, new)
            self.figure.layout.width = 760
            self._drawn = (P, N)
        else:  # the same bars: only opacity, outline, labels, the budget line and title move
            with self.figure.batch_update():
                for old, trace in zip(self.figure.data, new.data):
                    old.marker.opacity = trace.marker.opacity
                    if trace.type == "bar":
                        old.marker.line.width = trace.marker.line.width
                    else:
                        old.text = trace.text
                self.figure.layout.shapes = new.layout.shapes
                self.figure.layout.annotations = new.layout.annotations
                self.figure.layout.title.text = new.layout.title.text
        self.summary.value = _summary(P, N, rows, budget, candidates)


def tradeoff_explorer(tables: Mapping, *, P: int | None = None, N: int | None = None,
                      budget: float | None = None) -> TradeoffExplorer:
    """A widget over the chapter's trade-off tables.

    Args:
        tables: ``{(P, N): [TradeoffRow, ...]}`` from
            :func:`pipemare_lite.methods.tradeoff.tradeoff_table`, the same methods in every table.
        P, N: the starting table (default: the first key).
        budget: the starting per-device budget in bytes (default: the median device peak).

    Attributes: ``controls`` (``P``, ``N``, ``budget``, ``candidates``), ``figure``,
    ``summary``, ``pick`` (the engine's pick now), ``message``/``error``.
    """
    _check_tables(tables)
    first = next(iter(tables))
    P, N = first[0] if P is None else P, first[1] if N is None else N
    if (P, N) not in tables:
        raise ValueError(f"no table for P={P}, N={N}; computed: {sorted(tables)}")
    if budget is None:
        peaks = sorted(r.device_peak for r in tables[P, N] if r.not_possible is None)
        budget = float(peaks[len(peaks) // 2])
    return TradeoffExplorer(tables, P, N, float(budget))


def tradeoff_explorer_static(rows: Sequence, *, budgets: Sequence[float],
                             title: str = "the busiest device per method") -> go.Figure:
    """The explorer for the HTML book: one table, one slider step per budget (bytes)."""
    rows = list(rows)
    budgets = [float(b) for b in budgets]
    if not budgets or any(not (b >= 0 and math.isfinite(b)) for b in budgets):
        raise ValueError(f"budgets must be finite numbers >= 0, got {budgets}")
    unit, size = byte_unit(max([r.device_peak for r in rows] + budgets + [1]))
    figures = [tradeoff_figure(rows, b, pick=pick_method(rows, b), unit_bytes=size,
                               title=f"{title}: budget {b / size:.4g} {unit}, pick "
                                     f"{pick_method(rows, b) or 'none'}") for b in budgets]
    fig = go.Figure(figures[0])
    steps = []
    for b, f in zip(budgets, figures):
        steps.append({
            "method": "update", "label": f"{b / size:.4g} {unit}",
            "args": [{"marker.opacity": [t.marker.opacity for t in f.data],
                      "marker.line.width": [t.marker.line.width for t in f.data],
                      "text": [t.text for t in f.data]},
                     {"title.text": f.layout.title.text, "shapes": f.layout.shapes,
                      "annotations": f.layout.annotations}],
        })
    fig.update_layout(sliders=[{"active": 0, "steps": steps,
                                "currentvalue": {"prefix": "budget per device: "},
                                "pad": {"t": 50}}], height=520)
    return fig
