"""Exercises of chapter 02, GPipe and the bubble.

- ``ex02_1`` ``gpipe_order(P, M) -> list[list[str]]``: each rank's F/B actions in GPipe
  (all forwards, then all backwards), equal to the engine's ``"gpipe"`` rows without ``U``.
- ``ex02_2`` ``idle_fraction(P, M) -> float``: GPipe's idle fraction with P stages and M
  microbatches, as the engine's simulator measures it (default costs).
- ``ex02_3`` ``smallest_m_below(P, target) -> int``: the smallest M for which GPipe's idle
  fraction with P stages is strictly below ``target`` (the engine's simulator, in exact
  arithmetic). Until issue 18 this was a constant (M for P = 8 and 10%), compared by hash;
  one small integer falls to a brute force over hashes, or to bisection with ``check``'s
  "not below 10%" remarks, so it became a function checked on many (P, target) pairs, some
  of them exactly on the boundary. There a plain float loop, ``(P-1)/(M+P-1) < target``, is
  right: one correctly rounded division and the target's literal round to the same double
  whenever the fraction equals the decimal (and at these sizes they never meet otherwise).
  What floats get wrong is arithmetic that rounds twice: the closed form
  ``M > (P-1)(1-t)/t`` or one minus the utilization land on the wrong side of the first case
  (P = 8, 10 %: 63 instead of 64), and the check names that mistake. So does
  ``M > (P-1)/t - (P-1)``, right at 10 % but one short at (8, 7 %), a case of its own since
  a reader's answer of that form passed every other one.
"""

from __future__ import annotations

import random
from fractions import Fraction

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import compare_float, compare_int, compare_rows
from pipemare_lite.book.exercises.exercise import Exercise, Mistake


def _stage_and_microbatch_counts(seed: int) -> list[dict]:
    # a representative case first (check shows the first non-degenerate failure anyway)
    fixed = [(4, 4), (3, 2), (1, 1), (1, 3), (2, 1), (2, 5), (4, 9)]
    rng = random.Random(seed)
    drawn = [(rng.randint(2, 6), rng.randint(1, 8)) for _ in range(3)]
    return [{"P": P, "M": M} for P, M in fixed + drawn]


def _threshold_cases(seed: int) -> list[dict]:
    # (8, 0.1), (4, 0.2), (3, 0.5): some M gives exactly the target (7/70, 3/15, 2/4), so
    # "below" must be strict and exact; P = 1 never idles; (8, 0.07): 7 / 0.07 rounds to
    # just under 100, so the inequality solved as M > (P-1)/t - (P-1) lands one short
    # (a reader's answer that passed every other case, issue 45's second pass)
    fixed = [(8, 0.1), (4, 0.2), (3, 0.5), (16, 0.25), (1, 0.5), (6, 0.05), (8, 0.07)]
    rng = random.Random(seed)
    drawn = [(rng.randint(2, 12), rng.choice([0.05, 0.1, 0.15, 0.2, 0.3, 0.4])) for _ in range(4)]
    return [{"P": P, "target": target} for P, target in fixed + drawn]


def _exact(target: float) -> Fraction:
    """0.1 as the 1/10 the student means, not the float slightly above it."""
    return Fraction(repr(float(target)))


def _smallest_m(P: int, target: float, below) -> int:
    """The smallest M >= 1 with ``below(idle(P, M), target)``; idle falls as M grows."""
    high = 1
    while not below(references.exact_idle_fraction("gpipe", P, high), _exact(target)):
        high *= 2
    low = high // 2 + 1 if high > 1 else 1
    while low < high:  # bisect in (high/2, high]
        middle = (low + high) // 2
        if below(references.exact_idle_fraction("gpipe", P, middle), _exact(target)):
            high = middle
        else:
            low = middle + 1
    return high


def _at_most(P: int, target: float) -> int:
    """A known mistake: the smallest M with an idle fraction <= target (not strictly below)."""
    return _smallest_m(P, target, lambda idle, t: idle <= t)


def _solved_in_floats(P: int, target: float) -> int:
    """A known mistake: M > (P-1)(1-t)/t solved in floats (two roundings, then a floor)."""
    import math

    return max(1, math.floor((P - 1) * (1 - target) / target) + 1)


def _solved_by_division(P: int, target: float) -> int:
    """A known mistake: M > (P-1)/t - (P-1) solved in floats (7 / 0.07 is just under 100)."""
    import math

    return max(1, math.floor((P - 1) / target - (P - 1)) + 1)


def _one_minus_utilization(P: int, target: float) -> int:
    """A known mistake: 1 - M/(M+P-1) < target in floats (the subtraction rounds again)."""
    M = 1
    while not 1 - M / (M + P - 1) < target:
        M += 1
    return M


def _bubble_ratio_below(P: int, target: float) -> int:
    """A known mistake: the smallest M with (P-1)/M < target (the bubble ratio)."""
    M = 1
    while Fraction(P - 1, M) >= _exact(target):
        M += 1
    return M


