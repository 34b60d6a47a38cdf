"""Minibatch repetition, in one place: K minibatches from one (chapter 02; fit in chapter 07).

Every long schedule is a short one with a steady window repeated, held as
:class:`~pipemare_lite.schedules.rows.PeriodicRow` rows of an ordinary
:class:`~pipemare_lite.schedules.actions.Schedule`, so a run of any length stays small:

- :func:`repeated`: a one-minibatch pattern K times, minibatch k's microbatch ``j``
  renumbered ``k * N + j`` and its update ``k``. Every flushing builder (naive, gpipe, 1f1b,
  interleaved, zb-h1, zb-h2, zb-v, dualpipev) describes one minibatch and ends with this;
  :func:`repeat_schedule` is the same for a hand-written pattern (``fit(schedule=...)``)::

      rank 0:  0F0 0F1 0B0 0B1 0U0  |  0F2 0F3 0B2 0B3 0U1  |  ...
               minibatch 0          |  minibatch 1

  Each copy ends with its update before the next one starts, so a repeated pattern flushes
  between minibatches whatever its weight mode; the copies keep the pattern's placement.

- :func:`long_schedule`: a schedule that overlaps minibatches (PipeDream, 2BW, async) is
  periodic only after it fills. Cut each rank's row after its updates into windows (window
  k ends with the rank's update(s) of minibatch k)::

      build(K0):      | w0 | w1 | w2 | w3 | w4 |        w0, w1: filling (and warm-up);
                                                        w2 -> w3: steady (w3 == w2+1);
                                                        w4: the drain, nothing new to start
      K minibatches:  | w0 | w1 | w2 | w2+1 | w2+2 | ... | w2+n | w3+n | w4+n |   n = K - K0

  ``long_schedule(build, K)`` builds K0, K0+1 and K0+2 minibatches, finds the steady window
  and returns the K-minibatch schedule with head (w0 w1), window (w2) and tail (w3 w4).

Why a periodic schedule is valid: its short forms (the window there 1, 2 and 3 times:
build(K0), build(K0+1), build(K0+2) above) are validated in full
(:func:`~pipemare_lite.schedules.validation.validate` does so for a row with more copies,
and never walks the long one). Between windows everything is a translate, so every
dependency, update and flush pattern of the long run already occurs (and is met) in the
short ones; tests/test_lazy_schedules.py compares the rows with the builders' plainly
written K-minibatch schedules at many sizes. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pipemare_lite.schedules.actions import UPDATE, Schedule
from pipemare_lite.schedules.rows import PeriodicRow, shifted, with_copies
from pipemare_lite.schedules.validation import (
    LIMITS,
    ScheduleError,
    check_sizes,
    is_validated,
    validate,
)


def repeated(pattern: Schedule, num_minibatches: int, notes: tuple[str, ...] | None = None
             ) -> Schedule:
    """``pattern`` (one minibatch) run ``num_minibatches`` times, validated; ``notes``
    default to the pattern's."""
    if num_minibatches == 1 and notes is None:
        return validate(pattern)  # once is the pattern itself
    rows = tuple(PeriodicRow((), row, 1, (), pattern.num_microbatches).copies(num_minibatches)
                 for row in pattern.ranks)
    return validate(replace(pattern, ranks=rows, num_minibatches=num_minibatches,
                            notes=pattern.notes if notes is None else tuple(notes)))


def repeat_schedule(pattern: Schedule, num_minibatches: int) -> Schedule:
    """``pattern`` (one minibatch) run ``num_minibatches`` times, one after another."""
    if pattern.num_minibatches != 1:
        raise ScheduleError(
            f"schedule {pattern.name!r} covers {pattern.num_minibatches} minibatches; "
            "only a one-minibatch pattern can be repeated"
        )
    check_sizes(pattern.name, pattern.num_ranks, pattern.num_microbatches, num_minibatches,
                pattern.chunks)
    if pattern.warmup:  # a pattern, not a run: no warm-up (each copy flushes)
        pattern = replace(pattern, warmup=0)
    return repeated(validate(pattern), num_minibatches, repeat_notes(pattern, num_minibatches))


def repeat_notes(pattern: Schedule, num_minibatches: int) -> tuple[str, ...]:
    """The notes of ``pattern`` repeated ``num_minibatches`` times."""
    return (*pattern.notes, f"one-minibatch pattern repeated {num_minibatches} times")


def schedule_for_steps(schedule: Schedule, steps: int) -> Schedule:
    """``schedule`` itself when it runs exactly ``steps`` minibatches, its one-minibatch
    pattern repeated ``steps`` times, or a :class:`ScheduleError` saying which is allowed."""
    if schedule.num_minibatches == steps:
        return schedule
    if schedule.num_minibatches == 1:
        return repeat_schedule(schedule, steps)
    raise ScheduleError(
        f"schedule {schedule.name!r} runs {schedule.num_minibatches} minibatches but the run "
        f"has {steps} steps; allowed: a one-minibatch pattern (repeated) or exactly {steps}"
    )


