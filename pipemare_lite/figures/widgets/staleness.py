"""Staleness explorer: which weight versions each microbatch meets (chapter 05).

Pick a method, P stages, N microbatches per update, a number of updates, a synchronous
warm-up and (for the lock-step ``async`` schedule) the order of F and B inside a tick; see
the stage x microbatch heatmap of a delay, then pick one microbatch and follow its path:
the version it met at each stage at F and at B, and the version its gradient updates.

Two tables put measurement beside the closed forms. Per stage: the steady-state forward
delay read from the schedule's weight versions (mean, min..max, and one value per position
in the minibatch), the engine's derived formula (exact, by position j) and the recalled one
(the worst case). For the followed microbatch: its versions and delay at every stage
beside the derived formula at its position. Given ``measured`` (the versions an executor
recorded, :func:`pipemare_lite.analysis.staleness.versions_from_trace`), both tables add the
executed run's numbers whenever the controls describe the schedule that ran.
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from pipemare_lite.analysis.staleness import (
    VersionTable,
    exact_forward_delay,
    expected_forward_delay,
    microbatch_path,
    stage_delays,
    steady_state_minibatches,
    weight_versions,
)
from pipemare_lite.figures.viz.staleness import path_figure, staleness_heatmap
from pipemare_lite.figures.widgets._explorer import Explorer, figure_widget, show_plotly_figure
from pipemare_lite.schedules.builders.async_pipeline import (
    TICK_ORDER_NOTE_BACKWARD_FIRST,
    async_pipeline,
)
from pipemare_lite.schedules.registry import SCHEDULE_NAMES, build_schedule
from pipemare_lite.schedules.validation import size_range

#: Quantities the heatmap can show.
HEATMAP_QUANTITIES = ("forward_delay", "discrepancy", "backward_delay")

#: Orders of F and B inside one tick of the lock-step ``async`` schedule (label, value).
TICK_ORDERS = (("F, B, U (the engine's)", "forward_first"), ("B, U, F", "backward_first"))

#: The recalled closed form of the steady-state forward delay (the worst case over positions).
CLOSED_FORMS = {
    "async": "ceil((2(P - i) + 1) / N), i = stage + 1",
    "pipedream": "ceil((P - 1 - stage) / N)",
    "2bw": "1",
}

#: The engine's derived formula, exact for the microbatch at position j of its minibatch.
DERIVED_FORMS = {
    ("async", "forward_first"): "ceil((2(P - stage) - 1 - j) / N)",
    ("async", "backward_first"): "ceil((2(P - stage) - 2 - j) / N)",
    ("pipedream", "forward_first"): "ceil((P - 1 - stage - j) / N)",
    ("2bw", "forward_first"): "1",
}


def closed_form_text(name: str) -> str:
    """The recalled formula shown beside the measured delay of schedule ``name``."""
    return CLOSED_FORMS.get(name, "0 (synchronous: flushed every minibatch)")


def derived_form_text(name: str, tick_order: str = "forward_first") -> str:
    """The engine's exact formula (by position j) for schedule ``name``."""
    return DERIVED_FORMS.get((name, tick_order), "0 (synchronous: flushed every minibatch)")


def build_explored_schedule(method: str, stages: int, microbatches: int, minibatches: int,
                            warmup: int, tick_order: str = "forward_first"):
    """The schedule the explorer draws; B-before-F ticks exist only for ``async``."""
    if tick_order not in dict((v, k) for k, v in TICK_ORDERS):
        allowed = ", ".join(v for _, v in TICK_ORDERS)
        raise ValueError(f"unknown tick order {tick_order!r}; allowed: {allowed}")
    if tick_order == "backward_first":
        if method not in ("async", "pipemare"):
            raise ValueError(f"the tick order B, U, F applies to the lock-step 'async' "
                             f"schedule, not {method!r}; choose 'async' or the engine's order")
        return async_pipeline(stages, microbatches, minibatches, warmup, backward_first=True)
    return build_schedule(method, stages, microbatches, num_minibatches=minibatches,
                          warmup=warmup)


