"""Exercises with instant feedback, student/solution builds and grading (introduced in chapter 00).

In a chapter::

    from pipemare_lite.book.exercises import check
    check("ex02_1", gpipe_order)

- :func:`check` / :func:`run_checks`: compare an answer with the engine's (``feedback.py``);
  :func:`hint`: the next rung of an exercise's hints, up to the whole method in words;
- :data:`EXERCISES`, :func:`list_exercises`: the registry (``registry.py``, cases and
  hints in ``chNN.py``);
- :func:`load_from_notebook`: a student's definitions from their notebook (``loader.py``);
- ``grading.py``: grade submissions, each in its own process (``worker.py``), into
  per-student reports and a class CSV (``python -m pipemare_lite grade``);
- ``assign.py``: student copies (solutions stubbed), executed solution copies and the
  nbgrader / otter formats, used by ``python -m pipemare_lite assign``.

The registry's names are imported on first use (PEP 562), so that the grading worker can
import this package without importing the exercise definitions. Torch-free: nothing here
imports torch unless an exercise that needs it is checked.
"""

from __future__ import annotations

import importlib

from pipemare_lite.book.exercises.exercise import Exercise, Mistake
from pipemare_lite.book.exercises.feedback import (
    CheckResult,
    ExerciseFailed,
    check,
    hint,
    run_checks,
)
from pipemare_lite.book.exercises.loader import load_from_notebook

#: public name -> the submodule that defines it, for the names imported on first use
_WHERE = {
    "EXERCISES": "registry",
    "UnknownExerciseError": "registry",
    "get_exercise": "registry",
    "list_exercises": "registry",
}

__all__ = [
    "check",
    "hint",
    "run_checks",
    "CheckResult",
    "ExerciseFailed",
    "Exercise",
    "Mistake",
    "load_from_notebook",
    "EXERCISES",
    "UnknownExerciseError",
    "get_exercise",
    "list_exercises",
]


def __getattr__(name: str):
    """Import the submodule defining ``name`` on first use (see the module docstring)."""
    if name not in _WHERE:
        raise AttributeError(f"module 'pipemare_lite.book.exercises' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"pipemare_lite.book.exercises.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
