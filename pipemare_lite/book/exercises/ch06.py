"""Exercises of chapter 06, delayed gradients in theory.

- ``ex06_1`` ``delayed_gd(alpha, lam, tau, steps) -> list[float]``: the iterates
  ``w[0..steps]`` of ``w[t+1] = w[t] - alpha lam w[t-tau]`` on ``f(w) = lam w**2 / 2``,
  starting from ``w = 1`` with a constant past (``w[t] = 1`` for t < 0).
- ``ex06_2`` ``delayed_gd_coefficients(alpha, lam, tau, momentum) -> list[float]``: the
  characteristic polynomial of heavy-ball delayed GD, highest power first (a factor z more
  is accepted: it only adds a root at 0).
- ``ex06_3`` ``max_stable_step(tau, momentum) -> float``: the largest ``alpha * lam`` such
  that every smaller positive step is stable, within a relative 1e-4, for heavy-ball
  momentum ``0 < momentum < 1``. Without momentum the chapter prints the answer (the bound
  2 sin(pi / (2 (2 tau + 1))) just above the exercise), so no case has momentum 0: every
  case needs the search over the roots that the text has not done yet.

Each names the engine functions that compute its answer (``engine_answers``): an answer
that calls them is rejected, so the student writes the computation the chapter shows only
afterwards.
"""

from __future__ import annotations

import random

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import compare_close, compare_iterates, compare_polynomial
from pipemare_lite.book.exercises.exercise import Exercise

_THEORY = "pipemare_lite.analysis.theory."
#: Every function of the engine that simulates the recurrence or finds its roots.
_SIMULATORS = tuple(_THEORY + name for name in (
    "simulate_delayed_gd", "simulate_discrepancy_gd", "discrepancy_matrix"))
_POLYNOMIALS = tuple(_THEORY + name for name in (
    "characteristic_polynomial", "discrepancy_polynomial", "discrepancy_matrix",
    "characteristic_roots", "discrepancy_roots"))
# The roots, the spectral radius and the stability map are the chapter's measuring
# instruments, shown before ex06_3: a student may search with them; what answers the
# exercise outright (the search itself, or a bound) stays out of reach.
_STABILITY = tuple(_THEORY + name for name in (
    "largest_stable_step", "stability_bound", "stability_grid", "discrepancy_radius",
    "discrepancy_roots", "discrepancy_stability_map", "t2_stable_steps", "t1_step_limit",
    "momentum_stability_bound"))


def _iteration_cases() -> list[dict]:
    # representative first: converging with a delay, then diverging, then the edges
    fixed = [(0.3, 1.0, 4, 40), (0.3, 1.0, 8, 60), (0.5, 1.0, 2, 3), (0.5, 2.0, 0, 10),
             (1.2, 1.0, 0, 10), (0.2, 3.0, 3, 30), (0.05, 1.0, 16, 80), (0.4, 1.0, 1, 0)]
    rng = random.Random(601)
    drawn = [(round(rng.uniform(0.05, 0.9), 3), round(rng.uniform(0.5, 2.0), 2),
              rng.randint(0, 9), rng.randint(5, 50)) for _ in range(3)]
    return [{"alpha": a, "lam": lam, "tau": t, "steps": n} for a, lam, t, n in fixed + drawn]


def _polynomial_cases() -> list[dict]:
    fixed = [(0.3, 1.0, 4, 0.0), (0.2, 1.5, 3, 0.5), (0.3, 2.0, 0, 0.0), (0.5, 1.0, 0, 0.9),
             (0.2, 1.0, 1, 0.5), (0.1, 1.0, 2, 0.9), (0.25, 1.0, 1, 0.0)]
    rng = random.Random(602)
    drawn = [(round(rng.uniform(0.05, 0.9), 3), round(rng.uniform(0.5, 2.0), 2),
              rng.randint(0, 8), rng.choice([0.0, 0.3, 0.6, 0.9])) for _ in range(3)]
    return [{"alpha": a, "lam": lam, "tau": t, "momentum": m} for a, lam, t, m in fixed + drawn]


