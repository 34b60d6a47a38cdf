"""Run an answer on an exercise's cases and record what happened, without judging it.

Judging (comparing with the engine, choosing what to tell the student) is
:mod:`pipemare_lite.book.exercises.feedback`'s job and needs the registry; running is this module's,
and needs nothing but the answer, the cases and the names of the engine functions the answer
must not call. That split is what lets grading run a student's code in a separate process
that never imports the registry or the references (:mod:`pipemare_lite.book.exercises.worker`),
while ``check()`` in a notebook runs the same code in the same way. Every case runs: an
exception in one case is recorded and the next case still runs; only ``NotImplementedError``
(the student copy's stub) stops at once. An exercise that asks for a formula may cap the work
one case takes (``max_lines``, lines of Python traced): an answer that searches (tries P = 1,
2, ... until a condition holds) is stopped there, with :data:`TOO_MUCH_WORK` as its error,
instead of hanging the notebook on a case far outside what a search can afford. Introduced
in chapter 00 (for instructors: docs/instructors.md). Torch-free.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pipemare_lite.book.exercises.originality import (
    EngineAnswerSwitchedOff,
    call_watching,
    engine_origin,
    forbidden_codes,
    referenced_engine_answers,
    resolve,
)

#: Evaluation.status values.
RAN, NOT_ATTEMPTED, NOT_CALLABLE, CALLABLE_CONSTANT, USES_ENGINE, CONSTANT = (
    "ran",
    "not attempted",
    "not callable",
    "callable constant",
    "uses engine",
    "constant",
)


#: How the error of a case stopped for doing too much work begins (feedback names it).
TOO_MUCH_WORK = "ran more than"


class _WorkBudgetExceeded(BaseException):
    """Raised inside an answer that ran more lines than its exercise allows (a
    ``BaseException``, so the answer's own ``except Exception`` does not swallow it)."""


def _call_within(run, values: tuple, codes: dict, max_lines: int | None):
    """:func:`call_watching`, stopped with :class:`_WorkBudgetExceeded` after ``max_lines``
    traced lines (the answer's, its helpers' and any Python it calls); the trace function
    that was set before (a debugger's, coverage's) is restored afterwards."""
    if max_lines is None:
        return call_watching(run, values, codes)
    count = 0

    def count_lines(_frame, event, _arg):
        nonlocal count
        if event == "line":
            count += 1
            if count > max_lines:
                raise _WorkBudgetExceeded
        return count_lines

    previous = sys.gettrace()
    sys.settrace(lambda _frame, _event, _arg: count_lines)
    try:
        return call_watching(run, values, codes)
    finally:
        sys.settrace(previous)


@dataclass
class CaseOutcome:
    """One case: what the answer returned, or the error it raised (one short line)."""

    value: Any = None
    error: str | None = None


@dataclass
class Evaluation:
    """What running an answer produced.

    Attributes:
        status: :data:`RAN` (see ``outcomes``), :data:`CONSTANT` (see ``value``),
            :data:`NOT_ATTEMPTED`, :data:`NOT_CALLABLE`, :data:`CALLABLE_CONSTANT` or
            :data:`USES_ENGINE`.
        outcomes: one per case, in the order of the cases (for :data:`RAN`).
        value: the constant's value (for :data:`CONSTANT`).
        detail: the answer's type name (:data:`NOT_CALLABLE`) or the engine functions it
            used, comma-separated (:data:`USES_ENGINE`).
    """

    status: str
    outcomes: list[CaseOutcome] = field(default_factory=list)
    value: Any = None
    detail: str = ""


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where_it_raised(exc: BaseException, answer) -> str:
    """`` (line N of your code)`` when the failing frame is in the student's function."""
    code = getattr(answer, "__code__", None)
    if code is None:
        return ""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == code.co_filename]
    return f" (line {frames[-1].lineno} of your code)" if frames else ""


def is_stub_value(value) -> bool:
    """The student copy stubs a constant as ``NAME = NotImplemented``; ``...`` is the other."""
    return value is NotImplemented or value is Ellipsis


def run_function(
    answer,
    cases: Iterable[dict[str, Any]],
    engine_answers: Iterable[str] = (),
    harness: str | None = None,
    *,
    codes: dict | None = None,
    max_lines: int | None = None,
) -> Evaluation:
    """Call ``answer`` on every case (a dict of arguments, in call order) and record it.

    With ``harness`` (the dotted name of a function of
    :mod:`~pipemare_lite.book.exercises.harness`), each case runs ``harness(answer, *values)``
    instead: for an answer that is a tool the harness uses, not a value. The engine functions
    the answer must not call are watched while the harness runs, the answer's code included
    (``codes``: their code objects, when the caller took them before switching the functions
    off; by default :func:`forbidden_codes` of ``engine_answers``). With ``max_lines``, a
    case whose call runs more lines of Python than that is stopped and recorded with an error
    beginning :data:`TOO_MUCH_WORK`.
    """
    if not callable(answer):
        return Evaluation(NOT_CALLABLE, detail=type(answer).__name__)
    engine_answers = tuple(engine_answers)
    origin = engine_origin(answer)
    if origin is not None:
        return Evaluation(USES_ENGINE, detail=origin)
    referenced = referenced_engine_answers(answer, engine_answers)
    if referenced:
        return Evaluation(USES_ENGINE, detail=", ".join(referenced))
    codes = forbidden_codes(engine_answers) if codes is None else codes
    run = answer
    if harness is not None:
        use = resolve(harness)
        run = lambda *values: use(answer, *values)  # noqa: E731
    outcomes = []
    for arguments in cases:
        try:
            value, called = _call_within(run, tuple(arguments.values()), codes, max_lines)
        except _WorkBudgetExceeded:
            outcomes.append(CaseOutcome(error=f"{TOO_MUCH_WORK} {max_lines:,} lines of Python "
                                              "on this one case and was stopped"))
            continue
        except NotImplementedError:
            return Evaluation(NOT_ATTEMPTED)
        except EngineAnswerSwitchedOff as exc:  # grading: the engine's answer was reached
            return Evaluation(USES_ENGINE, detail=str(exc.args[0]) if exc.args else "?")
        except (Exception, SystemExit) as exc:  # the student's bug: one line, no traceback
            text = f"{type(exc).__name__}: {_shorten(str(exc))}{_where_it_raised(exc, answer)}"
            outcomes.append(CaseOutcome(error=text))
            continue
        if called:
            return Evaluation(USES_ENGINE, detail=", ".join(called))
        outcomes.append(CaseOutcome(value=value))
    return Evaluation(RAN, outcomes=outcomes)


def read_constant(answer) -> Evaluation:
    """A constant exercise's answer: its value, a stub, or a function passed by mistake."""
    if is_stub_value(answer):
        return Evaluation(NOT_ATTEMPTED)
    if callable(answer):
        return Evaluation(CALLABLE_CONSTANT, detail=type(answer).__name__)
    return Evaluation(CONSTANT, value=answer)
