"""The granularity explorer (chapter 07) and its static twin, on hand-made histories."""

from __future__ import annotations

import math

import pytest

from pipemare_lite.analysis.stage_stability import stage_points
from pipemare_lite.figures.viz import stage_map_figure, update_norm_figure
from pipemare_lite.figures.widgets import granularity_explorer, granularity_explorer_static
from pipemare_lite.training.history import History


def _history(method, P, delays, diverge_at=None):
    losses = [2.0 - 0.01 * k for k in range(30)]
    norms = [[0.1 * (s + 1)] * 30 for s in range(P)]
    if diverge_at is not None:
        losses = losses[:diverge_at]
        norms = [row[:diverge_at] for row in norms]
        norms[0][-1] = math.nan
    return History(config={"method": method}, loss=losses, stage_update_norm=norms,
                   forward_delay_max=delays, diverged=diverge_at is not None)


def _runs():
    runs = {}
    for P in (2, 4):
        async_delays = [math.ceil((2 * (P - s) - 1) / 2) for s in range(P)]
        stash_delays = [math.ceil((P - 1 - s) / 2) for s in range(P)]
        runs[P] = {
            "histories": {"1f1b": _history("1f1b", P, [0] * P),
                          "async": _history("async", P, async_delays, 20 if P == 4 else None),
                          "pipedream": _history("pipedream", P, stash_delays)},
            "sharpness": [10.0 - s for s in range(P)],
        }
    return runs


def test_controls_move_the_stages_and_the_table():
    w = granularity_explorer(_runs(), trained_lr=0.05)
    assert w.error is None and w.controls["P"].value == 4
    assert [p.delay for p in w.points] == [4, 3, 2, 1]
    assert w.points == stage_points(0.05, [10.0, 9.0, 8.0, 7.0], [4, 3, 2, 1])
    marker = w.map.data[-1]
    assert list(marker.y) == [4, 3, 2, 1]
    assert list(marker.x) == pytest.approx([0.5, 0.45, 0.4, 0.35])
    outside = sum(not p.inside for p in w.points)
    assert f"{outside} of 4 stages outside" in w.map.layout.title.text
    assert w.table.value.count("OUTSIDE") == outside
    w.set(lr=0.001)
    assert all(p.inside for p in w.points) and "OUTSIDE" not in w.table.value
    assert list(w.map.data[-1].x) == pytest.approx([0.01, 0.009, 0.008, 0.007])
    w.set(method="pipedream", P=2)
    assert [p.delay for p in w.points] == [1, 0]
    assert list(w.map.data[-1].y) == [1, 0]
    assert "P=2" in w.curves.layout.title.text and "lr 0.05" in w.curves.layout.title.text
    names = [t.name for t in w.curves.data]
    assert any(n.startswith("async") for n in names) and any("1f1b" in n for n in names)


def test_a_diverged_run_is_marked_in_the_curves():
    w = granularity_explorer(_runs(), P=4, trained_lr=0.05)
    assert any("diverged" in (t.name or "") for t in w.curves.data)


def test_bad_runs_and_controls_are_refused_by_name():
    with pytest.raises(ValueError, match="at least one pipeline"):
        granularity_explorer({}, trained_lr=0.05)
    runs = _runs()
    del runs[2]["histories"]["pipedream"]
    with pytest.raises(ValueError, match="P=2: no history for pipedream"):
        granularity_explorer(runs, trained_lr=0.05)
    with pytest.raises(ValueError, match="no pipeline with P=8"):
        granularity_explorer(_runs(), P=8, trained_lr=0.05)
    runs = _runs()
    runs[4]["sharpness"] = [1.0]
    with pytest.raises(ValueError, match="4 delays for 1 sharpness"):
        granularity_explorer(runs, trained_lr=0.05)


def test_static_twin_has_one_step_per_lr_with_every_pipeline():
    fig = granularity_explorer_static(_runs(), lrs=[0.001, 0.01, 0.1])
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == ["0.001", "0.01", "0.1"]
    markers = [t for t in fig.data if t.name in ("P=2", "P=4")]
    assert len(markers) == 2
    last = steps[-1].args[0]["x"]
    assert list(last[1]) == pytest.approx([1.0, 0.9, 0.8, 0.7])
    with pytest.raises(ValueError, match="lrs must be positive"):
        granularity_explorer_static(_runs(), lrs=[0.0])


def test_update_norm_figure_ends_a_stage_at_its_first_non_finite_update():
    runs = _runs()
    fig = update_norm_figure(runs[4]["histories"]["async"], runs[4]["histories"]["1f1b"])
    solid = [t for t in fig.data if t.name and t.name.startswith("stage") and t.mode == "lines"]
    assert len(solid) == 4
    assert solid[0].name == "stage 0 (non-finite at update 19)" and len(solid[0].x) == 19
    assert any(t.mode == "markers" for t in fig.data)
    with pytest.raises(ValueError, match="no stage_update_norm"):
        update_norm_figure(History())


def test_stage_map_figure_refuses_a_delay_off_the_map():
    points = stage_points(0.1, [1.0], [20])
    with pytest.raises(ValueError, match="off the map"):
        stage_map_figure({"P=1": points}, alphas=[0.01, 0.1, 1.0], taus=range(0, 17))
