"""One microbatch's trip over the ranks, one panel per schedule (chapter 04). Torch-free.

Chapter 04's ideas are all about where a microbatch goes and when: interleaving sends it
down the ranks v times, the split backward sends its input gradient (I) up at once and
leaves the weight gradient (W) for later, ZB-H2 starts the next minibatch early, the V
turns at the last rank and comes back up, DualPipeV runs a forward of one chunk beside a
backward of another. :func:`rank_trip_figure` draws exactly that from an engine schedule
simulated with the caller's costs: a box for each of the microbatch's actions on the rank
that ran it (labelled with its virtual stage), its path in time order (forwards, then the
gradient's way back), and optionally (``partners``) the action each of its forwards is
paired with on the same rank::

      rank 0  [F s0]                                         [I s0] [W s0]
      rank 1        [F s1]                            [I s1]
      rank 2              [F s2]               [I s2]
      rank 3                    [F s3] [I s3]                 [W s3]

Positions come from :func:`pipemare_lite.analysis.simulate.simulate` (what the tests
compare), so the drawing cannot drift from what the engine runs.
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipemare_lite.analysis.simulate import OpCosts, simulate
from pipemare_lite.figures.viz.colors import IDLE_COLOR, microbatch_color, op_color
from pipemare_lite.schedules.actions import Schedule


def rank_trip(schedule: Schedule, microbatch: int, costs: OpCosts | None = None) -> list[dict]:
    """The actions of ``microbatch`` (not its updates) as the simulator times them.

    One dict per action, in order of start time: ``rank``, ``action`` (e.g. ``"4F0"``),
    ``kind``, ``stage`` (virtual), ``start``, ``end``. Raises ValueError when the schedule
    has no such microbatch.
    """
    total = schedule.total_microbatches
    if not 0 <= microbatch < total:
        raise ValueError(f"microbatch={microbatch}: allowed 0..{total - 1} for this schedule")
    trip = [{"rank": e.rank, "action": str(e.action), "kind": e.action.kind,
             "stage": e.action.stage, "start": e.start, "end": e.end}
            for e in simulate(schedule, costs).entries
            if e.action.kind != "U" and e.action.index == microbatch]
    return sorted(trip, key=lambda a: (a["start"], a["rank"]))


def paired_actions(schedule: Schedule, microbatch: int,
                   costs: OpCosts | None = None) -> list[dict]:
    """For each forward of ``microbatch``, the backward (B or I) of another microbatch that
    its rank runs right after it, if any: DualPipeV's overlapped pair (same dict shape as
    :func:`rank_trip`, plus ``microbatch``)."""
    timeline = simulate(schedule, costs)
    pairs = []
    for rank in range(schedule.num_ranks):
        entries = sorted((e for e in timeline.entries if e.rank == rank), key=lambda e: e.start)
        for first, second in zip(entries, entries[1:]):
            if (first.action.kind == "F" and first.action.index == microbatch
                    and second.action.kind in ("B", "I") and second.action.index != microbatch):
                pairs.append({"rank": rank, "action": str(second.action),
                              "kind": second.action.kind, "stage": second.action.stage,
                              "start": second.start, "end": second.end,
                              "microbatch": second.action.index})
    return pairs


def rank_trip_figure(
    schedules: Mapping[str, Schedule],
    microbatch: int = 0,
    *,
    costs: OpCosts | Mapping[str, OpCosts] | None = None,
    partners: bool = False,
    title: str | None = None,
) -> go.Figure:
    """``microbatch``'s actions on the ranks that ran them, one panel per schedule.

    Boxes are coloured by op kind in the microbatch's hue and labelled with the virtual
    stage (``F s4``); the dotted line follows the microbatch's forwards and then its way
    back (B or I; a W sits off the path: nothing waits for it). With ``partners`` the
    backward each forward is paired with on its rank is drawn in grey with its microbatch.
    ``costs``: one :class:`OpCosts` for every panel (default the simulator's F = 1, B = 2),
    or one per panel name (a chunk of an interleaved schedule costs less than a stage).
    One time axis for all panels; rank 0 on top.
    """
    items = list(schedules.items())
    if not items:
        raise ValueError("needs at least one schedule: {name: schedule}")
    for name, schedule in items:
        if not isinstance(schedule, Schedule):
            raise TypeError(f"{name!r} is a {type(schedule).__name__}; expected a Schedule")
    per_panel = dict(costs) if isinstance(costs, Mapping) else {n: costs for n, _ in items}
    missing = [n for n, _ in items if n not in per_panel]
    if missing:
        raise ValueError(f"costs has no entry for the panels {missing}; give one per panel "
                         "name, or one OpCosts for all")
    fig = make_subplots(rows=len(items), cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        subplot_titles=[name for name, _ in items])
    end = 0.0
    for row, (name, schedule) in enumerate(items, start=1):
        costs = per_panel[name]
        trip = rank_trip(schedule, microbatch, costs)
        end = max([end, *(a["end"] for a in trip)])
        boxes = [(a, op_color(a["kind"], microbatch), f"{a['kind']} s{a['stage']}")
                 for a in trip]
        if partners:
            boxes += [(p, IDLE_COLOR, f"{p['kind']} s{p['stage']} · mb {p['microbatch']}")
                      for p in paired_actions(schedule, microbatch, costs)]
        for kind in ("F", "B", "I", "W", "pair"):
            chosen = [(a, color, text) for a, color, text in boxes
                      if (kind == "pair") == ("microbatch" in a) and (kind == "pair"
                                                                     or a["kind"] == kind)]
            if not chosen:
                continue
            fig.add_trace(go.Bar(
                base=[a["start"] for a, _, _ in chosen],
                x=[a["end"] - a["start"] for a, _, _ in chosen],
                y=[a["rank"] for a, _, _ in chosen], orientation="h", width=0.7,
                text=[t for _, _, t in chosen], textposition="inside", textangle=0,
                insidetextanchor="middle", hoverinfo="text",
                marker={"color": [c for _, c, _ in chosen],
                        "line": {"color": "black", "width": 1}},
                textfont={"color": "black" if kind == "pair" else "white"},
                name=("the backward its rank runs beside it" if kind == "pair"
                      else f"{kind} of microbatch {microbatch}"),
                legendgroup=kind, showlegend=row == 1), row=row, col=1)
        path = [a for a in trip if a["kind"] != "W"]
        fig.add_trace(go.Scatter(
            x=[(a["start"] + a["end"]) / 2 for a in path], y=[a["rank"] for a in path],
            mode="lines", line={"color": microbatch_color(microbatch), "dash": "dot",
                                "width": 1.5}, showlegend=False, hoverinfo="skip"),
            row=row, col=1)
        fig.update_yaxes(title={"text": "rank"}, autorange="reversed", tickmode="array",
                         tickvals=list(range(schedule.num_ranks)), row=row, col=1)
    fig.update_xaxes(range=[0, 1.02 * end], showgrid=True, gridcolor="#EEEEEE")
    fig.update_xaxes(title={"text": "time (cost units, a full stage's forward = 1)"},
                     row=len(items), col=1)
    fig.update_layout(
        title={"text": title or f"microbatch {microbatch}: which rank runs each of its actions"},
        barmode="overlay", plot_bgcolor="white", height=140 + 200 * len(items),
        legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"},
        margin={"l": 60, "r": 220, "t": 80, "b": 50})
    return fig
