"""Does an answer just call the engine's own solution? (introduced in chapter 05)

An exercise such as "derive the forward delay of stage s" is answered by an engine function
(``exact_forward_delay``) that the chapter shows only after the exercise. An answer that
calls it passes every case without any thinking, so exercises list such functions by name
(``Exercise.engine_answers``) and :func:`engine_answers_used` finds them in the answer's code:

- a name the code uses that is one of them: a direct call (``exact_forward_delay(...)``, an
  imported name) or an attribute (``staleness.exact_forward_delay``);
- a global the code uses whose value is one of them under another name
  (``from pipemare_lite.staleness import exact_forward_delay as f``);
- the same, inside helper functions the answer calls (its own globals that are plain
  Python functions, and nested functions or lambdas), followed to any depth.

A student's own function that happens to share a name with an engine function is followed,
not flagged. This is feedback for honest students, not a sandbox: ``getattr`` with a
computed name gets past it. Torch-free.
"""

from __future__ import annotations

import types
from collections.abc import Iterable

#: The package whose functions count as "the engine".
ENGINE_PACKAGE = "pipemare_lite"


def _is_engine_object(value) -> bool:
    module = getattr(value, "__module__", None) or ""
    return module == ENGINE_PACKAGE or module.startswith(ENGINE_PACKAGE + ".")


def _code_objects(code: types.CodeType):
    """``code`` and every function, lambda or comprehension defined inside it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _function_of(value):
    """The plain Python function behind ``value`` (a function or a method), else None."""
    if isinstance(value, types.MethodType):
        value = value.__func__
    return value if isinstance(value, types.FunctionType) else None


def engine_answers_used(answer, engine_answers: Iterable[str]) -> list[str]:
    """The names in ``engine_answers`` that ``answer``'s code uses, sorted (empty: none).

    ``engine_answers`` are short names of engine functions or classes
    (``"exact_forward_delay"``); see the module docstring for what counts as a use.
    """
    forbidden = set(engine_answers)
    if not forbidden:
        return []
    found: set[str] = set()
    seen: set[int] = set()
    pending = [_function_of(answer)]
    while pending:
        function = pending.pop()
        if function is None or id(function) in seen:
            continue
        seen.add(id(function))
        names: set[str] = set()
        for code in _code_objects(function.__code__):
            names.update(code.co_names)
        cells = {name: cell.cell_contents
                 for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ())
                 if _has_contents(cell)}
        namespace = {**function.__globals__, **cells}
        for name in names | set(cells):
            value = namespace.get(name)
            if value is not None and not _is_engine_object(value):
                own = _function_of(value)
                if own is not None:
                    pending.append(own)  # the student's helper: look inside it
                continue
            if name in forbidden:  # an engine object, an attribute or an unknown global
                found.add(name)
            elif value is not None and getattr(value, "__name__", None) in forbidden:
                found.add(value.__name__)  # an engine function under another name
    return sorted(found)


def _has_contents(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # a closure variable not assigned yet
        return False
    return True
