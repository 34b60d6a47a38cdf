"""The trace explorer (chapter 11): a measured run beside the simulator's plan of it.

Pick a run (one schedule executed by the distributed executor) and what the simulator is
fed: the **measured** op costs (median durations read off the trace, per stage) or the
book's **default** costs (F = 1, B = 2). Above, the simulated Gantt; below, the measured
one; under them a table of utilization per rank, measured beside simulated. With measured
costs, what still separates the two is what the real run lost to starting, communicating
and sharing cores. Static twin for the HTML book: :func:`trace_explorer_static`.

Torch-free at import; reading costs off a trace uses
:mod:`pipemare_lite.analysis.utilization`, imported when a figure is drawn.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

import ipywidgets as widgets
import plotly.graph_objects as go

from pipemare_lite.analysis.simulate import OpCosts, metrics, simulate
from pipemare_lite.analysis.timeline import Timeline
from pipemare_lite.figures.viz.gantt_chart import gantt_pair
from pipemare_lite.figures.widgets._explorer import Explorer, figure_widget, show_plotly_figure

#: What the simulator can be fed.
COST_SOURCES = ("measured", "default")


def _check_traces(traces: Mapping) -> None:
    if not traces:
        raise ValueError("traces is empty; give {label: measured Timeline}")
    for label, trace in traces.items():
        if not isinstance(trace, Timeline) or trace.source != "measured":
            raise ValueError(f"traces[{label!r}] must be a measured Timeline "
                             f"(a distributed run's .trace), got {type(trace).__name__}")


def planned_for(trace: Timeline, costs: str) -> Timeline:
    """The simulator's timeline of the trace's schedule, fed ``costs`` (see COST_SOURCES)."""
    if costs not in COST_SOURCES:
        raise ValueError(f"unknown costs {costs!r}; allowed: {', '.join(COST_SOURCES)}")
    if costs == "default":
        return simulate(trace.schedule, OpCosts())
    from pipemare_lite.analysis.utilization import measured_costs

    return simulate(trace.schedule, measured_costs(trace))


def utilization_table_html(planned: Timeline, measured: Timeline) -> str:
    """Utilization per rank and overall, simulated beside measured, as an HTML table."""
    sim, real = metrics(planned), metrics(measured)
    rows = [(f"rank {r}", s, m) for r, (s, m) in
            enumerate(zip(sim.utilization_per_rank, real.utilization_per_rank))]
    rows.append(("all ranks", sim.utilization, real.utilization))
    cells = "".join(f"<tr><td>{html.escape(name)}</td><td>{s:.2f}</td><td>{m:.2f}</td></tr>"
                    for name, s, m in rows)
    return ("<table><tr><th></th><th>simulated</th><th>measured</th></tr>"
            f"{cells}</table>")


class TraceExplorer(Explorer):
    """The widget returned by :func:`trace_explorer` (see there)."""

    def __init__(self, traces: Mapping, run: str, costs: str) -> None:
        style = {"description_width": "initial"}
        controls = {
            "run": widgets.ToggleButtons(options=list(traces), value=run, description="run",
                                         style=style),
            "costs": widgets.ToggleButtons(options=list(COST_SOURCES), value=costs,
                                           description="simulator fed", style=style),
        }
        self.traces = traces
        self.figure = figure_widget()
        self.table = widgets.HTML()
        self.planned: Timeline | None = None
        super().__init__(controls, [widgets.HBox([controls["run"], controls["costs"]]),
                                    self.figure, self.table])
        self.update()

    def _redraw(self, run, costs) -> None:
        measured = self.traces[run]
        self.planned = planned_for(measured, costs)
        title = f"{run}: simulated ({costs} costs) above, measured below"
        show_plotly_figure(self.figure, gantt_pair(self.planned, measured, title=title))
        self.table.value = utilization_table_html(self.planned, measured)


def trace_explorer(traces: Mapping, *, run: str | None = None,
                   costs: str = "measured") -> TraceExplorer:
    """A widget over measured runs.

    Args:
        traces: ``{label: measured Timeline}``, e.g. ``{"1f1b": result.trace}``.
        run, costs: the starting controls (default: the first run, measured costs).

    Attributes: ``controls`` (``run``, ``costs``), ``figure`` (FigureWidget), ``table``,
    ``planned`` (the simulated Timeline shown), ``message``/``error``.
    """
    _check_traces(traces)
    run = next(iter(traces)) if run is None else run
    if run not in traces:
        raise ValueError(f"unknown run {run!r}; allowed: {', '.join(traces)}")
    planned_for(traces[run], costs)  # a bad cost source fails here
    return TraceExplorer(traces, run, costs)


def trace_explorer_static(traces: Mapping, *, costs: str = "measured") -> go.Figure:
    """The explorer for the HTML book: one figure, a dropdown to pick the run."""
    _check_traces(traces)
    figures = {label: gantt_pair(planned_for(t, costs), t) for label, t in traces.items()}
    first = next(iter(figures.values()))
    out = go.Figure(layout=first.layout)
    buttons, start = [], 0
    counts = [len(f.data) for f in figures.values()]
    for k, (label, fig) in enumerate(figures.items()):
        for trace in fig.data:
            trace.visible = k == 0
            out.add_trace(trace)
        visible = [False] * sum(counts)
        visible[start:start + counts[k]] = [True] * counts[k]
        start += counts[k]
        util = metrics(traces[label]).utilization
        buttons.append({"label": label, "method": "update",
                        "args": [{"visible": visible},
                                 {"title.text": f"{label}: simulated ({costs} costs) above, "
                                                f"measured below; measured utilization "
                                                f"{util:.2f}"}]})
    out.update_layout(updatemenus=[{"buttons": buttons, "direction": "down", "x": 0.0,
                                    "xanchor": "left", "y": 1.08, "yanchor": "bottom"}],
                      title={"text": buttons[0]["args"][1]["title.text"]},
                      margin={"t": 120})
    return out
