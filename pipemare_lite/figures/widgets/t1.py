"""T1 explorer: each stage's learning rate over a run for P, N, K and a base (chapter 08).

The reader picks the number of stages P and microbatches per update N of a lock-step
asynchronous pipeline (which fix every stage's delay tau_s), T1's horizon K, the base
schedule and a curvature lam; the widget draws every stage's ``lr(k) * tau_s ** (-p_k)``
(:func:`pipemare_lite.analysis.stage_lr.stage_lrs`), the same steps against chapter 06's bound for
their delays, and a table: per stage its delay, its learning rate at the first update and
at the end of the anneal, the largest stable lr of the quadratic and the first update at
which T1 has carried the stage past it.

Delays: the closed form of chapter 05 for the lock-step async pipeline, ``ceil((2(P-s)-1)/N)``
(at least 1), which equals what the engine measures from the schedule for T1
(``tests/test_stage_lr.py``). No training: a redraw computes P * updates numbers and
restyles the lines. :func:`t1_explorer_static` is the HTML book's twin: one slider step per
K. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
import plotly.graph_objects as go

from pipemare_lite.analysis.stage_lr import (
    BASE_SCHEDULES,
    base_lr,
    first_unstable_update,
    stage_lrs,
)
from pipemare_lite.analysis.staleness import expected_forward_delay
from pipemare_lite.analysis.theory import stability_bound
from pipemare_lite.figures.viz.lr_schedules import edge_ratios, t1_figure, t1_shapes, t1_traces
from pipemare_lite.figures.widgets._explorer import Explorer, figure_widget, show_figure

#: Largest P and N the sliders offer.
MAX_STAGES, MAX_MICROBATCHES = 16, 16


def t1_delays(P: int, N: int) -> list[int]:
    """T1's delay of each stage of a lock-step async pipeline: ``max(1, ceil((2(P-s)-1)/N))``."""
    return [max(1, expected_forward_delay("async", P, N, s)) for s in range(P)]


