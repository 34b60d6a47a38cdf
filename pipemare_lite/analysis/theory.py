"""Delayed gradient descent on a quadratic: simulation, roots, stability (chapter 06).

The model (recalled from PipeMare, see /work/shared/pipemare-notes.md): minimize
``f(w) = lam / 2 * w**2`` with a gradient that is ``tau`` steps old,

    w[t+1] = w[t] - alpha * lam * w[t - tau]  (+ momentum * (w[t] - w[t-1]) with heavy ball).

Trying ``w[t] = z**t`` turns the recurrence into a polynomial; it converges for every start
iff all roots lie inside the unit circle, i.e. the spectral radius is below 1. Without
momentum the polynomial is ``z**(tau+1) - z**tau + alpha*lam`` and the stable steps are
``0 < alpha*lam < 2 sin(pi / (2 (2 tau + 1)))`` (:func:`stability_bound`).

The weight discrepancy of an asynchronous pipeline (forward at old weights, backward at
current ones) and PipeMare's T2 correction are the book's own toy model,
:func:`discrepancy_matrix` (chapter 06 introduces it, chapter 09 uses it). For maps over
many steps and delays, :func:`stability_grid` computes the same spectral radii as the
one-at-a-time loops, batched. numpy only.
"""

from __future__ import annotations

import math

import numpy as np


def simulate_delayed_gd(alpha, lam, tau, steps, w0=1.0, momentum=0.0) -> np.ndarray:
    """Iterates ``w[0..steps]`` of delayed (heavy-ball) GD; the past before t=0 is ``w0``.

    ``alpha`` is one step size, or one per step (e.g. :func:`t1_step_sizes`).
    """
    _check_delay(tau)
    alphas = np.broadcast_to(np.asarray(alpha, dtype=float), (steps,))
    history = max(tau, 1)  # w[t - tau] and w[t - 1] must exist at t = 0
    w = np.full(history + steps + 1, float(w0))
    for k, t in enumerate(range(history, history + steps)):
        w[t + 1] = w[t] - alphas[k] * lam * w[t - tau] + momentum * (w[t] - w[t - 1])
    return w[history:]


def characteristic_polynomial(alpha, lam, tau, momentum=0.0) -> np.ndarray:
    """Coefficients (highest power first) of the recurrence's characteristic polynomial.

    Put ``w[t] = z**t`` into ``w[t+1] = (1+m) w[t] - m w[t-1] - alpha lam w[t-tau]`` and
    multiply by ``z**(n-1)``, n being the recurrence's order (how far back it reaches, plus
    one): ``z**n - (1+m) z**(n-1) + m z**(n-2) + alpha lam z**(n-1-tau)``. Without momentum
    n = tau + 1 and this is ``z**(tau+1) - z**tau + alpha lam``; with momentum and tau = 0
    it is the heavy-ball quadratic ``z**2 - (1 + m - alpha lam) z + m``.
    """
    _check_delay(tau)
    order = max(tau + 1, 2 if momentum else 1)
    by_power = np.zeros(order + 1)  # by_power[k] multiplies z**k
    by_power[order] += 1.0
    by_power[order - 1] -= 1.0 + momentum
    if momentum:
        by_power[order - 2] += momentum
    by_power[order - 1 - tau] += alpha * lam
    return by_power[::-1]


def characteristic_roots(alpha, lam, tau, momentum=0.0) -> np.ndarray:
    """Roots of :func:`characteristic_polynomial` (complex)."""
    return np.roots(characteristic_polynomial(alpha, lam, tau, momentum))


def spectral_radius(alpha, lam, tau, momentum=0.0) -> float:
    """Largest root magnitude: the asymptotic factor by which ``|w|`` shrinks (< 1) or grows."""
    return float(np.max(np.abs(characteristic_roots(alpha, lam, tau, momentum))))


def stability_bound(tau) -> float:
    """Largest stable ``alpha * lam`` for plain delayed GD: ``2 sin(pi / (2 (2 tau + 1)))``."""
    _check_delay(tau)
    return 2.0 * math.sin(math.pi / (2 * (2 * tau + 1)))


