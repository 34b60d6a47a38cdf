"""The stability explorer (chapter 06) and its static twin, driven headless.

Expected values are the closed forms written out here (the bound 2 sin(pi/(2(2 tau+1))),
heavy ball's 2(1+m) and 1-m, the roots of z^(tau+1) - z^tau + alpha lam from numpy.roots),
not the engine's own functions.
"""

from __future__ import annotations

import importlib
import math
import re

import numpy as np
import plotly.graph_objects as go
import pytest

from pipemare_lite.figures.widgets import stability_explorer, stability_explorer_static
from pipemare_lite.figures.widgets.stability import MAP_ALPHAS, MAP_TAUS, stable_edge

# the package exports the factory under the module's name, so fetch the module itself
module = importlib.import_module("pipemare_lite.figures.widgets.stability")


def bound(tau: int) -> float:
    return 2 * math.sin(math.pi / (2 * (2 * tau + 1)))


def plain_roots(alpha_lam: float, tau: int) -> np.ndarray:
    return np.roots([1.0, -1.0] + [0.0] * (tau - 1) + [alpha_lam] if tau else [1.0, alpha_lam - 1])


def cells(html: str) -> dict[str, list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    table = [[re.sub("<[^>]+>", "", c) for c in re.findall(r"<t[dh]>(.*?)</t[dh]>", r)]
             for r in rows]
    return {r[0]: r[1:] for r in table[1:]}


def test_default_setting_is_stable_and_its_numbers_are_the_closed_forms():
    w = stability_explorer(alpha=0.3, tau=4)
    assert set(w.controls) == {"alpha", "tau", "lam", "momentum", "discrepancy", "t2", "gamma"}
    assert w.error is None
    assert w.radius == pytest.approx(np.max(np.abs(plain_roots(0.3, 4))), abs=1e-9)
    assert w.radius < 1
    assert w.largest_stable == pytest.approx(bound(4), rel=1e-5)
    table = cells(w.summary.value)
    assert float(table["closed form 2 sin(pi/(2(2 tau+1))) / lambda"][0]) == pytest.approx(
        bound(4), rel=1e-3)
    assert "applies: plain model" in table["closed form 2 sin(pi/(2(2 tau+1))) / lambda"][1]
    heat, line, point = w.map.data
    assert np.array(heat.z).shape == (len(MAP_TAUS), len(MAP_ALPHAS))
    assert list(line.x) == pytest.approx([bound(t) for t in MAP_TAUS])
    assert list(point.x) == [pytest.approx(0.3, rel=1e-2)] and list(point.y) == [4]
    assert w.map.layout.xaxis.type == "log"
    # roots figure: unit circle, then the roots inside (all of them) and outside (none)
    circle, inside, outside = w.roots.data
    assert len(inside.x) == 5 and len(outside.x) == 0


def test_one_more_step_of_delay_crosses_the_bound():
    w = stability_explorer(alpha=0.3, tau=4)
    w.controls["tau"].value = 5  # bound(5) = 0.2846 < 0.3
    assert w.radius > 1
    assert w.radius == pytest.approx(np.max(np.abs(plain_roots(0.3, 5))), abs=1e-9)
    assert w.largest_stable == pytest.approx(bound(5), rel=1e-5)
    assert len(w.roots.data[2].x) == 2  # a complex pair left the circle
    assert list(w.map.data[2].y) == [5]
    run = np.array(w.trajectory.data[0].y)
    assert abs(run[-1]) > abs(run[50]) > 0.01  # it grows
    assert "unstable" in cells(w.summary.value)["spectral radius (largest |root|)"][1]


def test_curvature_scales_the_stable_steps():
    w = stability_explorer(alpha=0.1, tau=3, lam=2.0)
    assert w.largest_stable == pytest.approx(bound(3) / 2.0, rel=1e-5)
    assert list(w.map.data[1].x) == pytest.approx([bound(t) / 2.0 for t in MAP_TAUS])


@pytest.mark.parametrize("tau, m, expected", [(0, 0.5, 2 * 1.5), (1, 0.5, 0.5), (1, 0.9, 0.1)])
def test_momentum_limits_are_heavy_balls_closed_forms(tau, m, expected):
    # Jury's test: no delay alpha lam < 2 (1 + m); one step of delay alpha lam < 1 - m
    w = stability_explorer(alpha=0.01, tau=tau, momentum=m)
    assert w.largest_stable == pytest.approx(expected, rel=1e-5)
    assert "plain model only" in cells(w.summary.value)[
        "closed form 2 sin(pi/(2(2 tau+1))) / lambda"][1]
    assert "effective step alpha / (1 - m)" in cells(w.summary.value)


def test_full_sensitivity_removes_the_delay():
    # s = lam: the gradient lam w[t-tau] + lam (w[t] - w[t-tau]) = lam w[t], plain GD
    w = stability_explorer(alpha=0.5, tau=6, discrepancy=1.0)
    assert w.largest_stable == pytest.approx(2.0, rel=1e-5)
    assert w.radius == pytest.approx(0.5, abs=1e-6)  # the root 1 - alpha lam
    run = np.array(w.trajectory.data[0].y)
    assert run[1:6] == pytest.approx([0.5 ** k for k in range(1, 6)])


def test_discrepancy_and_t2_redraw_the_map_only_when_the_model_changes(monkeypatch):
    calls = []
    original = module.stability_grid
    monkeypatch.setattr(module, "stability_grid",
                        lambda *a, **k: (calls.append(k), original(*a, **k))[1])
    w = stability_explorer(alpha=0.1, tau=4)
    assert len(calls) == 1
    w.set(alpha=0.2)
    w.set(tau=6)
    assert len(calls) == 1  # the step and the delay only move the point
    before = np.array(w.map.data[0].z)
    w.set(discrepancy=-1.0)
    assert len(calls) == 2 and calls[-1]["sensitivity"] == -1.0
    no_t2 = w.largest_stable
    assert no_t2 < 0.5 * bound(6)  # s = -lam costs more than half of the stable step
    assert w.controls["gamma"].disabled
    w.set(t2=True, gamma=0.5)
    assert len(calls) == 3 and calls[-1]["gamma"] == 0.5
    assert not w.controls["gamma"].disabled
    assert w.largest_stable > no_t2  # T2 gives some back
    assert not np.allclose(np.array(w.map.data[0].z), before)
    assert "T2 gamma=0.5" in w.map.layout.title.text


def test_bad_settings_are_refused_early_with_the_bad_value():
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\), got 1.0"):
        stability_explorer(momentum=1.0)
    with pytest.raises(ValueError, match="tau must be an integer in 0..16, got 20"):
        stability_explorer(tau=20)
    with pytest.raises(ValueError, match="step alpha must be positive"):
        stability_explorer(alpha=0.0)
    with pytest.raises(ValueError, match="gamma must be in"):
        stability_explorer(t2=True, gamma=1.0)


