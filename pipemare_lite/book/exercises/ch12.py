"""Exercises of chapter 12, beyond PipeMare.

- ``ex12_1`` ``look_ahead_factor(mu, s) -> float``: how many of the last update's steps the
  momentum alone still adds over the next ``s`` updates, ``mu + mu**2 + ... + mu**s`` (0 for
  ``s = 0``): the scale of the Nesterov-style look-ahead
  (:mod:`pipemare_lite.methods.nesterov`).
- ``ex12_2`` ``smallest_accumulation(P, max_delay) -> int``: solved, not searched: the
  fewest microbatches per update N that keep stage 0 of a P-stage lock-step asynchronous
  pipeline at most ``max_delay`` updates stale (local accumulation as staleness control).
  The student writes the delay ``ceil((2P - 1) / N)`` and solves the inequality for N;
  cases with P up to 10**12, and a budget of ``max_lines`` lines per case, stop an answer
  that tries N = 1, 2, ...

The first answers the engine's :func:`pipemare_lite.methods.nesterov.look_ahead_factor`
(checking it imports torch); the second is compared with chapter 05's delay formula
(:func:`pipemare_lite.analysis.staleness.expected_forward_delay`) bisected over N; an answer
may call that formula too, but calling it N by N is the search the line budget stops.
Torch-free.
"""

from __future__ import annotations

import random

from pipemare_lite.book.exercises.compare import compare_close, compare_int
from pipemare_lite.book.exercises.exercise import Exercise, Mistake


def _look_ahead_reference(mu: float, s: int) -> float:
    from pipemare_lite.methods.nesterov import look_ahead_factor

    return look_ahead_factor(mu, s)


def _look_ahead_cases() -> list[dict]:
    # s = 0 and mu = 0 first (nothing to look ahead), mu = 1 (every step repeats: s), the
    # chapter's momentum, then seeded random ones
    fixed = [(0.9, 0), (0.0, 3), (1.0, 4), (0.9, 1), (0.9, 7), (0.5, 3), (0.99, 15)]
    rng = random.Random(1201)
    drawn = [(round(rng.uniform(0.1, 0.99), 3), rng.randint(1, 12)) for _ in range(5)]
    return [{"mu": mu, "s": s} for mu, s in fixed + drawn]


def _smallest_accumulation_reference(P: int, max_delay: int) -> int:
    """The engine's delay formula, bisected over N: stage 0's delay never grows with N, and
    N = 2P - 1 makes it 1, so the answer lies in 1 .. 2P - 1 (a bisection, so that the
    reference answers P = 10**12 too; the student's answer is a formula)."""
    from pipemare_lite.analysis.staleness import expected_forward_delay

    low, high = 1, 2 * P - 1
    while low < high:
        middle = (low + high) // 2
        if expected_forward_delay("async", P, middle, 0) <= max_delay:
            high = middle
        else:
            low = middle + 1
    return low


#: The lines of Python an answer to ex12_2 may run on one case: the formula takes one or two,
#: trying N one by one takes up to 2P - 1 iterations.
_ACCUMULATION_LINES = 200


def _accumulation_cases() -> list[dict]:
    # the chapter's P = 8 at several budgets, a budget of 1 (N >= 2P - 1), one stage, a
    # budget already met without accumulation; budgets that divide 2P - 1 (the delay may
    # equal the budget: "at most"); pipelines far too deep to try N one by one; then seeded
    # random ones, small and huge
    fixed = [(8, 8), (8, 4), (8, 2), (8, 1), (1, 1), (4, 7), (16, 3), (8, 5), (8, 3),
             (10**6, 1), (10**9, 7), (10**12, 999)]
    rng = random.Random(1202)
    drawn = [(rng.randint(2, 16), rng.randint(1, 6)) for _ in range(5)]
    drawn += [(int(10 ** rng.uniform(5, 12)), rng.randint(1, 1000)) for _ in range(3)]
    return [{"P": P, "max_delay": d} for P, d in fixed + drawn]


def _prediction_scale(mu, s):
    return float(s)


def _from_zero(mu, s):
    return sum(mu ** k for k in range(s))


def _last_only(mu, s):
    return mu ** s if s else 0.0


def _floor_accumulation(P, max_delay):
    return max(1, (2 * P - 1) // max_delay)


def _round_trip_2p(P, max_delay):
    # the same number as floor((2P - 1) / max_delay) + 1, the strict inequality's answer
    return -(-2 * P // max_delay)


EXERCISES = [
    Exercise(
        id="ex12_1",
        chapter=12,
        title="How far the momentum carries the weights in s updates",
        function_name="look_ahead_factor",
        signature="look_ahead_factor(mu, s) -> float",
        hint=(
            "With no new gradient, what happens to SGD's velocity at each update? Follow the "
            "weights one update at a time and measure each move in units of the last step.",
            "The whole method: the velocity is multiplied by mu at every update, so the k-th "
            "update from now moves the weights by mu**k times the last step. Add those moves "
            "for k = 1 .. s (none when s = 0, so the sum is 0); the current step, k = 0, is "
            "already applied and does not count.",
        ),
        cases=_look_ahead_cases,
        reference=_look_ahead_reference,
        compare=compare_close(1e-9),
        mistakes=(
            Mistake("this is weight prediction's s: it assumes the whole step repeats",
                    _prediction_scale),
            Mistake("this starts the sum at k = 0: the current step is already applied",
                    _from_zero),
            Mistake("this is only the s-th update's move, mu**s, not the sum of all s",
                    _last_only),
        ),
        needs_torch=True,
        engine_answers=("pipemare_lite.methods.nesterov.look_ahead_factor",),
    ),
    Exercise(
        id="ex12_2",
        chapter=12,
        title="Bounding staleness by accumulating microbatches",
        function_name="smallest_accumulation",
        signature="smallest_accumulation(P, max_delay) -> int",
        hint=(
            "Write stage 0's delay as a formula of P and N first: how many ticks apart are "
            "its forward and backward, and how many updates is that with N microbatches per "
            "update? Then ask which N keep it at most max_delay.",
            "The delay is ceil((2P - 1) / N) updates. For an integer d, ceil(x) <= d holds "
            "exactly when x <= d (not x < d): solve (2P - 1) / N <= max_delay for N.",
            "The whole method: (2P - 1) / N <= max_delay means N >= (2P - 1) / max_delay, so "
            "the fewest microbatches is that quotient rounded up (exact in integers: the "
            "ceiling of a division is minus the floor division of the negated numerator). It "
            "is never below 1, and it is 1 when the budget is already 2P - 1 or more. No loop "
            "over N: the checker asks about pipelines of up to 10**12 stages.",
        ),
        cases=_accumulation_cases,
        reference=_smallest_accumulation_reference,
        compare=compare_int,
        mistakes=(
            Mistake("this divides without rounding the delay up: a partial update still "
                    "counts as one", _floor_accumulation),
            Mistake("this is ceil(2P / max_delay), which is also what solving (2P - 1) / N < "
                    "max_delay gives: either a round trip of 2P ticks (stage 0's is 2P - 1) or "
                    "a strict inequality (the delay may equal the budget: at most max_delay)",
                    _round_trip_2p),
        ),
        max_lines=_ACCUMULATION_LINES,
    ),
]
