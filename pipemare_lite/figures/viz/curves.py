"""Training curves of several runs on one set of axes (introduced in chapter 07).

A *history* is either a plain dict of lists, ``"step"`` and ``"loss"`` (optionally
``"accuracy"`` and a ``"diverged"`` flag; without ``"step"`` the steps are 0, 1, 2 ...), or
what :func:`pipemare_lite.training.loop.fit` returns (a ``History``, or its ``to_dict()``): its
per-step ``loss``, and for other metrics its per-epoch ``evals``. Each run keeps its
method's colour from :mod:`pipemare_lite.figures.viz.colors`, and a run that blew up is marked
where it did, so "async without fixes diverges, T1 recovers" is visible at a glance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import plotly.graph_objects as go

from pipemare_lite.figures.viz.colors import method_color

_EXTRA_COLORS = ("#17BECF", "#BCBD22", "#8C564B", "#E377C2", "#7F7F7F", "#1F77B4", "#D62728")


@dataclass(frozen=True)
class Curve:
    """One run's metric against step, and whether the run reported a divergence."""

    steps: list
    values: list
    diverged: bool = False
    diverged_at: int | None = None  # the step the run itself reported (fit's divergence_step)


def curve(history, metric: str = "loss", name: str = "history") -> Curve:
    """The ``metric`` curve of a history (dict, ``train.History`` or its ``to_dict()``).

    Per-step lists are used when the history has ``metric``; otherwise the per-epoch
    ``evals`` entries that carry it. Raises ValueError naming the run and what it has.
    """
    if not isinstance(history, Mapping) and hasattr(history, "to_dict"):
        history = history.to_dict()
    if not isinstance(history, Mapping):
        raise TypeError(f"history {name!r} is a {type(history).__name__}; expected a dict")
    diverged = bool(history.get("diverged", False))
    reported = history.get("divergence_step") if diverged else None
    if metric in history:
        values = list(history[metric])
        # a history's k-th value is step k, counted from 1 like the engine's divergence_step
        # and the evals' "step" (a legend must name the step the printed outcome names)
        steps = (list(history["step"]) if "step" in history
                 else list(range(1, len(values) + 1)))
        if len(steps) != len(values):
            raise ValueError(
                f"history {name!r}: {len(steps)} steps but {len(values)} {metric} values"
            )
        return Curve(steps, values, diverged, reported)
    evals = [e for e in history.get("evals", []) if metric in e]
    if evals:
        return Curve([e["step"] for e in evals], [e[metric] for e in evals], diverged, reported)
    raise ValueError(
        f"history {name!r} has no {metric!r} list (nor evals with it); "
        f"it has: {', '.join(map(str, history))}"
    )


def divergence_step(history, metric: str = "loss", threshold: float | None = None):
    """The first step whose ``metric`` is NaN/inf (or above ``threshold``), else None.

    A history flagged ``diverged`` with only finite values diverged after its last step. A
    run that reports its own divergence step (``fit()``'s ``divergence_step``) is taken at
    its word, so a legend names the step the printed outcome names.
    """
    run = history if isinstance(history, Curve) else curve(history, metric)
    if threshold is None and run.diverged_at is not None:
        return run.diverged_at
    for step, value in zip(run.steps, run.values):
        bad = value is None or not math.isfinite(value)
        if bad or (threshold is not None and value > threshold):
            return step
    if run.diverged:
        return run.steps[-1] if run.steps else 0
    return None


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
    histories: Mapping[str, object],
    *,
    metric: str = "loss",
    log_y: bool = False,
    threshold: float | None = None,
    title: str | None = None,
) -> go.Figure:
    """One line per run of ``metric`` against step; divergence marked with a cross.

    ``histories`` maps a run's name (its legend entry; method names such as ``"gpipe"`` or
    ``"pipemare"`` get their fixed colour) to its history (see the module docstring).
    Values that are NaN/inf, or above ``threshold`` when given, end the line; a black cross
    at the last good point marks where the run diverged and its legend entry says so.
    ``log_y`` puts the y axis on a log scale.
    """
    if not histories:
        raise ValueError("loss_curves() needs at least one history")
    colors = _distinct_colors(histories)
    fig = go.Figure()
    for name, history in histories.items():
        run = curve(history, metric, name)
        steps, values = run.steps, run.values
        diverged_at = divergence_step(run, metric, threshold)
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

