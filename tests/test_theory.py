"""Delayed GD on quadratics: roots vs simulation, bound vs bisection, T1 and the T2 toy model."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from pipemare_lite.analysis.theory import (
    characteristic_polynomial,
    characteristic_roots,
    discrepancy_matrix,
    discrepancy_polynomial,
    discrepancy_radius,
    discrepancy_roots,
    discrepancy_stability_map,
    largest_stable_step,
    simulate_delayed_gd,
    simulate_discrepancy_gd,
    spectral_radius,
    stability_bound,
    stability_grid,
    stability_map,
    t1_step_limit,
    t1_step_sizes,
    t2_stable_steps,
)


def _growth_rate(w, order, start, end):
    """Per-step growth of the state norm (the last ``order`` iterates) between two times."""
    norm = lambda t: np.linalg.norm(w[t - order : t])  # noqa: E731
    return (norm(end) / norm(start)) ** (1.0 / (end - start))


def test_plain_polynomial_is_the_recalled_one():
    # z^(tau+1) - z^tau + alpha*lam, highest power first
    assert characteristic_polynomial(0.3, 2.0, 3).tolist() == [1.0, -1.0, 0.0, 0.0, 0.6]
    assert characteristic_polynomial(0.3, 2.0, 0).tolist() == [1.0, -1.0 + 0.6]


def test_momentum_polynomial_without_delay_is_heavy_ball():
    # z^2 - (1 + m - alpha lam) z + m
    assert characteristic_polynomial(0.5, 1.0, 0, momentum=0.9) == pytest.approx([1.0, -1.4, 0.9])


def test_roots_satisfy_the_recurrence():
    # z^t must solve w[t+1] = (1+m) w[t] - m w[t-1] - alpha lam w[t-tau] for every root z
    alpha, lam, tau, m = 0.2, 1.5, 3, 0.5
    for z in characteristic_roots(alpha, lam, tau, m):
        t = 10
        lhs = z ** (t + 1)
        rhs = (1 + m) * z**t - m * z ** (t - 1) - alpha * lam * z ** (t - tau)
        assert abs(lhs - rhs) < 1e-9 * max(1.0, abs(z) ** (t + 1))


@pytest.mark.parametrize(
    "alpha, tau, momentum",
    [(0.75, 1, 0.0), (0.9, 1, 0.0), (0.3, 3, 0.0), (0.9, 3, 0.0), (1.95, 0, 0.0), (2.1, 0, 0.0)]
    + [(0.05, 1, 0.5), (0.2, 1, 0.5), (0.2, 3, 0.5), (0.05, 3, 0.9), (0.2, 0, 0.9)],
)
def test_roots_predict_the_simulated_growth_rate(alpha, tau, momentum):
    # cases chosen with radius above ~0.7 so that 1500 steps neither underflow nor overflow
    w = simulate_delayed_gd(alpha, 1.0, tau, 1500, momentum=momentum)
    measured = _growth_rate(w, max(tau, 1) + 1, 500, 1500)
    assert measured == pytest.approx(spectral_radius(alpha, 1.0, tau, momentum), rel=1e-2)


def test_simulation_starts_from_a_constant_past():
    w = simulate_delayed_gd(0.5, 1.0, 2, 3, w0=2.0)
    # w1 = w0 - 0.5*w(-2) = 1, w2 = 1 - 0.5*w(-1) = 0, w3 = 0 - 0.5*w0 = -1
    assert w.tolist() == [2.0, 1.0, 0.0, -1.0]


@pytest.mark.parametrize("tau", range(21))
def test_bound_is_the_largest_stable_step(tau):
    found = largest_stable_step(lambda x: spectral_radius(x, 1.0, tau), high=2.5, grid=100)
    assert found == pytest.approx(stability_bound(tau), abs=1e-6)
    assert stability_bound(tau) <= math.pi / (2 * tau + 1) + 1e-12  # "about pi/(2 tau + 1)"


@pytest.mark.parametrize("momentum", [0.0, 0.5, 0.9])
def test_momentum_closed_forms(momentum):
    limit = lambda tau: largest_stable_step(  # noqa: E731
        lambda x: spectral_radius(x, 1.0, tau, momentum), high=5.0, grid=200
    )
    # no delay: heavy ball is stable iff alpha lam < 2 (1 + m)   (Jury's test on the quadratic)
    assert limit(0) == pytest.approx(2 * (1 + momentum), abs=1e-6)
    # one step of delay: z^2 - (1+m) z + (m + alpha lam), stable iff alpha lam < 1 - m
    assert limit(1) == pytest.approx(1 - momentum, abs=1e-6)


def test_momentum_makes_delay_much_worse():
    for tau in (1, 2, 4, 8):
        plain = largest_stable_step(
            lambda x, tau=tau: spectral_radius(x, 1.0, tau), high=2.5, grid=200
        )
        heavy = largest_stable_step(
            lambda x, tau=tau: spectral_radius(x, 1.0, tau, 0.9), high=2.5, grid=500
        )
        assert heavy < 0.11 * plain  # at least ~9x smaller with m = 0.9


def test_stability_map_is_a_grid_of_radii():
    alphas, taus = [0.1, 0.5, 0.9], [0, 1, 4]
    grid = stability_map(alphas, taus)
    assert grid.shape == (3, 3)
    assert grid[2, 1] == pytest.approx(spectral_radius(0.5, 1.0, 4))
    stable = grid < 1
    for i, tau in enumerate(taus):
        assert stable[i].tolist() == [a < stability_bound(tau) for a in alphas]


def test_t1_with_p_1_keeps_any_step_below_one_stable_for_every_delay():
    limits = [t1_step_limit(tau, 1.0) for tau in range(1, 60)]
    assert limits[0] == pytest.approx(1.0)
    assert all(b > a for a, b in zip(limits, limits[1:]))  # increasing in tau
    assert limits[-1] < math.pi / 2
    for tau in range(1, 30):
        assert spectral_radius(0.99 / tau, 1.0, tau) < 1.0  # rescheduled: stable
        if tau >= 2:
            assert spectral_radius(0.99, 1.0, tau) > 1.0  # not rescheduled: diverges


def test_t1_with_p_below_1_is_not_safe_for_every_delay():
    # tau^p * bound(tau) ~ pi/2 * tau^(p-1): it falls below any fixed step eventually
    assert t1_step_limit(1000, 0.5) < 0.1 < t1_step_limit(1, 0.5)
    with pytest.raises(ValueError, match="tau >= 1"):
        t1_step_limit(0)


# --------------------------------------------------------------------------------------------
# Discrepancy toy model and T2
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gamma", [None, 0.0, 0.5, 0.9])
@pytest.mark.parametrize("tau_f, tau_b, sensitivity", [(3, 0, -1.0), (2, 1, 0.5), (4, 0, 2.0)])
def test_matrix_model_equals_the_plain_simulation(gamma, tau_f, tau_b, sensitivity):
    steps = 40
    w = simulate_discrepancy_gd(0.15, 1.0, tau_f, sensitivity, steps, tau_b=tau_b, gamma=gamma)
    A = discrepancy_matrix(0.15, 1.0, tau_f, sensitivity, tau_b=tau_b, gamma=gamma)
    x = np.ones(A.shape[0])
    x[-1] = 0.0  # delta starts at zero
    for t in range(1, steps + 1):
        x = A @ x
        assert x[0] == pytest.approx(w[t], rel=1e-10, abs=1e-12)


def test_no_discrepancy_is_plain_delayed_gd():
    for tau in (1, 3, 6):
        for alpha in (0.1, 0.3, 0.6):
            plain = spectral_radius(alpha, 1.0, tau)
            # sensitivity 0: the backward's weights do not matter
            assert discrepancy_radius(alpha, 1.0, tau, 0.0) == pytest.approx(plain, abs=1e-9)
            # backward on the forward's weights (stash): no discrepancy either
            stash = discrepancy_radius(alpha, 1.0, tau, -1.0, tau_b=tau)
            assert stash == pytest.approx(plain, abs=1e-9)


def test_simulated_growth_matches_discrepancy_radius():
    for gamma in (None, 0.5):
        w = simulate_discrepancy_gd(0.3, 1.0, 4, -1.0, 1200, gamma=gamma)
        radius = discrepancy_radius(0.3, 1.0, 4, -1.0, gamma=gamma)
        assert _growth_rate(w, 6, 400, 1200) == pytest.approx(radius, rel=1e-2)


def _stable_limit(tau_f, sensitivity, gamma):
    return largest_stable_step(
        lambda a: discrepancy_radius(a, 1.0, tau_f, sensitivity, gamma=gamma), high=4.0, grid=400
    )


@pytest.mark.parametrize("tau_f", [2, 4, 8])
def test_discrepancy_against_curvature_shrinks_the_stable_steps_and_t2_enlarges_them(tau_f):
    """sensitivity = -lam: the backward's weights pull the gradient the other way.

    Measured when this was written (largest stable alpha, lam = 1; stash / no T2 / T2 gamma 0.5):
    tau 2: 0.618 / 0.274 / 0.470; tau 4: 0.347 / 0.144 / 0.351; tau 8: 0.185 / 0.074 / 0.198.
    """
    stash = stability_bound(tau_f)
    no_t2 = _stable_limit(tau_f, -1.0, None)
    t2 = _stable_limit(tau_f, -1.0, 0.5)  # a moderate gamma
    assert no_t2 < 0.5 * stash  # the discrepancy costs more than half the stable step
    assert t2 > no_t2  # T2 enlarges the stable region


@pytest.mark.parametrize("tau_f", [2, 4, 8])
def test_discrepancy_along_curvature_helps_and_t2_then_hurts(tau_f):
    """sensitivity = +lam/2: the current weights make the gradient less stale; T2 undoes that.

    Reported as found, not tuned: in this toy model T2 helps only when the discrepancy hurts.
    """
    no_t2 = _stable_limit(tau_f, 0.5, None)
    t2 = _stable_limit(tau_f, 0.5, 0.5)
    assert no_t2 > stability_bound(tau_f)
    assert t2 < no_t2


def test_gamma_near_one_is_no_correction_and_map_rows_follow_gammas():
    alphas = [0.05, 0.1, 0.2, 0.4]
    grid = discrepancy_stability_map(alphas, [None, 0.3, 0.999], 4, -1.0)
    assert grid.shape == (3, 4)
    none_row = [discrepancy_radius(a, 1.0, 4, -1.0) for a in alphas]
    assert grid[0].tolist() == pytest.approx(none_row)
    # gamma -> 1: delta never moves, the T2 row's dominant root returns to the no-T2 one
    assert np.maximum(grid[2], 0.999) == pytest.approx(np.maximum(grid[0], 0.999), abs=5e-3)


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="gamma must be in"):
        discrepancy_matrix(0.1, 1.0, 2, -1.0, gamma=1.0)
    with pytest.raises(ValueError, match="non-negative integer, got -1"):
        spectral_radius(0.1, 1.0, -1)
    with pytest.raises(ValueError, match="non-negative integer, got 1.5"):
        stability_bound(1.5)


@pytest.mark.parametrize("tau_f", [2, 4, 8])
def test_best_gamma_is_moderate(tau_f):
    """Finding (sensitivity = -lam): gamma = 0 (raw last step) and gamma = 0.9 (slow average)
    both do worse than a moderate gamma; every gamma tried beats no correction here."""
    gammas = [0.0, 0.3, 0.5, 0.7, 0.9]
    no_t2, *with_t2 = t2_stable_steps([None, *gammas], tau_f, -1.0)
    assert with_t2[1] == pytest.approx(_stable_limit(tau_f, -1.0, 0.3))
    best = max(range(len(gammas)), key=lambda i: with_t2[i])
    assert 0 < best < len(gammas) - 1
    assert min(with_t2) > no_t2


def test_torch_free_modules_import_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import pipemare_lite.analysis.staleness, pipemare_lite.analysis.memory, "
        "pipemare_lite.analysis.theory\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_t1_schedule_in_a_simulation():
    """alpha lam = 0.9 and tau = 4 (bound 0.347): constant steps diverge; T1 holding p = 1
    (horizon far away) converges; once p has annealed to 0 the instability is back, as
    t1_step_limit says (the base learning rate must have decayed by then)."""
    tau, steps = 4, 600
    assert t1_step_sizes(0.9, tau, 100, 3).tolist() == pytest.approx(
        [0.9 / 4, 0.9 * 4 ** (-0.99), 0.9 * 4 ** (-0.98)]
    )
    constant = simulate_delayed_gd(0.9, 1.0, tau, steps)
    held = simulate_delayed_gd(t1_step_sizes(0.9, tau, 10**9, steps), 1.0, tau, steps)
    annealed = simulate_delayed_gd(t1_step_sizes(0.9, tau, 100, steps), 1.0, tau, steps)
    assert abs(constant[-1]) > 1e6
    assert abs(held[-1]) < 1e-6
    assert abs(annealed[-1]) > 1e6
    with pytest.raises(ValueError, match="horizon"):
        t1_step_sizes(0.9, tau, 0, 10)


# --------------------------------------------------------------------------------------------
# Momentum inside the discrepancy model, its polynomial, and the batched grid
# --------------------------------------------------------------------------------------------


def _plain_momentum_discrepancy(alpha, lam, tau_f, s, steps, tau_b, gamma, m):
    """The model written out once more, as a reference independent of theory.py's loop."""
    past = max(tau_f, tau_b, 1)
    w = [1.0] * (past + 1)  # w[-past..0], constant past
    delta = 0.0
    for _ in range(steps):
        now, previous = w[-1], w[-2]
        forward, backward = w[-1 - tau_f], w[-1 - tau_b]
        if gamma is not None:
            backward = backward - (tau_f - tau_b) * delta
        step = -alpha * (lam * forward + s * (backward - forward)) + m * (now - previous)
        w.append(now + step)
        if gamma is not None:
            delta = gamma * delta + (1 - gamma) * step
    return w[past:]


