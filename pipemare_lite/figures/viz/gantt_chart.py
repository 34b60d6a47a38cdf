"""Gantt charts of a timeline: who computes what, when (introduced in chapter 01).

One row per rank (rank 0 on top), one box per action, labelled with its microbatch and
coloured by it (:mod:`pipemare_lite.figures.viz.colors`); the op kind is told by pattern and shade;
idle time is light grey. The same function draws the simulator's plan (cost units) and an
executor's trace (seconds), and :func:`gantt_pair` stacks the two for comparison.

Drawing uses one bar trace per op kind with ``base`` = start time, not one shape per box,
so a P=16, M=64 schedule (thousands of boxes) redraws in milliseconds.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipemare_lite.analysis.timeline import Timeline
from pipemare_lite.figures.viz.colors import (
    IDLE_COLOR,
    MICROBATCH_PALETTE,
    OP_STYLE,
    UPDATE_COLOR,
    microbatch_colorscale,
)

#: Updates often cost nothing in a simulation; draw them at least this wide (fraction of the
#: makespan) so they stay visible as thin marks.
UPDATE_MIN_WIDTH = 0.004
#: Bar thickness as a fraction of a row.
ROW_FILL = 0.8


def time_scale(timeline: Timeline) -> tuple[float, str]:
    """(factor, unit) to display the timeline in: measured sub-second traces in ms."""
    if timeline.unit == "s" and 0 < timeline.makespan < 1.0:
        return 1000.0, "ms"
    return 1.0, timeline.unit


def idle_intervals(timeline: Timeline) -> dict[int, list[tuple[float, float]]]:
    """Per rank, the (start, end) gaps in which it computes nothing, in timeline time.

    Gaps run from the timeline's first start to its last end, so a rank that starts late or
    finishes early is idle for that time too (the pipeline bubble).
    """
    if not timeline.entries:
        return {r: [] for r in range(timeline.schedule.num_ranks)}
    t0 = min(e.start for e in timeline.entries)
    t_end = max(e.end for e in timeline.entries)
    tolerance = 1e-9 * max(t_end - t0, 1e-300)
    by_rank: dict[int, list] = defaultdict(list)
    for entry in timeline.entries:  # one pass, not one scan per rank: P=16 stays fast
        by_rank[entry.rank].append((entry.start, entry.end))
    gaps: dict[int, list[tuple[float, float]]] = {}
    for rank in range(timeline.schedule.num_ranks):
        cursor, rank_gaps = t0, []
        for start, end in sorted(by_rank[rank]):
            if start - cursor > tolerance:
                rank_gaps.append((cursor, start))
            cursor = max(cursor, end)
        if t_end - cursor > tolerance:
            rank_gaps.append((cursor, t_end))
        gaps[rank] = rank_gaps
    return gaps


def _op_marker(kind: str, entries: list) -> dict:
    """Marker of one op kind's bars: microbatch hue (numeric, via a colorscale), op pattern."""
    style = OP_STYLE[kind]
    marker: dict = {"opacity": style["opacity"], "line": {"width": 0.5, "color": "white"}}
    if kind == "U":
        marker["color"] = UPDATE_COLOR
        return marker
    marker.update(
        color=np.array([e.action.index % len(MICROBATCH_PALETTE) for e in entries]),
        colorscale=microbatch_colorscale(style["shade"]),
        cmin=-0.5,
        cmax=len(MICROBATCH_PALETTE) - 0.5,
        showscale=False,
        pattern={"shape": style["pattern"], "fgcolor": "rgba(255,255,255,0.7)", "solidity": 0.35},
    )
    return marker


#: Suffixes that tell an interleaved rank's model chunks apart: chunk 0, 1, 2, 3 ...
CHUNK_MARKS = ("", "\u2032", "\u2033", "\u2034")


def box_label(action, num_ranks: int) -> str:
    """A box's text: the microbatch, primed once per chunk when interleaved (``3``, ``3′``)."""
    chunk = action.stage // num_ranks
    mark = CHUNK_MARKS[chunk] if chunk < len(CHUNK_MARKS) else f"^{chunk}"
    return f"{action.index}{mark}"


#: Marks a legend-only trace (see :func:`legend_stub`); data traces carry no ``meta``.
LEGEND_META = "legend"
LEGEND_SWATCH = "#8C8C8C"


