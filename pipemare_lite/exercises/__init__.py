"""Exercises with instant feedback, student/solution builds and grading (introduced in chapter 00).

In a chapter::

    from pipemare_lite.exercises import check
    check("ex02_1", gpipe_order)

- :func:`check` / :func:`run_checks`: compare an answer with the engine's (``check.py``);
- :data:`EXERCISES`, :func:`list_exercises`: the registry (``registry.py``, cases and
  hints in ``chNN.py``);
- :func:`load_from_notebook`: a student's definitions from their notebook, for grading
  (``loader.py``);
- ``assign.py``: student copies (solutions stubbed) and executed solution copies, used by
  ``python -m pipemare_lite assign``.

Torch-free: nothing here imports torch unless an exercise that needs it is checked.
"""

from pipemare_lite.exercises.check import CheckResult, check, run_checks
from pipemare_lite.exercises.exercise import Exercise
from pipemare_lite.exercises.loader import load_from_notebook
from pipemare_lite.exercises.registry import (
    EXERCISES,
    UnknownExerciseError,
    get_exercise,
    list_exercises,
)

__all__ = [
    "check",
    "run_checks",
    "CheckResult",
    "Exercise",
    "EXERCISES",
    "UnknownExerciseError",
    "get_exercise",
    "list_exercises",
    "load_from_notebook",
]