def _exact(schedule, stage: int, position: int, tick_order: str):
    try:
        return exact_forward_delay(schedule.name, schedule.num_ranks,
                                   schedule.num_microbatches, schedule.rank_of(stage),
                                   position, backward_first=tick_order == "backward_first")
    except ValueError:
        return None


def _span(d) -> str:
    return f"{d.mean_forward_delay:.2f} ({d.min_forward_delay}..{d.max_forward_delay})"


def _by_position(table: VersionTable, stage: int, chosen, N: int) -> list[str]:
    """Per position j, the forward delays its microbatches met on ``stage`` ("2" or "1/2")."""
    seen: list[set] = [set() for _ in range(N)]
    for r in table.rows:
        if r.stage == stage and r.forward_delay is not None and (
                chosen is None or r.minibatch in chosen):
            seen[r.microbatch % N].add(r.forward_delay)
    return ["/".join(map(str, sorted(v))) if v else "-" for v in seen]


def _cell(text) -> str:
    return f"<td>{html.escape(str(text))}</td>"


def delay_table_html(schedule, table, tick_order: str = "forward_first",
                     measured: VersionTable | None = None) -> str:
    """HTML table: per stage, measured steady-state delays beside both closed forms.

    Columns: the delay read from the schedule's weight versions (mean, min..max; then one
    value per position j in the minibatch), the executed run's (when ``measured`` is given),
    the engine's derived formula per position, the recalled worst case, the discrepancy.
    """
    steady = steady_state_minibatches(schedule)
    chosen = set(steady) if len(steady) else None
    delays = stage_delays(table, minibatches=chosen)
    executed = None if measured is None else stage_delays(measured, minibatches=chosen)
    P, N = schedule.num_ranks, schedule.num_microbatches
    rows = []
    for d in delays:
        try:
            recalled = str(expected_forward_delay(schedule.name, P, N, schedule.rank_of(d.stage)))
        except ValueError:
            recalled = "n/a"
        exact = [_exact(schedule, d.stage, j, tick_order) for j in range(N)]
        cells = [d.stage, _span(d), ", ".join(_by_position(table, d.stage, chosen, N))]
        if executed is not None:
            cells.append(_span(executed[d.stage]))
        cells += [", ".join("n/a" if e is None else str(e) for e in exact), recalled,
                  f"{d.mean_discrepancy:.2f} ({d.min_discrepancy}..{d.max_discrepancy})"]
        rows.append("<tr>" + "".join(_cell(c) for c in cells) + "</tr>")
    span = (
        f"minibatches {steady.start}..{steady.stop - 1} (steady state)"
        if chosen is not None
        else "all minibatches (too few for a steady state: add updates)"
    )
    heads = ["stage", "forward delay, mean (min..max)", "by position j = 0..N-1"]
    if executed is not None:
        heads.append("executed run (local executor), mean (min..max)")
    heads += [f"derived: {derived_form_text(schedule.name, tick_order)}",
              f"recalled: {closed_form_text(schedule.name)}", "discrepancy F to B, mean (min..max)"]
    return (
        f"<p>Forward delay in updates (how many updates older the forward's weights are than "
        f"the weights its gradient is applied to), over {html.escape(span)}.</p>"
        '<table style="border-collapse:collapse" border="1" cellpadding="4"><tr>'
        + "".join(f"<th>{html.escape(h)}</th>" for h in heads) + "</tr>"
        + "".join(rows) + "</table>"
    )