def largest_stable_step(radius_of, high=4.0, grid=400, tol=1e-10) -> float:
    """Largest ``x`` such that every step in ``(0, x)`` has ``radius_of(step) < 1``.

    Scans a grid from 0 up to ``high`` for the first unstable point (the stable set need not
    be an interval, so plain bisection from the ends could jump over a gap), then bisects
    between the last stable and the first unstable grid point. Returns ``high`` if nothing
    up to it is unstable.
    """
    steps = np.linspace(0.0, high, grid + 1)[1:]
    stable = [radius_of(x) < 1.0 for x in steps]
    if all(stable):
        return float(high)
    first_bad = stable.index(False)
    low = steps[first_bad - 1] if first_bad else 0.0  # the last stable point (or 0)
    up = steps[first_bad]
    while up - low > tol:
        mid = 0.5 * (low + up)
        low, up = (mid, up) if radius_of(mid) < 1.0 else (low, mid)
    return float(low)


def momentum_stability_bound(tau, momentum=0.0) -> float:
    """Largest stable ``alpha * lam`` of delayed heavy-ball GD with delay ``tau``.

    Without momentum :func:`stability_bound`; with it, found from the characteristic roots
    (:func:`largest_stable_step` over :func:`spectral_radius`): torch's SGD with momentum m
    is this recurrence (``v <- m v + g``, ``w <- w - alpha v``).
    """
    _check_delay(tau)
    if not momentum:
        return stability_bound(tau)
    return largest_stable_step(lambda x: spectral_radius(x, 1.0, tau, momentum))


def stability_map(alphas, taus, lam=1.0, momentum=0.0) -> np.ndarray:
    """Spectral radius on a grid: ``result[i, j]`` for ``taus[i]``, ``alphas[j]`` (< 1: stable)."""
    return np.array([[spectral_radius(a, lam, int(t), momentum) for a in alphas] for t in taus],
                    dtype=float)


# ---------------------------------------------------------------------------------------------
# T1: learning-rate rescheduling (chapter 08)
# ---------------------------------------------------------------------------------------------


def t1_step_limit(tau, p=1.0) -> float:
    """Largest ``alpha * lam`` whose T1-rescheduled step ``alpha * lam * tau**(-p)`` is stable.

    Equal to ``tau**p * stability_bound(tau)``. For ``p = 1`` (T1 at the start of training)
    this is ``2 tau sin(pi / (4 tau + 2))``: 1 at tau = 1, increasing towards pi/2, so any
    ``alpha * lam < 1`` stays under the bound for EVERY delay tau >= 1 once divided by tau.
    For ``p < 1`` the limit eventually falls like ``tau**(p-1)``: no step is safe for every
    delay, which is why T1 anneals p only as the base learning rate decays.
    """
    if tau < 1:
        raise ValueError(f"T1 needs a delay tau >= 1, got {tau}")
    return tau**p * stability_bound(tau)


def t1_step_sizes(alpha, tau, horizon, steps) -> np.ndarray:
    """T1's step at update k: ``alpha * tau**(-p_k)`` with ``p_k = 1 - min(k / horizon, 1)``."""
    if tau < 1:
        raise ValueError(f"T1 needs a delay tau >= 1, got {tau}")
    if horizon <= 0:
        raise ValueError(f"the T1 horizon must be a positive number of updates, got {horizon}")
    p = 1.0 - np.minimum(np.arange(steps) / horizon, 1.0)
    return alpha * float(tau) ** (-p)


# ---------------------------------------------------------------------------------------------
# Discrepancy and T2 (chapter 09): the book's own toy model (derived)
# ---------------------------------------------------------------------------------------------


