"""Granularity explorer: a pipeline's stages on chapter 06's map, beside its runs (chapter 07).

The reader picks the number of stages P (among the pipelines that were trained), the method
whose delays place the stages (async or PipeDream) and a learning rate; the widget shows the
training loss of the runs at that P (trained at the chapter's lr, drawn as they were: the lr
slider does not retrain anything), the stability map with every stage at
``(lr * lam_s, tau_s)`` (filled inside the stable region, hollow outside), and a table per
stage: delay, curvature, ``lr * lam``, bound, largest stable lr, spectral radius.

Everything is precomputed: the map once (:func:`~pipemare_lite.analysis.theory.stability_grid`), the
runs by the chapter; moving a control restyles the stage markers and rewrites the table, so
a redraw takes milliseconds. :func:`granularity_explorer_static` is the HTML book's twin: the
map with the stages of every P, one slider step per learning rate. Nothing here imports
torch (a :class:`~pipemare_lite.training.history.History` is plain Python).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import ipywidgets as widgets
import numpy as np
import plotly.graph_objects as go

from pipemare_lite.analysis.stage_stability import stage_points
from pipemare_lite.analysis.theory import stability_grid
from pipemare_lite.figures.viz.curves import loss_curves
from pipemare_lite.figures.viz.stages import SYMBOLS, stage_map_figure, stage_trace
from pipemare_lite.figures.widgets._explorer import Explorer, figure_widget, show_plotly_figure

#: The map's steps lr * lam (log axis) and delays.
MAP_ALPHAS = np.geomspace(1e-3, 4.0, 90)
MAP_TAUS = tuple(range(0, 17))
#: Methods whose measured delays can place the stages.
DELAY_METHODS = ("async", "pipedream")


def _delays(run: Mapping, method: str) -> list[int]:
    history = run["histories"][method]
    delays = history["forward_delay_max"] if isinstance(history, Mapping) \
        else history.forward_delay_max
    return [int(d) for d in delays]


def _check_runs(runs: Mapping) -> None:
    if not runs:
        raise ValueError("granularity_explorer needs at least one pipeline: {P: run}")
    for P, run in runs.items():
        if "histories" not in run or "sharpness" not in run:
            raise ValueError(f"P={P}: a run needs 'histories' (method -> history) and "
                             f"'sharpness' (one value per stage); got {sorted(run)}")
        missing = [m for m in DELAY_METHODS if m not in run["histories"]]
        if missing:
            raise ValueError(f"P={P}: no history for {', '.join(missing)}")
        for method in DELAY_METHODS:
            delays = _delays(run, method)
            if len(delays) != len(run["sharpness"]):
                raise ValueError(f"P={P}, {method}: {len(delays)} delays for "
                                 f"{len(run['sharpness'])} sharpness values")
            if max(delays) > MAP_TAUS[-1]:
                raise ValueError(f"P={P}, {method}: delay {max(delays)} is off the map "
                                 f"(up to {MAP_TAUS[-1]})")


def points_for(runs: Mapping, P: int, method: str, lr: float) -> list:
    """The stage points of pipeline ``P`` with ``method``'s measured delays at ``lr``."""
    if P not in runs:
        raise ValueError(f"no pipeline with P={P}; trained: {', '.join(map(str, runs))}")
    if method not in DELAY_METHODS:
        raise ValueError(f"method must be one of {', '.join(DELAY_METHODS)}, got {method!r}")
    return stage_points(lr, runs[P]["sharpness"], _delays(runs[P], method))


def stage_table_html(points) -> str:
    """The per-stage table under the map."""
    rows = "".join(
        f"<tr><td>{p.stage}</td><td>{p.delay}</td><td>{p.sharpness:.3g}</td>"
        f"<td>{p.step:.3g}</td><td>{p.bound:.3g}</td><td>{p.stable_lr:.3g}</td>"
        f"<td>{p.radius:.4f}</td><td>{'inside' if p.inside else 'OUTSIDE'}</td></tr>"
        for p in points)
    head = ("<tr><th>stage</th><th>delay tau</th><th>sharpness lambda</th><th>lr * lambda</th>"
            "<th>bound 2 sin(pi/(2(2tau+1)))</th><th>largest stable lr</th>"
            "<th>spectral radius</th><th>on the map</th></tr>")
    return ('<table style="border-collapse:collapse" border="1" cellpadding="4">'
            + head + rows + "</table>")


