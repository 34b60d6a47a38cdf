"""Exercises of chapter 01, naive model parallelism: one batch in flight.

- ``ex01_1`` ``naive_order(P) -> list[list[str]]``: the F/B actions of each rank for one
  microbatch, e.g. rank 0: ``["0F0", "0B0"]`` (the engine's ``"naive"`` schedule without
  its ``U`` actions).
- ``ex01_2`` ``naive_utilization(stage_costs) -> list[float]``: per rank, the fraction of
  the time it computes when one batch passes through stages of unequal cost (stage r's
  forward and backward cost ``stage_costs[r]`` times a unit stage's), as the engine's
  simulator measures it. Chapter 00 already says that equal stages give 1/P each, so the
  exercise asks for the step beyond it: each rank's share of one chain of work (equal
  stages are one case among several, never the first).
- ``ex01_3`` ``naive_start_times(P, F, B) -> list[list[float]]``: per rank, when its forward
  and its backward start in the naive schedule with one microbatch, a forward costing F and
  a backward B (the simulator's timeline): predict the timeline before seeing it.
"""

from __future__ import annotations

import random

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import (
    compare_float_list,
    compare_float_rows,
    compare_rows,
)
from pipemare_lite.book.exercises.exercise import Exercise, Mistake


def _stage_counts(seed: int, fixed: list[int]) -> list[dict]:
    rng = random.Random(seed)
    return [{"P": P} for P in fixed] + [{"P": rng.randint(2, 16)} for _ in range(2)]


def _stage_cost_cases(seed: int) -> list[dict]:
    # unequal first (1/P each is chapter 00's answer for equal stages), then one stage, two,
    # equal stages, halves; then lists drawn from ``seed``
    fixed = [[1.0, 2.0, 1.0, 1.0], [1.0], [3.0, 1.0], [1.0, 1.0, 1.0], [0.5, 1.0, 1.5, 2.0, 1.0]]
    rng = random.Random(seed)
    drawn = [[rng.choice([0.5, 1.0, 1.5, 2.0, 3.0]) for _ in range(rng.randint(2, 8))]
             for _ in range(3)]
    return [{"stage_costs": costs} for costs in fixed + drawn]


def _timing_cases(seed: int) -> list[dict]:
    fixed = [(4, 1.0, 2.0), (3, 1.5, 2.5), (1, 1.0, 2.0), (2, 1.0, 1.0), (5, 2.0, 3.0)]
    rng = random.Random(seed)
    drawn = [(rng.randint(2, 8), float(rng.randint(1, 4)), float(rng.randint(1, 6)))
             for _ in range(3)]
    return [{"P": P, "F": F, "B": B} for P, F, B in fixed + drawn]


def _starts(P, F, B, backward_hop, first_backward) -> list[list[float]]:
    """Start times with the backward of the last stage at ``first_backward`` and each hop
    back costing ``backward_hop``: the shape of the right answer and of two mistakes."""
    return [[r * F, first_backward + (P - 1 - r) * backward_hop] for r in range(P)]


def _backward_first(P: int) -> list[list[str]]:
    return [[f"{r}B0", f"{r}F0"] for r in range(P)]


