"""Figures of delayed gradient descent on a quadratic (introduced in chapter 06).

- :func:`stability_map`: a grid of spectral radii from :mod:`pipemare_lite.analysis.theory` (rows:
  delays tau, or T2's gamma; columns: step sizes) drawn as a heatmap, with the closed-form
  bound on the largest stable step overlaid as a line, so the reader sees the formula trace
  the edge of the measured stable region; optionally one marked point (a widget's setting);
- :func:`roots_figure`: characteristic roots in the complex plane with the unit circle;
- :func:`trajectory_figure`: the iterates ``w[t]`` of one or several runs;
- :func:`gamma_sweep_figure` (chapter 09): the largest stable step against T2's gamma,
  beside the step without T2 and the one without any discrepancy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import plotly.graph_objects as go

from pipemare_lite.figures.viz.colors import (
    BOUND_COLOR,
    POINT_COLOR,
    ROOT_STABLE_COLOR,
    ROOT_UNSTABLE_COLOR,
    STABLE_COLOR,
    UNSTABLE_COLOR,
)

MODES = ("radius", "stable")
AXIS_TYPES = ("linear", "log")
#: Radii above this are drawn with the same (darkest) colour; hover still shows the value.
RADIUS_CLIP = 2.0


def _row_label(value) -> str:
    """Tick text of a row: ``none`` for gamma=None (no T2), integers without a point."""
    if value is None:
        return "none"
    number = float(value)
    return str(int(number)) if number.is_integer() else f"{number:g}"


def stability_map(
    radius,
    alphas: Sequence[float],
    rows: Sequence,
    *,
    bound: Sequence[float] | Callable | None = None,
    mode: str = "radius",
    row_title: str = "delay tau (updates)",
    alpha_title: str = "step size alpha * lambda",
    bound_name: str = "bound 2 sin(pi / (2(2 tau + 1)))",
    title: str | None = None,
    alpha_axis: str = "linear",
    point: tuple[float, object] | None = None,
) -> go.Figure:
    """Heatmap of ``radius[i, j]`` (row ``rows[i]``, step ``alphas[j]``), bound overlaid.

    ``radius`` is what :func:`pipemare_lite.analysis.theory.stability_map` (rows = taus) or
    :func:`~pipemare_lite.analysis.theory.discrepancy_stability_map` (rows = gammas, None = no T2)
    return. ``mode="radius"`` colours the spectral radius (white at 1, blue below = stable,
    red above = unstable, clipped at 2); ``mode="stable"`` shows only stable/unstable.
    ``bound`` is the largest stable step per row (a sequence, or a callable ``row -> step``),
    drawn as a black line through the rows: the closed form beside the computation.
    ``alpha_axis="log"`` draws the steps on a log axis (give log-spaced ``alphas``): small
    steps, as momentum needs, stay visible next to large ones. ``point = (alpha, row)``
    marks one setting (``row`` must be one of ``rows``) with a cross.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
    if alpha_axis not in AXIS_TYPES:
        raise ValueError(f"unknown alpha_axis {alpha_axis!r}; allowed: {', '.join(AXIS_TYPES)}")
    grid = np.asarray(radius, dtype=float)
    alphas, rows = list(alphas), list(rows)
    if grid.shape != (len(rows), len(alphas)):
        raise ValueError(
            f"radius has shape {grid.shape} but rows x alphas is ({len(rows)}, {len(alphas)})"
        )
    positions = list(range(len(rows)))  # rows may hold None (gamma = no T2): plot by index
    labels = [_row_label(r) for r in rows]
    hover = f"{row_title} %{{customdata}}<br>{alpha_title} %{{x:.4g}}<br>"
    if mode == "radius":
        heat = go.Heatmap(
            z=grid,
            x=alphas,
            y=positions,
            customdata=[[label] * len(alphas) for label in labels],
            colorscale="RdBu_r",
            zmin=0.0,
            zmax=RADIUS_CLIP,
            zmid=1.0,
            colorbar={"title": {"text": "spectral<br>radius"}},
            hovertemplate=hover + "spectral radius %{z:.4f}<extra></extra>",
        )
    else:
        stable = (grid < 1.0).astype(float)
        heat = go.Heatmap(
            z=stable,
            x=alphas,
            y=positions,
            customdata=[[label] * len(alphas) for label in labels],
            colorscale=[[0.0, UNSTABLE_COLOR], [0.5, UNSTABLE_COLOR], [0.5, STABLE_COLOR],
                        [1.0, STABLE_COLOR]],
            zmin=0.0,
            zmax=1.0,
            colorbar={"title": {"text": "stable?"}, "tickvals": [0.25, 0.75],
                      "ticktext": ["unstable", "stable"]},
            hovertemplate=hover + "stable: %{z}<extra></extra>",
        )
    fig = go.Figure(heat)
    if bound is not None:
        values = [bound(r) for r in rows] if callable(bound) else list(bound)
        if len(values) != len(rows):
            raise ValueError(f"bound has {len(values)} values for {len(rows)} rows")
        fig.add_trace(
            go.Scatter(
                name=bound_name,
                showlegend=True,  # a lone line beside a heatmap gets no legend otherwise
                x=values,
                y=positions,
                mode="lines+markers",
                line={"color": BOUND_COLOR, "width": 2},
                marker={"size": 5, "color": BOUND_COLOR},
                hovertemplate="closed-form largest stable step %{x:.4g}<extra></extra>",
            )
        )
    tick_every = max(1, math.ceil(len(rows) / 15))
    fig.update_yaxes(
        title_text=row_title,
        tickmode="array",
        tickvals=positions[::tick_every],
        ticktext=labels[::tick_every],
        range=[-0.5, len(rows) - 0.5],
    )
    if point is not None:
        fig.add_trace(point_trace(point[0], _row_position(rows, point[1])))
    span = [min(alphas), max(alphas)]
    if alpha_axis == "log":
        if span[0] <= 0:
            raise ValueError(f"a log alpha axis needs positive steps, got {span[0]}")
        span = [math.log10(span[0]), math.log10(span[1])]
    fig.update_xaxes(title_text=alpha_title, range=span, type=alpha_axis)
    fig.update_layout(
        title={"text": title or "stability of delayed gradient descent"},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        height=440,
        margin={"l": 60, "r": 20, "t": 80, "b": 50},
    )
    return fig