def path_table_html(schedule, table, microbatch: int, tick_order: str = "forward_first",
                    measured: VersionTable | None = None) -> str:
    """HTML table: the followed microbatch's versions per stage beside the derived formula."""
    N = schedule.num_microbatches
    position = microbatch % N
    executed = None if measured is None else {r.stage: r for r in
                                              microbatch_path(measured, microbatch)}
    heads = ["stage", "version at F", "version at B", "applied to", "forward delay",
             f"derived at j = {position}"]
    if executed is not None:
        heads.append("executed run: at F / at B / applied")
    rows = []
    for r in microbatch_path(table, microbatch):
        exact = _exact(schedule, r.stage, position, tick_order)
        cells = [r.stage, r.version_at_forward, _dash(r.version_at_backward),
                 _dash(r.version_applied), _dash(r.forward_delay),
                 "n/a" if exact is None else exact]
        if executed is not None:
            e = executed[r.stage]
            cells.append(f"{e.version_at_forward} / {_dash(e.version_at_backward)} / "
                         f"{_dash(e.version_applied)}")
        rows.append("<tr>" + "".join(_cell(c) for c in cells) + "</tr>")
    return (
        f"<p>Microbatch {microbatch} is number j = {position} of minibatch "
        f"{schedule.minibatch_of(microbatch)}. The derived formula holds in the steady "
        "state; near the start there are no older versions yet, so delays are smaller.</p>"
        '<table style="border-collapse:collapse" border="1" cellpadding="4"><tr>'
        + "".join(f"<th>{html.escape(h)}</th>" for h in heads) + "</tr>"
        + "".join(rows) + "</table>"
    )


def _dash(value) -> str:
    return "-" if value is None else str(value)


def _same_schedule(a, b) -> bool:
    return (a.name, a.weight_mode, a.num_microbatches, a.ranks) == (
        b.name, b.weight_mode, b.num_microbatches, b.ranks)


def _slider(value: int, key: str, cap: int, description: str, minibatches: int = 1):
    """An IntSlider over the engine's range for ``key`` (:func:`size_range`), cut at ``cap``
    so the drawing stays readable."""
    low, high = size_range(key, minibatches)
    return widgets.IntSlider(value=value, min=low, max=min(high, cap), description=description,
                             style={"description_width": "initial"})


class StalenessExplorer(Explorer):
    """The widget returned by :func:`staleness_explorer` (see there)."""

    def __init__(self, method: str, stages: int, microbatches: int, warmup: int,
                 minibatches: int, quantity: str, tick_order: str = "forward_first",
                 microbatch: int = 0, measured: VersionTable | None = None) -> None:
        style = {"description_width": "initial"}
        controls = {
            "method": widgets.Dropdown(options=SCHEDULE_NAMES, value=method,
                                       description="method"),
            "quantity": widgets.Dropdown(options=HEATMAP_QUANTITIES, value=quantity,
                                         description="heatmap"),
            "tick_order": widgets.Dropdown(options=TICK_ORDERS, value=tick_order,
                                           description="tick order (async)", style=style),
            "stages": _slider(stages, "num_ranks", 12, "P stages"),
            "microbatches": _slider(microbatches, "num_microbatches", 12, "N per update"),
            "minibatches": _slider(minibatches, "num_minibatches", 16, "updates"),
            # its upper end follows the updates slider (the engine allows 0..updates)
            "warmup": _slider(warmup, "warmup", 16, "sync warm-up", minibatches),
            "microbatch": widgets.IntSlider(value=microbatch, min=0,
                                            max=max(microbatches * minibatches - 1, 0),
                                            description="follow microbatch", style=style),
        }
        self.measured = measured
        self.figure = figure_widget()
        self.path = figure_widget()
        self.path_table = widgets.HTML()
        self.summary = widgets.HTML()
        self.schedule = None
        self.table = None
        self.showing_measured = False
        c = controls
        super().__init__(
            controls,
            [
                widgets.VBox([
                    widgets.HBox([c["method"], c["quantity"], c["tick_order"]]),
                    widgets.HBox([c["stages"], c["microbatches"]]),
                    widgets.HBox([c["minibatches"], c["warmup"]]),
                ]),
                self.figure,
                c["microbatch"],
                self.path,
                self.path_table,
                self.summary,
            ],
        )
        self.update()

    def _redraw(self, method, quantity, tick_order, stages, microbatches, minibatches, warmup,
                microbatch) -> None:
        warmup_slider = self.controls["warmup"]
        warmup_slider.max = size_range("warmup", minibatches)[1]  # clamps the value
        warmup = warmup_slider.value
        schedule = build_explored_schedule(method, stages, microbatches, minibatches, warmup,
                                           tick_order)
        table = weight_versions(schedule)
        picker = self.controls["microbatch"]
        picker.max = table.num_microbatches - 1  # clamps the value if it was larger
        microbatch = picker.value
        measured = self.measured
        if measured is not None and not _same_schedule(measured.schedule, schedule):
            measured = None  # the controls describe another schedule than the one that ran
        show_plotly_figure(
            self.figure, staleness_heatmap(table, quantity, highlight_microbatch=microbatch)
        )
        show_plotly_figure(self.path, path_figure(microbatch_path(table, microbatch)))
        self.path_table.value = path_table_html(schedule, table, microbatch, tick_order,
                                                measured)
        note = ""
        if self.measured is not None and measured is None:
            ran = self.measured.schedule
            note = (f"<p><i>The executed run is shown for {html.escape(ran.name)}, "
                    f"P={ran.num_ranks}, N={ran.num_microbatches}, "
                    f"{ran.num_minibatches} updates, warm-up {ran.warmup}"
                    f"{', B before F' if TICK_ORDER_NOTE_BACKWARD_FIRST in ran.notes else ''}; "
                    "these controls describe another schedule.</i></p>")
        self.summary.value = delay_table_html(schedule, table, tick_order, measured) + note
        self.schedule, self.table, self.showing_measured = schedule, table, measured is not None


