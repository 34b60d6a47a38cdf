"""Roots, trajectories and the marked stability map (chapter 06), against hand-made inputs."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import pytest

from pipemare_lite.figures.viz import roots_figure, stability_map, trajectory_figure


def test_roots_figure_splits_roots_at_the_unit_circle():
    roots = np.array([0.5, -0.2 + 0.9j, -0.2 - 0.9j, 1.1])
    fig = roots_figure(roots)
    circle, inside, outside = fig.data
    assert np.hypot(np.array(circle.x), np.array(circle.y)) == pytest.approx(1.0)
    assert sorted(inside.x) == pytest.approx([-0.2, -0.2, 0.5])
    assert list(outside.x) == [1.1] and list(outside.y) == [0.0]
    assert "1.1000" in fig.layout.title.text  # the largest |z|
    assert fig.layout.xaxis.range == (-1.3, 1.3)  # at least 1.3, so the circle fits
    assert fig.layout.yaxis.scaleanchor == "x"  # equal axes: the circle looks round
    wide = roots_figure([3.0 + 0j])
    assert wide.layout.xaxis.range[1] == pytest.approx(3.3)
    go.Figure(fig.to_dict())


def test_trajectory_figure_draws_each_run_on_a_fixed_range():
    fig = trajectory_figure({"a": [1.0, 0.5, 0.25], "b": [1.0, -2.0, 4.0]}, title="runs")
    assert [t.name for t in fig.data] == ["a", "b"]
    assert list(fig.data[1].y) == [1.0, -2.0, 4.0] and list(fig.data[0].x) == [0, 1, 2]
    assert fig.layout.yaxis.range == (-2.5, 2.5)
    assert trajectory_figure({"a": [1.0]}, limit=None).layout.yaxis.range is None


def test_stability_map_marks_a_point_on_a_log_axis():
    alphas = np.geomspace(0.01, 2.0, 12)
    taus = [0, 1, 2, 3]
    radius = np.where(alphas[None, :] < np.array([2.0, 1.0, 0.6, 0.4])[:, None], 0.9, 1.1)
    fig = stability_map(radius, alphas, taus, alpha_axis="log", point=(0.3, 2))
    heat, point = fig.data
    assert list(point.x) == [0.3] and list(point.y) == [2]  # row 2 sits at position 2
    assert fig.layout.xaxis.type == "log"
    assert fig.layout.xaxis.range == pytest.approx((math.log10(0.01), math.log10(2.0)))
    with pytest.raises(ValueError, match="point row 7"):
        stability_map(radius, alphas, taus, point=(0.3, 7))
    with pytest.raises(ValueError, match="alpha_axis"):
        stability_map(radius, alphas, taus, alpha_axis="symlog")
    with pytest.raises(ValueError, match="positive steps"):
        stability_map(radius, np.linspace(0.0, 2.0, 12), taus, alpha_axis="log")