def _stable_step_cases() -> list[dict]:
    # tau = 5 with m = 0.9 first: the chapter asks for exactly this; no momentum 0 (its answer
    # is the bound printed above the exercise), small and large momentum, tau = 0
    fixed = [(5, 0.9), (5, 0.5), (2, 0.3), (1, 0.5), (8, 0.5), (0, 0.9), (3, 0.9), (0, 0.2)]
    rng = random.Random(603)
    drawn = [(rng.randint(0, 10), rng.choice([0.1, 0.3, 0.6, 0.8])) for _ in range(2)]
    return [{"tau": t, "momentum": m} for t, m in fixed + drawn]


EXERCISES = [
    Exercise(
        id="ex06_1",
        chapter=6,
        title="Delayed gradient descent on a quadratic",
        function_name="delayed_gd",
        signature="delayed_gd(alpha, lam, tau, steps) -> list[float]",
        hint=(
            "Write the recurrence w[t+1] = w[t] - alpha lam w[t - tau] out for t = 0: which past "
            "weights does it need, and what are they before training starts?",
            "Keep the whole history in a list that starts with enough 1.0s for the past; "
            "the gradient at update t is lam times the weight tau updates before t, and the "
            "answer has steps + 1 values, w[0] = 1 included.",
            "The whole method: start the history with tau + 1 copies of 1.0 (the constant past "
            "and w[0]). For each of the steps updates append the last weight minus alpha * lam "
            "times the weight tau places before the last one. Return the history without the tau "
            "extra values at its start: w[0] .. w[steps], steps + 1 values.",
        ),
        cases=_iteration_cases,
        reference=references.delayed_gd_iterates,
        compare=compare_iterates,
        engine_answers=_SIMULATORS,
    ),
    Exercise(
        id="ex06_2",
        chapter=6,
        title="The characteristic polynomial of (heavy-ball) delayed GD",
        function_name="delayed_gd_coefficients",
        signature="delayed_gd_coefficients(alpha, lam, tau, momentum) -> list[float]",
        hint=(
            "Put w[t] = z**t into w[t+1] = (1+m) w[t] - m w[t-1] - alpha lam w[t-tau] and "
            "multiply by the power of z that clears the most negative exponent; list the "
            "coefficients from the highest power down, zeros included for missing powers "
            "(with tau = 0 two terms share a power).",
            "The whole method: substituting z**t turns the recurrence into z**(t+1) = (1 + m) "
            "z**t - m z**(t-1) - alpha lam z**(t-tau); multiply by z**(tau+1-t) so that the "
            "lowest power is z**0 or higher, and move everything to one side. List the "
            "coefficients of the powers from the highest, tau + 2, down to z**0, zeros included "
            "for powers that do not occur: 1, then -(1 + m), then m, then zeros, with alpha lam "
            "added to the coefficient of z**1 (with tau = 0 it lands on a power already used).",
        ),
        cases=_polynomial_cases,
        reference=references.delayed_gd_polynomial,
        compare=compare_polynomial,
        engine_answers=_POLYNOMIALS,
    ),
    Exercise(
        id="ex06_3",
        chapter=6,
        title="The largest stable step, with and without momentum",
        function_name="max_stable_step",
        signature="max_stable_step(tau, momentum) -> float",
        hint=(
            "Stable means every root of the characteristic polynomial has |z| < 1 (numpy.roots "
            "finds them). Scan alpha*lam upward from 0 for the first unstable step, then bisect "
            "between it and the last stable one; the bound 2 sin(...) holds only without "
            "momentum, which the check does not ask for.",
            "The whole method: write stable(x) as: the characteristic polynomial of delayed GD "
            "with alpha lam = x and the case's momentum (exercise 6.2's coefficients) has every "
            "root of modulus below 1. "
            "stable is true just above 0 and false by x = 4. Bisect between a stable low (0) and "
            "an unstable high (4): take the middle, keep the half whose ends still differ in "
            "stability, and stop when the interval is below about 1e-9; return the stable end.",
        ),
        cases=_stable_step_cases,
        reference=references.largest_stable_alpha_lam,
        compare=compare_close(1e-4),
        engine_answers=_STABILITY,
    ),
]