def discrepancy_matrix(alpha, lam, tau_f, sensitivity, tau_b=0, gamma=None,
                       momentum=0.0) -> np.ndarray:
    """Transition matrix of the discrepancy toy model (derived; the book's own model).

    The forward reads ``w[t - tau_f]``, the backward reads ``b[t]``, and the computed gradient
    is the true gradient at the forward's weights plus an error proportional to how far the
    backward's weights are from them:

        g[t] = lam * w[t - tau_f] + sensitivity * (b[t] - w[t - tau_f])
        w[t+1] = w[t] - alpha * g[t]  (+ momentum * (w[t] - w[t-1]) with heavy ball)

    Without T2 (``gamma=None``) ``b[t] = w[t - tau_b]`` (async: tau_b = 0, current weights).
    With T2, ``b[t] = w[t - tau_b] - (tau_f - tau_b) * delta[t]`` and after the update
    ``delta[t+1] = gamma * delta[t] + (1 - gamma) * (w[t+1] - w[t])``, ``0 <= gamma < 1``.
    With ``sensitivity = 0`` or ``tau_f == tau_b`` it is plain delayed GD (with the same
    ``momentum``).

    The state is ``x[t] = (w[t], w[t-1], ..., w[t-H], delta[t])`` with H = max(tau_f, tau_b, 1)
    and ``x[t+1] = A x[t]``; the model is stable iff every eigenvalue of A is inside the unit
    circle.

    What it shows (lam = 1, tau_b = 0, largest stable alpha; tests/test_theory.py): the sign
    of ``sensitivity`` decides everything. With ``sensitivity = -lam`` the discrepancy takes
    away more than half of the stable step and T2 with gamma = 0.5 gives it back (no T2 -> T2,
    no-discrepancy bound in brackets: tau_f 2: 0.274 -> 0.470 [0.618]; 4: 0.144 -> 0.351
    [0.347]; 8: 0.074 -> 0.198 [0.185]). With
    ``0 < sensitivity <= lam`` reading the current weights makes the gradient LESS stale, the
    discrepancy helps, and T2 hurts. For ``sensitivity = 2 lam`` it is mixed (T2 helps at
    tau_f 1 and 2, hurts at 4 and 8). The toy model does not tell which sign a network has.
    """
    _check_delay(tau_f, tau_b)
    if gamma is not None and not 0.0 <= gamma < 1.0:
        raise ValueError(f"gamma must be in [0, 1) (or None for no T2), got {gamma}")
    H = max(tau_f, tau_b, 1)
    size = H + 2  # H + 1 weights, then delta
    d = tau_f - tau_b
    # w[t+1] as a row over the state:
    # (1 + m) w[t] - m w[t-1] - alpha * ((lam - s) w[t-tau_f] + s * b[t])
    update = np.zeros(size)
    update[0] += 1.0 + momentum
    update[1] -= momentum
    update[tau_f] -= alpha * (lam - sensitivity)
    update[tau_b] -= alpha * sensitivity
    if gamma is not None:
        update[-1] += alpha * sensitivity * d  # b[t] includes -d * delta[t]
    A = np.zeros((size, size))
    A[0] = update
    for k in range(1, H + 1):  # shift the history down
        A[k, k - 1] = 1.0
    if gamma is not None:  # delta[t+1] = gamma delta + (1-gamma) (w[t+1] - w[t])
        A[-1] = (1.0 - gamma) * update
        A[-1, 0] -= 1.0 - gamma
        A[-1, -1] += gamma
    return A


def discrepancy_radius(alpha, lam, tau_f, sensitivity, tau_b=0, gamma=None,
                       momentum=0.0) -> float:
    """Spectral radius of :func:`discrepancy_matrix` (< 1: stable)."""
    A = discrepancy_matrix(alpha, lam, tau_f, sensitivity, tau_b, gamma, momentum)
    return float(np.max(np.abs(np.linalg.eigvals(A))))


def simulate_discrepancy_gd(alpha, lam, tau_f, sensitivity, steps, tau_b=0, gamma=None, w0=1.0,
                            momentum=0.0) -> np.ndarray:
    """Iterates ``w[0..steps]`` of the discrepancy toy model, written out plainly (no matrix).

    The forward reads ``w[t - tau_f]``; the backward reads ``w[t - tau_b]``, moved back by
    T2's extrapolation when ``gamma`` is given; the past before t=0 is ``w0``, and T2's
    running average of the weight changes starts at 0.
    """
    _check_delay(tau_f, tau_b)
    history = max(tau_f, tau_b, 1)
    w = np.full(history + steps + 1, float(w0))
    delta = 0.0
    for t in range(history, history + steps):
        backward = w[t - tau_b]
        if gamma is not None:
            backward -= (tau_f - tau_b) * delta
        forward = w[t - tau_f]
        gradient = lam * forward + sensitivity * (backward - forward)
        w[t + 1] = w[t] - alpha * gradient + momentum * (w[t] - w[t - 1])
        if gamma is not None:
            delta = gamma * delta + (1.0 - gamma) * (w[t + 1] - w[t])
    return w[history:]


def discrepancy_stability_map(alphas, gammas, tau_f, sensitivity, lam=1.0, tau_b=0):
    """Spectral radius on a grid: ``result[i, j]`` for ``gammas[i]`` and ``alphas[j]``.

    A gamma of None in ``gammas`` gives the row without T2.
    """
    return np.array([[discrepancy_radius(a, lam, tau_f, sensitivity, tau_b, g) for a in alphas]
                     for g in gammas], dtype=float)


