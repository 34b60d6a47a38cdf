"""The demo exercise of chapter 00 (how to use this book): try ``check()`` once.

- ``ex00_1`` ``gpipe_action_count(P, M) -> int``: how many forward and backward actions a
  GPipe schedule with P stages and M microbatches runs, over all ranks (the check counts
  them in the engine's ``"gpipe"`` schedule, leaving its updates out).
"""

from __future__ import annotations

import random

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import compare_int
from pipemare_lite.book.exercises.exercise import Exercise, Mistake


def _count_cases(seed: int) -> list[dict]:
    # the chapter's example first, then the edges, then cases drawn from ``seed`` (the
    # grader redraws these from its own secret: pipemare_lite.book.exercises.hidden)
    fixed = [(4, 8), (2, 3), (1, 1), (3, 5)]
    rng = random.Random(seed)
    drawn = [(rng.randint(2, 9), rng.randint(1, 16)) for _ in range(3)]
    return [{"P": P, "M": M} for P, M in fixed + drawn]


EXERCISES = [
    Exercise(
        id="ex00_1",
        chapter=0,
        title="Count the work in a GPipe schedule (a demo of check())",
        function_name="gpipe_action_count",
        signature="gpipe_action_count(P, M) -> int",
        hint=(
            "Take one rank and one microbatch: which actions does that microbatch cause on "
            "that rank? Then count over all ranks and all microbatches, leaving the updates U out.",
            "The whole method: for one rank and one microbatch, list the actions of the kinds F "
            "and B that rank runs for it (each kind once, since every rank holds one stage and "
            "every microbatch passes every stage going down and coming back). Multiply that count "
            "by the number of microbatches M and by the number of ranks P; leave the updates out.",
        ),
        cases=lambda: _count_cases(1),
        reference=lambda P, M: sum(len(row) for row in references.schedule_rows("gpipe", P, M)),
        compare=compare_int,
        mistakes=(
            Mistake("you counted one kind of action only: forwards or backwards",
                    lambda P, M: P * M),
            Mistake("you counted the updates too (U, one per rank); this exercise leaves them "
                    "out and counts only the forwards and backwards",
                    lambda P, M: 2 * P * M + P),
        ),
        engine_answers=(
            "pipemare_lite.schedules.builders.gpipe.gpipe",
        ),
    ),
]