EXERCISES = [
    Exercise(
        id="ex02_1",
        chapter=2,
        title="The GPipe order",
        function_name="gpipe_order",
        signature="gpipe_order(P, M) -> list[list[str]]",
        hint=(
            "One row per rank; rank r holds stage r. First every forward r F m for "
            "m = 0..M-1, then every backward: in which order of m does the engine run them?",
            "The whole method: for each rank r (it holds stage r), write the forwards of "
            "microbatches 0, 1, ..., M - 1 in that order, then the backwards. The backwards run "
            "in the same order of m as the forwards in the engine's GPipe (microbatch 0 first), "
            "each written r B m. One such list per rank, updates left out.",
        ),
        cases=lambda: _stage_and_microbatch_counts(201),
        reference=lambda P, M: references.schedule_rows("gpipe", P, M),
        compare=compare_rows,
        mistakes=(
            Mistake(
                "your backwards run from the last microbatch to the first; check the order "
                "the engine's rows above use",
                lambda P, M: [
                    [f"{r}F{m}" for m in range(M)] + [f"{r}B{m}" for m in reversed(range(M))]
                    for r in range(P)
                ],
            ),
            Mistake(
                "each forward is followed by its backward: that is one microbatch at a time, "
                "the naive schedule repeated, not GPipe",
                lambda P, M: [[a for m in range(M) for a in (f"{r}F{m}", f"{r}B{m}")]
                              for r in range(P)],
            ),
        ),
        engine_answers=(
            "pipemare_lite.schedules.builders.gpipe.gpipe",
            # 1F1B's order with a warm-up of M is GPipe's (a hostile pass scored with it)
            "pipemare_lite.schedules.builders.one_f_one_b.one_f_one_b_order",
        ),
    ),
    Exercise(
        id="ex02_2",
        chapter=2,
        title="GPipe's idle fraction",
        function_name="idle_fraction",
        signature="idle_fraction(P, M) -> float",
        hint=(
            "Idle fraction = idle time / (P x makespan). Count slots: how long until the last "
            "rank starts its first forward, and how long the last backward takes to drain back?",
            "The whole method: in unit slots (a forward and a backward of one stage each take one "
            "slot of their kind), every rank does M forwards and M backwards. The last rank "
            "starts its first forward only after P - 1 forward slots, and the first rank finishes "
            "its last backward P - 1 backward slots after the last rank's: the makespan is M + P "
            "- 1 slots of each kind, of which M are busy. The idle fraction is the idle part of "
            "that makespan: (makespan - busy) / makespan, the same on every rank.",
        ),
        cases=lambda: _stage_and_microbatch_counts(202),
        reference=lambda P, M: references.simulated_metrics("gpipe", P, M).idle_fraction,
        compare=compare_float,
        mistakes=(
            Mistake(
                "this is the bubble ratio, idle time / busy time; the idle fraction divides "
                "the idle time by all the device-time, P x makespan",
                lambda P, M: (P - 1) / M,
            ),
            Mistake(
                "this is the utilization, the busy share; the exercise asks for the idle share",
                lambda P, M: M / (M + P - 1),
            ),
        ),
        engine_answers=(
            "pipemare_lite.analysis.simulate.simulate",
            "pipemare_lite.analysis.simulate.metrics",
            "pipemare_lite.analysis.formulas.idle_fraction_gpipe",
            "pipemare_lite.analysis.formulas.utilization_gpipe",
            "pipemare_lite.analysis.formulas.makespan_gpipe",
            "pipemare_lite.analysis.formulas.bubble_ratio_gpipe",
            # the schedule explorer's helper computes the same fraction inline (hostile pass)
            "pipemare_lite.figures.widgets.schedule._no_flush",
            "pipemare_lite.analysis.formulas.idle_fraction_1f1b",
            "pipemare_lite.analysis.formulas.idle_fraction_interleaved",
        ),
    ),
    Exercise(
        id="ex02_3",
        chapter=2,
        title="How many microbatches for an idle fraction below a target",
        function_name="smallest_m_below",
        signature="smallest_m_below(P, target) -> int",
        hint=(
            "The idle fraction falls as M grows: search M = 1, 2, ... with your idle_fraction, "
            "or solve the inequality for M. Test the boundary case where the idle fraction "
            "equals the target: is it below? And if you solve for M in floats, does "
            "1 - 0.9 == 0.1?",
            "The whole method: compute the idle fraction for M = 1, 2, 3, ... (or solve idle(P, "
            "M) < target for M and round up) and return the first M where it is strictly below "
            "the target; a case sits exactly on the boundary, where equal is not below. The "
            "direct comparison (P - 1) / (M + P - 1) < target is safe in floats (one rounding "
            "on each side); anything that rounds twice, such as the solved form (P - 1)(1 - "
            "target) / target or 1 minus the utilization, is not: the float 1 - 0.9 is not "
            "0.1. Then compare exactly, with fractions.Fraction(str(target)) or in integers.",
        ),
        cases=lambda: _threshold_cases(203),
        reference=lambda P, target: _smallest_m(P, target, lambda idle, t: idle < t),
        compare=compare_int,
        points=2,
        mistakes=(
            Mistake(
                "your M gives an idle fraction exactly equal to the target on some case; "
                "'below' means strictly less",
                _at_most,
            ),
            Mistake(
                "your M is one too small on a case exactly on the boundary: a float formula "
                "that rounds twice (the solved inequality, or 1 minus the utilization; the "
                "float 1 - 0.9 is not 0.1) landed just past it; compare exactly",
                _solved_in_floats,
            ),
            Mistake(
                "your M is one too small on a case exactly on the boundary: the inequality "
                "solved for M in floats, (P-1)/target - (P-1), rounds the division before the "
                "floor (7 / 0.07 is 99.99999999999999 in floats); compare the idle fraction "
                "itself with the target, or compare exactly",
                _solved_by_division,
            ),
            Mistake(
                "your M is one too small on a case exactly on the boundary: a float formula "
                "that rounds twice (the solved inequality, or 1 minus the utilization; the "
                "float 1 - 0.9 is not 0.1) landed just past it; compare exactly",
                _one_minus_utilization,
            ),
            Mistake(
                "this solves (P-1)/M < target, the bubble ratio (idle / busy); the exercise "
                "asks for the idle fraction (idle / (P x makespan))",
                _bubble_ratio_below,
            ),
        ),
        engine_answers=(
            "pipemare_lite.analysis.formulas.microbatches_for_idle_below",
            "pipemare_lite.analysis.simulate.simulate",
        ),
    ),
]
