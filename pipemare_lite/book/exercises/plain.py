"""Answers as plain JSON, so a grading process never unpickles what a student's code made.

The grading worker (:mod:`pipemare_lite.book.exercises.worker`) runs the student's functions and
sends back what they returned; the grader compares. Pickle would let a returned object run
code in the grader when it is loaded, so answers travel as JSON with a few tags:

- ``None``, bools, ints, strings, lists: as themselves; floats too, ``nan`` and the
  infinities tagged; tuples, dicts, ``Fraction`` tagged;
- numpy arrays and scalars: as the lists and numbers ``tolist()`` gives;
- frozen dataclasses of the engine (``Action``, ``Schedule`` ...): tagged with their class,
  rebuilt on the grader's side from their fields (only classes defined in ``pipemare_lite``,
  outside ``pipemare_lite.book.exercises``);
- anything else: a :class:`ForeignValue` holding its type name and ``str()``, so a
  comparator can still say "returned a <type>; expected ...".

For instructors: docs/instructors.md. Torch-free.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from fractions import Fraction

#: Deepest nesting and most items an answer may have before it is cut (a runaway answer
#: must not exhaust the grader's memory).
MAX_DEPTH, MAX_ITEMS = 12, 200_000


class ForeignValue:
    """A value that has no plain form: its type's name and its ``str()``, nothing callable."""

    def __init__(self, type_name: str, text: str):
        self.type_name, self.text = type_name, text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"<{self.type_name} {self.text}>"

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, ForeignValue)
            and (self.type_name, self.text) == (other.type_name, other.text)
        )

    __hash__ = None  # mutable-looking on purpose: never a dict key


def _engine_class(cls) -> bool:
    module = getattr(cls, "__module__", "")
    return (module.startswith("pipemare_lite.")
            and not module.startswith("pipemare_lite.book.exercises"))


class _Budget:
    def __init__(self):
        self.items = 0

    def spend(self) -> None:
        self.items += 1
        if self.items > MAX_ITEMS:
            raise ValueError(f"the answer has more than {MAX_ITEMS} items")


def to_plain(value, _depth: int = 0, _budget: _Budget | None = None):
    """A JSON-ready form of ``value`` (see the module docstring).

    Raises:
        ValueError: the answer nests deeper than :data:`MAX_DEPTH` or holds more than
            :data:`MAX_ITEMS` items.
    """
    budget = _budget or _Budget()
    budget.spend()
    if _depth > MAX_DEPTH:
        raise ValueError(f"the answer nests deeper than {MAX_DEPTH} levels")
    again = lambda item: to_plain(item, _depth + 1, budget)  # noqa: E731
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, Fraction):
        return {"__fraction__": [value.numerator, value.denominator]}
    if isinstance(value, list):
        return [again(item) for item in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"__tuple__": [again(item) for item in value]}
    if isinstance(value, dict):
        return {"__dict__": [[again(k), again(v)] for k, v in value.items()]}
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return again(value.tolist())
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and _engine_class(
        type(value)
    ):
        fields = {f.name: again(getattr(value, f.name)) for f in dataclasses.fields(value)}
        cls = type(value)
        return {"__dataclass__": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}
    try:
        text = str(value)
    except Exception as exc:  # a student's __str__ may raise
        text = f"(str() raised {type(exc).__name__})"
    return {"__foreign__": type(value).__name__[:100], "text": text[:2000]}


def from_plain(data):
    """The value :func:`to_plain` encoded (an engine dataclass is rebuilt from its fields)."""
    if isinstance(data, list):
        return [from_plain(item) for item in data]
    if not isinstance(data, dict):
        return data
    if "__float__" in data:
        return float(data["__float__"])
    if "__fraction__" in data:
        numerator, denominator = data["__fraction__"]
        return Fraction(int(numerator), int(denominator))
    if "__tuple__" in data:
        return tuple(from_plain(item) for item in data["__tuple__"])
    if "__dict__" in data:
        return {_hashable(from_plain(k)): from_plain(v) for k, v in data["__dict__"]}
    if "__dataclass__" in data:
        module_name, _, qualname = str(data["__dataclass__"]).partition(":")
        if module_name.startswith("pipemare_lite.") and not module_name.startswith(
            "pipemare_lite.book.exercises"
        ):
            cls = importlib.import_module(module_name)
            for part in qualname.split("."):
                cls = getattr(cls, part)
            if isinstance(cls, type) and dataclasses.is_dataclass(cls):
                fields = {k: from_plain(v) for k, v in data["fields"].items()}
                try:
                    return cls(**fields)
                except Exception as exc:  # fields the class refuses: report, do not crash
                    return ForeignValue(cls.__name__, f"(invalid {cls.__name__}: {exc})")
        return ForeignValue(qualname, "(not an engine class)")
    if "__foreign__" in data:
        return ForeignValue(str(data["__foreign__"]), str(data.get("text", "")))
    return {k: from_plain(v) for k, v in data.items()}


def _hashable(key):
    return key if key.__hash__ is not None else repr(key)


def dumps(value) -> str:
    """``json.dumps(to_plain(value))``."""
    return json.dumps(to_plain(value))


def loads(text: str):
    """``from_plain(json.loads(text))``."""
    return from_plain(json.loads(text))
