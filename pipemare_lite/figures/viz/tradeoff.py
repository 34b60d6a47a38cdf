"""The trade-off table as a figure: each method's busiest device against a budget (chapter 10).

One bar per method (:class:`pipemare_lite.methods.tradeoff.TradeoffRow`): the per-kind peaks of the
device that holds the most, stacked in the memory kinds' colours of every chapter, a black
diamond at the most it holds at one moment, a dashed line at the budget, the simulated
utilization written over each bar. Methods over the budget are drawn faded; a method that
cannot run at this P and N has no bar and says so. Pure: rows in, figure out.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from pipemare_lite.analysis.memory import KINDS
from pipemare_lite.figures.viz.colors import memory_kind_color
from pipemare_lite.figures.viz.memory import _UNITS, KIND_LABELS, byte_unit

#: Opacity of a bar over the budget.
OVER_BUDGET_OPACITY = 0.3


def _fits(row, budget_bytes) -> bool:
    return row.not_possible is None and row.device_peak <= budget_bytes


def bar_labels(rows: Sequence, budget_bytes: float) -> list[str]:
    """The text over each bar: utilization and whether it fits (or why it cannot run)."""
    out = []
    for row in rows:
        if row.not_possible is not None:
            out.append("cannot run")
        else:
            out.append(f"util. {row.utilization:.2f}, "
                       + ("fits" if row.device_peak <= budget_bytes else "over"))
    return out


def tradeoff_figure(rows: Sequence, budget_bytes: float, *, pick: str | None = None,
                    title: str | None = None, unit_bytes: float | None = None) -> go.Figure:
    """Stacked bars of each method's busiest device, the budget line, utilization on top.

    ``pick`` (a method name) is outlined; ``unit_bytes`` fixes the axis unit (default: the
    binary unit of the largest bar or the budget), so redraws at another budget keep it.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("tradeoff_figure() needs at least one row")
    if not budget_bytes >= 0:
        raise ValueError(f"budget_bytes={budget_bytes!r}: allowed: a number >= 0")
    names = [row.label for row in rows]
    largest = max([row.device_peak for row in rows] + [budget_bytes, 1])
    unit, size = byte_unit(largest) if unit_bytes is None else _unit_named(unit_bytes)
    opacity = [1.0 if _fits(row, budget_bytes) or row.not_possible else OVER_BUDGET_OPACITY
               for row in rows]
    fig = go.Figure()
    for kind in KINDS:
        values = [(row.device_memory or {}).get(kind, 0) for row in rows]
        if not any(values):
            continue
        fig.add_trace(go.Bar(
            name=KIND_LABELS[kind], x=names, y=[v / size for v in values],
            marker={"color": memory_kind_color(kind), "opacity": opacity,
                    "line": {"width": [3 if row.method == pick else 0 for row in rows],
                             "color": "black"}},
            customdata=values,
            hovertemplate=f"%{{x}}: {KIND_LABELS[kind]} %{{y:.4g}} {unit} "
                          "(%{customdata:,} bytes)<extra></extra>"))
    fig.add_trace(go.Scatter(
        name="peak held at one moment", x=names, y=[row.device_peak / size for row in rows],
        mode="markers+text", text=bar_labels(rows, budget_bytes), textposition="top center",
        marker={"symbol": "diamond", "size": 10, "color": "black"},
        hovertemplate=f"%{{x}}: peak %{{y:.4g}} {unit}, %{{text}}<extra></extra>"))
    fig.add_hline(y=budget_bytes / size, line_dash="dash", line_color="#B00020",
                  annotation_text=f"budget {budget_bytes / size:.4g} {unit}",
                  annotation_position="top left")
    fig.update_xaxes(title_text="method", type="category")
    fig.update_yaxes(title_text=f"memory of the busiest device ({unit})", rangemode="tozero",
                     range=[0, 1.2 * largest / size])
    fig.update_layout(
        barmode="stack", plot_bgcolor="white", height=440,
        title={"text": title or "memory per device by kind, against the budget"},
        legend={"traceorder": "reversed"}, margin={"l": 60, "r": 20, "t": 60, "b": 50})
    return fig


def _unit_named(unit_bytes: float) -> tuple[str, float]:
    for name, size in _UNITS:  # the binary units memory_bars uses
        if unit_bytes == size:
            return name, size
    raise ValueError(f"unit_bytes={unit_bytes!r}: allowed: 1, 2**10, 2**20 or 2**30")
