"""Schematics of one microbatch's round trip (chapters 05, 07, 08 and 09). Torch-free.

Two drawings, both computed from an engine schedule simulated with unit costs (F = 1,
B = 2), so they show what the engine runs and cannot drift from it:

- :func:`round_trip_figure`: one microbatch's forwards down the stages and its backwards
  back up, each box labelled with the weight version it reads, the stage's updates while
  the microbatch is away marked in black; one panel per method (stash, no stash, T2)::

      stage 0  [F v3]...............U..U...........[B v5]    no stash: B reads v5, not v3
      stage 1      [F v3]........U.........[B v4]
      stage 2          [F v3]....[B v3]

- :func:`activation_lifetimes_figure`: on one stage, how long each microbatch's saved
  activations live (from its F's start to its B's end), one bar per microbatch, and how
  many are alive at once: the lock-step asynchronous tick holds about twice 1F1B's.

Versions come from :func:`pipemare_lite.analysis.staleness.weight_versions`, times from
:func:`pipemare_lite.analysis.simulate.simulate`, the count in flight from
:func:`pipemare_lite.analysis.simulate.metrics`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipemare_lite.analysis.simulate import metrics, simulate
from pipemare_lite.analysis.staleness import microbatch_path, weight_versions
from pipemare_lite.figures.viz.colors import UPDATE_COLOR, microbatch_color, op_color
from pipemare_lite.schedules.actions import Schedule

#: the time axis of both drawings (the simulator's default costs)
TIME_AXIS = "time (cost units: F = 1, B = 2)"


def _check(schedules: Mapping[str, Schedule]) -> list[tuple[str, Schedule]]:
    items = list(schedules.items())
    if not items:
        raise ValueError("needs at least one schedule: {name: schedule}")
    for name, schedule in items:
        if not isinstance(schedule, Schedule):
            raise TypeError(f"{name!r} is a {type(schedule).__name__}; expected a Schedule "
                            "(build_schedule(...))")
    return items


def backward_label(version_at_forward: int, version_at_backward: int, t2: bool) -> str:
    """What a backward reads: ``v5`` (current or stashed), or T2's ``v5−2δ`` (chapter 09)."""
    gap = version_at_backward - version_at_forward
    if t2 and gap > 0:
        return f"v{version_at_backward}−{gap if gap > 1 else ''}δ"
    return f"v{version_at_backward}"


def round_trip(schedule: Schedule, microbatch: int) -> list[dict]:
    """Per stage, where ``microbatch``'s F and B ran and what they read.

    One dict per stage in model order: ``stage``, ``forward`` and ``backward`` as
    ``(start, end)`` in the simulated timeline, ``version_at_forward``,
    ``version_at_backward``, ``updates`` (start times of the stage's updates between the
    end of the F and the start of the B: the updates the microbatch "missed").
    """
    path = microbatch_path(weight_versions(schedule), microbatch)
    timeline = simulate(schedule)
    spans: dict[tuple[int, str], tuple[float, float]] = {}
    updates: dict[int, list[float]] = {}
    for entry in timeline.entries:
        action = entry.action
        if action.kind in "FB" and action.index == microbatch:
            spans[action.stage, action.kind] = (entry.start, entry.end)
        elif action.kind == "U":
            updates.setdefault(action.stage, []).append(entry.start)
    trip = []
    for row in path:
        forward, backward = spans[row.stage, "F"], spans.get((row.stage, "B"))
        missed = sorted(t for t in updates.get(row.stage, [])
                        if backward and forward[1] <= t < backward[0])  # fmt: skip
        trip.append({"stage": row.stage, "forward": forward, "backward": backward,
                     "version_at_forward": row.version_at_forward,
                     "version_at_backward": row.version_at_backward, "updates": missed})
    return trip


