"""Exercises of chapter 02, GPipe and the bubble.

- ``ex02_1`` ``gpipe_order(P, M) -> list[list[str]]``: each rank's F/B actions in GPipe
  (all forwards, then all backwards), equal to the engine's ``"gpipe"`` rows without ``U``.
- ``ex02_2`` ``idle_fraction(P, M) -> float``: GPipe's idle fraction with P stages and M
  microbatches, as the engine's simulator measures it (default costs).
- ``ex02_3`` constant ``M_FOR_10_PERCENT``: the smallest M for which GPipe's idle fraction
  with P = 8 is below 10% (hash-checked).
"""

from __future__ import annotations

import random
from fractions import Fraction

from pipemare_lite.exercises import references
from pipemare_lite.exercises.compare import compare_float, compare_rows
from pipemare_lite.exercises.exercise import Exercise


def _stage_and_microbatch_counts(seed: int) -> list[dict]:
    fixed = [(1, 1), (1, 3), (2, 1), (3, 2), (4, 4), (2, 5), (4, 9)]
    rng = random.Random(seed)
    drawn = [(rng.randint(2, 6), rng.randint(1, 8)) for _ in range(3)]
    return [{"P": P, "M": M} for P, M in fixed + drawn]


def _diagnose_m_for_10_percent(value) -> str | None:
    """Say what GPipe's idle fraction is at the student's M, so they can see which way to go."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"M_FOR_10_PERCENT should be a positive int (got {value!r})."
    if value > 10_000:
        return f"M={value} is far more than needed."
    idle = references.exact_idle_fraction("gpipe", 8, value)
    if idle >= Fraction(1, 10):
        return (
            f"With P=8 and M={value} the simulator measures an idle fraction of "
            f"{float(idle):.1%}: not below 10%."
        )
    return f"With M={value} the idle fraction is below 10%, but is it the smallest such M?"


EXERCISES = [
    Exercise(
        id="ex02_1",
        chapter=2,
        title="The GPipe order",
        function_name="gpipe_order",
        signature="gpipe_order(P, M) -> list[list[str]]",
        hint=(
            "One row per rank; rank r holds stage r. First every forward r F m for "
            "m = 0..M-1, then every backward: in which order of m does the engine run them?"
        ),
        cases=lambda: _stage_and_microbatch_counts(201),
        reference=lambda P, M: references.schedule_rows("gpipe", P, M),
        compare=compare_rows,
        engine_answers=(
            "pipemare_lite.schedules.gpipe.gpipe",
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
            "rank starts its first forward, and how long the last backward takes to drain back?"
        ),
        cases=lambda: _stage_and_microbatch_counts(202),
        reference=lambda P, M: references.simulated_metrics("gpipe", P, M).idle_fraction,
        compare=compare_float,
        engine_answers=(
            "pipemare_lite.simulate.simulate",
            "pipemare_lite.simulate.metrics",
            "pipemare_lite.formulas.idle_fraction_gpipe",
            "pipemare_lite.formulas.utilization_gpipe",
            "pipemare_lite.formulas.makespan_gpipe",
        ),
    ),
    Exercise(
        id="ex02_3",
        chapter=2,
        title="How many microbatches for an idle fraction below 10% (P = 8)",
        function_name="M_FOR_10_PERCENT",
        signature="M_FOR_10_PERCENT: int",
        hint="Solve idle_fraction(8, M) < 0.1 for M, or try values with your idle_fraction.",
        # sha256("ex02_3:<answer>"), see pipemare_lite.exercises.hashing
        answer_hash="34dc7991aa720b45b006d94067a6b7f3c39999a3b9d3ee10d45e4624cbaddf0b",
        diagnose=_diagnose_m_for_10_percent,
        engine_answers=(
            "pipemare_lite.formulas.microbatches_for_idle_below",
            "pipemare_lite.simulate.simulate",
        ),
    ),
]