def t2_stable_steps(gammas, tau_f, sensitivity, lam=1.0, tau_b=0) -> list[float]:
    """Largest stable ``alpha`` of the toy model for each gamma (None: without T2)."""
    return [largest_stable_step(
        lambda a, g=g: discrepancy_radius(a, lam, tau_f, sensitivity, tau_b, g), high=4.0 / lam)
        for g in gammas]


def discrepancy_polynomial(alpha, lam, tau_f, sensitivity, tau_b=0, momentum=0.0) -> np.ndarray:
    """Characteristic polynomial of the discrepancy model without T2 (highest power first).

    The gradient ``lam w[t-tau_f] + s (w[t-tau_b] - w[t-tau_f])`` weighs the forward's old
    weights by ``lam - s`` and the backward's by ``s``; putting ``w[t] = z**t`` into the
    recurrence and multiplying by ``z**(n-1)`` (n its order) gives

        z**n - (1+m) z**(n-1) + m z**(n-2) + alpha (lam - s) z**(n-1-tau_f) + alpha s z**(n-1-tau_b)

    With ``tau_b = 0`` and no momentum: ``z**(tau+1) - (1 - alpha s) z**tau + alpha (lam - s)``.
    With ``s = 0`` it is :func:`characteristic_polynomial`. Its roots are the nonzero
    eigenvalues of :func:`discrepancy_matrix` with ``gamma=None``.
    """
    _check_delay(tau_f, tau_b)
    order = max(tau_f + 1, tau_b + 1, 2 if momentum else 1)
    by_power = np.zeros(order + 1)  # by_power[k] multiplies z**k
    by_power[order] += 1.0
    by_power[order - 1] -= 1.0 + momentum
    if momentum:
        by_power[order - 2] += momentum
    by_power[order - 1 - tau_f] += alpha * (lam - sensitivity)
    by_power[order - 1 - tau_b] += alpha * sensitivity
    return by_power[::-1]


def discrepancy_roots(alpha, lam, tau_f, sensitivity, tau_b=0, gamma=None,
                      momentum=0.0) -> np.ndarray:
    """The modes of the discrepancy model: ``w[t]`` is a combination of ``root**t``.

    Without T2, the roots of :func:`discrepancy_polynomial`; with T2 (``gamma`` given) the
    running average adds a state, and the modes are the eigenvalues of
    :func:`discrepancy_matrix` (zeros included: they die out after one step).
    """
    if gamma is None:
        return np.roots(discrepancy_polynomial(alpha, lam, tau_f, sensitivity, tau_b, momentum))
    return np.linalg.eigvals(discrepancy_matrix(alpha, lam, tau_f, sensitivity, tau_b, gamma,
                                                momentum))


def stability_grid(alphas, taus, lam=1.0, momentum=0.0, sensitivity=0.0, gamma=None,
                   tau_b=0) -> np.ndarray:
    """Spectral radii ``result[i, j]`` for ``taus[i]`` and ``alphas[j]``, computed batched.

    The same numbers as :func:`stability_map` (for ``sensitivity = 0``, no T2) and as
    :func:`discrepancy_radius` one at a time (tests check both), but fast enough for a
    widget: the transition matrix is affine in alpha, ``A(alpha) = A(0) + alpha (A(1) - A(0))``,
    so each delay needs one stacked ``numpy.linalg.eigvals`` call over all the steps.
    """
    alphas = np.asarray(alphas, dtype=float)
    result = np.empty((len(taus), len(alphas)))
    for i, tau in enumerate(taus):
        at_zero = discrepancy_matrix(0.0, lam, int(tau), sensitivity, tau_b, gamma, momentum)
        slope = discrepancy_matrix(1.0, lam, int(tau), sensitivity, tau_b, gamma, momentum)
        slope -= at_zero
        stack = at_zero[None, :, :] + alphas[:, None, None] * slope[None, :, :]
        result[i] = np.max(np.abs(np.linalg.eigvals(stack)), axis=1)
    return result


def _check_delay(*taus) -> None:
    for tau in taus:
        if int(tau) != tau or tau < 0:
            raise ValueError(f"a delay must be a non-negative integer, got {tau!r}")
