"""``check(exercise_id, answer)``: instant feedback in a chapter (introduced in chapter 00).

In a notebook::

    from pipemare_lite.book.exercises import check
    check("ex02_1", gpipe_order)      # prints ✅ / ❌ / ⏳, shows nothing else

A function answer is called on every case of the exercise and compared with the engine's
answer; the message says how many cases passed and shows one failing case (a representative
one, not the degenerate P = 1 when another failed too) with its input, what the function
returned, whether a number is too high or too low, the name of a known mistake when the
answer matches one, and the first hint of the exercise's ladder, with the call that shows the
next (:func:`hint`); never the expected value. A function that raises
``NotImplementedError`` (the student copy's stub) is "not attempted yet"; any other exception
is reported by type, message and line, without a traceback. An answer that only calls the
engine function answering the exercise is rejected
(:mod:`~pipemare_lite.book.exercises.originality`).
A constant answer is compared by hash.

``check`` returns the :class:`CheckResult` (true when passed), which a notebook does not echo.
With ``raises=True``, or the environment variable ``PIPEMARE_CHECK_RAISES=1``, a failing or
unattempted answer raises :class:`ExerciseFailed` (an ``AssertionError``) carrying the same
message: what an nbgrader or otter test cell needs. :func:`run_checks` does the same
silently; :func:`judge` turns an :class:`~pipemare_lite.book.exercises.evaluate.Evaluation` made
in another process into the same verdict (grading uses it). Torch-free unless an exercise
needs torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from pipemare_lite.book.exercises import evaluate as ev
from pipemare_lite.book.exercises.exercise import Exercise
from pipemare_lite.book.exercises.hashing import matches_hash
from pipemare_lite.book.exercises.originality import rejection, resolve

PASSED, FAILED, NOT_ATTEMPTED, ERROR = "passed", "failed", "not attempted", "error"
#: Environment variable that makes every failing ``check`` raise (for graders).
RAISES_ENV = "PIPEMARE_CHECK_RAISES"


class ExerciseFailed(AssertionError):
    """A ``check(..., raises=True)`` whose answer is wrong or not attempted; the message is
    the feedback ``check`` would print."""


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one answer.

    Attributes:
        exercise_id: which exercise.
        status: ``"passed"``, ``"failed"``, ``"not attempted"`` or ``"error"`` (the case
            shown raised).
        message: the text :func:`check` prints (one verdict line, then remarks and a hint).
        cases_passed: how many cases passed, of all cases (every case runs).
        cases_total: how many cases the exercise has (1 for a constant).
        failing_case: the arguments of the failing case the message shows, or None.
    """

    exercise_id: str
    status: str
    message: str
    cases_passed: int
    cases_total: int
    failing_case: dict | None = None

    @property
    def passed(self) -> bool:
        """True only when every case passed."""
        return self.status == PASSED

    def __bool__(self) -> bool:
        return self.passed

    def _ipython_display_(self) -> None:
        """Show nothing: ``check`` has printed the message (no ``True``/``False`` echo)."""


#: What the feedback says of an answer stopped for doing too much work (``max_lines``).
SEARCHED = (
    "trying candidates one by one (a loop or a search until a condition holds); this "
    "exercise asks for the answer derived as a formula, which takes a few lines whatever "
    "the input"
)


def _hint(exercise: Exercise) -> str:
    rungs = exercise.hints
    text = f"\n   Hint: {rungs[0]}"
    if len(rungs) > 1:
        text += (f"\n   Stuck? hint({exercise.id!r}, 2) shows the next of {len(rungs)} hints "
                 "(from pipemare_lite.book.exercises import hint).")
    return text


def hint(exercise_id: str, rung: int = 2) -> str:
    """Print (and return) rung ``rung`` (1-based) of exercise ``exercise_id``'s hints, with
    the call for the next one; the last rung spells out the whole method in words.

    Raises:
        UnknownExerciseError: ``exercise_id`` is not registered (the message lists the ids).
        ValueError: ``rung`` is not an int from 1 to the number of hints.
    """
    from pipemare_lite.book.exercises.registry import get_exercise  # not at import: see worker.py

    rungs = get_exercise(exercise_id).hints
    if isinstance(rung, bool) or not isinstance(rung, int) or not 1 <= rung <= len(rungs):
        raise ValueError(f"{exercise_id} has hints 1 to {len(rungs)}, got rung {rung!r}")
    text = f"Hint {rung} of {len(rungs)} ({exercise_id}): {rungs[rung - 1]}"
    if rung < len(rungs):
        text += f"\n   Next: hint({exercise_id!r}, {rung + 1})."
    print(text)
    return text