class GranularityExplorer(Explorer):
    """The widget returned by :func:`granularity_explorer` (see there)."""

    def __init__(self, runs: Mapping, P: int, method: str, lr: float, trained_lr: float) -> None:
        style = {"description_width": "initial"}
        controls = {
            "P": widgets.ToggleButtons(options=list(runs), value=P, description="stages P",
                                       style=style),
            "method": widgets.ToggleButtons(options=list(DELAY_METHODS), value=method,
                                            description="delays of", style=style),
            "lr": widgets.FloatLogSlider(value=lr, base=10, min=-3, max=0, step=0.01,
                                         description="learning rate", readout_format=".3g",
                                         style=style),
        }
        self.runs, self.trained_lr = runs, trained_lr
        self.curves = figure_widget()
        self.map = figure_widget()
        self.table = widgets.HTML()
        self.points: list = []
        self._curves_for = None
        self._grid = stability_grid(MAP_ALPHAS, MAP_TAUS)
        c = controls
        super().__init__(controls, [widgets.HBox([c["P"], c["method"]]), c["lr"],
                                    widgets.HBox([self.curves, self.map]), self.table])
        self.update()

    def _redraw(self, P, method, lr) -> None:
        self.points = points_for(self.runs, P, method, lr)
        if self._curves_for != P:  # the runs change only with P
            histories = self.runs[P]["histories"]
            show_plotly_figure(self.curves, loss_curves(
                {name: histories[name] for name in histories}, log_y=True,
                title=f"P={P}: training loss (trained at lr {self.trained_lr:g})"))
            self.curves.layout.width = 520
            self._curves_for = P
        title = (f"P={P}, {method} delays, lr {lr:.3g}: "
                 f"{sum(not p.inside for p in self.points)} of {P} stages outside")
        if not self.map.data:  # the first drawing builds the map; later ones move markers
            show_plotly_figure(self.map, stage_map_figure(
                {f"P={P}": self.points}, alphas=MAP_ALPHAS, taus=MAP_TAUS, grid=self._grid,
                title=title))
            self.map.layout.width = 600
        else:
            new = stage_trace(f"P={P}", self.points)
            with self.map.batch_update():
                marker = self.map.data[-1]
                marker.name, marker.x, marker.y = new.name, new.x, new.y
                marker.marker.symbol, marker.marker.color = new.marker.symbol, new.marker.color
                marker.customdata = new.customdata
                self.map.layout.title.text = title
        self.table.value = stage_table_html(self.points)


def granularity_explorer(
    runs: Mapping, *, P: int | None = None, method: str = "async", lr: float | None = None,
    trained_lr: float,
) -> GranularityExplorer:
    """A widget over the chapter's trained pipelines.

    Args:
        runs: ``{P: {"histories": {method: History}, "sharpness": [lam_s per stage]}}``, the
            histories including ``"async"`` and ``"pipedream"`` (their measured
            ``forward_delay_max`` place the stages) and any others to draw (``"1f1b"``).
        P, method, lr: the starting controls (default: the largest P, async, ``trained_lr``).
        trained_lr: the learning rate the runs were trained with (named in the figure).

    Attributes: ``controls`` (``P``, ``method``, ``lr``), ``curves`` and ``map``
    (FigureWidgets), ``table``, ``points`` (the current StagePoints), ``message``/``error``.
    """
    _check_runs(runs)
    P = max(runs) if P is None else P
    points_for(runs, P, method, trained_lr if lr is None else lr)  # bad choices fail here
    return GranularityExplorer(runs, P, method, trained_lr if lr is None else lr, trained_lr)


def granularity_explorer_static(
    runs: Mapping, *, lrs: Sequence[float], method: str = "async",
) -> go.Figure:
    """The explorer's map for the HTML book: every P at once, one slider step per lr."""
    _check_runs(runs)
    lrs = [float(x) for x in lrs]
    if not lrs or any(not (x > 0 and math.isfinite(x)) for x in lrs):
        raise ValueError(f"lrs must be positive numbers, got {lrs}")
    first = {f"P={P}": points_for(runs, P, method, lrs[0]) for P in runs}
    fig = stage_map_figure(first, alphas=MAP_ALPHAS, taus=MAP_TAUS,
                           grid=stability_grid(MAP_ALPHAS, MAP_TAUS),
                           title=f"every stage on the map ({method} delays), lr {lrs[0]:.3g}")
    markers = list(range(len(fig.data) - len(runs), len(fig.data)))
    steps = []
    for lr in lrs:
        traces = [stage_trace(f"P={P}", points_for(runs, P, method, lr), SYMBOLS[k])
                  for k, P in enumerate(runs)]
        steps.append({
            "method": "update", "label": f"{lr:.3g}",
            "args": [{"x": [t.x for t in traces], "marker": [t.marker for t in traces],
                      "customdata": [t.customdata for t in traces]},
                     {"title.text": f"every stage on the map ({method} delays), lr {lr:.3g}"},
                     markers],
        })
    fig.update_layout(sliders=[{"active": 0, "steps": steps,
                                "currentvalue": {"prefix": "learning rate: "}, "pad": {"t": 50}}],
                      height=520)
    return fig
