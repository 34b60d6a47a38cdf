"""The demo exercise of chapter 00 (how to use this book): try ``check()`` once.

- ``ex00_1`` ``gpipe_action_count(P, M) -> int``: how many forward and backward actions a
  GPipe schedule with P stages and M microbatches runs, over all ranks (the check counts
  them in the engine's ``"gpipe"`` schedule; updates are not counted).
"""

from __future__ import annotations

from pipemare_lite.exercises import references
from pipemare_lite.exercises.compare import compare_int
from pipemare_lite.exercises.exercise import Exercise

EXERCISES = [
    Exercise(
        id="ex00_1",
        chapter=0,
        title="Count the work in a GPipe schedule (a demo of check())",
        function_name="gpipe_action_count",
        signature="gpipe_action_count(P, M) -> int",
        hint="Every microbatch needs one forward and one backward on every stage.",
        cases=lambda: [{"P": P, "M": M} for P, M in [(1, 1), (2, 3), (4, 8), (3, 5)]],
        reference=lambda P, M: sum(len(row) for row in references.schedule_rows("gpipe", P, M)),
        compare=compare_int,
        engine_answers=(
            "pipemare_lite.schedules.gpipe.gpipe",
        ),
    ),
]