@pytest.mark.parametrize("gamma", [None, 0.5])
@pytest.mark.parametrize("tau_f, tau_b, s, m", [(3, 0, -1.0, 0.5), (0, 0, 0.5, 0.9),
                                                (4, 1, 2.0, 0.3), (1, 0, -0.5, 0.0)])
def test_momentum_discrepancy_simulation_and_matrix_agree_with_a_plain_reference(
    gamma, tau_f, tau_b, s, m
):
    steps, alpha = 30, 0.12
    reference = _plain_momentum_discrepancy(alpha, 1.3, tau_f, s, steps, tau_b, gamma, m)
    w = simulate_discrepancy_gd(alpha, 1.3, tau_f, s, steps, tau_b=tau_b, gamma=gamma,
                                momentum=m)
    assert w.tolist() == pytest.approx(reference, rel=1e-12, abs=1e-14)
    A = discrepancy_matrix(alpha, 1.3, tau_f, s, tau_b=tau_b, gamma=gamma, momentum=m)
    x = np.ones(A.shape[0])
    x[-1] = 0.0
    for t in range(1, steps + 1):
        x = A @ x
        assert x[0] == pytest.approx(reference[t], rel=1e-10, abs=1e-12)


def test_no_discrepancy_with_momentum_is_heavy_ball_delayed_gd():
    for tau in (0, 1, 3, 6):
        for m in (0.5, 0.9):
            for alpha in (0.02, 0.1, 0.4):
                plain = spectral_radius(alpha, 1.0, tau, m)
                ours = discrepancy_radius(alpha, 1.0, tau, 0.0, momentum=m)
                assert ours == pytest.approx(plain, abs=1e-7)
                w = simulate_discrepancy_gd(alpha, 1.0, tau, 0.0, 50, momentum=m)
                assert w == pytest.approx(simulate_delayed_gd(alpha, 1.0, tau, 50, momentum=m))