def _is_degenerate(arguments: dict[str, Any]) -> bool:
    """A case with a 0 or 1 among its int arguments (P = 1, M = 1, v = 1) explains little."""
    return any(
        isinstance(v, int) and not isinstance(v, bool) and v <= 1 for v in arguments.values()
    )


def _representative(failing: list[int], cases: list[dict]) -> int:
    """The failing case to show: the first that is not degenerate, else the first."""
    return next((i for i in failing if not _is_degenerate(cases[i])), failing[0])


def _mistake_value(exercise: Exercise, mistake, arguments: dict[str, Any]):
    """What the known mistake gives on one case (through the exercise's harness, if any)."""
    if exercise.harness is not None:
        return resolve(exercise.harness)(mistake.answer, *arguments.values())
    return mistake.answer(*arguments.values())


def _matching_mistake(
    exercise: Exercise, cases, outcomes, failing: list[int], expected: list
) -> str | None:
    """The message of the known mistake that explains the student's answer on every case:
    it gives the student's values on every failing case that returned, and it passes every
    case the student passed. (Matching the failing cases only named a mistake that merely
    agreed there: ex08_2's answer wrong only at horizon 0 was told it used the undelayed
    bound, which would also have failed cases that answer passed.)"""
    shown = [i for i in failing if outcomes[i].error is None]
    if not shown:
        return None
    passed = [i for i in range(len(cases)) if i not in set(failing)]
    for mistake in exercise.mistakes:
        try:
            agrees = all(
                exercise.compare(outcomes[i].value, _mistake_value(exercise, mistake, cases[i]))
                is None
                for i in shown
            )
            if agrees and all(
                exercise.compare(_mistake_value(exercise, mistake, cases[i]), expected[i])
                is None
                for i in passed
            ):
                return mistake.message
        except Exception:  # a mistake that cannot be computed for a case is not this one
            continue
    return None


def _judge_function(exercise: Exercise, evaluation: ev.Evaluation, cases: list[dict]):
    name, total = exercise.function_name, len(cases)
    if evaluation.status == ev.NOT_CALLABLE:
        message = (
            f"❌ {exercise.id}: pass the function itself, e.g. check({exercise.id!r}, {name}) "
            f"(got {evaluation.detail}); expected {exercise.signature}"
        )
        return CheckResult(exercise.id, FAILED, message, 0, total)
    if evaluation.status == ev.NOT_ATTEMPTED:
        message = (
            f"⏳ {exercise.id} {name}: not attempted yet "
            "(replace the `raise NotImplementedError` with your code)."
        )
        return CheckResult(exercise.id, NOT_ATTEMPTED, message, 0, total)
    if evaluation.status == ev.USES_ENGINE:
        message = f"❌ {exercise.id}: " + rejection(name, evaluation.detail.split(", ")) + "."
        return CheckResult(exercise.id, FAILED, message, 0, total)
    if evaluation.status != ev.RAN or len(evaluation.outcomes) != total:
        raise ValueError(
            f"{exercise.id}: an evaluation with status {evaluation.status!r} and "
            f"{len(evaluation.outcomes)} outcomes for {total} cases cannot be judged"
        )
    problems: list[str | None] = []
    references: list = []  # the engine's answer per case (None where it was not needed)
    for arguments, outcome in zip(cases, evaluation.outcomes):
        references.append(None)
        if outcome.error is not None:
            stopped = outcome.error.startswith(ev.TOO_MUCH_WORK)
            problems.append(outcome.error if stopped else f"raised {outcome.error}")
            continue
        try:
            expected = references[-1] = exercise.reference(*arguments.values())
            problems.append(exercise.compare(outcome.value, expected))
        except Exception as exc:  # a value the comparator chokes on is a wrong value
            problems.append(f"returned a value that cannot be compared ({type(exc).__name__})")
    failing = [i for i, problem in enumerate(problems) if problem is not None]
    passed = total - len(failing)
    if not failing:
        message = f"✅ {exercise.id} {name}: passed {total} cases."
        return CheckResult(exercise.id, PASSED, message, total, total)
    stopped = [i for i in failing if (evaluation.outcomes[i].error or "").startswith(
        ev.TOO_MUCH_WORK)]
    shown = stopped[0] if stopped else _representative(failing, cases)
    error = evaluation.outcomes[shown].error
    status = ERROR if error is not None and not stopped else FAILED
    message = f"❌ {exercise.id}: {exercise.describe_case(cases[shown])} {problems[shown]}."
    if stopped:
        mistake = SEARCHED
    else:
        mistake = _matching_mistake(exercise, cases, evaluation.outcomes, failing, references)
    if mistake:
        message += f"\n   A known mistake: {mistake}"
    message += f"\n   {passed} of {total} cases passed."
    message += _hint(exercise)
    return CheckResult(exercise.id, status, message, passed, total, dict(cases[shown]))


