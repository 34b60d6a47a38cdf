"""Comparing a student's answer with the engine's, saying what is wrong but not what is right.

Every comparator has the signature ``compare(answer, expected) -> str | None``: ``None``
means equal; otherwise a short description built only from the student's own answer and
the shape of the task (number of ranks, position of the first difference), never from the
expected value. Used by the exercises of chapters 00-05. Torch-free.
"""

from __future__ import annotations

import math
import numbers

#: Relative and absolute tolerance for float answers.
REL_TOL, ABS_TOL = 1e-9, 1e-12


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def compare_float(answer, expected) -> str | None:
    """A real number equal to ``expected`` up to :data:`REL_TOL` / :data:`ABS_TOL`."""
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        return f"returned {_short(answer)} ({type(answer).__name__}); expected a number"
    if math.isclose(float(answer), float(expected), rel_tol=REL_TOL, abs_tol=ABS_TOL):
        return None
    return f"returned {float(answer):.6g}, which is not right"


def compare_int(answer, expected) -> str | None:
    """An integer (int or numpy integer) equal to ``expected``."""
    if isinstance(answer, bool) or not isinstance(answer, numbers.Integral):
        return f"returned {_short(answer)} ({type(answer).__name__}); expected an int"
    if int(answer) == int(expected):
        return None
    return f"returned {int(answer)}, which is not right"


def _as_list(answer):
    """numpy arrays (anything with ``tolist``) compare like the lists they hold."""
    return answer.tolist() if hasattr(answer, "tolist") and not isinstance(answer, str) else answer


def compare_int_list(answer, expected) -> str | None:
    """A list with one int per stage, equal to ``expected`` element by element."""
    answer = _as_list(answer)
    if not isinstance(answer, (list, tuple)):
        return f"returned {_short(answer)} ({type(answer).__name__}); expected a list of ints"
    if len(answer) != len(expected):
        return f"returned {len(answer)} values; expected one per stage ({len(expected)})"
    for stage, value in enumerate(answer):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            return f"stage {stage}: {_short(value)} is not an int"
    for stage, (value, right) in enumerate(zip(answer, expected)):
        if int(value) != int(right):
            return f"stage {stage}: you have {int(value)}, which is not right"
    return None


def compare_rows(answer, expected) -> str | None:
    """One list of action strings per rank (``"0F0"``, ``"1B3"``), equal row by row.

    Items are compared by ``str(item).strip()``, so engine ``Action`` objects work too.
    """
    answer = _as_list(answer)
    if not isinstance(answer, (list, tuple)) or not all(
        isinstance(row, (list, tuple)) for row in answer
    ):
        return (
            f"returned {_short(answer)}; expected a list with one list of action strings "
            "per rank, e.g. [['0F0', '0B0'], ['1F0', '1B0']]"
        )
    if len(answer) != len(expected):
        return f"returned {len(answer)} rows; expected one row per rank ({len(expected)})"
    for rank, (row, right_row) in enumerate(zip(answer, expected)):
        mine = [str(item).strip() for item in row]
        for position, (item, right) in enumerate(zip(mine, right_row)):
            if item != right:
                return (
                    f"rank {rank}, position {position}: you have {item!r} there, "
                    "which is not right"
                )
        if len(mine) < len(right_row):
            return f"rank {rank}: too few actions (you have {len(mine)})"
        if len(mine) > len(right_row):
            extra = mine[len(right_row)]
            return f"rank {rank}: too many actions (you have {len(mine)}); extra: {extra!r}"
    return None
