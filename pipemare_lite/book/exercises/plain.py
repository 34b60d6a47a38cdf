"""Answers as plain JSON, so a grading process never unpickles what a student's code made.

The grading worker (:mod:`pipemare_lite.book.exercises.worker`) runs the student's functions and
sends back what they returned; the grader compares. Pickle would let a returned object run
code in the grader when it is loaded, so answers travel as JSON with a few tags:

- ``None``, bools, ints, strings, lists: as themselves; floats too, ``nan`` and the
  infinities tagged; tuples, dicts, ``Fraction`` tagged; an int longer than
  :data:`MAX_INT_BITS` bits (too long for JSON: Python refuses to print it) tagged with its
  sign and size, and decoded as an int of that sign and size (so "too high" stays true);
- numpy arrays and scalars: as the lists and numbers ``tolist()`` gives;
- anything else (a dataclass included): a :class:`ForeignValue` holding its type name and
  ``str()``, so a comparator can still say "returned a <type>; expected ...".

Decoding (:func:`from_plain`) knows a fixed list of types: ``None``, bool, int, float, str,
list, tuple, dict, ``Fraction`` and :class:`ForeignValue`. It never imports anything a worker
names (until issue 31 an engine dataclass was rebuilt by importing the module its
``__module__`` named: a submission could name a module it had just written into the package,
and it ran in the grader), and anything it does not know is a ``ValueError``.
Strings longer than :data:`MAX_TEXT` characters are cut.

For instructors: docs/instructors.md. Torch-free.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

#: Deepest nesting and most items an answer may have before it is cut (a runaway answer
#: must not exhaust the grader's memory).
MAX_DEPTH, MAX_ITEMS = 12, 200_000
#: Longest string an answer may hold (longer ones are cut, with a mark).
MAX_TEXT = 100_000
#: Longest int sent as itself (Python will not turn an int of over 4,300 digits into text).
MAX_INT_BITS = 13_000


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
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = str.__str__(value)
        return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "...(cut)"
    if isinstance(value, int):
        if int(value).bit_length() > MAX_INT_BITS:
            return {"__huge_int__": 1 if value > 0 else -1, "bits": int(value).bit_length()}
        return int(value)
    if isinstance(value, float):  # numpy's float64 too: its repr is "np.float64(nan)"
        value = float(value)
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
    try:
        text = str(value)
    except Exception as exc:  # a student's __str__ may raise
        text = f"(str() raised {type(exc).__name__})"
    return {"__foreign__": type(value).__name__[:100], "text": text[:2000]}


def from_plain(data, _depth: int = 0):
    """The value :func:`to_plain` encoded, from the fixed list of types in the module
    docstring; nothing is imported.

    Raises:
        ValueError: ``data`` holds something else, or nests deeper than :data:`MAX_DEPTH`.
    """
    if _depth > MAX_DEPTH + 2:
        raise ValueError(f"the answer nests deeper than {MAX_DEPTH} levels")
    again = lambda item: from_plain(item, _depth + 1)  # noqa: E731
    if data is None or isinstance(data, (bool, int, float)):
        return data
    if isinstance(data, str):
        return data[: MAX_TEXT + 10]
    if isinstance(data, list):
        return [again(item) for item in data]
    if not isinstance(data, dict) or len(data) > 2:
        raise ValueError(f"not an encoded answer: {type(data).__name__}")
    if "__float__" in data and str(data["__float__"]) in ("nan", "inf", "-inf"):
        return float(data["__float__"])
    if "__huge_int__" in data and data["__huge_int__"] in (1, -1) and type(data.get("bits")) is int:
        # an int of the same sign and (up to a cap on the grader's memory) the same size
        bits = min(max(data["bits"], MAX_INT_BITS + 1), 4 * MAX_INT_BITS)
        return data["__huge_int__"] * (1 << (bits - 1))
    if "__fraction__" in data:
        numerator, denominator = data["__fraction__"]
        if not all(type(n) is int for n in (numerator, denominator)):
            raise ValueError("a fraction of non-integers")
        return Fraction(numerator, denominator)
    if "__tuple__" in data and isinstance(data["__tuple__"], list):
        return tuple(again(item) for item in data["__tuple__"])
    if "__dict__" in data and isinstance(data["__dict__"], list):
        return {_hashable(again(k)): again(v) for k, v in data["__dict__"]}
    if "__foreign__" in data:
        return ForeignValue(str(data["__foreign__"])[:100], str(data.get("text", ""))[:2000])
    raise ValueError(f"not an encoded answer: a dict with keys {sorted(map(str, data))[:3]}")


def _hashable(key):
    return key if getattr(key, "__hash__", None) is not None else repr(key)


def dumps(value) -> str:
    """``json.dumps(to_plain(value))``."""
    return json.dumps(to_plain(value))


def loads(text: str):
    """``from_plain(json.loads(text))``."""
    return from_plain(json.loads(text))