# ---------------------------------------------------------------------- long runs


def long_schedule(build: Callable[[int], Schedule], num_minibatches: int, *, warmup: int = 0,
                  notes: tuple[str, ...] | None = None) -> Schedule:
    """``build(num_minibatches)``, held as head + steady window + tail when it is long.

    ``build(k)`` returns the (validated) schedule of ``k`` minibatches. The short one has
    K0 = ``warmup`` + 4, 8, 16 ... minibatches, until the filling and the drain leave a
    steady window between them. Short runs, bad sizes (the builder raises its usual error)
    and builders that are not periodic give ``build(num_minibatches)`` itself. ``notes``:
    the long schedule's notes when they depend on its length (default: the short one's).
    """
    K = num_minibatches
    if isinstance(K, bool) or not isinstance(K, int) or K > LIMITS["num_minibatches"][1]:
        return build(K)
    steady_after = 4
    while warmup + steady_after + 2 < K and steady_after <= 128:
        K0 = warmup + steady_after
        try:
            short, longer, longest = build(K0), build(K0 + 1), build(K0 + 2)
        except Exception:  # noqa: BLE001  the probe's error would quote K0, not the run's K:
            return build(K)  # the run's own build raises (or, if only K0 failed, succeeds)
        parts = [_steady_parts(short, longer, longest, r) for r in range(short.num_ranks)]
        if None not in parts:
            N, n = short.num_microbatches, K - K0
            rows = tuple(PeriodicRow(head, window, n + 1, tail, N) for head, window, tail in parts)
            long = replace(short, num_minibatches=K, ranks=rows,
                           notes=short.notes if notes is None else tuple(notes))
            # checked by its short forms when ``build`` gives validated schedules; a method's
            # order run in another weight mode (a plugin's replace()) is not re-validated,
            # as build(K) itself would not be
            return validate(long) if is_validated(short) else long
        steady_after *= 2
    return build(K)


def is_long_run(schedule: Schedule) -> bool:
    """True for a schedule made by :func:`long_schedule` (its rows end with a drain after
    the repeated window); False for any other, a repeated pattern included."""
    return all(isinstance(row, PeriodicRow) and row.tail for row in schedule.ranks)


def schedule_key(schedule: Schedule) -> tuple:
    """A checkpoint's record of the schedule it was saved with: its name and rows, or a long
    run's name, length, short rows and where each steady window ends (the key
    checkpoints have always recorded, so old ones still load)."""
    if is_long_run(schedule):
        return (schedule.name, schedule.num_minibatches, with_copies(schedule, 1).rows(),
                [len(row.head) + len(row.window) for row in schedule.ranks])
    return (schedule.name, schedule.rows())


def short_schedule(schedule: Schedule) -> Schedule:
    """The schedule to measure a whole run's delays on: itself, or a long run's short form
    (build(K0) of :func:`long_schedule`, which already shows the steady state)."""
    return with_copies(schedule, 1) if is_long_run(schedule) else schedule


def materialized(schedule: Schedule) -> Schedule:
    """``schedule`` with every row a tuple (for consumers that need every action at once)."""
    if all(isinstance(row, tuple) for row in schedule.ranks):
        return schedule
    return validate(replace(schedule, ranks=tuple(tuple(row) for row in schedule.ranks)))


def _windows(row) -> list[tuple]:
    """``row`` cut after each run of updates: window k ends with the updates of minibatch k
    (a valid row ends with an update, since every action of a stage precedes its last)."""
    cuts = [i + 1 for i in range(len(row) - 1)
            if row[i].kind == UPDATE and row[i + 1].kind != UPDATE]
    return [tuple(row[start:end]) for start, end in zip([0, *cuts], [*cuts, len(row)])]


def _steady_parts(short: Schedule, longer: Schedule, longest: Schedule, rank: int):
    """``rank``'s row of ``short`` as (head w0 .. w_b-1, steady window w_b, tail w_b+1 ..)
    for a steady window w_b (w_b+1 == w_b shifted by one minibatch) such that ``longer`` and
    ``longest`` are ``short`` with one and two more copies of it inserted after w_b; None
    when there is none."""
    N = short.num_microbatches
    A = _windows(tuple(short.ranks[rank]))
    for b in range(len(A) - 2, -1, -1):  # the last steady window (furthest from filling)
        if A[b + 1] != tuple(shifted(A[b], 1, N)):
            continue
        if all(_windows(tuple(s.ranks[rank])) == A[: b + 1]
               + [tuple(shifted(A[b], j, N)) for j in range(1, n + 1)]
               + [tuple(shifted(w, n, N)) for w in A[b + 1:]]
               for n, s in ((1, longer), (2, longest))):
            return sum(A[:b], ()), A[b], sum(A[b + 1:], ())
    return None