def t1_run(P: int, N: int, K: int, schedule: str, *, lr: float, total_updates: int,
           step_size: int | None = None) -> tuple[list[int], list[list[float]], list[float]]:
    """(delays, ``lrs[s][k]``, base ``lr(k)``) of one setting of the explorer."""
    if not 1 <= P <= MAX_STAGES or not 1 <= N <= MAX_MICROBATCHES:
        raise ValueError(f"P={P}, N={N}: allowed P in 1..{MAX_STAGES}, N in "
                         f"1..{MAX_MICROBATCHES}")
    if not 0 <= K <= total_updates:
        raise ValueError(f"K={K}: allowed 0..{total_updates} (the run's updates)")
    step_size = step_size or max(1, total_updates // 2)
    delays = t1_delays(P, N)
    lrs = stage_lrs(lr, delays, total_updates, horizon=K, schedule=schedule,
                    step_size=step_size)
    base = [base_lr(k, lr, schedule, total_updates=total_updates, step_size=step_size)
            for k in range(total_updates)]
    return delays, lrs, base


def stage_table_html(delays, lrs, lam: float, K: int) -> str:
    """Per stage: delay, lr at update 0 and at K, largest stable lr, first unstable update."""
    end = min(K, len(lrs[0]) - 1)
    rows = []
    for s, (tau, row) in enumerate(zip(delays, lrs)):
        first = first_unstable_update(row, lam, tau)
        rows.append(f"<tr><td>{s}</td><td>{tau}</td><td>{row[0]:.4g}</td><td>{row[end]:.4g}"
                    f"</td><td>{stability_bound(tau) / lam:.4g}</td>"
                    f"<td>{'never' if first is None else first}</td></tr>")
    head = (f"<tr><th>stage</th><th>delay tau</th><th>lr at update 0</th>"
            f"<th>lr at update {end}</th><th>largest stable lr (bound / lam)</th>"
            "<th>first update outside</th></tr>")
    return ('<table style="border-collapse:collapse" border="1" cellpadding="4">'
            + head + "".join(rows) + "</table>")


def _title(P, N, K, schedule, delays, lrs, lam) -> str:
    outside = sum(first_unstable_update(row, lam, tau) is not None
                  for tau, row in zip(delays, lrs))
    return (f"P={P}, N={N}, K={K}, {schedule} base: {outside} of {P} stages leave the "
            f"stable region of lam={lam:.3g} during the run")


class T1Explorer(Explorer):
    """The widget returned by :func:`t1_explorer` (see there)."""

    def __init__(self, *, lr: float, total_updates: int, P: int, N: int, K: int,
                 schedule: str, lam: float, step_size: int | None) -> None:
        style = {"description_width": "initial"}
        controls = {
            "P": widgets.IntSlider(value=P, min=1, max=MAX_STAGES, description="stages P",
                                   style=style),
            "N": widgets.IntSlider(value=N, min=1, max=MAX_MICROBATCHES,
                                   description="microbatches N", style=style),
            "K": widgets.IntSlider(value=K, min=0, max=total_updates,
                                   description="T1 horizon K", style=style),
            "schedule": widgets.ToggleButtons(options=list(BASE_SCHEDULES), value=schedule,
                                              description="base", style=style),
            "lam": widgets.FloatLogSlider(value=lam, base=10, min=-1, max=2, step=0.01,
                                          description="curvature lam", readout_format=".3g",
                                          style=style),
        }
        self.lr, self.total_updates, self.step_size = lr, total_updates, step_size
        self.figure = figure_widget()
        self.table = widgets.HTML()
        self.delays: list[int] = []
        self.lrs: list[list[float]] = []
        self._layout: dict | None = None
        c = controls
        super().__init__(controls, [widgets.HBox([c["P"], c["N"], c["K"]]),
                                    widgets.HBox([c["schedule"], c["lam"]]),
                                    self.figure, self.table])
        self.update()

    def _redraw(self, P, N, K, schedule, lam) -> None:
        self.delays, self.lrs, base = t1_run(P, N, K, schedule, lr=self.lr,
                                             total_updates=self.total_updates,
                                             step_size=self.step_size)
        title = _title(P, N, K, schedule, self.delays, self.lrs, lam)
        traces = t1_traces(self.lrs, self.delays, base=base, lam=lam)
        if self._layout is None:  # the layout (two panels, axes) is built once
            self._layout = t1_figure(self.lrs, self.delays, base=base, lam=lam, anneal_end=K,
                                     title=title).layout.to_plotly_json()
        if len(self.figure.data) != len(traces):  # P changed, or the first drawing
            show_figure(self.figure, traces, dict(self._layout))
        else:  # same lines: move them
            with self.figure.batch_update():
                for trace, new in zip(self.figure.data, traces):
                    trace.y, trace.name = new["y"], new["name"]
        with self.figure.batch_update():
            self.figure.layout.title.text = title
            self.figure.layout.shapes = t1_shapes(K, True)
            self.figure.layout.annotations[1].text = f"lr * lam / bound(tau), lam = {lam:.3g}"
        self.table.value = stage_table_html(self.delays, self.lrs, lam, K)


def t1_explorer(*, lr: float, total_updates: int, P: int = 8, N: int = 2, K: int | None = None,
                schedule: str = "constant", lam: float = 5.0,
                step_size: int | None = None) -> T1Explorer:
    """A widget drawing each stage's T1 learning rate over a run.

    Args:
        lr: the base learning rate; total_updates: the run's updates (each stage's).
        P, N, K, schedule, lam: the starting controls (K default: the whole run).
        step_size: the ``step`` schedule's interval (default: half the run).

    Attributes: ``controls`` (``P``, ``N``, ``K``, ``schedule``, ``lam``), ``figure`` (a
    FigureWidget), ``table``, ``delays`` and ``lrs`` (the current numbers), ``message``/``error``.
    """
    K = total_updates if K is None else K
    if not lr > 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if schedule not in BASE_SCHEDULES:
        raise ValueError(f"unknown base schedule {schedule!r}; allowed: "
                         f"{', '.join(BASE_SCHEDULES)}")
    if not lam > 0:
        raise ValueError(f"the curvature lam must be positive, got {lam!r}")
    t1_run(P, N, K, schedule, lr=lr, total_updates=total_updates, step_size=step_size)
    return T1Explorer(lr=lr, total_updates=total_updates, P=P, N=N, K=K, schedule=schedule,
                      lam=lam, step_size=step_size)


def t1_explorer_static(*, lr: float, total_updates: int, horizons: Sequence[int], P: int = 8,
                       N: int = 2, schedule: str = "constant", lam: float = 5.0,
                       step_size: int | None = None) -> go.Figure:
    """The explorer for the HTML book: one P, N and base, one slider step per K in ``horizons``."""
    horizons = [int(K) for K in horizons]
    if not horizons or len(horizons) > 24:
        raise ValueError(f"horizons must hold 1 to 24 values, got {len(horizons)}")
    runs = [t1_run(P, N, K, schedule, lr=lr, total_updates=total_updates, step_size=step_size)
            for K in horizons]
    delays, lrs, base = runs[0]
    fig = t1_figure(lrs, delays, base=base, lam=lam, anneal_end=horizons[0],
                    title=_title(P, N, horizons[0], schedule, delays, lrs, lam))
    moving = list(range(P)) + list(range(P + 1, 2 * P + 1))  # stage lines and their ratios
    steps = []
    for K, (delays, lrs, _) in zip(horizons, runs):
        ys = [list(row) for row in lrs] + [edge_ratios(row, lam, tau)
                                           for tau, row in zip(delays, lrs)]
        steps.append({"method": "update", "label": str(K),
                      "args": [{"y": ys},
                               {"title.text": _title(P, N, K, schedule, delays, lrs, lam),
                                "shapes": t1_shapes(K, True)}, moving]})
    fig.update_layout(sliders=[{"active": 0, "steps": steps, "pad": {"t": 50},
                                "currentvalue": {"prefix": "T1 horizon K: "}}], height=520)
    return fig
