"""Exercises of chapter 07, asynchrony at fine granularity.

- ``ex07_1`` ``first_to_blow_up(lr, sharpness, delays) -> int | None``: treating every
  stage as chapter 06's quadratic (curvature ``sharpness[s]``, delay ``delays[s]``), the
  stage whose weights grow fastest, the largest spectral radius above 1; None when every
  stage is stable.
- ``ex07_2`` ``largest_stable_depth(step, num_microbatches) -> int``: solved, not searched:
  the largest number of stages P of a lock-step asynchronous pipeline whose stage 0 (delay
  ``ceil((2P-1)/N)``) stays strictly inside the stability bound at ``lr * lam = step``; 0
  when even one stage is outside. The student inverts the bound for the largest delay and
  solves the delay for P; cases with steps so small that P runs into the millions, and a
  budget of ``max_lines`` lines per case, stop an answer that tries P = 1, 2, ...

Both come before the engine's versions (:mod:`pipemare_lite.analysis.stage_stability`), which their
``engine_answers`` name; the bound and roots (:mod:`pipemare_lite.analysis.theory`) and
chapter 05's delay formula may be used (in ex07_2 they can only check a formula: evaluating
them P by P is the search the line budget stops). Numpy only: the checks import no torch.
"""

from __future__ import annotations

import math
import random

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import compare_int, compare_stage_or_none
from pipemare_lite.book.exercises.exercise import Exercise, Mistake

_STAGES = "pipemare_lite.analysis.stage_stability."
_STAGE_ANSWERS = (_STAGES + "fastest_growing_stage", _STAGES + "stage_points")
_DEPTH_ANSWERS = (_STAGES + "largest_stable_pipeline",)
#: The lines of Python an answer to ex07_2 may run on one case: a derivation runs a dozen,
#: trying P one by one runs thousands on the small steps.
_DEPTH_LINES = 200


def _bound(tau: int) -> float:
    return 2.0 * math.sin(math.pi / (2 * (2 * tau + 1)))


def _radii(lr, sharpness, delays) -> list[float]:
    from pipemare_lite.analysis.theory import spectral_radius

    return [spectral_radius(lr, lam, tau) if lam > 0 else 1.0
            for lam, tau in zip(sharpness, delays)]


def _furthest_outside(lr, sharpness, delays):
    """Known mistake: the stage with the largest lr * lam / bound, not the fastest growth."""
    ratios = [lr * lam / _bound(tau) for lam, tau in zip(sharpness, delays)]
    best = max(ratios)
    return None if best < 1.0 else ratios.index(best)


def _stalest_unstable(lr, sharpness, delays):
    """Known mistake: the stalest stage among the unstable ones, whatever its growth."""
    unstable = [s for s, r in enumerate(_radii(lr, sharpness, delays)) if r > 1.0]
    return max(unstable, key=lambda s: (delays[s], -s)) if unstable else None


def _tie_to_higher(lr, sharpness, delays):
    """Known mistake: the fastest-growing stage, but an exact tie goes to the higher stage."""
    radii = _radii(lr, sharpness, delays)
    best = max(radii)
    return None if best <= 1.0 else max(s for s, r in enumerate(radii) if r == best)


def _crossing(step: float) -> float:
    """The delay x (a real number) at which the exact bound equals ``step``."""
    return (math.pi / (2 * math.asin(step / 2)) - 1) / 2 if step < 2 else -0.5


def _largest_delay(step, bound=_bound, crossing=_crossing,
                   inside=lambda step, bound: step < bound) -> int:
    """The largest delay tau >= 0 with ``inside(step, bound(tau))``, -1 when none: the
    integer below the crossing, moved by one where rounding put it on the wrong side (the
    mistakes below are formulas too: a search would be stopped on the small steps)."""
    tau = max(-1, math.ceil(crossing(step)) - 1)
    while tau >= 0 and not inside(step, bound(tau)):
        tau -= 1
    while inside(step, bound(tau + 1)):
        tau += 1
    return tau


def _depth_with(stages_for_delay, bound=_bound, crossing=_crossing,
                inside=lambda step, bound: step < bound):
    """An answer to ex07_2 from a rule for the largest delay and one for P given it."""
    def answer(step, num_microbatches):
        tau = _largest_delay(step, bound, crossing, inside)
        return 0 if tau < 0 else max(0, stages_for_delay(tau, num_microbatches))

    return answer


