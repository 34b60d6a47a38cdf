"""A whole run from a one-minibatch pattern (chapter 07's fit; docs/write-a-schedule.md).

A hand-written schedule is usually one minibatch: each rank's forwards, backwards and its
update. :func:`repeat_schedule` lays that pattern out K times, minibatch k's microbatch
``j`` renumbered ``k * N + j`` and its update ``k``, which is what ``fit(schedule=...)``
trains on when the schedule covers one minibatch and the run has K steps::

    rank 0:  0F0 0F1 0B0 0B1 0U0  |  0F2 0F3 0B2 0B3 0U1  |  ...
             minibatch 0          |  minibatch 1

Each copy ends with its update before the next one starts, so a repeated pattern flushes
between minibatches whatever its weight mode. The copies keep the pattern's placement (which
rank holds which virtual stage: a V schedule's stays a V). Torch-free.
"""

from __future__ import annotations

from pipemare_lite.schedules.actions import UPDATE, Schedule
from pipemare_lite.schedules.builders.common import make_schedule
from pipemare_lite.schedules.validation import ScheduleError, check_sizes


def repeat_schedule(pattern: Schedule, num_minibatches: int) -> Schedule:
    """``pattern`` (one minibatch) run ``num_minibatches`` times, one after another."""
    if pattern.num_minibatches != 1:
        raise ScheduleError(
            f"schedule {pattern.name!r} covers {pattern.num_minibatches} minibatches; "
            "only a one-minibatch pattern can be repeated"
        )
    N = pattern.num_microbatches
    check_sizes(pattern.name, pattern.num_ranks, N, num_minibatches, pattern.chunks)
    orders = [[(a.kind, a.stage, a.index + (k if a.kind == UPDATE else k * N))
               for k in range(num_minibatches) for a in row] for row in pattern.ranks]
    return make_schedule(pattern.name, pattern.num_ranks, N, orders,
                         num_minibatches=num_minibatches, chunks=pattern.chunks,
                         weight_mode=pattern.weight_mode, placement=pattern.placement,
                         notes=repeat_notes(pattern, num_minibatches))


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
