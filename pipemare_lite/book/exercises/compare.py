"""Comparing a student's answer with the engine's, saying what is wrong but not what is right.

Every comparator has the signature ``compare(answer, expected) -> str | None``: ``None``
means equal; otherwise a short description built only from the student's own answer and
the shape of the task (number of ranks, position of the first difference), never from the
expected value. Used by the exercises of chapters 00-06 (ex05_1's gradients arrive as
nested lists). Torch-free.
"""

from __future__ import annotations

import math
import numbers

#: Relative and absolute tolerance for float answers.
REL_TOL, ABS_TOL = 1e-9, 1e-12


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Ints longer than this many bits are shown by their size (Python will not print them).
_LONG_INT_BITS = 13_000


def _number(value) -> str:
    """A returned number as the student is shown it: 6 significant digits, the int itself,
    or, for an int too long to print or turn into a float, its size."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if int(value).bit_length() > _LONG_INT_BITS:  # the grader gets its sign and size
            return "an integer with over 3,900 digits"
        return str(int(value))
    try:
        return f"{float(value):.6g}"
    except (OverflowError, ValueError, TypeError):
        return _short(value)


def _close(answer, expected, rel_tol: float) -> bool:
    """``math.isclose`` for real numbers of any size (a huge int is no float: not close)."""
    try:
        return math.isclose(float(answer), float(expected), rel_tol=rel_tol, abs_tol=ABS_TOL)
    except OverflowError:
        return False


def compare_float(answer, expected) -> str | None:
    """A real number equal to ``expected`` up to :data:`REL_TOL` / :data:`ABS_TOL`."""
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        return f"returned {_short(answer)} ({type(answer).__name__}); expected a number"
    if _close(answer, expected, REL_TOL):
        return None
    return f"returned {_number(answer)}, which is not right: {_direction(answer, expected)}"


def _direction(answer, expected) -> str:
    """"too high" or "too low"; NaN is neither (it compares false with everything), so it is
    named for what it is. Compared exactly (a huge int is no float)."""
    if isinstance(answer, numbers.Real) and answer != answer:
        return "it is NaN (not a number): something divided 0 by 0 or took inf - inf"
    return "too high" if answer > expected else "too low"


def compare_int(answer, expected) -> str | None:
    """An integer (int or numpy integer) equal to ``expected``."""
    if isinstance(answer, bool) or not isinstance(answer, numbers.Integral):
        return f"returned {_short(answer)} ({type(answer).__name__}); expected an int"
    if int(answer) == int(expected):
        return None
    return f"returned {_number(answer)}, which is not right: {_direction(answer, expected)}"


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
            return (
                f"stage {stage}: you have {_number(value)}, which is not right: "
                f"{_direction(value, right)}"
            )
    return None


def compare_float_list(answer, expected) -> str | None:
    """One number per rank, each equal to ``expected``'s up to the float tolerance."""
    answer = _as_list(answer)
    if not isinstance(answer, (list, tuple)):
        return f"returned {_short(answer)}, not a list: expected one number per rank"
    if len(answer) != len(expected):
        return f"returned {len(answer)} numbers; expected one per rank ({len(expected)})"
    for rank, (value, right) in enumerate(zip(answer, expected)):
        problem = compare_float(value, right)
        if problem is not None:
            return f"rank {rank}: {problem.replace('returned', 'you have')}"
    return None


def compare_float_rows(answer, expected) -> str | None:
    """One list of numbers per rank, each equal to ``expected``'s up to the float tolerance."""
    answer = _as_list(answer)
    if not isinstance(answer, (list, tuple)) or not all(
        isinstance(row, (list, tuple)) for row in answer
    ):
        return f"returned {_short(answer)}; expected one list of numbers per rank"
    if len(answer) != len(expected):
        return f"returned {len(answer)} rows; expected one row per rank ({len(expected)})"
    for rank, (row, right_row) in enumerate(zip(answer, expected)):
        if len(row) != len(right_row):
            return f"rank {rank}: {len(row)} numbers; expected {len(right_row)}"
        for position, (value, right) in enumerate(zip(row, right_row)):
            problem = compare_float(value, right)
            if problem is not None:
                problem = problem.replace("returned", "you have")
                return f"rank {rank}, position {position}: {problem}"
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


