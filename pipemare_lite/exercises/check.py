"""``check(exercise_id, answer)``: instant feedback in a chapter (introduced in chapter 00).

In a notebook::

    from pipemare_lite.exercises import check
    check("ex02_1", gpipe_order)      # prints ✅ / ❌ / ⏳ and returns True or False

A function answer is called on every case of the exercise (edge cases, then seeded random
ones) and compared with the engine's answer; the first failing case is shown with its
input, what the function returned and a hint, never the expected value. A function that
raises ``NotImplementedError`` (the student copy's stub) is "not attempted yet"; any other
exception is reported by type, message and line, without a traceback. A constant answer is
compared by hash. :func:`run_checks` does the same silently and returns a
:class:`CheckResult` (the grading suite uses it). Torch-free unless an exercise needs torch.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from pipemare_lite.exercises.engine_calls import engine_answers_used
from pipemare_lite.exercises.exercise import Exercise
from pipemare_lite.exercises.hashing import matches_hash
from pipemare_lite.exercises.registry import get_exercise

PASSED, FAILED, NOT_ATTEMPTED, ERROR = "passed", "failed", "not attempted", "error"
_ICONS = {PASSED: "✅", FAILED: "❌", NOT_ATTEMPTED: "⏳", ERROR: "❌"}


@dataclass(frozen=True)
class CheckResult:
    """The verdict on one answer.

    Attributes:
        exercise_id: which exercise.
        status: ``"passed"``, ``"failed"``, ``"not attempted"`` or ``"error"`` (it raised).
        message: the text :func:`check` prints (one verdict line, then hint lines).
        cases_passed: how many cases passed before the verdict.
        cases_total: how many cases the exercise has (1 for a constant).
    """

    exercise_id: str
    status: str
    message: str
    cases_passed: int
    cases_total: int

    @property
    def passed(self) -> bool:
        """True only when every case passed."""
        return self.status == PASSED


def _is_stub_value(value) -> bool:
    # The student copy stubs a constant as ``NAME = NotImplemented``; ``...`` is the other
    # placeholder students write.
    return value is NotImplemented or value is Ellipsis


def _shorten(text: str, limit: int = 200) -> str:
    """A message stays readable even when an exception or a value prints pages."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where_it_raised(exc: BaseException, answer) -> str:
    """`` (line N of your code)`` when the failing frame is in the student's function."""
    code = getattr(answer, "__code__", None)
    if code is None:
        return ""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == code.co_filename]
    return f" (line {frames[-1].lineno} of your code)" if frames else ""


def _with_hint(exercise: Exercise, verdict: str) -> str:
    return f"{verdict}\n   Hint: {exercise.hint}"


def _check_constant(exercise: Exercise, answer) -> CheckResult:
    name = exercise.function_name
    if _is_stub_value(answer):
        message = f"⏳ {exercise.id} {name}: not attempted yet (set {name} to your answer)."
        return CheckResult(exercise.id, NOT_ATTEMPTED, message, 0, 1)
    if callable(answer):
        message = (
            f"❌ {exercise.id}: {name} is a constant; pass its value, "
            f"e.g. check({exercise.id!r}, {name})"
        )
        return CheckResult(exercise.id, FAILED, message, 0, 1)
    if matches_hash(exercise.id, answer, exercise.answer_hash):
        return CheckResult(exercise.id, PASSED, f"✅ {exercise.id} {name}: correct.", 1, 1)
    verdict = f"❌ {exercise.id}: {name} = {_shorten(repr(answer))} is not right."
    if exercise.diagnose is not None:
        try:
            remark = exercise.diagnose(answer)
        except Exception:  # a remark is a courtesy; never let it hide the verdict
            remark = None
        if remark:
            verdict += f"\n   {remark}"
    return CheckResult(exercise.id, FAILED, _with_hint(exercise, verdict), 0, 1)


def _check_function(exercise: Exercise, answer) -> CheckResult:
    name = exercise.function_name
    if not callable(answer):
        message = (
            f"❌ {exercise.id}: pass the function itself, e.g. check({exercise.id!r}, {name}) "
            f"(got {type(answer).__name__}); expected {exercise.signature}"
        )
        return CheckResult(exercise.id, FAILED, message, 0, 0)
    cases = exercise.cases()
    used = engine_answers_used(answer, exercise.engine_answers)
    if used:
        verdict = (
            f"❌ {exercise.id}: {name} uses the engine's own {', '.join(used)}: derive it "
            "yourself (the chapter shows the engine's version after this exercise)."
        )
        return CheckResult(exercise.id, FAILED, _with_hint(exercise, verdict), 0, len(cases))
    for passed, arguments in enumerate(cases):
        call = exercise.describe_case(arguments)
        try:
            got = exercise.run_case(answer, arguments)
        except NotImplementedError:
            message = (
                f"⏳ {exercise.id} {name}: not attempted yet "
                "(replace the `raise NotImplementedError` with your code)."
            )
            return CheckResult(exercise.id, NOT_ATTEMPTED, message, passed, len(cases))
        except Exception as exc:  # the student's bug: report it, don't drown them in a traceback
            verdict = (
                f"❌ {exercise.id}: {call} raised {type(exc).__name__}: {_shorten(str(exc))}"
                f"{_where_it_raised(exc, answer)}"
            )
            return CheckResult(
                exercise.id, ERROR, _with_hint(exercise, verdict), passed, len(cases)
            )
        problem = exercise.compare(got, exercise.reference(*arguments.values()))
        if problem is not None:
            verdict = f"❌ {exercise.id}: {call} {problem}."
            return CheckResult(
                exercise.id, FAILED, _with_hint(exercise, verdict), passed, len(cases)
            )
    message = f"✅ {exercise.id} {name}: passed {len(cases)} cases."
    return CheckResult(exercise.id, PASSED, message, len(cases), len(cases))


def run_checks(exercise_id: str, answer) -> CheckResult:
    """Check ``answer`` against exercise ``exercise_id`` without printing.

    Raises:
        UnknownExerciseError: ``exercise_id`` is not registered (the message lists the ids).
    """
    exercise = get_exercise(exercise_id)
    if exercise.kind == "constant":
        return _check_constant(exercise, answer)
    return _check_function(exercise, answer)


def check(exercise_id: str, answer) -> bool:
    """Check ``answer`` (a function, or a constant's value); print a verdict; True if right."""
    result = run_checks(exercise_id, answer)
    print(result.message)
    return result.passed
