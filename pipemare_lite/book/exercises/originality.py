"""Does an answer do the work itself, or hand it to the engine function that answers it?

An exercise may name the engine functions that answer it (``Exercise.engine_answers``, e.g.
``"pipemare_lite.analysis.formulas.idle_fraction_gpipe"`` for GPipe's idle fraction). An answer is
rejected, in ``check()`` and in grading alike, when

1. it *is* an engine function (``idle_fraction = idle_fraction_gpipe``; any function defined
   in ``pipemare_lite`` counts, named or not);
2. its code, or the code of a notebook helper it calls, refers to one of the named functions
   (by name or as an attribute of a module, e.g. ``formulas.idle_fraction_gpipe``);
3. one of the named functions runs while the answer runs (a profiling hook sees every
   Python call, however the function was reached: an alias, ``getattr``, an engine
   function that calls it, like ``simulate_and_measure`` calling ``simulate``).

Rule 3 is the one that matters; 1 and 2 give a clearer message earlier. None of this stops
a determined student from copying the engine's source into their answer: it stops the
one-line wrapper. Introduced in chapter 00 (for instructors: docs/instructors.md). Torch-
free (it imports only the named modules).
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
from collections.abc import Callable, Iterable
from typing import Any

#: How deep rule 2 follows a student's helpers (functions calling functions ...).
_MAX_HELPER_DEPTH = 8


class EngineAnswerSwitchedOff(RuntimeError):
    """Raised, while grading, by an engine function that answers an exercise of the notebook
    being graded (the grading worker switches them off before the notebook loads); its
    argument is the function's dotted name."""


def resolve(dotted: str) -> Any:
    """The object a dotted name points at
    (``"pipemare_lite.analysis.formulas.idle_fraction_gpipe"``).

    Raises:
        ImportError: no module along the name can be imported, or an attribute is missing.
    """
    parts = dotted.split(".")
    try:
        obj = importlib.import_module(parts[0])
    except ImportError:
        raise ImportError(f"cannot import any module of {dotted!r}") from None
    for depth, attribute in enumerate(parts[1:], start=2):
        # as ``from a.b import c`` does: the package's attribute first (a function may share
        # an old module path's name), then the submodule
        if hasattr(obj, attribute):
            obj = getattr(obj, attribute)
            continue
        try:
            obj = importlib.import_module(".".join(parts[:depth]))
        except ImportError:
            raise ImportError(f"{dotted}: {attribute!r} not found") from None
    return obj


def _code_of(obj) -> types.CodeType | None:
    obj = getattr(obj, "__func__", obj)  # bound methods
    obj = getattr(obj, "__wrapped__", obj)  # functools.wraps / lru_cache
    return getattr(obj, "__code__", None)


def forbidden_codes(names: Iterable[str]) -> dict[types.CodeType, str]:
    """``code object -> dotted name`` for each named engine function (rules 2 and 3)."""
    codes = {}
    for name in names:
        code = _code_of(resolve(name))
        if code is not None:
            codes[code] = name
    return codes


def _unwrap(answer):
    while isinstance(answer, functools.partial):
        answer = answer.func
    return getattr(answer, "__func__", answer)


def engine_origin(answer) -> str | None:
    """``"pipemare_lite.x.f"`` when ``answer`` is a function of the engine itself (rule 1)."""
    target = _unwrap(answer)
    module = getattr(target, "__module__", None) or ""
    if module == "pipemare_lite" or module.startswith("pipemare_lite."):
        return f"{module}.{getattr(target, '__qualname__', getattr(target, '__name__', '?'))}"
    return None


def _code_objects(code: types.CodeType):
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _code_objects(constant)


def referenced_engine_answers(answer, names: Iterable[str]) -> list[str]:
    """The named engine functions that ``answer``'s code refers to (rule 2), sorted."""
    forbidden = {}
    for name in names:
        forbidden[id(resolve(name))] = name
    if not forbidden:
        return []
    attribute_names = {name.rsplit(".", 1)[1]: name for name in forbidden.values()}
    found: set[str] = set()
    seen: set[int] = set()

    def visit(function, depth: int) -> None:
        function = _unwrap(function)
        code = getattr(function, "__code__", None)
        if code is None or id(code) in seen or depth > _MAX_HELPER_DEPTH:
            return
        seen.add(id(code))
        namespace = getattr(function, "__globals__", {})
        cells = [c.cell_contents for c in (function.__closure__ or ()) if _has_contents(c)]
        names_used = {n for c in _code_objects(code) for n in c.co_names}
        values = [namespace[n] for n in names_used if n in namespace] + cells
        modules = [v for v in values if isinstance(v, types.ModuleType)]
        for value in values:
            if id(value) in forbidden:
                found.add(forbidden[id(value)])
            elif callable(value) and engine_origin(value) is None:
                visit(value, depth + 1)  # a helper of the student's: look inside it too
        for attribute in names_used & set(attribute_names):
            if any(id(getattr(m, attribute, None)) in forbidden for m in modules):
                found.add(attribute_names[attribute])

    visit(answer, 0)
    return sorted(found)


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty closure cell raises ValueError
    except ValueError:
        return False
    return True


def call_watching(
    function: Callable, arguments: tuple, codes: dict[types.CodeType, str]
) -> tuple[Any, list[str]]:
    """``function(*arguments)`` and the named engine functions that ran meanwhile (rule 3).

    The profiling hook that was set before (a debugger's, coverage's) is restored afterwards.
    """
    if not codes:
        return function(*arguments), []
    called: list[str] = []

    def hook(frame, event, _arg):
        if event == "call" and frame.f_code in codes:
            name = codes[frame.f_code]
            if name not in called:
                called.append(name)

    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        value = function(*arguments)
    finally:
        sys.setprofile(previous)
    return value, called


def rejection(exercise_name: str, engine_names: Iterable[str]) -> str:
    """The message for an answer that hands its work to the engine."""
    listed = ", ".join(f"`{n.rsplit('.', 1)[1]}`" for n in engine_names)
    return (
        f"{exercise_name} uses the engine's {listed}, which computes the answer of this "
        "exercise; write the computation yourself (the engine's version is for comparing "
        "with afterwards)"
    )