def staleness_explorer(
    method: str = "async",
    stages: int = 4,
    microbatches: int = 4,
    warmup: int = 0,
    *,
    minibatches: int = 6,
    quantity: str = "forward_delay",
    tick_order: str = "forward_first",
    microbatch: int = 0,
    measured: VersionTable | None = None,
) -> StalenessExplorer:
    """A widget to explore weight staleness.

    Controls (``w.controls[name]``): ``method`` (a schedule name), ``quantity`` (heatmap),
    ``tick_order`` (``"forward_first"``, the engine's F-B-U, or ``"backward_first"``; the
    latter only for ``async``), ``stages`` (P), ``microbatches`` (N per update),
    ``minibatches`` (updates per stage), ``warmup`` (synchronous minibatches first),
    ``microbatch`` (whose path to follow). ``measured``: a :class:`VersionTable` recorded by
    an executor (``versions_from_trace(result.trace)``), shown beside the analysis while
    the controls describe the schedule that ran. Attributes: ``figure`` (heatmap), ``path``
    (the followed microbatch) and ``path_table``, ``summary`` (measured vs closed-form
    delays per stage), ``showing_measured``, ``message`` and ``error`` (the engine's
    refusal, if any), ``schedule`` and ``table`` (what is drawn). ``w.update()`` redraws.
    """
    if method not in SCHEDULE_NAMES:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(SCHEDULE_NAMES)}")
    if quantity not in HEATMAP_QUANTITIES:
        raise ValueError(
            f"unknown quantity {quantity!r}; allowed: {', '.join(HEATMAP_QUANTITIES)}"
        )
    if tick_order not in [v for _, v in TICK_ORDERS]:
        allowed = ", ".join(v for _, v in TICK_ORDERS)
        raise ValueError(f"unknown tick order {tick_order!r}; allowed: {allowed}")
    if measured is not None and not isinstance(measured, VersionTable):
        raise TypeError(f"measured must be a VersionTable (staleness.versions_from_trace), "
                        f"got {type(measured).__name__}")
    return StalenessExplorer(method, stages, microbatches, warmup, minibatches, quantity,
                             tick_order, microbatch, measured)
