"""Static twins of the explorers, for the HTML book where no kernel runs (chapters 02-06).

Each returns ONE plotly figure with a slider whose steps were computed in advance: every
step's traces are in the figure, hidden but one, and a step shows its own and retitles the
figure with that step's measured numbers beside the closed form. So the rendered page stays
interactive without Python. Keep the steps few: the figure carries all of them (the
functions refuse more than :data:`MAX_STEPS`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipemare_lite.analysis.simulate import metrics, simulate
from pipemare_lite.analysis.staleness import (
    expected_forward_delay,
    stage_delays,
    steady_state_minibatches,
    weight_versions,
)
from pipemare_lite.analysis.theory import (
    discrepancy_roots,
    simulate_discrepancy_gd,
    stability_bound,
)
from pipemare_lite.figures.viz.colors import BOUND_COLOR, ROOT_STABLE_COLOR, ROOT_UNSTABLE_COLOR
from pipemare_lite.figures.viz.gantt_chart import gantt_layout, gantt_trace_specs
from pipemare_lite.figures.viz.staleness import QUANTITY_LABELS, staleness_heatmap
from pipemare_lite.figures.widgets.schedule import chunk_share, closed_forms, explorer_costs
from pipemare_lite.figures.widgets.stability import STEPS
from pipemare_lite.figures.widgets.staleness import HEATMAP_QUANTITIES
from pipemare_lite.schedules.registry import SCHEDULE_NAMES, build_schedule

#: More steps than this make the page heavy (every step's boxes are in the figure).
MAX_STEPS = 24


def _check_steps(name: str, values) -> list[int]:
    values = list(values)
    if not values:
        raise ValueError(f"{name} is empty; give at least one value")
    if len(values) > MAX_STEPS:
        raise ValueError(f"{name} has {len(values)} values; allowed: at most {MAX_STEPS}")
    return values


def _slider(steps: list[dict], prefix: str) -> dict:
    return {
        "active": 0,
        "currentvalue": {"prefix": prefix},
        "pad": {"t": 40},
        "steps": steps,
    }


def schedule_explorer_static(
    schedule: str = "1f1b",
    stages: int = 4,
    microbatches: Iterable[int] = range(1, 17),
    chunks: int = 2,
    *,
    minibatches: int = 1,
    forward: float = 1.0,
    backward: float = 1.0,
    weight: float = 1.0,
) -> go.Figure:
    """Gantt charts of ``schedule`` for every M in ``microbatches``, one slider step each.

    A step's title gives the measured idle fraction beside its closed form. M values the
    engine refuses (e.g. interleaved needs M a multiple of P) are left out of the slider;
    if none is left, the engine's error is raised. Costs as in :func:`schedule_explorer`.
    """
    if schedule not in SCHEDULE_NAMES:
        raise ValueError(f"unknown schedule {schedule!r}; allowed: {', '.join(SCHEDULE_NAMES)}")
    values = _check_steps("microbatches", microbatches)
    data: list[dict] = []
    steps, spans, last_error = [], [], None
    first_layout = None
    for M in values:
        try:
            built = build_schedule(schedule, stages, M, num_minibatches=minibatches,
                                   chunks=chunks if schedule == "interleaved" else 1)
        except ValueError as error:
            last_error = error
            continue
        share = chunk_share(schedule, chunks)  # as the live explorer: a chunk costs 1/v
        costs = explorer_costs(forward / share, backward / share, weight / share)
        timeline = simulate(built, costs)
        measured = metrics(timeline)
        forms = closed_forms(built, costs)
        formula = ("" if forms.idle is None
                   else f" (closed form {forms.idle_text} = {forms.idle:.3f})")
        title = (f"{schedule}, P={stages}, M={M}: idle fraction {measured.idle_fraction:.3f}"
                 f"{formula}")
        traces = gantt_trace_specs(timeline)
        first_layout = first_layout or gantt_layout(timeline, title=title)
        spans.append((len(data), len(data) + len(traces)))
        data += traces
        steps.append({"label": str(M), "method": "update",
                      "args": [None, {"title.text": title,
                                      "xaxis.range": [0, 1.02 * measured.makespan]}]})
    if not steps:
        raise last_error
    for step, (a, b) in zip(steps, spans):
        step["args"][0] = {"visible": [a <= i < b for i in range(len(data))]}
    for i, trace in enumerate(data):
        trace["visible"] = i < spans[0][1]
    fig = go.Figure(data=data, layout=first_layout)
    fig.update_layout(sliders=[_slider(steps, "M = ")],
                      xaxis_range=steps[0]["args"][1]["xaxis.range"])
    fig.update_layout(height=fig.layout.height + 80, margin_b=120)
    return fig


def staleness_explorer_static(
    method: str = "async",
    stages: Iterable[int] = range(2, 9),
    microbatches: int = 4,
    *,
    minibatches: int = 6,
    warmup: int = 0,
    quantity: str = "forward_delay",
) -> go.Figure:
    """Staleness heatmaps of ``method`` for every P in ``stages``, one slider step each.

    A step's title gives stage 0's measured steady-state forward delay beside the closed
    form (stage 0 is the stalest). A dropdown switches every heatmap between the forward
    delay, the F-to-B discrepancy and the backward delay (``quantity`` is shown first).
    Arguments as in :func:`staleness_explorer`.
    """
    if quantity not in HEATMAP_QUANTITIES:
        raise ValueError(
            f"unknown quantity {quantity!r}; allowed: {', '.join(HEATMAP_QUANTITIES)}"
        )
    values = _check_steps("stages", stages)
    figures, titles, tables = [], [], []
    for P in values:
        built = build_schedule(method, P, microbatches, num_minibatches=minibatches,
                               warmup=warmup)
        table = weight_versions(built)
        steady = steady_state_minibatches(built)
        first = stage_delays(table, minibatches=steady if len(steady) else None)[0]
        try:
            formula = f", closed form {expected_forward_delay(built.name, P, microbatches, 0)}"
        except ValueError:
            formula = ""
        titles.append(f"{method}, P={P}, N={microbatches}: stage 0 forward delay "
                      f"{first.mean_forward_delay:.2f} (measured mean){formula}")
        figures.append(staleness_heatmap(table, quantity, title=titles[-1]))
        tables.append(table)
    heats = [fig.data[0] for fig in figures]
    for k, heat in enumerate(heats):
        heat.visible = k == 0
    steps = [
        {"label": str(P), "method": "update",
         "args": [{"visible": [k == j for j in range(len(values))]},
                  {"title.text": title, "yaxis.range": [P - 0.5, -0.5]}]}
        for k, (P, title) in enumerate(zip(values, titles))
    ]
    tallest = max(fig.layout.height for fig in figures)
    out = go.Figure(data=heats, layout=figures[0].layout)  # same columns, so same lines
    out.update_yaxes(autorange=None, range=[values[0] - 0.5, -0.5])
    out.update_layout(sliders=[_slider(steps, "P = ")], height=tallest + 140,
                      updatemenus=[_quantity_menu(tables, quantity)],
                      margin={"t": 120})  # room for the dropdown between title and plot
    return out


def _quantity_menu(tables, first: str) -> dict:
    """A dropdown that restyles every heatmap (all P at once) to another quantity.

    It changes only the heatmaps' values and colours, never which one is visible, so it
    composes with the slider.
    """
    order = [first] + [q for q in HEATMAP_QUANTITIES if q != first]
    buttons = []
    for quantity in order:
        heats = [staleness_heatmap(table, quantity).data[0] for table in tables]
        keys = ("z", "text", "zmin", "zmax", "colorscale", "hovertemplate")
        restyle = {key: [heat[key] for heat in heats] for key in keys}
        buttons.append({"label": QUANTITY_LABELS[quantity], "method": "restyle",
                        "args": [restyle]})
    return {"buttons": buttons, "direction": "down", "x": 0.0, "xanchor": "left",
            "y": 1.02, "yanchor": "bottom", "showactive": True}


def stability_explorer_static(
    alpha: float = 0.3,
    lam: float = 1.0,
    taus: Iterable[int] = range(0, 11),
    *,
    momentum: float = 0.0,
    discrepancy: float = 0.0,
    steps: int = STEPS,
) -> go.Figure:
    """Delayed GD at one step for every delay in ``taus``, one slider step each.

    Left: the iterates ``w[t]``; right: the characteristic roots with the unit circle. A
    step's title gives the largest root magnitude and, for the plain model (no momentum, no
    discrepancy), the closed-form bound ``2 sin(pi / (2 (2 tau + 1)))`` beside ``alpha lam``.
    Arguments as in :func:`~pipemare_lite.figures.widgets.stability.stability_explorer`.
    """
    values = _check_steps("taus", taus)
    plain = momentum == 0 and discrepancy == 0
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.1,
                        subplot_titles=("iterates w[t]", "characteristic roots"))
    angle = np.linspace(0.0, 2.0 * math.pi, 121)
    fig.add_trace(go.Scatter(name="unit circle", x=np.cos(angle), y=np.sin(angle),
                             mode="lines", line={"color": BOUND_COLOR, "width": 1.5},
                             hoverinfo="skip"), row=1, col=2)
    titles, largest_root = [], 1.0
    for k, tau in enumerate(values):
        roots = discrepancy_roots(alpha, lam, tau, discrepancy, momentum=momentum)
        radius = float(np.max(np.abs(roots)))
        largest_root = max(largest_root, radius)
        w = simulate_discrepancy_gd(alpha, lam, tau, discrepancy, steps, momentum=momentum)
        fig.add_trace(go.Scatter(name=f"w[t], tau={tau}", x=np.arange(len(w)), y=w,
                                 mode="lines", visible=k == 0, showlegend=False,
                                 hovertemplate="t = %{x}<br>w = %{y:.4g}<extra></extra>"),
                      row=1, col=1)
        inside = np.abs(roots) < 1.0
        for keep, color in ((inside, ROOT_STABLE_COLOR), (~inside, ROOT_UNSTABLE_COLOR)):
            fig.add_trace(go.Scatter(
                name="root", x=roots.real[keep], y=roots.imag[keep], mode="markers",
                visible=k == 0, showlegend=False,
                marker={"size": 9, "color": color, "line": {"width": 1, "color": "black"}},
                hovertemplate="z = %{x:.4f} %{y:+.4f}i<extra></extra>"), row=1, col=2)
        verdict = "stable" if radius < 1 else "unstable"
        bound = (f"; bound 2 sin(pi/(2(2 tau+1))) = {stability_bound(tau):.4f} vs alpha*lambda "
                 f"= {alpha * lam:.4g}" if plain else "")
        titles.append(f"tau={tau}: largest |z| = {radius:.4f} ({verdict}){bound}")
    per_step = 3  # trajectory, roots inside, roots outside
    steps_ = [
        {"label": str(tau), "method": "update",
         "args": [{"visible": [True] + [j // per_step == k
                                        for j in range(per_step * len(values))]},
                  {"title.text": title}]}
        for k, (tau, title) in enumerate(zip(values, titles))
    ]
    limit = max(1.3, 1.1 * largest_root)
    fig.update_xaxes(title_text="update t", row=1, col=1)
    fig.update_yaxes(title_text="weight w[t] (optimum 0)", range=[-2.5, 2.5], row=1, col=1)
    fig.update_xaxes(title_text="real part", range=[-limit, limit], row=1, col=2)
    fig.update_yaxes(title_text="imaginary part", range=[-limit, limit], scaleanchor="x2",
                     scaleratio=1, row=1, col=2)
    extra = "" if plain else f", m={momentum:g}, s={discrepancy:g}"
    fig.update_layout(title={"text": titles[0]}, height=480, margin={"t": 90, "b": 120},
                      sliders=[_slider(steps_, f"alpha={alpha:g}, lambda={lam:g}{extra}: tau = ")])
    return fig