def test_discrepancy_polynomial_written_out():
    # tau_b = 0, no momentum: z^(tau+1) - (1 - alpha s) z^tau + alpha (lam - s)
    assert discrepancy_polynomial(0.5, 2.0, 3, -1.0).tolist() == pytest.approx(
        [1.0, -(1 + 0.5), 0.0, 0.0, 0.5 * 3.0])
    # s = 0 is the plain polynomial, with and without momentum
    for tau, m in [(0, 0.0), (2, 0.0), (0, 0.9), (3, 0.5)]:
        assert discrepancy_polynomial(0.3, 1.5, tau, 0.0, momentum=m) == pytest.approx(
            characteristic_polynomial(0.3, 1.5, tau, m))
    # s = lam: all of the gradient reads the current weights, i.e. no delay at all
    assert np.sort_complex(np.roots(discrepancy_polynomial(0.3, 1.0, 4, 1.0))) == (
        pytest.approx(np.sort_complex(np.array([0.7, 0, 0, 0, 0], dtype=complex)), abs=1e-3))


@pytest.mark.parametrize("tau_f, tau_b, s, m", [(3, 0, -1.0, 0.0), (4, 1, 0.5, 0.5),
                                                (1, 0, 2.0, 0.9), (0, 0, 0.7, 0.3)])