def round_trip_figure(
    schedules: Mapping[str, Schedule],
    microbatch: int,
    *,
    t2: Iterable[str] = (),
    title: str | None = None,
) -> go.Figure:
    """One microbatch's forwards and backwards across the stages, one panel per method.

    ``schedules`` maps a panel's name to a schedule; the names in ``t2`` label their
    backwards as T2 reads them (current version minus the gap times δ). Each F box says
    the version it read, each B box the version its products used; black ticks are the
    stage's updates while the microbatch was away (their number is the discrepancy without
    a stash). Stage 0 is on top.
    """
    items = _check(schedules)
    corrected = set(t2)
    # a panel's height grows with its stages, so that the boxes of a deep pipeline stay legible
    heights = [90 + 34 * schedule.num_virtual_stages for _, schedule in items]
    fig = make_subplots(rows=len(items), cols=1, vertical_spacing=110 / (sum(heights) + 110),
                        row_heights=heights, subplot_titles=[name for name, _ in items])
    color = microbatch_color(microbatch)
    for row, (name, schedule) in enumerate(items, start=1):
        trip = round_trip(schedule, microbatch)
        boxes = {"F": ([], [], [], []), "B": ([], [], [], [])}  # base, length, stage, text
        for step in trip:
            base, length, stages, text = boxes["F"]
            start, end = step["forward"]
            base.append(start), length.append(end - start), stages.append(step["stage"])
            text.append(f"F v{step['version_at_forward']}")
            if step["backward"]:
                base, length, stages, text = boxes["B"]
                start, end = step["backward"]
                base.append(start), length.append(end - start), stages.append(step["stage"])
                text.append("B " + backward_label(step["version_at_forward"],
                                                  step["version_at_backward"],
                                                  name in corrected))
        for kind, (base, length, stages, text) in boxes.items():
            fig.add_trace(go.Bar(
                base=base, x=length, y=stages, orientation="h", text=text,
                # a label that does not fit its box goes beside it, level, in black
                textposition="auto", textangle=0, insidetextanchor="middle", width=0.7,
                outsidetextfont={"color": "black"}, cliponaxis=False,
                marker={"color": op_color(kind, microbatch),
                        "line": {"color": "black", "width": 1}},
                textfont={"color": "white"}, name=f"{kind} of microbatch {microbatch}",
                legendgroup=kind, showlegend=row == 1, hoverinfo="text"), row=row, col=1)
        # the microbatch's path: down the stages with its forwards, back up with its backwards
        path = [((s["forward"][0] + s["forward"][1]) / 2, s["stage"]) for s in trip]
        path += [((s["backward"][0] + s["backward"][1]) / 2, s["stage"])
                 for s in reversed(trip) if s["backward"]]
        fig.add_trace(go.Scatter(
            x=[p[0] for p in path], y=[p[1] for p in path], mode="lines",
            line={"color": color, "dash": "dot", "width": 1.5}, showlegend=False,
            hoverinfo="skip"), row=row, col=1)
        ticks = [(t, s["stage"]) for s in trip for t in s["updates"]]
        fig.add_trace(go.Scatter(
            x=[t for t, _ in ticks], y=[s for _, s in ticks], mode="markers",
            marker={"symbol": "line-ns-open", "size": 16, "color": UPDATE_COLOR,
                    "line": {"width": 3}},
            name="U: an update of that stage<br>while the microbatch is away",
            legendgroup="U", showlegend=row == 1), row=row, col=1)
        fig.update_yaxes(title={"text": "stage"}, autorange="reversed", tickmode="array",
                         tickvals=[s["stage"] for s in trip], row=row, col=1)
        fig.update_xaxes(title={"text": TIME_AXIS}, showgrid=True, gridcolor="#EEEEEE",
                         row=row, col=1)
    fig.update_layout(
        title={"text": title or f"microbatch {microbatch}: the weight version each F and B "
                                "reads"},
        barmode="overlay", plot_bgcolor="white", height=150 + sum(heights),
        # beside the panels: below them it would cover the last time axis's title
        legend={"orientation": "v", "x": 1.02, "xanchor": "left", "y": 1, "yanchor": "top"},
        margin={"l": 60, "r": 200, "t": 80, "b": 50})
    return fig


def activation_lifetimes(schedule: Schedule, stage: int) -> list[tuple[int, float, float]]:
    """``(microbatch, F start, B end)`` on ``stage``: how long its saved activations live."""
    timeline = simulate(schedule)
    forward, backward = {}, {}
    for entry in timeline.entries:
        action = entry.action
        if action.stage == stage and action.kind == "F":
            forward[action.index] = entry.start
        elif action.stage == stage and action.kind in ("B", "W"):
            backward[action.index] = max(backward.get(action.index, 0.0), entry.end)
    return sorted((m, forward[m], backward[m]) for m in forward if m in backward)


def activation_lifetimes_figure(
    schedules: Mapping[str, Schedule],
    stage: int = 0,
    *,
    title: str | None = None,
) -> go.Figure:
    """How long each microbatch's activations live on ``stage``, one panel per schedule.

    A bar per microbatch runs from its forward's start to its backward's end on that stage;
    the panel's title gives the most alive at once (the simulator's ``peak_inflight``), the
    activation memory in microbatches. Stack the lock-step ``async`` schedule under ``1f1b``
    to see why it holds about twice as many: its backward comes back later.
    """
    items = _check(schedules)
    peaks = [metrics(simulate(s)).peak_inflight[stage] for _, s in items]
    # one time axis for all panels: the lock-step run is shorter (no flush) but holds more
    fig = make_subplots(rows=len(items), cols=1, vertical_spacing=0.12, shared_xaxes=True,
                        subplot_titles=[f"{name}: at most {peak} microbatches held on stage "
                                        f"{stage}" for (name, _), peak in zip(items, peaks)])
    for row, (_, schedule) in enumerate(items, start=1):
        lives = activation_lifetimes(schedule, stage)
        fig.add_trace(go.Bar(
            base=[start for _, start, _ in lives], x=[end - start for _, start, end in lives],
            y=[m for m, _, _ in lives], orientation="h", width=0.7,
            marker={"color": [microbatch_color(m) for m, _, _ in lives],
                    "line": {"color": "black", "width": 0.5}},
            text=[f"microbatch {m}" for m, _, _ in lives], textposition="inside",
            insidetextanchor="start", textfont={"size": 10}, hoverinfo="text",
            showlegend=False), row=row, col=1)
        fig.update_yaxes(title={"text": "microbatch"}, autorange="reversed", row=row, col=1)
        fig.update_xaxes(showgrid=True, gridcolor="#EEEEEE", row=row, col=1)
    fig.update_xaxes(title={"text": TIME_AXIS}, row=len(items), col=1)
    fig.update_layout(
        title={"text": title or f"stage {stage}: each microbatch's activations, from its F "
                                "to its B"},
        plot_bgcolor="white", height=140 + 230 * len(items),
        margin={"l": 60, "r": 20, "t": 80, "b": 50})
    return fig
