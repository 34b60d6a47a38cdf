"""Stability maps of delayed gradient descent (introduced in chapter 06).

A grid of spectral radii from :mod:`pipemare_lite.theory` (rows: delays tau, or T2's gamma;
columns: step sizes alpha * lambda) drawn as a heatmap, with the closed-form bound on the
largest stable step overlaid as a line, so the reader sees the formula trace the edge of
the measured stable region.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import plotly.graph_objects as go

from pipemare_lite.viz.colors import BOUND_COLOR, STABLE_COLOR, UNSTABLE_COLOR

MODES = ("radius", "stable")
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
) -> go.Figure:
    """Heatmap of ``radius[i, j]`` (row ``rows[i]``, step ``alphas[j]``), bound overlaid.

    ``radius`` is what :func:`pipemare_lite.theory.stability_map` (rows = taus) or
    :func:`~pipemare_lite.theory.discrepancy_stability_map` (rows = gammas, None = no T2)
    return. ``mode="radius"`` colours the spectral radius (white at 1, blue below = stable,
    red above = unstable, clipped at 2); ``mode="stable"`` shows only stable/unstable.
    ``bound`` is the largest stable step per row (a sequence, or a callable ``row -> step``),
    drawn as a black line through the rows: the closed form beside the computation.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; allowed: {', '.join(MODES)}")
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
    fig.update_xaxes(title_text=alpha_title, range=[min(alphas), max(alphas)])
    fig.update_layout(
        title={"text": title or "stability of delayed gradient descent"},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        height=440,
        margin={"l": 60, "r": 20, "t": 80, "b": 50},
    )
    return fig
