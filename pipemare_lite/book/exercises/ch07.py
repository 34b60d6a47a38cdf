"""Exercises of chapter 07, asynchrony at fine granularity.

- ``ex07_1`` ``first_to_blow_up(lr, sharpness, delays) -> int | None``: treating every
  stage as chapter 06's quadratic (curvature ``sharpness[s]``, delay ``delays[s]``), the
  stage whose weights grow fastest, the largest spectral radius above 1; None when every
  stage is stable.
- ``ex07_2`` ``largest_stable_depth(step, num_microbatches) -> int``: the largest number of
  stages P of a lock-step asynchronous pipeline whose stage 0 (delay ``ceil((2P-1)/N)``)
  stays inside the stability bound at ``lr * lam = step``; 0 when even one stage is outside.

Both come before the engine's versions (:mod:`pipemare_lite.analysis.stage_stability`), which their
``engine_answers`` name; the bound and roots (:mod:`pipemare_lite.analysis.theory`) and
chapter 05's delay formula may be used. Numpy only: the checks import no torch.
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


def _depth_with(delay_of, bound_of=_bound):
    def answer(step, num_microbatches):
        P = 0
        while P < 100_000 and step < bound_of(delay_of(P + 1, num_microbatches)):
            P += 1
        return P

    return answer


def _async_delay(P, N):
    return math.ceil((2 * P - 1) / N)


_pipedream_delay_depth = _depth_with(lambda P, N: math.ceil((P - 1) / N))
_undivided_depth = _depth_with(lambda P, N: 2 * P - 1)
_approximate_depth = _depth_with(_async_delay, lambda tau: math.pi / (2 * tau + 1))


def _growth_cases() -> list[dict]:
    # first: one stage per layer of an 8-stage pipeline with N = 2, two stages outside; then
    # cases where the furthest-outside and the stalest stage are not the fastest-growing,
    # every stage inside, a single stage, and a stage without delay
    fixed = [
        (0.05, [9.6, 11.2, 5.6, 5.5, 5.6, 5.4, 4.8, 20.6], [8, 7, 6, 5, 4, 3, 2, 1]),
        (1.0, [0.3696, 1.2], [8, 1]),
        (0.1, [1.0, 1.0, 15.0], [6, 4, 1]),
        (0.01, [1.0, 1.0, 1.0, 1.0], [7, 5, 3, 1]),
        (0.5, [5.0], [1]),
        (0.1, [25.0, 1.0], [0, 3]),
        (0.05, [4.0, 8.0, 9.0, 2.0], [4, 3, 2, 1]),
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
    # its approximation
    fixed = [(0.25, 2), (0.25, 1), (0.05, 2), (0.6, 4), (1.2, 2), (0.99, 1), (0.1, 8), (0.285, 2)]
    # the boundary the text states: a step exactly at the bound is outside (stable means
    # strictly below). The bound 2 sin(pi / (2 (2 tau + 1))) is the same float however it is
    # written (pi over an integer, then sin, then times 2), so an answer that lets the step
    # reach the bound fails here: tau = 3 at P = 3 with N = 2, and at P = 2 with N = 1
    fixed += [(_exact_bound(3), 2), (_exact_bound(3), 1)]
    rng = random.Random(702)
    drawn = [(round(rng.uniform(0.03, 0.9), 3), rng.randint(1, 8)) for _ in range(4)]
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
            "bound), keep only the stages where it exceeds 1, and return None if there are none."
        ),
        cases=_growth_cases,
        reference=references.fastest_growing_stage,
        compare=compare_stage_or_none,
        mistakes=(
            Mistake("this is the stage furthest outside its bound (largest lr * lam / bound); "
                    "how far outside is not how fast it grows", _furthest_outside),
            Mistake("this is the stalest unstable stage; a fresher stage can grow faster",
                    _stalest_unstable),
        ),
        engine_answers=_STAGE_ANSWERS,
    ),
    Exercise(
        id="ex07_2",
        chapter=7,
        title="The deepest pipeline whose stalest stage is still stable",
        function_name="largest_stable_depth",
        signature="largest_stable_depth(step, num_microbatches) -> int",
        hint=(
            "Try P = 1, 2, 3, ... : stage 0 of a lock-step asynchronous pipeline is "
            "ceil((2P - 1) / N) updates stale, and it is stable while step is below chapter "
            "06's bound 2 sin(pi / (2 (2 tau + 1))) at that delay (strictly). Return the last "
            "P that passes (0 if P = 1 already fails)."
        ),
        cases=_depth_cases,
        reference=references.largest_stable_pipeline,
        compare=compare_int,
        mistakes=(
            Mistake("this uses PipeDream's delay ceil((P - 1) / N); the lock-step async "
                    "pipeline's stage 0 waits for the whole round trip", _pipedream_delay_depth),
            Mistake("this forgets that the delay counts updates: N microbatches make one",
                    _undivided_depth),
            Mistake("this uses the approximation pi / (2 tau + 1), slightly above the exact "
                    "bound", _approximate_depth),
        ),
        engine_answers=_DEPTH_ANSWERS,
    ),
]
