"""The T2 explorer (chapter 09), its static twin and the gamma sweep figure, driven headless.

Expected values come from a plain scan written here: the toy model iterated step by step
(w, delta and the corrected backward weight as the definitions say) and its growth read off
a long run, and the largest stable step found by scanning with the engine's single-matrix
radius (:func:`pipemare_lite.analysis.theory.t2_stable_steps`), not from the widget's batched
search.
"""

from __future__ import annotations

import numpy as np
import pytest

from pipemare_lite.analysis.theory import discrepancy_radius, stability_bound, t2_stable_steps
from pipemare_lite.figures.viz import gamma_sweep_figure
from pipemare_lite.figures.widgets import t2_explorer, t2_explorer_static
from pipemare_lite.figures.widgets.t2 import (
    EDGE_TOL,
    GAMMAS,
    MAP_TAUS,
    largest_stable_steps,
)


def plain_toy_run(alpha, tau, s, gamma, steps=400):
    """|w| after ``steps`` updates of the toy model (lam = 1), written from its definition."""
    w = [1.0] * (tau + 1)
    delta = 0.0
    for _ in range(steps):
        backward = w[-1] - (tau * delta if gamma is not None else 0.0)
        forward = w[-1 - tau]
        new = w[-1] - alpha * (forward + s * (backward - forward))
        if gamma is not None:
            delta = gamma * delta + (1 - gamma) * (new - w[-1])
        w.append(new)
    return abs(w[-1])


@pytest.mark.parametrize("tau, s", [(4, -1.0), (2, -1.0), (8, -1.0), (4, 0.5), (3, 2.0)])
def test_largest_stable_steps_match_the_engines_scan(tau, s):
    gammas = (None, 0.0, 0.3, 0.5, 0.9)
    found = largest_stable_steps(tau, s, gammas)
    expected = t2_stable_steps(list(gammas), tau, s)
    for got, want in zip(found, expected):
        assert got == pytest.approx(want, rel=3 * EDGE_TOL)


def test_the_chapter_finding_t2_helps_against_the_curvature_and_hurts_along_it():
    before, after = largest_stable_steps(4, -1.0, (None, 0.3))
    assert before < stability_bound(4) < after  # T2 gives back more than the discrepancy took
    # just inside / outside the edges, a plain run decays / grows
    for edge, gamma in ((before, None), (after, 0.3)):
        assert plain_toy_run(0.95 * edge, 4, -1.0, gamma, steps=3000) < 0.1
        assert plain_toy_run(1.05 * edge, 4, -1.0, gamma, steps=3000) > 10.0
    hurt_before, hurt_after = largest_stable_steps(4, 0.5, (None, 0.3))
    assert hurt_after < hurt_before


def test_default_widget_numbers():
    w = t2_explorer()
    assert set(w.controls) == {"alpha", "tau", "discrepancy", "gamma"}
    assert w.error is None
    assert w.radius_before == pytest.approx(discrepancy_radius(0.3, 1.0, 4, -1.0), abs=1e-12)
    assert w.radius_after == pytest.approx(
        discrepancy_radius(0.3, 1.0, 4, -1.0, gamma=0.3), abs=1e-12)
    assert w.radius_before > 1 > w.radius_after  # alpha = 0.3: unstable without T2, not with
    want_before, want_after = t2_stable_steps([None, 0.3], 4, -1.0)
    assert w.stable_before == pytest.approx(want_before, rel=3 * EDGE_TOL)
    assert w.stable_after == pytest.approx(want_after, rel=3 * EDGE_TOL)
    assert len(w.sweep_steps) == len(GAMMAS)
    assert "T2 helps here" in w.summary.value
    # both maps mark the current setting at tau's row
    for figure in (w.before, w.after):
        assert figure.data[-1].x == (0.3,) and figure.data[-1].y == (MAP_TAUS.index(4),)


def test_moving_gamma_redraws_only_the_map_with_t2():
    w = t2_explorer()
    before_z = np.array(w.before.data[0].z)
    after_z = np.array(w.after.data[0].z)
    w.set(gamma=0.9)
    assert w.error is None
    np.testing.assert_array_equal(np.array(w.before.data[0].z), before_z)
    assert not np.array_equal(np.array(w.after.data[0].z), after_z)
    assert w.sweep.data[-1].x == (0.9,)
    assert w.stable_after == pytest.approx(w.sweep_steps[GAMMAS.index(0.9)])
    assert "gamma=0.9" in w.after.layout.title.text


def test_sensitivity_along_the_curvature_makes_t2_hurt():
    w = t2_explorer(discrepancy=0.5)
    assert w.stable_after < w.stable_before
    assert "T2 hurts here" in w.summary.value


def test_bad_settings_are_refused_early_and_shown_in_the_widget():
    with pytest.raises(ValueError, match="gamma"):
        t2_explorer(gamma=0.97)
    with pytest.raises(ValueError, match="delay tau"):
        t2_explorer(tau=17)
    with pytest.raises(ValueError, match="sensitivity"):
        t2_explorer(discrepancy=3.0)
    w = t2_explorer()
    w.controls["gamma"].value = 0.33  # off the grid of GAMMAS
    assert w.error is not None and "gamma" in w.error
    assert "Not possible" in w.message.value


def test_static_twin_has_one_step_per_gamma_and_shows_one_heatmap_at_a_time():
    gammas = (0.0, 0.3, 0.9)
    fig = t2_explorer_static(tau=4, discrepancy=-1.0, gammas=gammas)
    steps = fig.layout.sliders[0].steps
    assert [s.label for s in steps] == ["0", "0.3", "0.9"]
    heatmaps = [i for i, t in enumerate(fig.data) if t.type == "heatmap"]
    assert len(heatmaps) == 3
    for step in steps:
        visible, _, indexes = step.args
        shown = [idx for idx, v in zip(indexes, visible["visible"]) if v and idx in heatmaps]
        assert len(shown) == 1
        assert fig.data[shown[0]].z is not None
    want = t2_stable_steps([None, 0.3], 4, -1.0)
    title = steps[1].args[1]["title.text"]
    assert f"{want[0]:.3f} without T2" in title and f"{want[1]:.3f} with it" in title
    with pytest.raises(ValueError, match="gammas"):
        t2_explorer_static(gammas=[])


def test_gamma_sweep_figure_checks_its_input():
    fig = gamma_sweep_figure([0.0, 0.5], [0.2, 0.3], without=0.1, no_discrepancy=0.35,
                             current=0.5)
    assert [t.name for t in fig.data] == ["with T2", "without T2", "no discrepancy (stash)",
                                          "current gamma"]
    assert fig.data[-1].y == (0.3,)
    with pytest.raises(ValueError, match="one step per gamma"):
        gamma_sweep_figure([0.0, 0.5], [0.2], without=0.1)
    with pytest.raises(ValueError, match="current gamma"):
        gamma_sweep_figure([0.0, 0.5], [0.2, 0.3], without=0.1, current=0.7)
