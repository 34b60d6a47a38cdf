"""Training curves of several runs on one set of axes (introduced in chapter 07).

A *history* is a plain dict of equal-length lists: ``"step"`` and ``"loss"``, optionally
``"accuracy"`` (and a ``"diverged"`` flag). Each run keeps its method's colour from
:mod:`pipemare_lite.viz.colors`, and a run that blew up is marked where it did, so "async
without fixes diverges, T1 recovers" is visible at a glance (chapters 07-10).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import plotly.graph_objects as go

from pipemare_lite.viz.colors import method_color

_EXTRA_COLORS = ("#17BECF", "#BCBD22", "#8C564B", "#E377C2", "#7F7F7F", "#1F77B4", "#D62728")


def divergence_step(history: Mapping, metric: str = "loss", threshold: float | None = None):
    """The first step whose ``metric`` is NaN/inf (or above ``threshold``), else None.

    A history with ``"diverged": True`` but only finite values diverged after its last step.
    """
    steps, values = history["step"], history[metric]
    for step, value in zip(steps, values):
        bad = value is None or not math.isfinite(value)
        if bad or (threshold is not None and value > threshold):
            return step
    if history.get("diverged"):
        return steps[-1] if steps else 0
    return None


def _check_history(name: str, history: Mapping, metric: str) -> None:
    for key in ("step", metric):
        if key not in history:
            raise ValueError(
                f"history {name!r} has no {key!r} list; it has: {', '.join(map(str, history))}"
            )
    if len(history["step"]) != len(history[metric]):
        raise ValueError(
            f"history {name!r}: {len(history['step'])} steps but {len(history[metric])} "
            f"{metric} values"
        )


def _distinct_colors(names) -> dict[str, str]:
    """Method colours, except that two runs in one figure never share a colour."""
    used: set[str] = set()
    result = {}
    for name in names:
        color = method_color(name)
        if color in used:
            color = next((c for c in _EXTRA_COLORS if c not in used), color)
        used.add(color)
        result[name] = color
    return result


def loss_curves(
    histories: Mapping[str, Mapping],
    *,
    metric: str = "loss",
    log_y: bool = False,
    threshold: float | None = None,
    title: str | None = None,
) -> go.Figure:
    """One line per run of ``metric`` against step; divergence marked with a cross.

    ``histories`` maps a run's name (its legend entry; method names such as ``"gpipe"`` or
    ``"pipemare"`` get their fixed colour) to its history. Values that are NaN/inf, or above
    ``threshold`` when given, end the line; a black cross at the last good point marks where
    the run diverged and its legend entry says so. ``log_y`` puts the y axis on a log scale.
    """
    if not histories:
        raise ValueError("loss_curves() needs at least one history")
    colors = _distinct_colors(histories)
    fig = go.Figure()
    for name, history in histories.items():
        _check_history(name, history, metric)
        steps, values = list(history["step"]), list(history[metric])
        diverged_at = divergence_step(history, metric, threshold)
        shown = []
        for step, value in zip(steps, values):
            ok = value is not None and math.isfinite(value)
            ok = ok and (threshold is None or value <= threshold)
            if diverged_at is not None and step >= diverged_at and not ok:
                break
            shown.append((step, value if ok else None))
        label = name if diverged_at is None else f"{name} (diverged at step {diverged_at})"
        fig.add_trace(
            go.Scatter(
                name=label,
                legendgroup=name,
                x=[s for s, _ in shown],
                y=[v for _, v in shown],
                mode="lines",
                line={"color": colors[name], "width": 2},
                hovertemplate=f"{name}<br>step %{{x}}: {metric} %{{y:.4g}}<extra></extra>",
            )
        )
        last_good = [(s, v) for s, v in shown if v is not None]
        if diverged_at is not None and last_good:
            s, v = last_good[-1]
            fig.add_trace(
                go.Scatter(
                    name=f"{name} diverged",
                    legendgroup=name,
                    showlegend=False,
                    x=[s],
                    y=[v],
                    mode="markers",
                    marker={"symbol": "x", "size": 14, "color": "black",
                            "line": {"width": 1, "color": colors[name]}},
                    hovertemplate=f"{name} diverged after step %{{x}}<extra></extra>",
                )
            )
    fig.update_xaxes(title_text="step (optimizer updates)")
    fig.update_yaxes(title_text=metric + (" (log scale)" if log_y else ""),
                     type="log" if log_y else "linear")
    fig.update_layout(
        title={"text": title or f"{metric} during training"},
        legend={"title": {"text": "run"}},
        plot_bgcolor="white",
        height=420,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
    )
    fig.update_xaxes(gridcolor="#EEEEEE")
    fig.update_yaxes(gridcolor="#EEEEEE")
    return fig

