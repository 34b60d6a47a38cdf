"""Staleness explorer: which weight versions each microbatch meets (chapter 05).

Pick a method, P stages, N microbatches per update, a number of updates and a synchronous
warm-up; see the stage x microbatch heatmap of a delay, then pick one microbatch and follow
its path: the version it met at each stage at F and at B, and the version its gradient
updates. A table puts the measured steady-state delay next to the closed form.
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from pipemare_lite.schedules.registry import SCHEDULE_NAMES, build_schedule
from pipemare_lite.staleness import (
    expected_forward_delay,
    microbatch_path,
    stage_delays,
    steady_state_minibatches,
    weight_versions,
)
from pipemare_lite.viz.staleness import path_figure, staleness_heatmap
from pipemare_lite.widgets._explorer import Explorer, figure_widget, show_plotly_figure

#: Quantities the heatmap can show.
HEATMAP_QUANTITIES = ("forward_delay", "discrepancy", "backward_delay")

#: The closed form of the steady-state forward delay, as the table prints it.
CLOSED_FORMS = {
    "async": "ceil((2(P - i) + 1) / N), i = stage + 1",
    "pipedream": "ceil((P - 1 - stage) / N)",
    "2bw": "1",
}


def closed_form_text(name: str) -> str:
    """The formula shown beside the measured delay of schedule ``name``."""
    return CLOSED_FORMS.get(name, "0 (synchronous: flushed every minibatch)")


def delay_table_html(schedule, table) -> str:
    """HTML table: per stage, measured steady-state delays beside the closed form."""
    steady = steady_state_minibatches(schedule)
    chosen = steady if len(steady) else None
    delays = stage_delays(table, minibatches=chosen)
    P, N = schedule.num_stages, schedule.num_microbatches
    rows = []
    for d in delays:
        try:
            expected = str(expected_forward_delay(schedule.name, P, N, d.stage % P))
        except ValueError:
            expected = "n/a"
        rows.append(
            f"<tr><td>{d.stage}</td><td>{d.mean_forward_delay:.2f} "
            f"({d.min_forward_delay}..{d.max_forward_delay})</td><td>{expected}</td>"
            f"<td>{d.mean_discrepancy:.2f} ({d.min_discrepancy}..{d.max_discrepancy})</td></tr>"
        )
    span = (
        f"minibatches {steady.start}..{steady.stop - 1} (steady state)"
        if chosen is not None
        else "all minibatches (too few for a steady state: add updates)"
    )
    return (
        f"<p>Forward delay in updates, measured over {html.escape(span)}; closed form "
        f"<code>{html.escape(closed_form_text(schedule.name))}</code>.</p>"
        '<table style="border-collapse:collapse" border="1" cellpadding="4">'
        "<tr><th>stage</th><th>measured forward delay, mean (min..max)</th>"
        "<th>closed form</th><th>discrepancy F to B, mean (min..max)</th></tr>"
        + "".join(rows)
        + "</table>"
    )


class StalenessExplorer(Explorer):
    """The widget returned by :func:`staleness_explorer` (see there)."""

    def __init__(self, method: str, stages: int, microbatches: int, warmup: int,
                 minibatches: int, quantity: str) -> None:
        style = {"description_width": "initial"}
        controls = {
            "method": widgets.Dropdown(options=SCHEDULE_NAMES, value=method,
                                       description="method"),
            "quantity": widgets.Dropdown(options=HEATMAP_QUANTITIES, value=quantity,
                                         description="heatmap"),
            "stages": widgets.IntSlider(value=stages, min=1, max=12, description="P stages",
                                        style=style),
            "microbatches": widgets.IntSlider(value=microbatches, min=1, max=12,
                                              description="N per update", style=style),
            "minibatches": widgets.IntSlider(value=minibatches, min=1, max=16,
                                             description="updates", style=style),
            "warmup": widgets.IntSlider(value=warmup, min=0, max=15,
                                        description="sync warm-up", style=style),
            "microbatch": widgets.IntSlider(value=0, min=0,
                                            max=max(microbatches * minibatches - 1, 0),
                                            description="follow microbatch", style=style),
        }
        self.figure = figure_widget()
        self.path = figure_widget()
        self.summary = widgets.HTML()
        self.schedule = None
        self.table = None
        c = controls
        super().__init__(
            controls,
            [
                widgets.VBox([
                    widgets.HBox([c["method"], c["quantity"]]),
                    widgets.HBox([c["stages"], c["microbatches"]]),
                    widgets.HBox([c["minibatches"], c["warmup"]]),
                ]),
                self.figure,
                c["microbatch"],
                self.path,
                self.summary,
            ],
        )
        self.update()

    def _redraw(self, method, quantity, stages, microbatches, minibatches, warmup,
                microbatch) -> None:
        schedule = build_schedule(method, stages, microbatches, num_minibatches=minibatches,
                                  warmup_minibatches=warmup)
        table = weight_versions(schedule)
        picker = self.controls["microbatch"]
        picker.max = table.num_microbatches - 1  # clamps the value if it was larger
        microbatch = picker.value
        show_plotly_figure(
            self.figure, staleness_heatmap(table, quantity, highlight_microbatch=microbatch)
        )
        show_plotly_figure(self.path, path_figure(microbatch_path(table, microbatch)))
        self.summary.value = delay_table_html(schedule, table)
        self.schedule, self.table = schedule, table


def staleness_explorer(
    method: str = "async",
    stages: int = 4,
    microbatches: int = 4,
    warmup: int = 0,
    *,
    minibatches: int = 6,
    quantity: str = "forward_delay",
) -> StalenessExplorer:
    """A widget to explore weight staleness (introduced in chapter 05).

    Controls (``w.controls[name]``): ``method`` (a schedule name), ``quantity`` (heatmap),
    ``stages`` (P), ``microbatches`` (N per update), ``minibatches`` (updates per stage),
    ``warmup`` (synchronous minibatches first), ``microbatch`` (whose path to follow).
    Attributes: ``figure`` (heatmap), ``path`` (the followed microbatch), ``summary``
    (measured vs closed-form delays), ``message`` and ``error`` (the engine's refusal, if
    any), ``schedule`` and ``table`` (what is drawn). ``w.update()`` redraws.
    """
    if method not in SCHEDULE_NAMES:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(SCHEDULE_NAMES)}")
    if quantity not in HEATMAP_QUANTITIES:
        raise ValueError(
            f"unknown quantity {quantity!r}; allowed: {', '.join(HEATMAP_QUANTITIES)}"
        )
    return StalenessExplorer(method, stages, microbatches, warmup, minibatches, quantity)