def _row_position(rows: Sequence, row) -> int:
    for position, value in enumerate(rows):
        if value == row:
            return position
    raise ValueError(f"point row {row!r} is not one of the map's rows {list(rows)!r}")


def point_trace(alpha: float, position: float) -> go.Scatter:
    """The cross that marks the current setting on a stability map (row by position)."""
    return go.Scatter(
        name="current setting",
        x=[alpha],
        y=[position],
        mode="markers",
        marker={"symbol": "x", "size": 13, "color": POINT_COLOR,
                "line": {"width": 2, "color": "white"}},
        hovertemplate="current setting: step %{x:.4g}<extra></extra>",
    )


def roots_figure(roots, *, title: str | None = None, limit: float | None = None) -> go.Figure:
    """The characteristic roots in the complex plane, with the unit circle.

    Roots inside the circle (``|z| < 1``) are drawn in the stable colour, the others in the
    unstable colour, so the figure says at a glance whether ``w[t]`` shrinks (every root
    inside) or grows (one outside is enough). Axes are equal, from ``-limit`` to ``limit``
    (default: a little more than the largest root, at least 1.3).
    """
    roots = np.asarray(roots, dtype=complex).ravel()
    largest = float(np.max(np.abs(roots))) if roots.size else 0.0
    limit = limit if limit is not None else max(1.3, 1.1 * largest)
    angle = np.linspace(0.0, 2.0 * math.pi, 121)
    inside = np.abs(roots) < 1.0
    fig = go.Figure()
    fig.add_trace(go.Scatter(name="unit circle |z| = 1", x=np.cos(angle), y=np.sin(angle),
                             mode="lines", line={"color": BOUND_COLOR, "width": 1.5},
                             hoverinfo="skip"))
    for name, keep, color in (("root inside (decays)", inside, ROOT_STABLE_COLOR),
                              ("root outside (grows)", ~inside, ROOT_UNSTABLE_COLOR)):
        fig.add_trace(go.Scatter(
            name=name, x=roots.real[keep], y=roots.imag[keep], mode="markers",
            marker={"size": 9, "color": color, "line": {"width": 1, "color": "black"}},
            customdata=np.abs(roots[keep]),
            hovertemplate="z = %{x:.4f} %{y:+.4f}i<br>|z| = %{customdata:.4f}<extra></extra>",
        ))
    fig.update_xaxes(title_text="real part", range=[-limit, limit], zeroline=True)
    fig.update_yaxes(title_text="imaginary part", range=[-limit, limit], zeroline=True,
                     scaleanchor="x", scaleratio=1)
    fig.update_layout(
        title={"text": title or f"characteristic roots (largest |z| = {largest:.4f})"},
        height=400, width=440, showlegend=True,
        legend={"orientation": "h", "yanchor": "top", "y": -0.18, "x": 0},
        margin={"l": 60, "r": 20, "t": 60, "b": 40},
    )
    return fig


