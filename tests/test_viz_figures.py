"""Staleness, stability and loss-curve figures, checked against hand-worked examples."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import pytest

from pipemare_lite.analysis import theory
from pipemare_lite.analysis.staleness import microbatch_path, stage_delays, weight_versions
from pipemare_lite.figures.viz import (
    delay_bars,
    divergence_step,
    loss_curves,
    path_figure,
    staleness_heatmap,
)
from pipemare_lite.figures.viz.colors import METHOD_COLORS, microbatch_color
from pipemare_lite.figures.viz.stability import stability_map
from pipemare_lite.schedules.actions import Action, Schedule


def hand_async() -> Schedule:
    """P=2, one microbatch per update, 3 updates, no stash. Worked out by hand:

    stage 0 runs F0 F1 B0 U0 F2 B1 U1 B2 U2: F1 saw version 0 and lands in U1 (delay 1),
    F2 saw version 1 and lands in U2 (delay 1); stage 1 runs F B U in lock-step (delay 0).
    """
    rows = ("F0 F1 B0 U0 F2 B1 U1 B2 U2", "F0 B0 U0 F1 B1 U1 F2 B2 U2")
    ranks = tuple(
        tuple(Action(rank, text[0], int(text[1:])) for text in row.split())
        for rank, row in enumerate(rows)
    )
    return Schedule("async", 2, 1, ranks, num_minibatches=3, weight_mode="async")


FORWARD_DELAY_BY_HAND = [[0, 1, 1], [0, 0, 0]]


def test_heatmap_shows_the_hand_worked_delays():
    table = weight_versions(hand_async())
    fig = staleness_heatmap(table, "forward_delay", highlight_microbatch=1)
    heat = fig.data[0]
    assert [list(row) for row in heat.z] == FORWARD_DELAY_BY_HAND
    assert [list(row) for row in heat.text] == [["0", "1", "1"], ["0", "0", "0"]]
    assert fig.layout.yaxis.autorange == "reversed"  # stage 0 on top
    assert fig.layout.xaxis.title.text.startswith("microbatch")
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert sorted(s.x0 for s in lines) == [0.5, 1.5]  # minibatch boundaries (N=1)
    (box,) = [s for s in fig.layout.shapes if s.type == "rect"]
    assert (box.x0, box.x1) == (0.5, 1.5) and box.line.color == microbatch_color(1)
    go.Figure(fig.to_dict())


def test_heatmap_rejects_bad_input():
    table = weight_versions(hand_async())
    with pytest.raises(ValueError, match="quantity"):
        staleness_heatmap(table, "staleness")
    with pytest.raises(TypeError, match="VersionTable"):
        staleness_heatmap([[0, 1]])
    with pytest.raises(ValueError, match="out of range"):
        staleness_heatmap(table, highlight_microbatch=3)


def test_heatmap_of_a_built_schedule_has_one_cell_per_stage_and_microbatch():
    from pipemare_lite.schedules.registry import build_schedule

    schedule = build_schedule("async", 4, 3, num_minibatches=5)
    fig = staleness_heatmap(weight_versions(schedule), "discrepancy")
    assert np.array(fig.data[0].z).shape == (4, 15)
    assert len([s for s in fig.layout.shapes if s.type == "line"]) == 4


def test_delay_bars_mean_whiskers_and_closed_form():
    delays = stage_delays(hand_async())
    fig = delay_bars(delays, expected=lambda s: 1 - s)
    bars, closed = fig.data
    assert list(bars.y) == pytest.approx([2 / 3, 0.0])
    assert list(bars.error_y.arrayminus) == pytest.approx([2 / 3, 0.0])  # down to min 0
    assert list(bars.error_y.array) == pytest.approx([1 / 3, 0.0])  # up to max 1
    assert list(closed.y) == [1, 0] and closed.name == "closed form"
    assert fig.layout.yaxis.title.text == "forward delay (updates)"
    with pytest.raises(ValueError, match="2 stages"):
        delay_bars(delays, expected=[1, 2, 3])
    with pytest.raises(ValueError, match="quantity"):
        delay_bars(delays, quantity="lag")


def test_path_figure_shows_the_versions_met():
    path = microbatch_path(hand_async(), 1)
    fig = path_figure(path)
    by_name = {t.name: list(t.y) for t in fig.data}
    assert by_name == {
        "version at F": [0, 1],
        "version at B": [1, 1],
        "version applied to": [1, 1],
    }
    assert fig.data[0].marker.color == microbatch_color(1)


def test_stability_map_bound_traces_the_stable_edge():
    taus = list(range(0, 9))
    alphas = np.linspace(0.02, 2.2, 60)
    radius = theory.stability_map(alphas, taus)
    fig = stability_map(radius, alphas, taus, bound=theory.stability_bound, mode="stable")
    heat, line = fig.data
    stable = np.array(heat.z)
    for i, tau in enumerate(taus):
        limit = 2 * math.sin(math.pi / (2 * (2 * tau + 1)))  # the closed form, written out
        assert line.x[i] == pytest.approx(limit)
        clear = np.abs(alphas - limit) > 0.03  # away from the edge itself
        assert np.all(stable[i][clear] == (alphas[clear] < limit))
    go.Figure(fig.to_dict())


def test_stability_map_radius_mode_and_gamma_rows():
    alphas = [0.1, 0.5]
    gammas = [None, 0.5, 0.9]
    radius = np.array([[0.9, 1.2], [0.8, 1.0], [0.7, 0.95]])  # rows: no T2, gamma 0.5, 0.9
    fig = stability_map(radius, alphas, gammas, row_title="T2 gamma")
    assert list(fig.layout.yaxis.ticktext) == ["none", "0.5", "0.9"]
    assert fig.data[0].zmid == 1.0  # white at radius 1: stable is blue, unstable red
    stable = stability_map(radius, alphas, gammas, mode="stable").data[0].z
    assert [list(r) for r in stable] == [[1, 0], [1, 0], [1, 1]]
    with pytest.raises(ValueError, match="shape"):
        stability_map(radius, alphas, gammas[:2])
    with pytest.raises(ValueError, match="mode"):
        stability_map(radius, alphas, gammas, mode="roots")


def test_loss_curves_mark_divergence_and_keep_method_colours():
    histories = {
        "gpipe": {"step": [0, 1, 2, 3], "loss": [2.0, 1.0, 0.5, 0.25]},
        "async": {"step": [0, 1, 2, 3], "loss": [2.0, 3.0, float("nan"), float("nan")]},
        "pipemare": {"step": [0, 1, 2, 3], "loss": [2.0, 1.5, 1.0, 0.7]},
    }
    fig = loss_curves(histories, log_y=True)
    lines = {t.legendgroup: t for t in fig.data if t.mode == "lines"}
    assert lines["gpipe"].line.color == METHOD_COLORS["gpipe"]
    assert lines["async"].name == "async (diverged at step 2)"
    assert list(lines["async"].x) == [0, 1]
    (cross,) = [t for t in fig.data if t.mode == "markers"]
    assert (cross.x[0], cross.y[0]) == (1, 3.0)
    assert fig.layout.yaxis.type == "log"
    assert divergence_step(histories["gpipe"]) is None
    assert divergence_step(histories["pipemare"], threshold=1.8) == 0
    go.Figure(fig.to_dict())


def test_loss_curves_distinct_colours_and_errors():
    h = {"step": [0, 1], "loss": [1.0, 0.5], "accuracy": [0.1, 0.2]}
    fig = loss_curves({"run a": h, "run b": h, "run c": h}, metric="accuracy")
    colors = [t.line.color for t in fig.data]
    assert len(set(colors)) == 3
    with pytest.raises(ValueError, match="'accuracy'"):
        loss_curves({"x": {"step": [0], "loss": [1.0]}}, metric="accuracy")
    with pytest.raises(ValueError, match="2 steps but 1"):
        loss_curves({"x": {"step": [0, 1], "loss": [1.0]}})


def test_memory_bars_stack_kinds_in_one_unit_with_kind_colours():
    from pipemare_lite.figures.viz import memory_bars
    from pipemare_lite.figures.viz.colors import memory_kind_color

    ranks = [
        {"weights": 2048, "stash": 4096, "t2_buffer": 0, "optimizer": 2048, "activations": 1024,
         "total": 9216, "peak_total": 8192},
        {"weights": 2048, "stash": 0, "t2_buffer": 0, "optimizer": 2048, "activations": 512,
         "total": 4608, "peak_total": 4608},
    ]
    fig = memory_bars(ranks, ["first", "last"])
    assert fig.layout.barmode == "stack"
    assert fig.layout.yaxis.title.text == "memory (KiB)"
    bars = {t.name: t for t in fig.data if t.type == "bar"}
    assert list(bars["stashed weight versions"].y) == [4.0, 0.0]
    assert bars["weights"].marker.color == memory_kind_color("weights")
    assert "T2 delta buffer" not in bars  # zero in every bar: left out of the legend
    assert [t.name for t in fig.data if t.type == "bar"][0] == "weights"  # bottom of the stack
    stacked = [sum(t.y[i] for t in bars.values()) for i in range(2)]
    assert stacked == pytest.approx([9.0, 4.5])  # equals "total" / 1024
    (peak,) = [t for t in fig.data if t.type == "scatter"]
    assert list(peak.y) == [8.0, 4.5]
    with pytest.raises(ValueError, match="3 labels for 2 bars"):
        memory_bars(ranks, ["a", "b", "c"])


def test_memory_bars_of_a_real_memory_model():
    from pipemare_lite.analysis.memory import MemoryProfile, memory_by_kind
    from pipemare_lite.figures.viz import memory_bars
    from pipemare_lite.schedules.registry import build_schedule

    schedule = build_schedule("pipedream", 3, 2, num_minibatches=4)
    result = memory_by_kind(schedule, MemoryProfile([2**20] * 3, [2**19] * 3, "adam"))
    fig = memory_bars(result)
    assert fig.layout.yaxis.title.text == "memory (MiB)"
    opt = next(t for t in fig.data if t.name == "optimizer state")
    assert list(opt.y) == [2.0, 2.0, 2.0]  # adam: two states of a 1 MiB stage
    go.Figure(fig.to_dict())


def test_loss_curves_read_train_histories():
    """The shape of ``train.History.to_dict()``: per-step loss, per-epoch evals, a flag."""
    trained = {"loss": [2.0, 1.5, 1.2, 1.0], "diverged": False,
               "evals": [{"epoch": 0, "step": 2, "loss": 1.3, "accuracy": 0.5},
                         {"epoch": 1, "step": 4, "loss": 1.0, "accuracy": 0.7}]}
    blew_up = {"loss": [2.0, 5.0, 40.0], "diverged": True, "evals": []}

    class HistoryLike:  # what fit() returns: an object with to_dict()
        def to_dict(self):
            return trained

    fig = loss_curves({"gpipe": HistoryLike(), "async": blew_up})
    lines = {t.legendgroup: t for t in fig.data if t.mode == "lines"}
    assert list(lines["gpipe"].x) == [1, 2, 3, 4]  # the k-th loss is step k, as in evals
    assert lines["async"].name == "async (diverged at step 3)"  # flagged after its last step
    acc = loss_curves({"gpipe": trained}, metric="accuracy")
    assert (list(acc.data[0].x), list(acc.data[0].y)) == ([2, 4], [0.5, 0.7])  # from evals
    with pytest.raises(ValueError, match="'async' has no 'accuracy'"):
        loss_curves({"async": blew_up}, metric="accuracy")


def test_the_legend_names_the_step_the_engine_reports():
    """Issue 30: legends said "diverged at step 109" where fit() and the text said 110."""
    history = {"loss": [2.0, 5.0, float("nan")], "diverged": True, "divergence_step": 3,
               "evals": []}
    fig = loss_curves({"async": history})
    assert fig.data[0].name == f"async (diverged at step {history['divergence_step']})"
    # a history that recorded only its finite losses still names the step fit() reported
    finite_only = {**history, "loss": [2.0, 5.0]}
    assert loss_curves({"async": finite_only}).data[0].name == "async (diverged at step 3)"
