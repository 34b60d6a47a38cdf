"""Figures of weight staleness: heatmaps, per-stage delay bars, a microbatch's path (chapter 05).

They draw what :mod:`pipemare_lite.analysis.staleness` measured from a schedule: which weight
version
each forward and backward saw. Delays are in *updates* (optimizer steps of that stage).
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from pipemare_lite.analysis.staleness import QUANTITIES, StageDelay, VersionRow, VersionTable
from pipemare_lite.figures.viz.colors import microbatch_color, shade

#: Axis and colour-bar wording per quantity.
QUANTITY_LABELS = {
    "version_at_forward": "version seen by F",
    "version_at_backward": "version seen by B",
    "version_applied": "version the gradient is applied to",
    "forward_delay": "forward delay (updates)",
    "backward_delay": "backward delay (updates)",
    "discrepancy": "F-to-B discrepancy (updates)",
}
#: Sequential colour scales: delays in blues, the F/B discrepancy in reds.
QUANTITY_COLORSCALES = {
    "forward_delay": "Blues",
    "backward_delay": "Purples",
    "discrepancy": "Reds",
}
#: Above this many cells the numbers are not printed inside the heatmap (unreadable).
MAX_ANNOTATED_CELLS = 600


def staleness_heatmap(
    table: VersionTable,
    quantity: str = "forward_delay",
    *,
    title: str | None = None,
    highlight_microbatch: int | None = None,
) -> go.Figure:
    """Stage x microbatch heatmap of one quantity of a :class:`VersionTable`.

    Rows are (virtual) stages, stage 0 on top; columns are global microbatch indices; thin
    vertical lines separate minibatches; blank cells have no value (e.g. a gradient that no
    update applied). ``highlight_microbatch`` outlines one column (the explorer's choice).
    """
    if not isinstance(table, VersionTable):
        raise TypeError(
            f"staleness_heatmap() needs a VersionTable (staleness.weight_versions(schedule)), "
            f"got {type(table).__name__}"
        )
    if quantity not in QUANTITIES:
        raise ValueError(f"unknown quantity {quantity!r}; allowed: {', '.join(QUANTITIES)}")
    grid = table.matrix(quantity)
    stages, mbs = table.num_stages, table.num_microbatches
    values = [v for row in grid for v in row if v is not None]
    heat = go.Heatmap(
        z=grid,
        x=list(range(mbs)),
        y=list(range(stages)),
        colorscale=QUANTITY_COLORSCALES.get(quantity, "Viridis"),
        zmin=min(0, min(values, default=0)),
        zmax=max(1, max(values, default=1)),
        xgap=1,
        ygap=1,
        colorbar={"title": {"text": "updates" if "version" not in quantity else "version"},
                  "dtick": 1},  # delays and versions are whole numbers
        hovertemplate=(
            f"stage %{{y}}, microbatch %{{x}}<br>{QUANTITY_LABELS[quantity]}: %{{z}}<extra></extra>"
        ),
    )
    if stages * mbs <= MAX_ANNOTATED_CELLS:
        heat.update(
            text=[["" if v is None else str(v) for v in row] for row in grid],
            texttemplate="%{text}",
        )
    schedule = table.schedule
    per_minibatch = schedule.num_microbatches
    # minibatch boundaries as plain shape dicts (fig.add_vline is slow for many figures)
    shapes = [
        {"type": "line", "xref": "x", "yref": "paper", "x0": k * per_minibatch - 0.5,
         "x1": k * per_minibatch - 0.5, "y0": 0, "y1": 1,
         "line": {"color": "#555555", "width": 1.5}}
        for k in range(1, schedule.num_minibatches)
    ]
    if highlight_microbatch is not None:
        if not 0 <= highlight_microbatch < mbs:
            raise ValueError(
                f"highlight_microbatch {highlight_microbatch} out of range 0..{mbs - 1}"
            )
        shapes.append(
            {"type": "rect", "xref": "x", "yref": "y", "x0": highlight_microbatch - 0.5,
             "x1": highlight_microbatch + 0.5, "y0": -0.5, "y1": stages - 0.5,
             "line": {"color": microbatch_color(highlight_microbatch), "width": 4}}
        )
    default_title = (f"{QUANTITY_LABELS[quantity]}: {schedule.name}, "
                     f"P={schedule.num_ranks}, N={per_minibatch}")
    layout = {  # one dict at construction: much faster than a chain of update_* calls
        "shapes": shapes,
        "xaxis": {"title": {"text": "microbatch (global index)"}, "showgrid": False},
        "yaxis": {"title": {"text": "stage"}, "autorange": "reversed", "showgrid": False,
                  "tickmode": "linear", "dtick": 1},
        "title": {"text": title or default_title},
        "height": int(min(700, 180 + 28 * stages)),
        "plot_bgcolor": "white",
        "margin": {"l": 60, "r": 20, "t": 60, "b": 50},
    }
    return go.Figure(heat, layout=layout)


def _as_sequence(expected, num_stages: int) -> list[float] | None:
    if expected is None:
        return None
    values = [expected(s) for s in range(num_stages)] if callable(expected) else list(expected)
    if len(values) != num_stages:
        raise ValueError(
            f"expected has {len(values)} values but there are {num_stages} stages"
        )
    return values


def delay_bars(
    stage_delays: Sequence[StageDelay],
    expected: Sequence[float] | None = None,
    *,
    quantity: str = "forward_delay",
    title: str | None = None,
) -> go.Figure:
    """Mean delay per stage as bars, min..max as whiskers, the closed form overlaid.

    ``stage_delays`` comes from :func:`pipemare_lite.analysis.staleness.stage_delays`; ``expected``
    is
    one closed-form value per stage (a sequence, or a callable ``stage -> value``) drawn as
    black diamonds joined by a dashed line, so measurement and formula sit side by side.
    ``quantity`` is ``"forward_delay"``, ``"backward_delay"`` or ``"discrepancy"``.
    """
    allowed = ("forward_delay", "backward_delay", "discrepancy")
    if quantity not in allowed:
        raise ValueError(f"unknown quantity {quantity!r}; allowed: {', '.join(allowed)}")
    delays = list(stage_delays)
    if not delays or not all(isinstance(d, StageDelay) for d in delays):
        raise TypeError(
            "delay_bars() needs a non-empty list of StageDelay (staleness.stage_delays)"
        )
    stages = [d.stage for d in delays]
    mean = [getattr(d, f"mean_{quantity}") for d in delays]
    low = [m - getattr(d, f"min_{quantity}") for d, m in zip(delays, mean)]
    high = [getattr(d, f"max_{quantity}") - m for d, m in zip(delays, mean)]
    fig = go.Figure(
        go.Bar(
            name="measured (mean, min..max)",
            x=stages,
            y=mean,
            marker={"color": QUANTITY_BAR_COLORS[quantity]},
            error_y={"type": "data", "symmetric": False, "array": high, "arrayminus": low,
                     "color": "#333333"},
            customdata=[
                (getattr(d, f"min_{quantity}"), getattr(d, f"max_{quantity}"), d.count)
                for d in delays
            ],
            hovertemplate=(
                "stage %{x}: mean %{y:.3g}, min %{customdata[0]}, max %{customdata[1]} "
                "over %{customdata[2]} microbatches<extra></extra>"
            ),
        )
    )
    closed_form = _as_sequence(expected, len(delays))
    if closed_form is not None:
        fig.add_trace(
            go.Scatter(
                name="closed form",
                x=stages,
                y=closed_form,
                mode="lines+markers",
                line={"color": "black", "dash": "dash", "width": 1.5},
                marker={"symbol": "diamond", "size": 10, "color": "black"},
                hovertemplate="stage %{x}: closed form %{y}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text="stage", tickmode="linear", dtick=1)
    fig.update_yaxes(title_text=QUANTITY_LABELS[quantity], rangemode="tozero")
    fig.update_layout(
        title={"text": title or f"{QUANTITY_LABELS[quantity]} per stage"},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        plot_bgcolor="white",
        height=380,
        margin={"l": 60, "r": 20, "t": 80, "b": 50},
    )
    return fig


#: Bar colours of :func:`delay_bars`, from the same scales as the heatmap.
QUANTITY_BAR_COLORS = {
    "forward_delay": "#4E79A7",
    "backward_delay": "#8C6BB1",
    "discrepancy": "#E15759",
}


def path_figure(path: Sequence[VersionRow], *, title: str | None = None) -> go.Figure:
    """The versions one microbatch met at each stage: at F, at B, and the one it updates.

    ``path`` is :func:`pipemare_lite.analysis.staleness.microbatch_path`'s result. F is a filled
    circle, B an open circle, the applied version a black tick; the vertical gap between F
    and "applied" is the forward delay, between F and B the discrepancy.
    """
    rows = list(path)
    if not rows:
        raise ValueError("path_figure() needs a non-empty path (staleness.microbatch_path)")
    microbatch = rows[0].microbatch
    if any(r.microbatch != microbatch for r in rows):
        raise ValueError("path_figure(): all rows must belong to one microbatch")
    color = microbatch_color(microbatch)
    stages = [r.stage for r in rows]
    series = (
        ("at F", "version_at_forward", {"symbol": "circle", "size": 12, "color": color}, "solid"),
        ("at B", "version_at_backward",
         {"symbol": "circle-open", "size": 14, "color": shade(color, 0.35),
          "line": {"width": 3}}, "dot"),
        ("applied to", "version_applied",
         {"symbol": "line-ew-open", "size": 18, "color": "black", "line": {"width": 3}}, None),
    )
    traces = [
        {
            "type": "scatter",
            "name": f"version {name}",
            "x": stages,
            "y": [getattr(r, field) for r in rows],
            "mode": "markers" if dash is None else "lines+markers",
            "marker": marker,
            "line": {"color": marker["color"], "dash": dash or "solid", "width": 2},
            "hovertemplate": f"stage %{{x}}: version {name} %{{y}}<extra></extra>",
        }
        for name, field, marker, dash in series
    ]
    layout = {
        "xaxis": {"title": {"text": "stage"}, "tickmode": "linear", "dtick": 1},
        "yaxis": {"title": {"text": "weight version (updates so far)"}, "tickmode": "linear",
                  "dtick": 1, "rangemode": "tozero"},
        "title": {"text": title or f"microbatch {microbatch}: the weight versions it met"},
        "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
        "plot_bgcolor": "white",
        "height": 360,
        "margin": {"l": 60, "r": 20, "t": 80, "b": 50},
    }
    return go.Figure(data=traces, layout=layout)