def legend_stub(kind: str, showlegend: bool = True) -> dict:
    """A data-free bar that gives op ``kind`` a neutral grey legend swatch with its pattern.

    The boxes' hue belongs to the microbatch, so the legend must not show any one
    microbatch's colour: it shows the pattern alone. It shares the kind's legend group, so
    clicking it still hides or shows that kind's boxes.
    """
    style = OP_STYLE[kind]
    return dict(
        type="bar",
        name=style["label"],
        legendgroup=kind,
        showlegend=showlegend,
        meta=LEGEND_META,
        orientation="h",
        x=[None],
        y=[None],
        hoverinfo="skip",
        marker={"color": LEGEND_SWATCH, "opacity": style["opacity"],
                "pattern": {"shape": style["pattern"], "fgcolor": "white", "solidity": 0.35}},
    )


def gantt_trace_specs(
    timeline: Timeline, *, show_idle: bool = True, showlegend: bool = True
) -> list[dict]:
    """The bar traces of a Gantt chart as plain dicts: one per op kind present, plus idle.

    F/B/I/W boxes are drawn by a trace without a legend entry, followed by its
    :func:`legend_stub` (``meta == "legend"``, no data). y is the rank (a number;
    :func:`gantt` labels and reverses the axis), base the start time relative to the
    timeline's first start, x the duration. Plain dicts so a widget can hand them to its
    figure without validating them twice (:func:`gantt` validates).
    """
    factor, unit = time_scale(timeline)
    t0 = min((e.start for e in timeline.entries), default=0.0)
    makespan = timeline.makespan
    P = timeline.schedule.num_ranks
    by_kind: dict[str, list] = defaultdict(list)
    for entry in timeline.entries:
        by_kind[entry.action.kind].append(entry)

    hover = (
        "<b>%{hovertext}</b> on rank %{y}<br>"
        f"start %{{customdata[0]:.4g}} {unit}<br>end %{{customdata[1]:.4g}} {unit}"
        "<extra></extra>"
    )
    traces: list[dict] = []
    for kind in OP_STYLE:  # fixed order: F, B, I, W, U (legend order is the same everywhere)
        entries = by_kind.get(kind)
        if not entries:
            continue
        style = OP_STYLE[kind]
        starts = np.array([(e.start - t0) * factor for e in entries], dtype=float)
        ends = np.array([(e.end - t0) * factor for e in entries], dtype=float)
        widths = ends - starts
        if kind == "U":
            widths = np.maximum(widths, UPDATE_MIN_WIDTH * makespan * factor)
        traces.append(
            dict(
                type="bar",
                name=style["label"],
                legendgroup=kind,
                showlegend=showlegend and kind == "U",  # U is black: its own swatch is right
                orientation="h",
                y=np.array([e.rank for e in entries]),
                x=widths,
                base=starts,
                width=ROW_FILL,
                text=np.array([box_label(e.action, P) if kind != "U" else "" for e in entries]),
                textposition="inside",
                insidetextanchor="middle",
                textangle=0,
                hovertext=np.array([str(e.action) for e in entries]),
                customdata=np.column_stack([starts, ends]),
                hovertemplate=hover,
                marker=_op_marker(kind, entries),
            )
        )
        if kind != "U":
            traces.append(legend_stub(kind, showlegend))
    if show_idle and timeline.entries:
        gaps = [(rank, a, b) for rank, rg in idle_intervals(timeline).items() for a, b in rg]
        if gaps:
            traces.append(
                dict(
                    type="bar",
                    name="idle",
                    legendgroup="idle",
                    showlegend=showlegend,
                    orientation="h",
                    y=[rank for rank, _, _ in gaps],
                    x=[(b - a) * factor for _, a, b in gaps],
                    base=[(a - t0) * factor for _, a, _ in gaps],
                    width=ROW_FILL,
                    hovertext=np.array(["idle"] * len(gaps)),
                    customdata=np.array([(a - t0, b - t0) for _, a, b in gaps]) * factor,
                    hovertemplate=hover,
                    marker={"color": IDLE_COLOR, "line": {"width": 0}},
                )
            )
    return traces


def gantt_traces(
    timeline: Timeline, *, show_idle: bool = True, showlegend: bool = True
) -> list[go.Bar]:
    """:func:`gantt_trace_specs` as validated ``go.Bar`` objects."""
    return [go.Bar(spec) for spec in gantt_trace_specs(timeline, show_idle=show_idle,
                                                       showlegend=showlegend)]


def default_title(timeline: Timeline, symbol: str = "M") -> str:
    """``"1f1b, P=4, M=8 (simulated)"``-style title naming what is drawn.

    ``symbol`` names the microbatches per minibatch: chapters 01-04 write M, chapters 05 on
    write N (PipeMare's notation).
    """
    s = timeline.schedule
    parts = [f"{s.name}: P={s.num_ranks}, {symbol}={s.num_microbatches}"]
    if s.chunks > 1:
        parts.append(f"v={s.chunks}")
    if s.num_minibatches > 1:
        parts.append(f"{s.num_minibatches} minibatches")
    return ", ".join(parts) + f" ({timeline.source})"