def compare_close(rel_tol: float):
    """A comparator for a number found by a numerical search: right within ``rel_tol``.

    Says whether a wrong answer is too high or too low, never by how much.
    """

    def compare(answer, expected) -> str | None:
        if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
            return f"returned {_short(answer)} ({type(answer).__name__}); expected a number"
        if _close(answer, expected, rel_tol):
            return None
        return f"returned {_number(answer)}, which is not right: {_direction(answer, expected)}"

    compare.__doc__ = f"A real number within a relative {rel_tol:g} of the expected one."
    return compare


def _real_list(answer, what: str):
    """``(list of floats, None)`` or ``(None, problem)`` for a sequence of real numbers."""
    answer = _as_list(answer)
    if not isinstance(answer, (list, tuple)):
        kind = type(answer).__name__
        return None, f"returned {_short(answer)} ({kind}); expected a list of {what}"
    for position, value in enumerate(answer):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return None, f"item {position}: {_short(value)} is not a real number"
    return [float(value) for value in answer], None


def compare_iterates(answer, expected) -> str | None:
    """A list of iterates ``w[0..T]`` equal to ``expected`` up to rounding.

    Rounding is judged against the largest iterate so far, so a diverging run whose values
    pass near zero is not failed for the last bits of a large number.
    """
    values, problem = _real_list(answer, "iterates w[0..steps]")
    if problem:
        return problem
    if len(values) != len(expected):
        return f"returned {len(values)} values; expected w[0..steps], one more than the steps"
    scale = 1.0
    for t, (value, right) in enumerate(zip(values, expected)):
        scale = max(scale, abs(right))
        if not (math.isfinite(value) and abs(value - right) <= REL_TOL * 1e3 * scale):
            return f"w[{t}] is {value:.6g} in yours, which is not right"
    return None


