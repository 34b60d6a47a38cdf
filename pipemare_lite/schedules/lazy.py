"""Old home of the long-run helpers, now in :mod:`pipemare_lite.schedules.repeat`.

A long run is an ordinary :class:`~pipemare_lite.schedules.actions.Schedule` whose rows are
:class:`~pipemare_lite.schedules.rows.PeriodicRow` (there is no ``LazySchedule`` any more).
These names stay importable from here until the next release (0.3), for code written
against this module; import them from :mod:`pipemare_lite.schedules.repeat`. Torch-free.
"""

from __future__ import annotations

from pipemare_lite.schedules.repeat import (
    long_schedule,
    materialized,
    schedule_key,
    short_schedule,
)

__all__ = ["lazy_schedule", "materialized", "schedule_key", "short_schedule"]


def lazy_schedule(build, num_minibatches, *, warmup_minibatches=0, notes=None):
    """:func:`~pipemare_lite.schedules.repeat.long_schedule` under its old name and
    signature (it returns a Schedule with periodic rows)."""
    return long_schedule(build, num_minibatches, warmup=warmup_minibatches, notes=notes)
