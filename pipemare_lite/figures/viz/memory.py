"""Memory per device, stacked by kind (introduced in chapter 03).

Draws :func:`pipemare_lite.analysis.memory.memory_by_kind`'s result: one bar per rank (or per
method, whatever the list holds), one colour per memory kind from
:mod:`pipemare_lite.figures.viz.colors`, so "weights" is the same blue in every chapter. A stacked
bar adds each kind's peak, which is an upper bound; a black diamond marks ``peak_total``,
the most held at one moment, when the result has it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from pipemare_lite.analysis.memory import KINDS
from pipemare_lite.figures.viz.colors import memory_kind_color

#: Keys of a memory_by_kind dict that are sums, not kinds.
TOTAL_KEYS = ("total", "peak_total")
#: Human-readable names of the kinds in the legend.
KIND_LABELS = {
    "weights": "weights",
    "stash": "stashed weight versions",
    "t2_buffer": "T2 delta buffer",
    "optimizer": "optimizer state",
    "activations": "in-flight activations",
}
_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("bytes", 1))


def byte_unit(largest: float) -> tuple[str, int]:
    """The binary unit (name, size) that shows ``largest`` bytes as a number >= 1."""
    for name, size in _UNITS:
        if largest >= size:
            return name, size
    return "bytes", 1


def memory_bars(
    memory_by_kind_result: Sequence[Mapping[str, int]],
    labels: Sequence[str] | None = None,
    *,
    title: str | None = None,
    axis_title: str = "rank",
) -> go.Figure:
    """Stacked bars of bytes by kind, one bar per dict of ``memory_by_kind_result``.

    ``labels`` names the bars (default ``"0"``, ``"1"``, ... with ``axis_title="rank"``); to
    compare methods, pass e.g. one rank's dict per method and ``axis_title="method"``. Kinds
    are stacked in :data:`pipemare_lite.analysis.memory.KINDS` order (unknown kinds on top); kinds
    that
    are zero in every bar are left out.
    """
    bars = list(memory_by_kind_result)
    if not bars:
        raise ValueError("memory_bars() needs at least one dict of bytes by kind")
    for i, bar in enumerate(bars):
        if not isinstance(bar, Mapping):
            raise TypeError(f"memory_bars(): item {i} is a {type(bar).__name__}, not a dict")
    names = [str(i) for i in range(len(bars))] if labels is None else [str(x) for x in labels]
    if len(names) != len(bars):
        raise ValueError(f"{len(names)} labels for {len(bars)} bars")
    # kinds that are zero in every bar (no stash for async, no T2 buffer without T2) would
    # only clutter the legend
    present = {k for bar in bars for k, v in bar.items() if k not in TOTAL_KEYS and v}
    kinds = [k for k in KINDS if k in present] + sorted(present - set(KINDS))
    heights = [sum(bar.get(k, 0) for k in kinds) for bar in bars]
    unit, size = byte_unit(max(heights + [bar.get("peak_total", 0) for bar in bars]))
    fig = go.Figure()
    for kind in kinds:
        fig.add_trace(
            go.Bar(
                name=KIND_LABELS.get(kind, kind),
                x=names,
                y=[bar.get(kind, 0) / size for bar in bars],
                marker={"color": memory_kind_color(kind)},
                customdata=[bar.get(kind, 0) for bar in bars],
                hovertemplate=(
                    f"%{{x}}: {KIND_LABELS.get(kind, kind)} %{{y:.4g}} {unit} "
                    "(%{customdata:,} bytes)<extra></extra>"
                ),
            )
        )
    if all("peak_total" in bar for bar in bars):
        fig.add_trace(
            go.Scatter(
                name="peak held at one moment",
                x=names,
                y=[bar["peak_total"] / size for bar in bars],
                mode="markers",
                marker={"symbol": "diamond", "size": 11, "color": "black"},
                hovertemplate=f"%{{x}}: peak at one moment %{{y:.4g}} {unit}<extra></extra>",
            )
        )
    fig.update_xaxes(title_text=axis_title, type="category")
    fig.update_yaxes(title_text=f"memory ({unit})", rangemode="tozero")
    fig.update_layout(
        barmode="stack",
        title={"text": title or "memory per device by kind (peak of each kind)"},
        legend={"traceorder": "reversed"},  # legend top-to-bottom as the stack
        plot_bgcolor="white",
        height=420,
        margin={"l": 60, "r": 20, "t": 60, "b": 50},
    )
    return fig
