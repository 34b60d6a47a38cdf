"""Hash-checked answers: compare a constant without storing it in clear (chapters 00-04).

Some exercises ask for a single value ("the smallest M with an idle fraction below 10%").
Writing that value into the registry would hand out the answer to anyone who reads the
source, so the registry keeps only ``sha256("<exercise id>:<normalized repr>")``.

Normalization makes equal answers hash equally: ``64``, ``64.0`` and ``numpy.int64(64)``
all become ``"64"``; other floats are rounded to :data:`SIGNIFICANT_DIGITS` significant
digits (so ``0.1 + 0.2`` and ``0.3`` agree); strings are stripped and lower-cased; lists
and tuples are normalized element by element. The exercise id salts the hash, so one
value has a different hash in every exercise.

This hides an answer from a glance, not from a determined search over small integers:
it is a courtesy, not cryptography. Torch-free.
"""

from __future__ import annotations

import hashlib
import math
import numbers

#: Floats are compared after rounding to this many significant digits.
SIGNIFICANT_DIGITS = 6


def normalize(value) -> str:
    """A canonical text for ``value``: equal answers give equal text.

    Raises:
        TypeError: for values with no canonical form (dicts, sets, objects); the message
            names the type and lists what is allowed.
    """
    if isinstance(value, bool):  # bool is an int subclass: keep True distinct from 1
        return f"bool:{value}"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        number = float(value)
        if math.isnan(number) or math.isinf(number):
            return str(number)
        if number.is_integer():
            return str(int(number))
        return repr(float(f"{number:.{SIGNIFICANT_DIGITS}g}"))
    if isinstance(value, str):
        return "str:" + value.strip().lower()
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(normalize(item) for item in value) + "]"
    raise TypeError(
        f"cannot hash an answer of type {type(value).__name__}; "
        "allowed: int, float, bool, str, or a list/tuple of those"
    )


def answer_hash(exercise_id: str, value) -> str:
    """sha256 hex digest of ``"<exercise_id>:<normalize(value)>"``."""
    text = f"{exercise_id}:{normalize(value)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def matches_hash(exercise_id: str, value, expected_hash: str) -> bool:
    """True when ``value`` normalizes to the answer whose hash is ``expected_hash``.

    A value with no canonical form (see :func:`normalize`) simply does not match.
    """
    try:
        return answer_hash(exercise_id, value) == expected_hash
    except TypeError:
        return False
