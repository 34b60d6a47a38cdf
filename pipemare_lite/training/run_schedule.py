"""Which schedule a ``fit()`` run executes (chapter 07; docs/write-a-schedule.md).

Three ways to say it:

- ``method="1f1b"`` (chapter 07): the method's builder, sized by ``num_ranks``,
  ``num_microbatches`` and the run's steps;
- ``schedule="my-name"``: a builder added with
  :func:`~pipemare_lite.schedules.registry.register_schedule`, sized the same way;
- ``schedule=<Schedule>`` or a ``.csv`` / ``.json`` file: a hand-written schedule. It
  fixes the stages, chunks and microbatches itself (``fit``'s, when given, must agree); it
  either covers the whole run or is one minibatch, repeated once per step
  (:func:`~pipemare_lite.schedules.repeat.repeat_schedule`).

The weight mode (what a backward reads) is the schedule's: declared by the builder, the
JSON file, the method given beside a CSV file, or derived when the schedule flushes (see
:mod:`pipemare_lite.schedules.io`); an undeclared schedule that does not flush is refused. A
``method`` given beside a schedule brings its options (T1, T2) and must have the same
weight mode. Everything is checked before any training, with errors that name the value.
Imports torch only to look up a method's weight mode.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.io import SCHEDULE_SUFFIXES, load_schedule, to_csv
from pipemare_lite.schedules.names import ALIASES
from pipemare_lite.schedules.registry import BUILDERS, build_schedule, schedule_names
from pipemare_lite.schedules.repeat import (
    long_schedule,
    repeat_notes,
    repeat_schedule,
    schedule_for_steps,
)


@dataclass(frozen=True)
class ScheduleChoice:
    """A resolved ``schedule=`` argument: a registered ``name``, or a ``given`` schedule."""

    label: str  # how the run's settings record it
    name: str | None = None
    given: Schedule | None = None
    weight_mode: str | None = None


def resolve(schedule, weight_mode: str | None = None, method: str | None = None
            ) -> ScheduleChoice | None:
    """Read ``fit``'s ``schedule=`` argument (None: the method's own schedule).

    ``weight_mode`` declares a CSV file's (the command line's ``--weight-mode``); without
    it, a ``method`` given beside a CSV file declares its own mode for it."""
    if weight_mode is None and method is not None and schedule is not None:
        from pipemare_lite.methods import get_method

        method_mode = get_method(method).weight_mode
        if str(schedule).lower().endswith(".csv"):
            weight_mode = method_mode
    if weight_mode is not None and not (
            isinstance(schedule, (str, os.PathLike)) and str(schedule).lower().endswith(".csv")):
        raise ValueError(f"weight mode {weight_mode!r} only applies to a .csv schedule file "
                         "(a builder, a Schedule or a JSON file declares its own)")
    if schedule is None:
        return None
    if isinstance(schedule, Schedule):
        return ScheduleChoice(label=_label(schedule), given=schedule,
                              weight_mode=schedule.weight_mode)
    if isinstance(schedule, str) and ALIASES.get(schedule, schedule) in BUILDERS:
        from pipemare_lite.schedules.names import weight_mode_of

        mode = weight_mode_of(ALIASES.get(schedule, schedule))
        return ScheduleChoice(label=schedule, name=schedule, weight_mode=mode)
    if isinstance(schedule, (str, os.PathLike)) and \
            str(schedule).lower().endswith(SCHEDULE_SUFFIXES):
        loaded = load_schedule(schedule, weight_mode=weight_mode)
        return ScheduleChoice(label=_label(loaded), given=loaded, weight_mode=loaded.weight_mode)
    raise ValueError(
        f"schedule={schedule!r}: allowed: a Schedule, a registered name "
        f"({', '.join(schedule_names())}) or a {'/'.join(SCHEDULE_SUFFIXES)} file"
    )


def _label(schedule: Schedule) -> str:
    """``name#digest``: a hand-written schedule recorded by its rows, so that resuming a
    checkpoint with other rows is refused."""
    digest = hashlib.sha256(to_csv(schedule).encode()).hexdigest()[:12]
    return f"{schedule.name}#{digest}"


def fill_sizes(choice: ScheduleChoice, config: dict) -> None:
    """Take stages, microbatches and chunks from a given schedule; refuse disagreement."""
    if choice.given is None:
        return
    s = choice.given
    for key, value in (("num_stages", s.num_ranks), ("num_microbatches", s.num_microbatches),
                       ("chunks", s.chunks)):
        if config[key] is not None and config[key] != value:
            raise ValueError(f"{key}={config[key]!r} disagrees with schedule {s.name!r}, which "
                             f"has {value}; leave {key} out or give {value}")
        config[key] = value
    if config["warmup"]:
        raise ValueError(f"warmup={config['warmup']!r} cannot apply to a given schedule "
                         f"{s.name!r}: write the flushed minibatches into it "
                         "(the Schedule's warmup)")


def check_method(choice: ScheduleChoice, method_name: str | None, method_mode: str | None):
    """A method given beside a schedule must agree with its weight mode."""
    if method_name is None or choice.weight_mode is None or method_mode == choice.weight_mode:
        return
    raise ValueError(
        f"method {method_name!r} reads weights in mode {method_mode!r} but schedule "
        f"{choice.label!r} has weight mode {choice.weight_mode!r}; give a method with that "
        "mode, or no method (then t1/t2 switch PipeMare's techniques)"
    )


def schedule_for_run(choice: ScheduleChoice, num_ranks: int, num_microbatches: int,
                     steps: int, chunks: int, warmup: int) -> Schedule:
    """The schedule of the whole run: ``steps`` minibatches, held as periodic rows when it
    is long (:func:`~pipemare_lite.schedules.repeat.long_schedule`)."""
    if choice.name is not None:
        return long_schedule(
            lambda k: build_schedule(choice.name, num_ranks, num_microbatches, chunks=chunks,
                                     num_minibatches=k, warmup=warmup),
            steps, warmup=warmup)
    given = choice.given
    if given.num_minibatches != 1 or steps == 1:  # the whole run, or refused
        return schedule_for_steps(given, steps)
    return long_schedule(lambda k: repeat_schedule(given, k), steps,
                         notes=repeat_notes(given, steps))