def _async_delay(P, N):
    return math.ceil((2 * P - 1) / N)


# PipeDream's delay ceil((P - 1) / N) <= tau  iff  P <= N tau + 1
_pipedream_delay_depth = _depth_with(lambda tau, N: N * tau + 1)
# the delay counted in microbatches: 2P - 1 <= tau
_undivided_depth = _depth_with(lambda tau, N: (tau + 1) // 2)
# the ceiling dropped with a strict inequality: 2P - 1 < N tau
_strict_ceiling_depth = _depth_with(lambda tau, N: N * tau // 2)
_approximate_depth = _depth_with(lambda tau, N: (N * tau + 1) // 2,
                                 lambda tau: math.pi / (2 * tau + 1),
                                 lambda step: (math.pi / step - 1) / 2)
_reaching_depth = _depth_with(lambda tau, N: (N * tau + 1) // 2,
                              inside=lambda step, bound: step <= bound)


def _growth_cases() -> list[dict]:
    # first: one stage per layer of an 8-stage pipeline with N = 2, two stages outside; then
    # cases where the furthest-outside and the stalest stage are not the fastest-growing,
    # every stage inside, a single stage, a stage without delay, and two exact ties
    fixed = [
        (0.05, [9.6, 11.2, 5.6, 5.5, 5.6, 5.4, 4.8, 20.6], [8, 7, 6, 5, 4, 3, 2, 1]),
        (1.0, [0.3696, 1.2], [8, 1]),
        (0.1, [1.0, 1.0, 15.0], [6, 4, 1]),
        (0.01, [1.0, 1.0, 1.0, 1.0], [7, 5, 3, 1]),
        (0.5, [5.0], [1]),
        (0.1, [25.0, 1.0], [0, 3]),
        (0.05, [4.0, 8.0, 9.0, 2.0], [4, 3, 2, 1]),
        # exact ties (the same curvature and delay give the same radius, bit for bit): the
        # stated rule gives the lower stage, so an answer that breaks ties upwards fails
        (0.1, [15.0, 1.0, 15.0], [3, 6, 3]),
        (0.05, [2.0, 12.0, 3.0, 12.0], [5, 4, 2, 4]),
    ]
    rng = random.Random(701)
    drawn = []
    while len(drawn) < 4:
        P, N = rng.randint(2, 8), rng.randint(1, 4)
        delays = [_async_delay(P - s, N) for s in range(P)]
        sharpness = [round(rng.uniform(0.5, 20.0), 2) for _ in range(P)]
        lr = round(rng.uniform(0.01, 0.1), 3)
        radii = sorted((r for r in _radii(lr, sharpness, delays) if r > 1.0), reverse=True)
        if radii and (len(radii) == 1 or radii[0] - radii[1] > 1e-4):  # no near ties
            drawn.append((lr, sharpness, delays))
    return [{"lr": lr, "sharpness": lam, "delays": tau} for lr, lam, tau in fixed + drawn]


def _exact_bound(tau: int) -> float:
    """Chapter 06's stability bound at delay ``tau``, as the engine computes it."""
    return 2.0 * math.sin(math.pi / (2 * (2 * tau + 1)))


def _depth_cases() -> list[dict]:
    # first: the chapter's setting (N = 2), then N = 1, a small step, one stage too many
    # already, a step just inside one stage, many microbatches, one between the bound and
    # its approximation, and steps so small that the answer is in the thousands and millions
    # (a formula answers them in a few lines; trying P = 1, 2, ... is stopped)
    fixed = [(0.25, 2), (0.25, 1), (0.05, 2), (0.6, 4), (1.2, 2), (0.99, 1), (0.1, 8), (0.285, 2),
             (0.002, 3), (1e-4, 2), (3e-6, 8)]
    # the boundary the text states: a step exactly at the bound is outside (stable means
    # strictly below). The bound 2 sin(pi / (2 (2 tau + 1))) is the same float however it is
    # written (pi over an integer, then sin, then times 2), so an answer that lets the step
    # reach the bound fails here: tau = 3 at P = 3 with N = 2, and at P = 2 with N = 1
    fixed += [(_exact_bound(3), 2), (_exact_bound(3), 1)]
    rng = random.Random(702)
    drawn = [(round(rng.uniform(0.03, 0.9), 3), rng.randint(1, 8)) for _ in range(4)]
    drawn += [(float(f"{10 ** -rng.uniform(3, 7):.3g}"), rng.randint(1, 64)) for _ in range(3)]
    return [{"step": step, "num_microbatches": n} for step, n in fixed + drawn]


EXERCISES = [
    Exercise(
        id="ex07_1",
        chapter=7,
        title="Which stage blows up first: the fastest-growing quadratic",
        function_name="first_to_blow_up",
        signature="first_to_blow_up(lr, sharpness, delays) -> int | None",
        hint=(
            "Each stage s is chapter 06's recurrence w[t+1] = w[t] - lr * sharpness[s] * "
            "w[t - delays[s]]: its weights grow per update by the largest |root| of its "
            "characteristic polynomial. Compare those growth factors (not the distance to the "
            "bound), keep only the stages where it exceeds 1, and return None if there are none.",
            "The whole method: for each stage s, build chapter 06's characteristic polynomial for "
            "delay delays[s] and step lr * sharpness[s], take the largest modulus of its roots (1 "
            "for a stage without curvature), and keep the stages where it is above 1. Return the "
            "one with the largest growth factor, the lower stage on a tie, or None when no stage "
            "is left.",
        ),
        cases=_growth_cases,
        reference=references.fastest_growing_stage,
        compare=compare_stage_or_none,
        mistakes=(
            Mistake("this is the stage furthest outside its bound (largest lr * lam / bound); "
                    "how far outside is not how fast it grows", _furthest_outside),
            Mistake("this is the stalest unstable stage; a fresher stage can grow faster",
                    _stalest_unstable),
            Mistake("two stages grow exactly as fast here: the rule gives the tie to the "
                    "lower stage", _tie_to_higher),
        ),
        engine_answers=_STAGE_ANSWERS,
    ),
    Exercise(
        id="ex07_2",
        chapter=7,
        title="The deepest pipeline whose stalest stage is still stable, solved for P",
        function_name="largest_stable_depth",
        signature="largest_stable_depth(step, num_microbatches) -> int",
        hint=(
            "Work backwards in two steps. First: how stale may stage 0 be at this step? The "
            "bound falls as the delay grows, so the stable delays are 0, 1, ..., tau_max; "
            "find tau_max. Second: which P give stage 0 a delay of at most tau_max?",
            "Step 1: step < 2 sin(pi / (2 (2 tau + 1))) is, with asin applied to both sides "
            "(all angles are in [0, pi/2]), 2 tau + 1 < pi / (2 asin(step / 2)). Step 2: "
            "ceil((2P - 1) / N) <= tau_max holds exactly when (2P - 1) / N <= tau_max, since "
            "tau_max is an integer.",
            "The whole method: if step >= 2, return 0. Otherwise tau_max is the largest integer "
            "strictly below (pi / (2 asin(step / 2)) - 1) / 2: ceil of that, minus 1. Floating "
            "point can land a step that sits exactly on a bound a hair on the wrong side, so "
            "check tau_max against the bound itself (step must be strictly below the bound at "
            "tau_max, and not below the bound at tau_max + 1) and move it by one if not. Then "
            "2P - 1 <= N tau_max gives the largest P as the floor of (N tau_max + 1) / 2, which "
            "is 0 when tau_max is 0. No loop over P: the checker asks about steps where P is "
            "in the millions.",
        ),
        cases=_depth_cases,
        reference=references.largest_stable_pipeline,
        compare=compare_int,
        mistakes=(
            Mistake("this uses PipeDream's delay ceil((P - 1) / N); the lock-step async "
                    "pipeline's stage 0 waits for the whole round trip", _pipedream_delay_depth),
            Mistake("this forgets that the delay counts updates: N microbatches make one",
                    _undivided_depth),
            Mistake("this drops the ceiling with a strict inequality, (2P - 1) / N < tau; the "
                    "delay may equal the largest stable delay", _strict_ceiling_depth),
            Mistake("this uses the approximation pi / (2 tau + 1), slightly above the exact "
                    "bound", _approximate_depth),
            Mistake("this lets the step reach the bound; stable means strictly below it",
                    _reaching_depth),
        ),
        engine_answers=_DEPTH_ANSWERS,
        max_lines=_DEPTH_LINES,
    ),
]
