"""The trace explorer (chapter 11) and its static twin, on hand-made "measured" traces."""

from __future__ import annotations

import dataclasses

import pytest

from pipemare_lite.analysis.simulate import OpCosts, metrics, simulate
from pipemare_lite.analysis.timeline import TimedAction
from pipemare_lite.figures.widgets import trace_explorer, trace_explorer_static
from pipemare_lite.schedules import build_schedule


def _measured(name, P, M, forward, backward, late=0.0):
    """A simulated timeline in seconds, every action of rank r shifted by r * late."""
    planned = simulate(build_schedule(name, P, M), OpCosts(forward=forward, backward=backward))
    entries = tuple(TimedAction(e.rank, e.action, e.start + e.rank * late, e.end + e.rank * late)
                    for e in planned.entries)
    return dataclasses.replace(planned, entries=entries, unit="s", source="measured")


def _traces():
    return {"gpipe": _measured("gpipe", 2, 4, 0.001, 0.002, late=0.003),
            "1f1b": _measured("1f1b", 2, 4, 0.001, 0.002)}


def test_measured_costs_reproduce_a_trace_without_losses():
    w = trace_explorer(_traces(), run="1f1b")
    assert w.error is None and w.controls["run"].value == "1f1b"
    # a trace that lost nothing: the simulator fed its costs draws the same utilization
    assert metrics(w.planned).utilization == pytest.approx(metrics(_traces()["1f1b"]).utilization)
    assert "simulated (measured costs)" in w.figure.layout.title.text
    assert w.table.value.count("<tr>") == 4  # header, 2 ranks, all
    w.set(run="gpipe")
    lost = metrics(_traces()["gpipe"]).utilization
    assert lost < metrics(w.planned).utilization  # the late rank shows as a gap
    w.set(costs="default")
    assert w.planned.unit == "cost units" and w.error is None


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="measured Timeline"):
        trace_explorer({"x": simulate(build_schedule("gpipe", 2, 2))})
    with pytest.raises(ValueError, match="unknown run 'zb'"):
        trace_explorer(_traces(), run="zb")
    with pytest.raises(ValueError, match="unknown costs"):
        trace_explorer(_traces(), costs="guessed")


def test_static_twin_has_one_dropdown_entry_per_run():
    fig = trace_explorer_static(_traces())
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["gpipe", "1f1b"]
    first = buttons[0].args[0]["visible"]
    assert sum(first) > 0 and len(first) == len(fig.data)
    assert [t.visible for t in fig.data] == first