def test_stable_edge_says_when_the_map_does_not_contain_the_edge():
    alphas = np.array([0.1, 0.2, 0.4])
    assert stable_edge(np.array([0.5, 0.6, 0.7]), lambda a: 0.5, alphas) == (0.4, "above")
    assert stable_edge(np.array([1.5, 1.6, 1.7]), lambda a: 1.5, alphas) == (0.1, "below")
    value, note = stable_edge(np.array([0.5, 0.9, 1.2]), lambda a: a / 0.3, alphas)
    assert note == "" and value == pytest.approx(0.3, rel=1e-5)


def test_static_twin_has_one_step_per_delay_with_the_right_roots():
    taus = list(range(0, 9))
    fig = stability_explorer_static(alpha=0.3, lam=1.0, taus=taus)
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == [str(t) for t in taus]
    for tau, step in zip(taus, steps):
        mask = step.args[0]["visible"]
        assert len(mask) == len(fig.data) and mask[0]  # the unit circle is always shown
        shown = [t for t, on in zip(fig.data, mask) if on][1:]
        run, inside, outside = shown
        roots = plain_roots(0.3, tau)
        assert len(inside.x) == int(np.sum(np.abs(roots) < 1))
        assert len(outside.x) == int(np.sum(np.abs(roots) >= 1))
        title = step.args[1]["title.text"]
        assert f"largest |z| = {np.max(np.abs(roots)):.4f}" in title
        assert f"= {bound(tau):.4f} vs alpha*lambda = 0.3" in title
        assert ("unstable" in title) == (0.3 > bound(tau))
        assert len(run.y) == module.STEPS + 1
    assert [t.visible is not False for t in fig.data] == list(steps[0].args[0]["visible"])
    assert len(fig.to_json()) < 2_000_000
    go.Figure(fig.to_dict())


def test_static_twin_with_momentum_leaves_out_the_plain_bound():
    fig = stability_explorer_static(alpha=0.06, taus=[1, 2], momentum=0.9)
    titles = [s.args[1]["title.text"] for s in fig.layout.sliders[0].steps]
    assert all("bound" not in t for t in titles)
    assert "unstable" in titles[1] and "(stable)" in titles[0]  # limits 0.1, 0.051
