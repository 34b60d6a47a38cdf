"""Stages on chapter 06's map (chapter 07), against plain computations: roots of the
characteristic polynomial and delays measured on built schedules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipemare_lite.analysis.stage_stability import (
    fastest_growing_stage,
    largest_stable_pipeline,
    stage_points,
)
from pipemare_lite.analysis.staleness import weight_versions
from pipemare_lite.analysis.theory import stability_bound
from pipemare_lite.schedules import build_schedule
from tests.references import largest_stable_pipeline_by_search


def _radius(step, tau):
    """Largest |root| of z^(tau+1) - z^tau + step, written out."""
    coefficients = [1.0, -1.0] + [0.0] * tau
    coefficients[-1] += step
    if tau == 0:
        coefficients = [1.0, step - 1.0]
    return max(abs(np.roots(coefficients)))


def test_points_agree_with_the_roots():
    lr, sharpness, delays = 0.05, [6.0, 2.5, 1.0, 9.0], [8, 7, 2, 1]
    points = stage_points(lr, sharpness, delays)
    for p, lam, tau in zip(points, sharpness, delays):
        assert p.step == pytest.approx(lr * lam)
        assert p.bound == pytest.approx(2 * math.sin(math.pi / (2 * (2 * tau + 1))))
        assert p.stable_lr == pytest.approx(p.bound / lam)
        assert p.radius == pytest.approx(_radius(lr * lam, tau), rel=1e-9)
        assert p.inside == (p.radius < 1.0)
    assert [p.inside for p in points] == [False, True, True, True]


def test_no_curvature_means_no_motion():
    (point,) = stage_points(0.1, [0.0], [3])
    assert point.radius == 1.0 and point.inside and point.stable_lr == math.inf


def _fastest_plain(lr, sharpness, delays):
    radii = [_radius(lr * lam, tau) if lam > 0 else 1.0 for lam, tau in zip(sharpness, delays)]
    best = max(radii)
    return None if best <= 1.0 else radii.index(best)


@pytest.mark.parametrize("seed", range(20))
def test_fastest_growing_stage_is_the_largest_radius(seed):
    rng = np.random.default_rng(seed)
    P = int(rng.integers(1, 9))
    sharpness = [float(x) for x in rng.uniform(0.5, 20.0, P)]
    delays = [int(x) for x in rng.integers(0, 12, P)]
    lr = float(rng.uniform(0.005, 0.2))
    assert fastest_growing_stage(lr, sharpness, delays) == _fastest_plain(lr, sharpness, delays)


def test_growth_is_not_the_distance_outside_the_bound():
    # stage 0 (tau 8) is twice outside its bound, stage 1 (tau 1) only 1.2 times, yet
    # stage 1's quadratic grows faster per update
    lr, sharpness, delays = 1.0, [2.0 * 2 * math.sin(math.pi / 34), 1.2], [8, 1]
    points = stage_points(lr, sharpness, delays)
    assert points[0].step / points[0].bound == pytest.approx(2.0)
    assert points[1].step / points[1].bound == pytest.approx(1.2)
    assert points[1].radius > points[0].radius > 1.0
    assert fastest_growing_stage(lr, sharpness, delays) == 1
    assert fastest_growing_stage(0.001, [1.0, 1.0], [5, 1]) is None
    # equal radii: the staler (lower) stage
    assert fastest_growing_stage(1.0, [1.5, 1.5], [3, 3]) == 0


def _stage0_delay_measured(P, N):
    schedule = build_schedule("async", P, N, num_minibatches=math.ceil((2 * P - 1) / N) + 3)
    return max(r.forward_delay for r in weight_versions(schedule).rows if r.stage == 0)


@pytest.mark.parametrize("step, N", [(0.3, 1), (0.3, 2), (0.1, 4), (0.05, 2), (0.7, 3)])
def test_largest_stable_pipeline_against_measured_delays_and_roots(step, N):
    P = largest_stable_pipeline(step, N)
    assert P >= 1
    assert _radius(step, _stage0_delay_measured(P, N)) < 1.0
    assert _radius(step, _stage0_delay_measured(P + 1, N)) >= 1.0


def test_the_solved_depth_is_the_searched_one_on_and_off_the_boundaries():
    """The closed form (bound inverted, then the delay solved for P) against its definition
    (try P = 1, 2, ...): random steps, steps exactly on a bound (outside: strictly below is
    stable) and one float below it, for several N."""
    import random

    rng = random.Random(7)
    steps = [rng.uniform(0.01, 2.5) for _ in range(200)]
    steps += [stability_bound(t) for t in range(40)]
    steps += [math.nextafter(stability_bound(t), 0.0) for t in range(40)]
    for step in steps:
        for N in (1, 2, 3, 8):
            assert largest_stable_pipeline(step, N) == largest_stable_pipeline_by_search(step, N), (
                step, N)
    # far beyond what a search affords, still exact: stage 0 of P stages is inside, of P + 1 not
    for step, N in ((1e-7, 8), (3e-9, 1)):
        P = largest_stable_pipeline(step, N)
        assert step < stability_bound(math.ceil((2 * P - 1) / N))
        assert step >= stability_bound(math.ceil((2 * P + 1) / N))


def test_a_step_too_large_for_one_stage_gives_zero():
    assert largest_stable_pipeline(1.2, 1) == 0
    assert largest_stable_pipeline(1.2, 8) == 0  # one stage is still one update stale


@pytest.mark.parametrize("call, message", [
    (lambda: stage_points(0.0, [1.0], [1]), "lr must be a positive number"),
    (lambda: stage_points(0.1, [1.0, 2.0], [1]), "one sharpness per stage"),
    (lambda: stage_points(0.1, [-1.0], [1]), "stage 0: sharpness"),
    (lambda: stage_points(0.1, [1.0], [1.5]), "non-negative integer"),
    (lambda: stage_points(0.1, [], []), "at least one stage"),
    (lambda: largest_stable_pipeline(0.0, 2), "step"),
    (lambda: largest_stable_pipeline(0.1, 0), "num_microbatches"),
    (lambda: largest_stable_pipeline_by_search(1e-9, 1, max_stages=50), "beyond 50 stages"),
    (lambda: largest_stable_pipeline_by_search(0.1, 0), "num_microbatches"),
])
def test_bad_input_is_refused_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()