def _judge_constant(exercise: Exercise, evaluation: ev.Evaluation):
    name = exercise.function_name
    if evaluation.status == ev.NOT_ATTEMPTED:
        message = f"⏳ {exercise.id} {name}: not attempted yet (set {name} to your answer)."
        return CheckResult(exercise.id, NOT_ATTEMPTED, message, 0, 1)
    if evaluation.status != ev.CONSTANT:
        message = (
            f"❌ {exercise.id}: {name} is a constant; pass its value, "
            f"e.g. check({exercise.id!r}, {name})"
        )
        return CheckResult(exercise.id, FAILED, message, 0, 1)
    answer = evaluation.value
    if matches_hash(exercise.id, answer, exercise.answer_hash):
        return CheckResult(exercise.id, PASSED, f"✅ {exercise.id} {name}: correct.", 1, 1)
    verdict = f"❌ {exercise.id}: {name} = {ev._shorten(repr(answer))} is not right."
    for mistake in exercise.mistakes:
        try:
            if answer == mistake.answer:
                verdict += f"\n   A known mistake: {mistake.message}"
                break
        except Exception:
            continue
    if exercise.diagnose is not None:
        try:
            remark = exercise.diagnose(answer)
        except Exception:  # a remark is a courtesy; never let it hide the verdict
            remark = None
        if remark:
            verdict += f"\n   {remark}"
    return CheckResult(exercise.id, FAILED, verdict + _hint(exercise), 0, 1)


def judge(
    exercise: Exercise, evaluation: ev.Evaluation, cases: list[dict] | None = None
) -> CheckResult:
    """The verdict on ``evaluation`` (made by :mod:`~pipemare_lite.book.exercises.evaluate` here or
    in a grading worker) for ``exercise``; the expected values come from this process.
    ``cases``: the cases the evaluation ran (default ``exercise.cases()``; the grader's are
    drawn from its secret, :mod:`~pipemare_lite.book.exercises.hidden`)."""
    if exercise.kind == "constant":
        return _judge_constant(exercise, evaluation)
    return _judge_function(exercise, evaluation, exercise.cases() if cases is None else cases)


def run_checks(exercise_id: str, answer) -> CheckResult:
    """Check ``answer`` against exercise ``exercise_id`` without printing.

    Raises:
        UnknownExerciseError: ``exercise_id`` is not registered (the message lists the ids).
    """
    from pipemare_lite.book.exercises.registry import get_exercise  # not at import: see worker.py

    exercise = get_exercise(exercise_id)
    if exercise.kind == "constant":
        return judge(exercise, ev.read_constant(answer))
    evaluation = ev.run_function(
        answer, exercise.cases(), exercise.engine_answers, exercise.harness,
        max_lines=exercise.max_lines,
    )
    return judge(exercise, evaluation)


def _raises_by_default() -> bool:
    return os.environ.get(RAISES_ENV, "").strip().lower() in ("1", "true", "yes")


def check(
    exercise_id: str, answer, *, raises: bool | None = None, quiet: bool = False
) -> CheckResult:
    """Check ``answer`` (a function, or a constant's value) and print the verdict.

    Returns the :class:`CheckResult`, true when every case passed (a notebook shows nothing
    for it). With ``raises=True`` (default: the ``PIPEMARE_CHECK_RAISES`` environment
    variable) a wrong or unattempted answer raises :class:`ExerciseFailed` with the message
    instead of printing it. ``quiet=True`` prints nothing for a passing answer (otter's
    doctest-style tests compare printed output).
    """
    __tracebackhide__ = True  # IPython and pytest: the student's cell, not this frame
    result = run_checks(exercise_id, answer)
    if not result.passed and (_raises_by_default() if raises is None else raises):
        raise ExerciseFailed(result.message)
    if not (quiet and result.passed):
        print(result.message)
    return result