def _rank_axis(num_ranks: int) -> dict:
    return {
        "title": {"text": "rank"},
        "tickmode": "array",
        "tickvals": list(range(num_ranks)),
        "ticktext": [str(r) for r in range(num_ranks)],
        "range": [num_ranks - 0.5, -0.5],  # rank 0 on top
    }


def _time_axis(unit: str) -> dict:
    return {"title": {"text": f"time ({unit})"}, "rangemode": "tozero", "showgrid": True,
            "gridcolor": "#EEEEEE"}


def _figure_height(num_ranks: int) -> int:
    return int(min(900, 140 + 32 * num_ranks))


#: Layout shared by every Gantt figure.
COMMON_LAYOUT = {
    "barmode": "overlay",
    "bargap": 0,
    "uniformtext": {"minsize": 8, "mode": "hide"},
    "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
    "margin": {"l": 60, "r": 20, "t": 90, "b": 50},
    "plot_bgcolor": "white",
    "hoverlabel": {"bgcolor": "white"},
}


def gantt_layout(timeline: Timeline, *, title: str | None = None) -> dict:
    """The layout of :func:`gantt` as a plain dict (axes, title, height; no template)."""
    _, unit = time_scale(timeline)
    ranks = timeline.schedule.num_ranks
    return dict(
        COMMON_LAYOUT,
        title={"text": title if title is not None else default_title(timeline)},
        height=_figure_height(ranks),
        xaxis=_time_axis(unit),
        yaxis=_rank_axis(ranks),
    )


def gantt(timeline: Timeline, *, title: str | None = None, show_idle: bool = True) -> go.Figure:
    """A Gantt chart of ``timeline``: rows = ranks (rank 0 on top), boxes = actions.

    Boxes are labelled by microbatch (with interleaving, primed per model chunk: ``3`` is
    microbatch 3 on the rank's first chunk, ``3′`` on its second) and coloured by it; F is
    solid, B hatched and darker, I and W (split backward) have their own patterns, U is a
    thin black mark, idle time is grey (``show_idle``). The x axis is time in the timeline's
    unit (cost units for a simulation; seconds, or ms when shorter than a second, for a
    measured trace).
    """
    if not isinstance(timeline, Timeline):
        raise TypeError(f"gantt() needs a Timeline, got {type(timeline).__name__}")
    return go.Figure(
        data=gantt_trace_specs(timeline, show_idle=show_idle),
        layout=gantt_layout(timeline, title=title),
    )


def gantt_pair(
    planned: Timeline,
    measured: Timeline,
    *,
    title: str | None = None,
    show_idle: bool = True,
    microbatch_symbol: str = "M",
) -> go.Figure:
    """The simulator's plan above an executor's measured trace, one Gantt each (chapter 11).

    The two keep their own time axes (cost units vs seconds): compare shapes and order, not
    absolute times. Both must come from schedules with the same number of ranks. Any two
    timelines with the same ranks can be stacked (chapter 05: flushed above unflushed).
    ``microbatch_symbol`` is the letter the subplot titles use (see :func:`default_title`).
    """
    for name, t in (("planned", planned), ("measured", measured)):
        if not isinstance(t, Timeline):
            raise TypeError(f"gantt_pair(): {name} must be a Timeline, got {type(t).__name__}")
    ranks = planned.schedule.num_ranks
    if measured.schedule.num_ranks != ranks:
        raise ValueError(
            f"gantt_pair(): planned has {ranks} ranks but measured has "
            f"{measured.schedule.num_ranks}; draw them separately with gantt()"
        )
    fig = make_subplots(
        rows=2,
        cols=1,
        vertical_spacing=0.16,
        subplot_titles=(default_title(planned, microbatch_symbol),
                        default_title(measured, microbatch_symbol)),
    )
    for row, t in ((1, planned), (2, measured)):
        for trace in gantt_traces(t, show_idle=show_idle, showlegend=(row == 1)):
            fig.add_trace(trace, row=row, col=1)
        fig.update_xaxes(_time_axis(time_scale(t)[1]), row=row, col=1)
        fig.update_yaxes(_rank_axis(ranks), row=row, col=1)
    fig.update_layout(COMMON_LAYOUT)
    fig.update_layout(
        title={"text": title or f"planned vs measured: {planned.schedule.name}"},
        height=2 * _figure_height(ranks) + 40,
        # beside the plots: above them it would cover the first subplot's title
        legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"},
        margin={**COMMON_LAYOUT["margin"], "r": 120},
    )
    return fig