EXERCISES = [
    Exercise(
        id="ex01_1",
        chapter=1,
        title="The order of work in naive model parallelism",
        function_name="naive_order",
        signature="naive_order(P) -> list[list[str]]",
        hint=(
            "One row per rank, in the notation '{stage}{F|B}{microbatch}' of the rows printed "
            "in the chapter; updates left out. Which actions does the single microbatch cause "
            "on rank r, and which of them needs the other to be done first?",
            "The whole method: rank r holds stage r and sees the single microbatch 0 twice: its "
            "forward on the way down and its backward on the way back up. A backward needs the "
            "forward of the same stage, so the forward comes first in the row. Build, for each r "
            "from 0 to P - 1, the row of those two action strings, r F 0 then r B 0 written in "
            "the chapter's notation.",
        ),
        cases=lambda: _stage_counts(102, [4, 1, 2, 3]),
        reference=lambda P: references.schedule_rows("naive", P, 1),
        compare=compare_rows,
        mistakes=(
            Mistake("a backward reads what its forward saved, so on every rank it comes "
                    "after the forward", _backward_first),
        ),
        engine_answers=(
            "pipemare_lite.schedules.builders.naive.naive",
        ),
    ),
    Exercise(
        id="ex01_2",
        chapter=1,
        title="Utilization of naive model parallelism with unequal stages",
        function_name="naive_utilization",
        signature="naive_utilization(stage_costs) -> list[float]",
        hint=(
            "With one batch in flight only one device computes at any moment. How long is the "
            "whole run, and how much of it is rank r's own work?",
            "The whole method: with a single batch the stages work strictly one after another, "
            "forward down the pipeline and backward back up, so the run lasts as long as all "
            "ranks' work put end to end: the sum over every stage of its forward and backward. "
            "Rank r is busy for its own stage's forward and backward only, so its utilization "
            "is its stage's cost divided by the sum of all stages' costs (the unit forward and "
            "backward costs cancel). One number per rank, rank 0 first.",
        ),
        cases=lambda: _stage_cost_cases(101),
        reference=references.naive_utilization_per_rank,
        compare=compare_float_list,
        mistakes=(
            Mistake("every rank gets the same share here; that holds for equal stages only: "
                    "a slower stage keeps its rank busy longer",
                    lambda stage_costs: [1 / len(stage_costs)] * len(stage_costs)),
            Mistake("this is each rank's idle share; the exercise asks for the share of time "
                    "a rank computes",
                    lambda stage_costs: [1 - c / sum(stage_costs) for c in stage_costs]),
            Mistake("you divided by the slowest stage's cost; the run lasts as long as all "
                    "stages' work put end to end",
                    lambda stage_costs: [c / max(stage_costs) for c in stage_costs]),
        ),
        engine_answers=(
            "pipemare_lite.analysis.simulate.simulate",
            "pipemare_lite.analysis.simulate.simulate_step_by_step",
            "pipemare_lite.analysis.simulate.metrics",
            "pipemare_lite.analysis.formulas.idle_fraction_naive",
            "pipemare_lite.analysis.formulas.idle_fraction_gpipe",
            "pipemare_lite.analysis.formulas.idle_fraction_1f1b",
            "pipemare_lite.analysis.formulas.bubble_ratio_gpipe",
            "pipemare_lite.analysis.formulas.utilization_gpipe",
        ),
    ),
    Exercise(
        id="ex01_3",
        chapter=1,
        title="Predict the naive schedule's timeline",
        function_name="naive_start_times",
        signature="naive_start_times(P, F, B) -> list[list[float]]",
        hint=(
            "A rank starts an action when the rank is free and what the action needs is done. "
            "Follow microbatch 0 down the stages (what does stage r's forward wait for?), "
            "then back up from the last stage (what does stage r's backward wait for?).",
            "The whole method: the forward of stage r cannot start before the forwards of stages "
            "0 .. r - 1 are done, one after another, so it starts at r times F. The last stage's "
            "backward starts as soon as all P forwards are done, at P times F; each backward "
            "above it then waits for the one below, so stage r's backward starts after the P - 1 "
            "- r backwards of the stages below it: P times F plus (P - 1 - r) times B. Return, "
            "per rank, the pair [forward start, backward start].",
        ),
        cases=lambda: _timing_cases(103),
        reference=lambda P, F, B: references.start_times("naive", P, 1, F, B),
        compare=compare_float_rows,
        points=2,
        mistakes=(
            Mistake(
                "your backwards move up the stages one forward-cost apart; each hop back is "
                "one backward: stage r+1's backward must end before stage r's starts",
                lambda P, F, B: _starts(P, F, B, F, P * F),
            ),
            Mistake(
                "the last stage's backward cannot start before its forward has ended",
                lambda P, F, B: _starts(P, F, B, B, (P - 1) * F),
            ),
        ),
        engine_answers=(
            "pipemare_lite.analysis.simulate.simulate",
            "pipemare_lite.analysis.simulate.simulate_step_by_step",
            # the second simulator (DualPipe's rule) times a naive schedule the same way: a
            # hostile pass scored 2 points through it (issue 46)
            "pipemare_lite.analysis.overlap.simulate_overlapped",
        ),
    ),
]
