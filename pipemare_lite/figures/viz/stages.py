"""Per-stage figures of a training run (chapter 07): update norms, and stages on the map.

- :func:`update_norm_figure`: every stage's update norm ``||w after - w before||`` against the
  update index (log scale), from a history's ``stage_update_norm``, optionally beside a
  reference run (the synchronous one) drawn dashed: where an asynchronous run goes wrong,
  and which stage first;
- :func:`stage_map_figure`: the stability map (delay against ``lr * lam``) with
  each stage of one or more pipelines as a point, filled when inside the stable region and
  hollow when outside (points from :func:`pipemare_lite.analysis.stage_stability.stage_points`).

Colours: stage s of P gets the same shade in both figures (dark = stage 0, the stalest).
Plain values in, a ``plotly.graph_objects.Figure`` out; nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import plotly.graph_objects as go
from plotly.colors import sample_colorscale

from pipemare_lite.analysis.theory import stability_bound
from pipemare_lite.figures.viz.stability import stability_map

#: Marker symbols of the pipelines drawn on one map, in order.
SYMBOLS = ("circle", "diamond", "square", "triangle-up", "star")


#: how far along Viridis the last stage's colour sits (see :func:`stage_color`)
STAGE_SCALE_END = 0.6


def stage_color(stage: int, num_stages: int) -> str:
    """Stage s of P: dark (stage 0, the stalest) to light (the last stage).

    Viridis stops at 0.6, at teal: its yellow-green end is the stable region's green, on
    which a filled marker looked hollow (issue 30).
    """
    position = 0.0 if num_stages <= 1 else stage / (num_stages - 1)
    return sample_colorscale("Viridis", [STAGE_SCALE_END * position])[0]


def _norms(history) -> list[list]:
    norms = history.get("stage_update_norm") if isinstance(history, Mapping) \
        else getattr(history, "stage_update_norm", None)
    if not norms:
        raise ValueError("the history has no stage_update_norm (a run from an engine that "
                         "records update norms is needed)")
    return norms


def _finite_or_none(values) -> list:
    return [v if v is not None and math.isfinite(v) and v > 0 else None for v in values]


def update_norm_figure(history, reference=None, *, title: str | None = None,
                       reference_name: str = "sync") -> go.Figure:
    """Per-stage update norms of ``history`` (solid), and of ``reference`` (dashed) if given.

    ``history`` is a :class:`~pipemare_lite.training.history.History` or its ``to_dict()``. A
    non-finite norm ends the stage's line; a cross marks the last finite update of a stage
    that went non-finite.
    """
    norms = _norms(history)
    P = len(norms)
    fig = go.Figure()
    if reference is not None:
        for s, values in enumerate(_norms(reference)):
            fig.add_trace(go.Scatter(
                name=f"{reference_name}, stage {s}", legendgroup=f"stage {s}", showlegend=False,
                x=list(range(len(values))), y=_finite_or_none(values), mode="lines",
                line={"color": stage_color(s, P), "width": 1, "dash": "dot"}, opacity=0.6,
                hovertemplate=f"{reference_name}, stage {s}<br>update %{{x}}: "
                              "%{y:.3g}<extra></extra>"))
    for s, values in enumerate(norms):
        shown = _finite_or_none(values)
        bad = next((k for k, v in enumerate(values)
                    if v is None or not math.isfinite(v)), None)
        if bad is not None:
            shown = shown[:bad]
        fig.add_trace(go.Scatter(
            name=f"stage {s}" + ("" if bad is None else f" (non-finite at update {bad})"),
            legendgroup=f"stage {s}", x=list(range(len(shown))), y=shown, mode="lines",
            line={"color": stage_color(s, P), "width": 2},
            hovertemplate=f"stage {s}<br>update %{{x}}: %{{y:.3g}}<extra></extra>"))
        finite = [(k, v) for k, v in enumerate(shown) if v is not None]
        if bad is not None and finite:
            fig.add_trace(go.Scatter(
                name=f"stage {s} non-finite", legendgroup=f"stage {s}", showlegend=False,
                x=[finite[-1][0]], y=[finite[-1][1]], mode="markers",
                marker={"symbol": "x", "size": 12, "color": "black"},
                hovertemplate=f"stage {s}: non-finite after update %{{x}}<extra></extra>"))
    fig.update_xaxes(title_text="update (of each stage)", gridcolor="#EEEEEE")
    fig.update_yaxes(title_text="update norm ||w after - w before|| (log scale)", type="log",
                     gridcolor="#EEEEEE")
    note = "" if reference is None else f" (dotted: {reference_name})"
    fig.update_layout(title={"text": (title or "update norm of every stage") + note},
                      legend={"title": {"text": "stage (dark: stalest)"}},
                      plot_bgcolor="white", height=440,
                      margin={"l": 70, "r": 20, "t": 60, "b": 50})
    return fig


def stage_map_figure(
    points: Mapping[str, Sequence],
    *,
    alphas: Sequence[float],
    taus: Sequence[int],
    grid=None,
    title: str | None = None,
) -> go.Figure:
    """Chapter 06's stability map with every stage of each pipeline in ``points`` marked.

    Args:
        points: pipeline name -> its :class:`~pipemare_lite.analysis.stage_stability.StagePoint`
        list.
        alphas: the map's steps ``lr * lam`` (increasing, positive: a log axis).
        taus: its delays, ``0, 1, ..., T`` (every point's delay must be one of them).
        grid: the spectral radii (rows = taus, columns = alphas), e.g. from
            :func:`pipemare_lite.analysis.theory.stability_grid` (computed when not given).
    """
    from pipemare_lite.analysis.theory import stability_grid

    taus = list(taus)
    if taus != list(range(len(taus))):
        raise ValueError(f"taus must be 0, 1, ..., T; got {taus}")
    if grid is None:
        grid = stability_grid(alphas, taus)
    fig = stability_map(grid, alphas, taus, bound=stability_bound, mode="stable",
                        alpha_axis="log", alpha_title="lr * lambda of the stage (log)",
                        title=title or "each stage on the stability map")
    for k, (name, stage_points) in enumerate(points.items()):
        for p in stage_points:
            if p.delay > taus[-1]:
                raise ValueError(f"{name}, stage {p.stage}: delay {p.delay} is off the map "
                                 f"(taus up to {taus[-1]})")
        fig.add_trace(stage_trace(name, stage_points, SYMBOLS[k % len(SYMBOLS)]))
    return fig


def stage_trace(name: str, stage_points: Sequence, symbol: str = "circle") -> go.Scatter:
    """One pipeline's stages as markers: filled inside the stable region, hollow outside."""
    P = len(stage_points)
    return go.Scatter(
        name=name, x=[max(p.step, 1e-12) for p in stage_points],
        y=[p.delay for p in stage_points], mode="markers",
        marker={"symbol": [symbol if p.inside else f"{symbol}-open" for p in stage_points],
                "size": 13, "color": [stage_color(p.stage, P) for p in stage_points],
                "line": {"width": 2, "color": "black"}},
        customdata=[[p.stage, p.bound, p.radius] for p in stage_points],
        hovertemplate=(f"{name}, stage %{{customdata[0]}}<br>delay %{{y}}, lr*lambda %{{x:.3g}}"
                       "<br>bound %{customdata[1]:.3g}, radius %{customdata[2]:.4f}"
                       "<extra></extra>"),
    )