def compare_polynomial(answer, expected) -> str | None:
    """Polynomial coefficients, highest power first, equal up to rounding.

    Trailing zeros are dropped from both first: multiplying a polynomial by z only adds a
    root at 0, which changes nothing about stability, so both forms are accepted.
    """
    values, problem = _real_list(answer, "coefficients, highest power first")
    if problem:
        return problem
    trim = lambda c: c[: max(k for k, x in enumerate(c) if abs(x) > ABS_TOL) + 1]  # noqa: E731
    bad = next((k for k, x in enumerate(values) if not math.isfinite(x)), None)
    if bad is not None:  # NaN and inf compare false with everything: name them
        return f"coefficient {bad} (highest power first) is {values[bad]}, not a finite number"
    if not values or all(abs(x) <= ABS_TOL for x in values):
        return "returned no nonzero coefficient"
    mine, right = trim(values), trim([float(x) for x in expected])
    if len(mine) != len(right):
        side = "too high" if len(mine) > len(right) else "too low"
        return f"your polynomial has degree {len(mine) - 1} (trailing zeros dropped): {side}"
    degree = len(mine) - 1
    for k, (value, good) in enumerate(zip(mine, right)):
        if not math.isclose(value, good, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return f"the coefficient of z^{degree - k} is {value:.6g} in yours, which is not right"
    return None


def _flat_reals(value) -> list[float] | None:
    """The numbers of a nested list (a tensor's ``tolist()``), flattened; None if not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return [float(value)]
    if not isinstance(value, (list, tuple)):
        return None
    flat: list[float] = []
    for item in value:
        inner = _flat_reals(item)
        if inner is None:
            return None
        flat += inner
    return flat


def _same_reals(answer, expected) -> bool:
    mine, right = _flat_reals(answer), _flat_reals(expected)
    return (
        mine is not None
        and right is not None
        and len(mine) == len(right)
        and all(math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL) for a, b in zip(mine, right))
    )


def compare_gradients(answer, expected) -> str | None:
    """``(input gradient, [parameter gradients])`` as nested lists, each close to the
    expected one (ex05_1: what a backward computed under the student's hooks)."""
    if not (isinstance(answer, (list, tuple)) and len(answer) == 2):
        return f"gave {_short(answer)}; expected an input gradient and parameter gradients"
    (grad_x, grads), (right_x, right_grads) = answer, expected
    if grad_x is None or not _same_reals(grad_x, right_x):
        return ("gives an input gradient that is not the one a backward with the chosen "
                "weights computes")
    if not isinstance(grads, (list, tuple)) or len(grads) != len(right_grads):
        return "does not give one gradient per parameter"
    for i, (got, right) in enumerate(zip(grads, right_grads)):
        if got is None:
            return f"leaves parameter {i} without a gradient"
        if not _same_reals(got, right):
            return f"gives parameter {i} a gradient that is not the right one"
    return None


def compare_stage_or_none(answer, expected) -> str | None:
    """A stage number (an int) or None, equal to ``expected``; a wrong one is only called
    wrong (naming the right stage, or that there is none, would give the answer away)."""
    if answer is None:
        return None if expected is None else "returned no stage, which is not right"
    if isinstance(answer, bool) or not isinstance(answer, numbers.Integral):
        return (f"returned {_short(answer)} ({type(answer).__name__}); expected a stage "
                "number (an int), or no stage at all")
    if expected is not None and int(answer) == int(expected):
        return None
    return f"returned stage {int(answer)}, which is not right"


def compare_update_or_none(answer, expected) -> str | None:
    """An update index (an int) or None, equal to ``expected``; a wrong one is called wrong
    with its direction (earlier or later), never with the right update."""
    if answer is None:
        return None if expected is None else "returned no update (never), which is not right"
    if isinstance(answer, bool) or not isinstance(answer, numbers.Integral):
        return (f"returned {_short(answer)} ({type(answer).__name__}); expected an update "
                "index (an int), or None for never")
    if expected is None:
        return f"returned update {int(answer)}, which is not right"
    if int(answer) == int(expected):
        return None
    return f"returned update {_number(answer)}, which is not right: {_direction(answer, expected)}"


def compare_bytes_by_kind(answer, expected) -> str | None:
    """A dict of bytes by memory kind with exactly ``expected``'s keys, each an equal int;
    a wrong kind is named with the student's own value and whether it is too high or low."""
    if not isinstance(answer, dict):
        return f"returned {_short(answer)} ({type(answer).__name__}); expected a dict of bytes"
    missing, extra = sorted(set(expected) - set(answer)), sorted(set(answer) - set(expected))
    if missing or extra:
        return (f"the keys are not right: missing {missing}, unexpected {extra}; expected one "
                "entry per kind")
    for kind in expected:
        value = answer[kind]
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            return f"{kind}: {_short(value)} is not an int number of bytes"
        if int(value) != int(expected[kind]):
            side = _direction(value, expected[kind])
            return f"{kind}: {_number(value)} bytes is not right: {side}"
    return None


def compare_name_or_none(answer, expected) -> str | None:
    """A name (a str) or None, equal to ``expected``; a wrong one is only called wrong."""
    if answer is None:
        return None if expected is None else "returned None (nothing fits), which is not right"
    if not isinstance(answer, str):
        return (f"returned {_short(answer)} ({type(answer).__name__}); expected a method name "
                "or None")
    if answer == expected:
        return None
    return f"returned {answer!r}, which is not right"


def compare_t2_steps(answer, expected) -> str | None:
    """Per update ``[delta, backward weights]`` (nested lists), each close to the expected
    one (ex09_1); says which update and which of the two is wrong first."""
    if not isinstance(answer, (list, tuple)) or len(answer) != len(expected):
        return f"gave {_short(answer)}; expected one (delta, backward weights) per update"
    for k, (got, right) in enumerate(zip(answer, expected)):
        if not (isinstance(got, (list, tuple)) and len(got) == 2):
            return f"update {k}: expected a pair (new delta, backward weights)"
        if not _same_reals(got[0], right[0]):
            return f"update {k}: the new delta is not the right one"
        if not _same_reals(got[1], right[1]):
            return f"update {k}: the backward weights are not the right ones"
    return None
