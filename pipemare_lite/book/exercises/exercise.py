"""What an exercise is: a name to define, cases to run, a reference to compare with.

Two kinds (introduced in chapter 00, used from chapter 01 on):

- a **function** exercise: the student defines ``function_name``; :func:`check` calls it on
  every case from ``cases()`` and compares with ``reference`` (computed by the engine:
  builders, simulator, closed forms) using ``compare``;
- a **constant** exercise: the student assigns ``function_name = value``; the value is
  compared by hash (``answer_hash``), so the answer is never stored in clear.

``compare(answer, expected)`` returns ``None`` when the answer is right, otherwise a short
description of what is wrong that never contains the expected value (see
:mod:`pipemare_lite.book.exercises.compare`).

Optional fields (all with defaults, so an exercise written with only the fields above keeps
working): ``points`` (its weight in a grade), ``mistakes`` (known wrong answers, recognised
and named in the feedback: :class:`Mistake`), ``engine_answers`` (engine functions that
answer the exercise; an answer that calls one is rejected, see
:mod:`pipemare_lite.book.exercises.originality`), and, for an answer that is a tool rather than a
value (chapter 05's saved-tensor hooks), ``harness`` (how to use it on a case, see
:mod:`pipemare_lite.book.exercises.harness`) with ``case_text`` (how to name a case),
``max_lines`` (for an exercise that asks for a formula: the work an answer may do on one
case before it is stopped as a search), and a ladder of hints (``hint`` as a tuple: a nudge
first, the whole method in words last). Torch-free.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_ID_RE = re.compile(r"^ex(\d{2})_(\d+)$")
_DOTTED_RE = re.compile(r"^pipemare_lite(\.[A-Za-z_]\w*)+$")
#: Where harnesses live: a module the grading worker may import (no reference answers).
_HARNESS_MODULE = "pipemare_lite.book.exercises.harness"


@dataclass(frozen=True)
class Mistake:
    """A wrong answer students are known to give, and what to tell them when they give it.

    Attributes:
        message: names the mistake ("this is the bubble ratio, idle / busy, not the idle
            fraction"); like a hint, it never contains the right answer.
        answer: for a function exercise, a function with the exercise's signature that
            computes the wrong answer; for a constant exercise, the wrong value.
    """

    message: str
    answer: Any


@dataclass(frozen=True)
class Exercise:
    """One exercise of one chapter.

    Attributes:
        id: ``"exNN_k"``: chapter NN, k-th exercise of the chapter (e.g. ``"ex02_1"``).
        chapter: the chapter number NN.
        title: one line saying what is asked.
        function_name: the name the student defines (a function, or a constant).
        signature: the expected signature, e.g. ``"gpipe_order(P, M) -> list[list[str]]"``.
        hint: shown after a wrong answer; never contains the answer. One string, or a ladder
            of them (a tuple): ``check`` shows the first, a nudge, and says how to ask for the
            next (:func:`~pipemare_lite.book.exercises.feedback.hint`); each rung says more,
            and the last spells out the whole method in words (not code), so a stuck student
            is never left without a way on.
        cases: for function exercises, returns the inputs to try, each a dict of
            argument name -> value in call order (edge cases first, then seeded random ones).
        reference: for function exercises, the engine's answer for one case's arguments.
        compare: ``compare(answer, expected)`` -> ``None`` or a description of the mistake.
        answer_hash: for constant exercises,
        :func:`~pipemare_lite.book.exercises.hashing.answer_hash`
            of the right value.
        diagnose: for constant exercises, optional ``diagnose(value)`` -> an extra remark on a
            wrong value (e.g. what the engine measures at that value), never the answer.
        needs_torch: True if checking it imports torch (e.g. ex05_1).
        points: what a right answer is worth in a grade (default 1).
        mistakes: known wrong answers (:class:`Mistake`), named when a student's answer
            agrees with one on every case it got wrong and the mistake passes every case the
            answer passed.
        engine_answers: dotted names of engine functions that answer the exercise
            (``"pipemare_lite.analysis.formulas.idle_fraction_gpipe"``); an answer that calls one of
            them, directly or through helpers, is rejected by ``check`` and by grading.
        harness: for a function exercise whose answer is not called on a case directly,
            the dotted name of a function in :mod:`pipemare_lite.book.exercises.harness`;
            ``harness(answer, *case.values())`` uses the answer and returns the value
            compared with ``reference(*case.values())``. It runs where the answer runs
            (``check``'s process, or the grading worker).
        case_text: optional ``case_text(case)`` -> how a failing case is named to the
            student (default: the call ``name(arg=value, ...)``, which would mislead when a
            harness, not the student, is given the case's arguments).
        max_lines: for an exercise that asks for a closed form or a bound, the most lines of
            Python an answer may run on one case (helpers and what they call included); an
            answer over it is stopped and told it searches instead of deriving
            (:mod:`~pipemare_lite.book.exercises.evaluate`). None: no limit.
    """

    id: str
    chapter: int
    title: str
    function_name: str
    signature: str
    hint: str | tuple[str, ...]
    cases: Callable[[], list[dict[str, Any]]] | None = None
    reference: Callable[..., Any] | None = None
    compare: Callable[[Any, Any], str | None] | None = None
    answer_hash: str | None = None
    diagnose: Callable[[Any], str | None] | None = None
    needs_torch: bool = False
    points: int = 1
    mistakes: tuple[Mistake, ...] = ()
    engine_answers: tuple[str, ...] = ()
    harness: str | None = None
    case_text: Callable[[dict[str, Any]], str] | None = None
    max_lines: int | None = None

    def __post_init__(self) -> None:
        match = _ID_RE.match(self.id)
        if not match:
            raise ValueError(f"exercise id {self.id!r} must look like 'ex02_1' (exNN_k)")
        if int(match.group(1)) != self.chapter:
            raise ValueError(f"exercise {self.id!r} is in chapter {self.chapter}, not its id's")
        is_function = self.cases is not None and self.reference is not None
        is_constant = self.answer_hash is not None
        if is_function == is_constant:
            raise ValueError(
                f"exercise {self.id!r}: give either cases+reference (a function exercise) "
                "or answer_hash (a constant exercise), not both or neither"
            )
        if is_function and self.compare is None:
            raise ValueError(f"exercise {self.id!r}: a function exercise needs compare")
        if isinstance(self.points, bool) or not isinstance(self.points, int) or self.points < 0:
            raise ValueError(
                f"exercise {self.id!r}: points must be an int >= 0, got {self.points!r}"
            )
        if not all(isinstance(m, Mistake) for m in self.mistakes):
            raise ValueError(f"exercise {self.id!r}: mistakes must be a tuple of Mistake")
        bad = [name for name in self.engine_answers if not _DOTTED_RE.match(str(name))]
        if bad:
            raise ValueError(
                f"exercise {self.id!r}: engine_answers must be dotted names like "
                f"'pipemare_lite.analysis.formulas.idle_fraction_gpipe', got {bad!r}"
            )
        rungs = (self.hint,) if isinstance(self.hint, str) else self.hint
        if not isinstance(rungs, tuple) or not all(isinstance(r, str) for r in rungs):
            raise ValueError(
                f"exercise {self.id!r}: hint must be a string or a tuple of strings (a ladder "
                f"from a nudge to the whole method), got {type(self.hint).__name__}"
            )
        if isinstance(self.hint, tuple) and (not rungs or not all(r.strip() for r in rungs)):
            raise ValueError(f"exercise {self.id!r}: a ladder of hints needs non-empty rungs")
        if self.max_lines is not None and (
            isinstance(self.max_lines, bool) or not isinstance(self.max_lines, int)
            or self.max_lines < 1
        ):
            raise ValueError(
                f"exercise {self.id!r}: max_lines must be a positive int or None, "
                f"got {self.max_lines!r}"
            )
        if self.harness is not None and (
            not is_function or not str(self.harness).startswith(_HARNESS_MODULE + ".")
        ):
            raise ValueError(
                f"exercise {self.id!r}: harness must name a function of {_HARNESS_MODULE} "
                f"(e.g. '{_HARNESS_MODULE}.gradients_with_hooks') on a function exercise, "
                f"got {self.harness!r}"
            )

    def describe_case(self, arguments: dict[str, Any]) -> str:
        """How a failing case is named to the student (``case_text``, else the call)."""
        if self.case_text is not None:
            return self.case_text(arguments)
        return format_call(self.function_name, arguments)

    @property
    def hints(self) -> tuple[str, ...]:
        """The ladder of hints, first (a nudge) to last (the whole method in words)."""
        return (self.hint,) if isinstance(self.hint, str) else tuple(self.hint)

    @property
    def kind(self) -> str:
        """``"function"`` or ``"constant"``."""
        return "constant" if self.answer_hash is not None else "function"

    @property
    def label(self) -> str:
        """The human name, e.g. ``"Exercise 2.1"`` for ``ex02_1``."""
        match = _ID_RE.match(self.id)
        return f"Exercise {int(match.group(1))}.{int(match.group(2))}"


def brief(value, limit: int = 120) -> str:
    """A short readable form of a case's argument: a schedule by its sizes, else its repr."""
    if all(hasattr(value, a) for a in ("name", "num_ranks", "num_microbatches", "ranks")):
        text = f"<{value.name} schedule, P={value.num_ranks}, M={value.num_microbatches}"
        if getattr(value, "chunks", 1) != 1:
            text += f", v={value.chunks}"
        if getattr(value, "num_minibatches", 1) != 1:
            text += f", {value.num_minibatches} minibatches"
        return text + ">"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """``gpipe_order(P=3, M=2)``: how a failing input is shown to the student."""
    return f"{name}(" + ", ".join(f"{k}={brief(v)}" for k, v in arguments.items()) + ")"
