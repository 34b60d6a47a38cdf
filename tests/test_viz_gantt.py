"""Gantt figures: one box per action at its time, idle gaps, colours, units, validity."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import pytest

from pipemare_lite.analysis.timeline import TimedAction, Timeline
from pipemare_lite.figures.viz import gantt, gantt_pair, idle_intervals
from pipemare_lite.figures.viz.colors import MICROBATCH_PALETTE, OP_STYLE, microbatch_color, shade
from pipemare_lite.figures.viz.gantt_chart import LEGEND_META, LEGEND_SWATCH
from pipemare_lite.schedules.actions import Action, Schedule


def gpipe_by_hand(P: int, M: int, f: float = 1.0, b: float = 2.0, t0: float = 0.0,
                  unit: str = "cost units", source: str = "simulated") -> Timeline:
    """A GPipe timeline written from its textbook picture, not from the simulator.

    F(m) on stage s runs in slot m + s; all backwards start after the last forward leaves the
    last stage and run in reverse order; one zero-length update per stage at its end.
    """
    ranks, entries = [], []
    fill = (M + P - 1) * f
    for s in range(P):
        row = [Action(s, "F", m) for m in range(M)]
        row += [Action(s, "B", m) for m in reversed(range(M))] + [Action(s, "U", 0)]
        ranks.append(tuple(row))
        for m in range(M):
            entries.append(TimedAction(s, Action(s, "F", m), t0 + (m + s) * f,
                                       t0 + (m + s + 1) * f))
        for k, m in enumerate(reversed(range(M))):
            start = t0 + fill + (P - 1 - s + k) * b
            entries.append(TimedAction(s, Action(s, "B", m), start, start + b))
        end = t0 + fill + (P - 1 - s + M) * b
        entries.append(TimedAction(s, Action(s, "U", 0), end, end))
    schedule = Schedule("gpipe", P, M, tuple(ranks))
    return Timeline(schedule, tuple(entries), unit=unit, source=source)


def trace(fig: go.Figure, name_prefix: str):
    """The one trace that draws boxes named ``name_prefix...`` (legend stubs left out)."""
    found = [t for t in fig.data
             if t.name and t.name.startswith(name_prefix) and t.meta != LEGEND_META]
    assert len(found) == 1, [t.name for t in fig.data]
    return found[0]


@pytest.mark.parametrize("P,M", [(2, 1), (4, 8), (16, 64)])
def test_one_box_per_forward_and_backward(P, M):
    fig = gantt(gpipe_by_hand(P, M))
    assert len(trace(fig, "F").x) == P * M
    assert len(trace(fig, "B").x) == P * M
    assert len(trace(fig, "U").x) == P


def test_boxes_sit_at_their_times_and_ranks():
    timeline = gpipe_by_hand(3, 4, t0=5.0)
    fig = gantt(timeline)
    boxes = {}
    for t in fig.data:
        if t.meta == LEGEND_META:
            continue
        for label, y, base, width in zip(t.hovertext, t.y, t.base, t.x):
            boxes.setdefault(label, []).append((y, base, width))
    for e in timeline.entries:
        if e.action.kind == "U":
            continue
        (y, base, width), = boxes[str(e.action)]
        assert y == e.rank
        assert base == pytest.approx(e.start - 5.0)  # time axis starts at the first start
        assert width == pytest.approx(e.duration)


def test_idle_matches_the_gpipe_bubble():
    P, M, f, b = 4, 6, 1.0, 2.0
    timeline = gpipe_by_hand(P, M, f, b)
    makespan = (M + P - 1) * (f + b)
    assert timeline.makespan == pytest.approx(makespan)
    idle = trace(gantt(timeline), "idle")
    per_rank = [0.0] * P
    for y, width in zip(idle.y, idle.x):
        per_rank[y] += width
    # every rank idles (P-1)(f+b): the bubble, idle fraction (P-1)/(M+P-1)
    assert per_rank == pytest.approx([(P - 1) * (f + b)] * P)
    assert sum(per_rank) / (P * makespan) == pytest.approx((P - 1) / (M + P - 1))
    gaps = idle_intervals(timeline)
    assert gaps[0][0][0] == pytest.approx(M * f)  # stage 0 waits after its last forward
    assert not any(t.name == "idle" for t in gantt(timeline, show_idle=False).data)


def test_rank_zero_on_top_and_axes_labelled():
    fig = gantt(gpipe_by_hand(4, 2))
    assert list(fig.layout.yaxis.range) == [3.5, -0.5]
    assert fig.layout.xaxis.title.text == "time (cost units)"
    assert fig.layout.yaxis.title.text == "rank"
    assert "gpipe" in fig.layout.title.text and "P=4" in fig.layout.title.text


def test_microbatch_colour_is_consistent_and_ops_differ_by_pattern():
    fig = gantt(gpipe_by_hand(2, 14))
    f_trace, b_trace = trace(fig, "F"), trace(fig, "B")
    n = len(MICROBATCH_PALETTE)
    for t in (f_trace, b_trace):
        for label, color_index in zip(t.hovertext, t.marker.color):
            assert color_index == Action.parse(label).index % n
    # the colorscale maps index k to the palette colour k (shaded for B)
    scale = f_trace.marker.colorscale
    for k in range(n):
        position = (k + 0.5) / n
        color = [c for lo, c in scale if lo <= position][-1]
        assert color == microbatch_color(k)
    b_first = [c for lo, c in b_trace.marker.colorscale if lo <= 0.5 / n][-1]
    assert b_first == shade(microbatch_color(0), 0.35)
    assert f_trace.marker.pattern.shape != b_trace.marker.pattern.shape
    assert f_trace.text[0] == "0"  # boxes are labelled by microbatch


def test_measured_seconds_are_shown_from_zero_in_ms():
    timeline = gpipe_by_hand(2, 3, f=0.01, b=0.02, t0=1234.5, unit="s", source="measured")
    fig = gantt(timeline)
    assert fig.layout.xaxis.title.text == "time (ms)"
    f_trace = trace(fig, "F")
    assert min(f_trace.base) == pytest.approx(0.0)
    assert max(f_trace.x) == pytest.approx(10.0)  # 0.01 s = 10 ms
    assert "measured" in fig.layout.title.text


def test_updates_are_visible_though_they_last_zero_time():
    fig = gantt(gpipe_by_hand(3, 2))
    widths = trace(fig, "U").x
    assert all(w > 0 for w in widths)
    assert all(w < 0.01 * 12 for w in widths)  # thin: well under 1% of the 12-unit makespan


def test_figure_is_valid_plotly_and_legend_lists_op_kinds():
    fig = gantt(gpipe_by_hand(3, 3))
    go.Figure(fig.to_dict())  # full validation round-trip
    in_legend = [t for t in fig.data if t.showlegend is not False]
    assert [t.name for t in in_legend] == [OP_STYLE["F"]["label"], OP_STYLE["B"]["label"],
                                           OP_STYLE["U"]["label"], "idle"]
    # F and B swatches are neutral grey (hue means microbatch) and differ only by pattern
    f_stub, b_stub = in_legend[:2]
    assert f_stub.meta == b_stub.meta == LEGEND_META
    assert f_stub.marker.color == b_stub.marker.color == LEGEND_SWATCH
    assert f_stub.marker.pattern.shape != b_stub.marker.pattern.shape
    assert f_stub.legendgroup == trace(fig, "F").legendgroup  # clicking it toggles the boxes


def test_pair_has_two_panels_with_their_own_units():
    planned = gpipe_by_hand(2, 4)
    measured = gpipe_by_hand(2, 4, f=1.1, b=2.3, t0=99.0, unit="s", source="measured")
    fig = gantt_pair(planned, measured)
    assert fig.layout.xaxis.title.text == "time (cost units)"
    assert fig.layout.xaxis2.title.text == "time (s)"
    assert {t.yaxis for t in fig.data} == {"y", "y2"}
    assert sum(1 for t in fig.data if t.showlegend is not False) == 4  # legend shown once
    assert len([t for t in fig.data if t.name.startswith("F") and t.meta != LEGEND_META]) == 2
    with pytest.raises(ValueError, match="ranks"):
        gantt_pair(planned, gpipe_by_hand(3, 4))


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="Timeline"):
        gantt([1, 2, 3])
    with pytest.raises(ValueError, match="microbatch index"):
        microbatch_color(-1)
    assert not math.isnan(gantt(gpipe_by_hand(1, 1)).data[0].x[0])


def test_interleaved_boxes_name_their_chunk():
    # P=2, v=2: virtual stages 0, 1 (chunk 0 on ranks 0, 1) and 2, 3 (chunk 1)
    rows = ("0F0 2F0 2B0 0B0", "1F0 3F0 3B0 1B0")
    ranks = tuple(tuple(Action.parse(a) for a in row.split()) for row in rows)
    schedule = Schedule("interleaved", 2, 1, ranks, chunks=2)
    entries = tuple(TimedAction(r, a, float(k), k + 1.0)
                    for r, row in enumerate(ranks) for k, a in enumerate(row))
    f_trace = trace(gantt(Timeline(schedule, entries)), "F")
    labels = dict(zip(f_trace.hovertext, f_trace.text))
    assert labels == {"0F0": "0", "1F0": "0", "2F0": "0\u2032", "3F0": "0\u2032"}


def test_gantt_pair_titles_use_the_chapters_letter_and_keep_the_legend_off_them():
    """Issue 30: chapter 05's pair said M=4 after the text renamed M to N, and the legend
    above the figure covered the first subplot's title."""
    from pipemare_lite.analysis.simulate import simulate
    from pipemare_lite.figures.viz import gantt_pair
    from pipemare_lite.schedules import build_schedule

    flushed = simulate(build_schedule("1f1b", 4, 4, num_minibatches=2))
    unflushed = simulate(build_schedule("pipedream", 4, 4, num_minibatches=2))
    fig = gantt_pair(flushed, unflushed, microbatch_symbol="N")
    titles = [a.text for a in fig.layout.annotations]
    assert all("N=4" in t and "M=" not in t for t in titles), titles
    assert fig.layout.legend.x > 1  # beside the plots, not over the titles
    assert "M=4" in gantt_pair(flushed, unflushed).layout.annotations[0].text