def test_polynomial_roots_are_the_nonzero_eigenvalues_of_the_matrix(tau_f, tau_b, s, m):
    roots = discrepancy_roots(0.2, 1.0, tau_f, s, tau_b=tau_b, momentum=m)
    eig = np.linalg.eigvals(discrepancy_matrix(0.2, 1.0, tau_f, s, tau_b=tau_b, momentum=m))
    nonzero = lambda z: np.sort_complex(z[np.abs(z) > 1e-7])  # noqa: E731
    assert nonzero(roots) == pytest.approx(nonzero(eig), abs=1e-6)
    assert discrepancy_radius(0.2, 1.0, tau_f, s, tau_b=tau_b, momentum=m) == pytest.approx(
        float(np.max(np.abs(roots))), abs=1e-9)
    with_t2 = discrepancy_roots(0.2, 1.0, tau_f, s, tau_b=tau_b, gamma=0.5, momentum=m)
    assert len(with_t2) == max(tau_f, tau_b, 1) + 2  # T2 adds the running average's state


def test_stability_grid_equals_the_loops():
    alphas, taus = np.linspace(0.01, 2.2, 23), [0, 1, 2, 5, 9]
    assert stability_grid(alphas, taus) == pytest.approx(stability_map(alphas, taus), abs=1e-7)
    assert stability_grid(alphas, taus, lam=2.0, momentum=0.6) == pytest.approx(
        stability_map(alphas, taus, lam=2.0, momentum=0.6), abs=1e-7)
    for s, gamma, m in [(-1.0, None, 0.0), (0.5, 0.5, 0.0), (-1.0, 0.3, 0.9), (2.0, None, 0.5)]:
        grid = stability_grid(alphas[:6], taus, sensitivity=s, gamma=gamma, momentum=m)
        loop = [[discrepancy_radius(a, 1.0, t, s, gamma=gamma, momentum=m) for a in alphas[:6]]
                for t in taus]
        assert grid == pytest.approx(np.array(loop), abs=1e-9)


def test_discrepancy_with_momentum_tightens_the_stable_step_further():
    # the same story with heavy ball: s = -lam takes stable steps away, T2 gives some back
    def limit(gamma):
        return largest_stable_step(
            lambda a: discrepancy_radius(a, 1.0, 4, -1.0, gamma=gamma, momentum=0.5),
            high=2.0, grid=400)

    heavy = largest_stable_step(lambda a: spectral_radius(a, 1.0, 4, 0.5), high=2.0, grid=400)
    assert limit(None) < heavy
    assert limit(0.5) > limit(None)
