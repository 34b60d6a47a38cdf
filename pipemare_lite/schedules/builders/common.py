"""Small helpers shared by the schedule builders (introduced in chapter 02).

Builders describe a rank's order as plain ``(kind, stage, index)`` triples, which read like
the schedule itself; :func:`make_schedule` turns them into :class:`Action` objects, checks the
sizes and validates the result. A flushing builder describes ONE minibatch (microbatches
0..N-1, no update) and :func:`flushed_schedule` adds each stage's update and repeats it K
times (:func:`~pipemare_lite.schedules.repeat.repeated`). Torch-free.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import replace

from pipemare_lite.schedules.actions import KINDS, Action, Schedule, placement_named
from pipemare_lite.schedules.repeat import repeated
from pipemare_lite.schedules.validation import validate


def make_schedule(name: str, num_ranks: int, num_microbatches: int,
                  orders: list[list[tuple[str, int, int]]], *, num_minibatches: int = 1,
                  chunks: int = 1, weight_mode: str = "sync", warmup: int = 0,
                  notes: tuple[str, ...] = (), placement: tuple[int, ...] | None = None
                  ) -> Schedule:
    """Build and validate a :class:`Schedule` from per-rank lists of ``(kind, stage, index)``
    (``placement``: virtual stage -> rank; None: round robin; ``warmup``: W flushed minibatches)."""
    schedule = Schedule(name=name, num_ranks=num_ranks, num_microbatches=num_microbatches,
                        ranks=tuple(tuple(actions_of(order)) for order in orders),
                        num_minibatches=num_minibatches, chunks=chunks,
                        weight_mode=weight_mode, warmup=warmup,
                        notes=tuple(notes), placement=placement)
    return validate(schedule)


def flushed_schedule(name: str, num_ranks: int, num_microbatches: int,
                     minibatch: list[list[tuple[str, int, int]]], num_minibatches: int = 1, *,
                     chunks: int = 1, notes: tuple[str, ...] = (),
                     placement: tuple[int, ...] | None = None) -> Schedule:
    """The flushing schedule whose rank ``r`` runs ``minibatch[r]`` (one minibatch's
    ``(kind, stage, microbatch)`` triples), then updates each of its stages in model order,
    ``num_minibatches`` times; validated."""
    pattern = Schedule(name, num_ranks, num_microbatches, tuple(() for _ in minibatch),
                       chunks=chunks, placement=placement)  # says who holds what
    orders = [order + [("U", stage, 0) for stage in pattern.stages_of(rank)]
              for rank, order in enumerate(minibatch)]
    one = make_schedule(name, num_ranks, num_microbatches, orders, chunks=chunks, notes=notes,
                        placement=pattern.placement)
    return repeated(one, num_minibatches)


def on_placement(schedule: Schedule, placement) -> Schedule:
    """The same rows with each rank's chunks moved to another placement, validated.

    ``placement``: a style (``"loop"``, ``"v"``) or one rank per virtual stage. Rank r's
    c-th stage (in model order) becomes its c-th stage under the new placement, so every
    rank runs the same sequence of (chunk, microbatch) work; whether that order can still
    run is the validator's to say (ZB-V's order on the loop placement deadlocks: its
    chunk-1 forwards wait for a rank that is still in its warm-up). Named "custom", with a
    note saying where it came from.
    """
    if isinstance(placement, str):
        placement = placement_named(placement, schedule.num_ranks, schedule.chunks)
    # an empty schedule on the new placement: it checks the map and says who holds what
    target = Schedule("custom", schedule.num_ranks, schedule.num_microbatches,
                      tuple(() for _ in schedule.ranks), chunks=schedule.chunks,
                      placement=placement)
    stage_map = {old: new for rank in range(schedule.num_ranks)
                 for old, new in zip(schedule.stages_of(rank), target.stages_of(rank))}
    moved = replace(
        schedule, name="custom", placement=target.placement,
        ranks=tuple(tuple(Action(stage_map[a.stage], a.kind, a.index) for a in row)
                    for row in schedule.ranks),
        notes=(*schedule.notes, f"{schedule.name}'s order on placement {list(target.placement)}"))
    return validate(moved)


def actions_of(order: list[tuple[str, int, int]]) -> list[Action]:
    """``[Action(stage, kind, index) for kind, stage, index in order]``, a third faster.

    Kept for the benchmark (0.1-0.2 s of a P=128, N=1024 build): large schedules hold
    hundreds of thousands of actions, and the frozen dataclass' ``__init__`` (a call per
    field, then ``__post_init__``) is the largest part of building them. Each triple is
    checked here as ``__post_init__`` would; a bad one goes through the real constructor, so
    the error is the usual one. Fields are set the way the dataclass sets them
    (``object.__setattr__``), so the objects are the same, memory layout included.
    """
    new, set_field, kinds, out = object.__new__, object.__setattr__, frozenset(KINDS), []
    append = out.append
    for kind, stage, index in order:
        if kind not in kinds or stage < 0 or index < 0:
            Action(stage, kind, index)  # raises the constructor's error
        action = new(Action)
        set_field(action, "stage", stage)
        set_field(action, "kind", kind)
        set_field(action, "index", index)
        append(action)
    return out


@contextmanager
def gc_paused():
    """Pause the cyclic garbage collector: building or simulating a large schedule makes
    hundreds of thousands of small acyclic objects, which it would rescan many times."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def microbatches_of(minibatch: int, num_microbatches: int) -> list[int]:
    """Global indices of the microbatches of ``minibatch``: ``k*N .. k*N + N-1``."""
    start = minibatch * num_microbatches
    return list(range(start, start + num_microbatches))
