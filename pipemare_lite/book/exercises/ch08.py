"""Exercises of chapter 08, T1: learning-rate rescheduling.

- ``ex08_1`` ``t1_factor(update, tau, horizon) -> float``: the factor ``tau ** (-p_k)`` by
  which T1 multiplies the base learning rate of a stage with delay ``tau`` at update k,
  ``p_k = 1 - min(k / K, 1)``, and 1 when ``K = 0`` (T1 off). The chapter asks for it as a
  derivation (1/tau at update 0, 1 at K, the same ratio between consecutive updates) and
  prints the formula only after the exercise.
- ``ex08_2`` ``first_update_outside(lr, lam, tau, horizon) -> int | None``: with a constant
  base lr, the first update at which the stage's T1 step ``lr * factor``, times the
  curvature ``lam``, reaches the stability bound for its delay; None if it never does.

Graded against the engine (:mod:`pipemare_lite.analysis.stage_lr`, whose factor the engine's
``LRRescheduling`` uses). ``ex08_2`` may use the engine's factor (shown after ``ex08_1``) and
:func:`pipemare_lite.analysis.theory.stability_bound`. Torch-free.
"""

from __future__ import annotations

import math
import random

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import compare_float, compare_update_or_none
from pipemare_lite.book.exercises.exercise import Exercise, Mistake

_FACTOR_ANSWERS = tuple(f"pipemare_lite.analysis.{name}" for name in (
    "stage_lr.rescheduling_factor", "stage_lr.rescheduling_exponent", "stage_lr.stage_lrs",
    "theory.t1_step_sizes"))
_UNSTABLE_ANSWERS = ("pipemare_lite.analysis.stage_lr.first_unstable_update",)


def _bound(tau: int) -> float:
    return 2.0 * math.sin(math.pi / (2 * (2 * tau + 1)))


def _exponent(update, horizon):
    return 0.0 if horizon == 0 else 1.0 - min(update / horizon, 1.0)


def _inverted(update, tau, horizon):
    """Known mistake: the anneal run backwards, from the full lr down to lr / tau."""
    return float(tau) ** -(1.0 - _exponent(update, horizon)) if horizon else 1.0


def _unclamped(update, tau, horizon):
    """Known mistake: p_k = 1 - k / K without the min, so past K the factor exceeds 1."""
    return float(tau) ** -(1.0 - update / horizon) if horizon else 1.0


def _linear(update, tau, horizon):
    """Known mistake: the lr interpolated linearly from lr / tau to lr, not in the exponent."""
    done = 1.0 if horizon == 0 else min(update / horizon, 1.0)
    return 1.0 / tau + (1.0 - 1.0 / tau) * done


def _first_with(bound_of, factor_of, reaching_counts: bool = True):
    def answer(lr, lam, tau, horizon):
        def outside(step):
            return step >= bound_of(tau) if reaching_counts else step > bound_of(tau)

        return next((k for k in range(horizon + 1)
                     if outside(lr * lam * factor_of(k, tau, horizon))), None)

    return answer


def _factor(update, tau, horizon):
    return float(tau) ** -_exponent(update, horizon)


_approximate_bound = _first_with(lambda tau: math.pi / (2 * tau + 1), _factor)
_without_t1 = _first_with(_bound, lambda update, tau, horizon: 1.0)
_undelayed_bound = _first_with(lambda tau: _bound(0), _factor)
_strictly_past = _first_with(_bound, _factor, reaching_counts=False)  # a second-pass reader's


def _factor_cases() -> list[dict]:
    # the chapter's stage 0 (tau 8, K = the run's 168 updates) at its start, middle and end,
    # past the end, a stage without delay, T1 switched off, then seeded random ones
    fixed = [(0, 8, 168), (84, 8, 168), (42, 8, 168), (168, 8, 168), (200, 8, 168),
             (5, 1, 10), (3, 4, 0), (13, 16, 26), (7, 3, 7)]
    rng = random.Random(801)
    drawn = []
    for _ in range(4):
        horizon = rng.randint(1, 400)
        drawn.append((rng.randint(0, horizon + 20), rng.randint(1, 16), horizon))
    return [{"update": k, "tau": tau, "horizon": K} for k, tau, K in fixed + drawn]