def trajectory_figure(runs: dict, *, title: str | None = None, limit: float | None = 2.5,
                      width: int | None = None) -> go.Figure:
    """The iterates ``w[t]`` of each run (``name -> array``), one line each.

    The y axis is fixed to ``[-limit, limit]`` (None: automatic) so that a run that
    diverges leaves the picture instead of squashing the others. ``width`` in pixels
    (None: the page's width).
    """
    fig = go.Figure()
    for name, w in runs.items():
        w = np.asarray(w, dtype=float)
        fig.add_trace(go.Scatter(name=str(name), x=np.arange(len(w)), y=w, mode="lines",
                                 hovertemplate="t = %{x}<br>w = %{y:.4g}<extra></extra>"))
    fig.update_xaxes(title_text="update t")
    fig.update_yaxes(title_text="weight w[t] (optimum 0)",
                     range=None if limit is None else [-limit, limit])
    fig.update_layout(title={"text": title or "delayed gradient descent on a quadratic"},
                      height=360, width=width, margin={"l": 60, "r": 20, "t": 60, "b": 50},
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0})
    return fig


def gamma_sweep_figure(
    gammas: Sequence[float],
    steps: Sequence[float],
    *,
    without: float,
    no_discrepancy: float | None = None,
    current: float | None = None,
    title: str | None = None,
    width: int | None = None,
) -> go.Figure:
    """The largest stable step for each of T2's ``gammas`` (a line), against two references.

    ``steps[i]`` belongs to ``gammas[i]`` (e.g. from
    :func:`pipemare_lite.analysis.theory.t2_stable_steps`);
    ``without`` is the largest stable step without T2 (a dashed line: above it T2 helps,
    below it T2 hurts); ``no_discrepancy`` the one with no discrepancy at all, as with a
    stash (dotted); ``current`` marks one gamma of ``gammas`` (a widget's setting).
    """
    gammas, steps = [float(g) for g in gammas], [float(s) for s in steps]
    if len(gammas) != len(steps) or not gammas:
        raise ValueError(f"need one step per gamma, got {len(steps)} steps for "
                         f"{len(gammas)} gammas")
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        name="with T2", x=gammas, y=steps, mode="lines+markers",
        line={"color": ROOT_STABLE_COLOR, "width": 2},
        hovertemplate="gamma %{x:.3g}<br>largest stable step %{y:.4g}<extra></extra>"))
    span = [min(gammas), max(gammas)]
    fig.add_trace(go.Scatter(
        name="without T2", x=span, y=[without, without], mode="lines",
        line={"color": ROOT_UNSTABLE_COLOR, "dash": "dash", "width": 2},
        hovertemplate="without T2: %{y:.4g}<extra></extra>"))
    if no_discrepancy is not None:
        fig.add_trace(go.Scatter(
            name="no discrepancy (stash)", x=span, y=[no_discrepancy, no_discrepancy],
            mode="lines", line={"color": BOUND_COLOR, "dash": "dot", "width": 1.5},
            hovertemplate="no discrepancy: %{y:.4g}<extra></extra>"))
    if current is not None:
        if current not in gammas:
            raise ValueError(f"current gamma {current!r} is not one of {gammas!r}")
        fig.add_trace(go.Scatter(
            name="current gamma", x=[current], y=[steps[gammas.index(current)]],
            mode="markers", marker={"symbol": "x", "size": 13, "color": POINT_COLOR,
                                    "line": {"width": 2, "color": "black"}},
            hovertemplate="current: gamma %{x:.3g}, step %{y:.4g}<extra></extra>"))
    fig.update_xaxes(title_text="T2 gamma")
    fig.update_yaxes(title_text="largest stable step alpha * lambda", rangemode="tozero")
    fig.update_layout(title={"text": title or "T2: largest stable step against gamma"},
                      height=380, width=width, margin={"l": 60, "r": 20, "t": 70, "b": 50},
                      legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0})
    return fig
