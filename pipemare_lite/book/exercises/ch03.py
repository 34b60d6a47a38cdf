"""Exercises of chapter 03, 1F1B and activation memory.

- ``ex03_1`` ``one_f_one_b_order(P, M) -> list[list[str]]``: each rank's F/B actions in
  1F1B (warm-up forwards, one-forward-one-backward, cool-down backwards), equal to the
  engine's ``"1f1b"`` rows without ``U``. With M < P the warm-up is clamped to M.
- ``ex03_2`` ``peak_activations_1f1b(P, M) -> list[int]``: per stage, the most microbatches
  whose forward is done and whose backward is not (the simulator's ``peak_inflight``).
"""

from __future__ import annotations

import random

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import compare_int_list, compare_rows
from pipemare_lite.book.exercises.exercise import Exercise, Mistake


def _stage_and_microbatch_counts(seed: int) -> list[dict]:
    # (4, 2) and (3, 1): fewer microbatches than stages, where the warm-up is clamped
    fixed = [(4, 8), (3, 5), (1, 1), (1, 4), (2, 2), (4, 2), (3, 1)]
    rng = random.Random(seed)
    drawn = [(rng.randint(2, 6), rng.randint(1, 10)) for _ in range(3)]
    return [{"P": P, "M": M} for P, M in fixed + drawn]


def _one_f_one_b_rows(P: int, M: int, warmup_of) -> list[list[str]]:
    """1F1B rows with the warm-up of rank r given by ``warmup_of(P, M, r)`` (for mistakes)."""
    rows = []
    for r in range(P):
        warmup = max(0, min(warmup_of(P, M, r), M))
        row = [f"{r}F{m}" for m in range(warmup)]
        for k, m in enumerate(range(warmup, M)):
            row += [f"{r}F{m}", f"{r}B{k}"]
        rows.append(row + [f"{r}B{m}" for m in range(M - warmup, M)])
    return rows


def _newest_first_rows(P: int, M: int) -> list[list[str]]:
    """Known mistake: the steady state runs the backward of the newest microbatch in flight."""
    rows = []
    for r in range(P):
        warmup = min(P - 1 - r, M)
        row, in_flight = [f"{r}F{m}" for m in range(warmup)], list(range(warmup))
        for m in range(warmup, M):
            in_flight.append(m)
            row += [f"{r}F{m}", f"{r}B{in_flight.pop()}"]
        rows.append(row + [f"{r}B{m}" for m in in_flight])  # the cool-down, oldest first
    return rows


def _gpipe_rows(P: int, M: int) -> list[list[str]]:
    return [[f"{r}F{m}" for m in range(M)] + [f"{r}B{m}" for m in range(M)] for r in range(P)]


EXERCISES = [
    Exercise(
        id="ex03_1",
        chapter=3,
        title="The 1F1B order",
        function_name="one_f_one_b_order",
        signature="one_f_one_b_order(P, M) -> list[list[str]]",
        hint=(
            "Rank r starts with a warm-up of forwards (how many, for rank r? and if M is "
            "small?), then alternates one forward and one backward, then drains the rest.",
            "The whole method: rank r first runs a warm-up of forwards, P - 1 - r of them but "
            "never more than M. Then, while forwards remain, it alternates: the next forward, "
            "then the backward of the oldest microbatch whose backward has not run. When the "
            "forwards run out, it runs the remaining backwards in order of m. Backwards always go "
            "oldest first, microbatch 0 first.",
        ),
        cases=lambda: _stage_and_microbatch_counts(301),
        reference=lambda P, M: references.schedule_rows("1f1b", P, M),
        compare=compare_rows,
        points=2,
        mistakes=(
            Mistake("this is GPipe's order, all forwards first; 1F1B starts a backward as soon "
                    "as the warm-up is over", _gpipe_rows),
            Mistake("your warm-up has one forward too many on every rank",
                    lambda P, M: _one_f_one_b_rows(P, M, lambda P_, M_, r: P_ - r)),
            # the same rows come from a right warm-up followed by a steady state that runs
            # the backward before the forward, so the message names both ways to get there
            Mistake("your first backward comes one forward too early on every rank: either the "
                    "warm-up is one forward short, or the steady state runs the backward before "
                    "the next forward (each pair is the forward first, then the oldest backward)",
                    lambda P, M: _one_f_one_b_rows(P, M, lambda P_, M_, r: P_ - 2 - r)),
            Mistake("your steady state runs the backward of the newest microbatch in flight; "
                    "1F1B's runs the oldest (the one whose forward ran first)",
                    _newest_first_rows),
        ),
        engine_answers=(
            "pipemare_lite.schedules.builders.one_f_one_b.one_f_one_b",
            "pipemare_lite.schedules.builders.one_f_one_b.one_f_one_b_order",
            "pipemare_lite.schedules.builders.interleaved.interleaved",
        ),
    ),
    Exercise(
        id="ex03_2",
        chapter=3,
        title="Peak activations per stage under 1F1B",
        function_name="peak_activations_1f1b",
        signature="peak_activations_1f1b(P, M) -> list[int]",
        hint=(
            "Count, on each stage, the microbatches whose forward ran and whose backward has "
            "not: the warm-up decides the peak. Remember M may be smaller than P.",
            "The whole method: after its warm-up of P - 1 - s forwards, stage s runs one more "
            "forward before its first backward, so at that moment P - s microbatches are in "
            "flight, and from then on every new forward follows a backward, so the count never "
            "grows again. With fewer microbatches than that, all M are in flight at once: the "
            "peak of stage s is the smaller of P - s and M. One number per stage, stage 0 first.",
        ),
        cases=lambda: _stage_and_microbatch_counts(302),
        reference=lambda P, M: list(references.simulated_metrics("1f1b", P, M).peak_inflight),
        compare=compare_int_list,
        mistakes=(
            Mistake("P-1-s counts the warm-up forwards only; when stage s runs its first "
                    "backward, one more forward has been done",
                    lambda P, M: [max(0, min(P - 1 - s, M)) for s in range(P)]),
            Mistake("a stage can never hold more microbatches than the minibatch has (M < P)",
                    lambda P, M: [P - s for s in range(P)]),
            Mistake("this is GPipe's peak (all M on every stage); 1F1B frees activations "
                    "as its backwards run", lambda P, M: [M] * P),
        ),
        engine_answers=(
            "pipemare_lite.analysis.simulate.simulate",
            "pipemare_lite.analysis.formulas.peak_inflight_1f1b",
        ),
    ),
]