def _unstable_cases() -> list[dict]:
    # the chapter's stage 0 at lr 0.1 and 0.05 with a curvature of 5, one that stays inside,
    # one outside even divided by tau, a stage with delay 1, T1 off, then random ones whose
    # crossing is not a near-tie
    fixed = [(0.1, 5.0, 8, 168), (0.05, 5.0, 8, 168), (0.05, 2.0, 8, 168), (0.5, 10.0, 4, 20),
             (0.3, 2.0, 3, 17), (0.6, 2.0, 1, 10), (0.1, 5.0, 8, 0), (0.1, 5.0, 8, 42)]
    # the boundary the text states (reaching the bound counts): a step that reaches it
    # exactly once the factor is back at 1 (update K), and with T1 off; lam = 1 and a
    # factor of 1 keep the product exact, so an answer testing ">" returns None here
    fixed += [(_bound(4), 1.0, 4, 20), (_bound(4), 1.0, 4, 0)]
    rng = random.Random(802)
    drawn = []
    while len(drawn) < 4:
        lr, lam = round(rng.uniform(0.01, 0.2), 3), round(rng.uniform(1.0, 12.0), 2)
        tau, horizon = rng.randint(2, 16), rng.randint(10, 300)
        ratio = lr * lam / _bound(tau)
        if 1.0 < ratio < tau:
            crossing = horizon * (1 - math.log(ratio) / math.log(tau))
            if abs(crossing - round(crossing)) > 1e-3:
                drawn.append((lr, lam, tau, horizon))
    return [{"lr": lr, "lam": lam, "tau": tau, "horizon": K} for lr, lam, tau, K in fixed + drawn]


EXERCISES = [
    Exercise(
        id="ex08_1",
        chapter=8,
        title="T1's factor: divide by the delay, then anneal back",
        function_name="t1_factor",
        signature="t1_factor(update, tau, horizon) -> float",
        hint=(
            "Call the ratio between consecutive updates r: K = horizon steps of r take the "
            "factor from 1/tau to 1, so r**K = tau. Write the factor at update k as a power "
            "of tau, and keep it at 1 from k = K on (with horizon 0, T1 is off: the factor "
            "is 1).",
            "The whole method: if horizon is 0, T1 is off and the factor is 1. Otherwise the "
            "exponent p is 1 - update / horizon for the updates before the horizon and 0 from "
            "update = horizon on, so it falls in a straight line from 1 and never goes below 0. "
            "The factor is tau raised to the power -p: 1 / tau at update 0, back to 1 at the "
            "horizon and after it.",
        ),
        cases=_factor_cases,
        reference=references.t1_factor,
        compare=compare_float,
        mistakes=(
            Mistake("this anneals the wrong way: T1 starts at lr / tau and ends at the full lr",
                    _inverted),
            Mistake("past update K the factor must stay 1; p never goes below 0", _unclamped),
            Mistake("this interpolates the learning rate linearly; T1 interpolates the "
                    "exponent p, so the factor changes geometrically", _linear),
        ),
        engine_answers=_FACTOR_ANSWERS,
    ),
    Exercise(
        id="ex08_2",
        chapter=8,
        title="When T1's anneal carries a stage out of the stable region",
        function_name="first_update_outside",
        signature="first_update_outside(lr, lam, tau, horizon) -> int | None",
        hint=(
            "Walk the updates k = 0, 1, ..., horizon: the stage's step is lr times T1's "
            "factor at k; compare step * lam with chapter 06's bound for delay tau (reaching "
            "it counts). After update K the factor stays 1, so if nothing has crossed by then "
            "nothing ever will: return None.",
            "The whole method: compute chapter 06's exact bound 2 sin(pi / (2 (2 tau + 1))) once. "
            "For k = 0, 1, ..., horizon, the step is lr times T1's factor at k times lam; return "
            "the first k where it is at least the bound (reaching it counts). If no k up to the "
            "horizon does, return None: from then on the factor is 1 and the step no longer "
            "changes.",
        ),
        cases=_unstable_cases,
        reference=references.t1_first_unstable_update,
        compare=compare_update_or_none,
        mistakes=(
            Mistake("this uses the approximation pi / (2 tau + 1), slightly above the exact "
                    "bound", _approximate_bound),
            Mistake("this ignores T1: the step is lr times T1's factor, not lr", _without_t1),
            Mistake("this uses the bound of a stage without delay; the stage's own delay tau "
                    "sets its bound", _undelayed_bound),
            Mistake("this waits for the step to pass the bound; reaching it counts (a step "
                    "exactly on the bound is not stable), so compare with >=", _strictly_past),
        ),
        engine_answers=_UNSTABLE_ANSWERS,
    ),
]
