"""What an exercise is: a name to define, cases to run, a reference to compare with.

Two kinds (introduced in chapter 00, used from chapter 01 on):

- a **function** exercise: the student defines ``function_name``; :func:`check` calls it on
  every case from ``cases()`` and compares with ``reference`` (computed by the engine:
  builders, simulator, closed forms) using ``compare``;
- a **constant** exercise: the student assigns ``function_name = value``; the value is
  compared by hash (``answer_hash``), so the answer is never stored in clear.

``compare(answer, expected)`` returns ``None`` when the answer is right, otherwise a short
description of what is wrong that never contains the expected value (see
:mod:`pipemare_lite.exercises.compare`). Torch-free.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

_ID_RE = re.compile(r"^ex(\d{2})_(\d+)$")


@dataclass(frozen=True)
class Exercise:
    """One exercise of one chapter.

    Attributes:
        id: ``"exNN_k"``: chapter NN, k-th exercise of the chapter (e.g. ``"ex02_1"``).
        chapter: the chapter number NN.
        title: one line saying what is asked.
        function_name: the name the student defines (a function, or a constant).
        signature: the expected signature, e.g. ``"gpipe_order(P, M) -> list[list[str]]"``.
        hint: shown after a wrong answer; never contains the answer.
        cases: for function exercises, returns the inputs to try, each a dict of
            argument name -> value in call order (edge cases first, then seeded random ones).
        reference: for function exercises, the engine's answer for one case's arguments.
        compare: ``compare(answer, expected)`` -> ``None`` or a description of the mistake.
        answer_hash: for constant exercises, :func:`~pipemare_lite.exercises.hashing.answer_hash`
            of the right value.
        diagnose: for constant exercises, optional ``diagnose(value)`` -> an extra remark on a
            wrong value (e.g. what the engine measures at that value), never the answer.
        needs_torch: True if checking it imports torch (of chapters 00-05 only ex05_1).
        engine_answers: names of engine functions that compute the answer (shown in the
            chapter only after the exercise); an answer whose code uses one of them fails
            with "derive it yourself" (:mod:`~pipemare_lite.exercises.engine_calls`).
        call: for function exercises whose answer is not called directly on a case
            (e.g. it returns hooks that the check then uses): ``call(answer, case)`` -> the
            value compared with ``reference(**case)``. Default: ``answer(*case.values())``.
        case_text: with ``call``, ``case_text(case)`` says in words which case failed
            (default: the call ``name(arg=value, ...)``).
    """

    id: str
    chapter: int
    title: str
    function_name: str
    signature: str
    hint: str
    cases: Callable[[], list[dict[str, Any]]] | None = None
    reference: Callable[..., Any] | None = None
    compare: Callable[[Any, Any], str | None] | None = None
    answer_hash: str | None = None
    diagnose: Callable[[Any], str | None] | None = None
    needs_torch: bool = False
    engine_answers: tuple[str, ...] = ()
    call: Callable[[Callable, dict[str, Any]], Any] | None = None
    case_text: Callable[[dict[str, Any]], str] | None = None

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

    def run_case(self, answer, arguments: dict[str, Any]):
        """The value of ``answer`` on one case (through :attr:`call` when set)."""
        if self.call is not None:
            return self.call(answer, arguments)
        return answer(*arguments.values())

    def describe_case(self, arguments: dict[str, Any]) -> str:
        """How a failing case is named to the student."""
        if self.case_text is not None:
            return self.case_text(arguments)
        return format_call(self.function_name, arguments)

    @property
    def kind(self) -> str:
        """``"function"`` or ``"constant"``."""
        return "constant" if self.answer_hash is not None else "function"

    @property
    def label(self) -> str:
        """The human name, e.g. ``"Exercise 2.1"`` for ``ex02_1``."""
        match = _ID_RE.match(self.id)
        return f"Exercise {int(match.group(1))}.{int(match.group(2))}"


def format_call(name: str, arguments: dict[str, Any]) -> str:
    """``gpipe_order(P=3, M=2)``: how a failing input is shown to the student."""
    return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in arguments.items()) + ")"
