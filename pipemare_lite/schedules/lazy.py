"""Lazy schedules: a long run made action by action as the executor asks (chapter 07's fit).

``fit`` trains K minibatches (5000 and more) as ONE schedule. Materialized, async with P=8,
N=4 and K=5000 is 360k Action objects; but a long schedule is the builder's schedule for a
few minibatches with its steady part repeated. Cut each rank's row after its updates into
windows (window k ends with the rank's update(s) of minibatch k)::

    build(K0):      | w0 | w1 | w2 | w3 | w4 |        w0, w1: filling (and warm-up);
                                                      w2 -> w3: steady (w3 == w2+1);
                                                      w4: the drain, nothing new to start
    K minibatches:  | w0 | w1 | w2 | w2+1 | w2+2 | ... | w2+n | w3+n | w4+n |   n = K - K0

    "w+j": window w with every microbatch index + j*N and every update index + j.

A :class:`LazySchedule` keeps build(K0) (small) and which window is steady; ``row(rank)``
yields the K-minibatch row one action at a time, so the run is never materialized. It has
the attributes and sizes of a :class:`~pipemare_lite.schedules.actions.Schedule`
(``ranks[r]`` iterates lazily and has a length, but no indexing); what needs the whole list
(simulate, staleness, figures, the ``schedule`` CLI) uses a Schedule, or
:meth:`LazySchedule.materialize` for small sizes.

Why it is still a valid schedule: build(K0), build(K0+1) and build(K0+2) are validated in
full by their builder, and :func:`lazy_schedule` checks that the two larger ones are exactly
build(K0) with one and two more steady windows. Between windows everything is a translate,
so every dependency, update and flush pattern of the long run already occurs (and is met) in
the short ones; tests/test_lazy_schedules.py compares ``materialize()`` with the builder's
own K-minibatch schedule for every schedule at many sizes. A builder whose rows are not
periodic this way gets its schedule materialized, as before. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from itertools import islice

from pipemare_lite.schedules.actions import UPDATE, Action, Schedule
from pipemare_lite.schedules.validation import LIMITS, validate


def lazy_schedule(build: Callable[[int], Schedule], num_minibatches: int, *,
                  warmup_minibatches: int = 0, notes: tuple[str, ...] | None = None
                  ) -> Schedule | LazySchedule:
    """``build(num_minibatches)``, made lazily when it is long and periodic.

    ``build(k)`` returns the (validated) schedule of ``k`` minibatches. The short one has
    K0 = ``warmup_minibatches`` + 4, 8, 16 ... minibatches, until the filling and the drain
    leave a steady window between them. Short runs, bad sizes (the builder raises its usual
    error) and builders that are not periodic give ``build(num_minibatches)`` itself.
    ``notes``: the long schedule's notes when they depend on its length (default: the
    short schedule's).
    """
    K = num_minibatches
    if isinstance(K, bool) or not isinstance(K, int) or K > LIMITS["num_minibatches"][1]:
        return build(K)
    steady_after = 4
    while warmup_minibatches + steady_after + 2 < K and steady_after <= 128:
        K0 = warmup_minibatches + steady_after
        try:
            short, longer, longest = build(K0), build(K0 + 1), build(K0 + 2)
        except Exception:  # noqa: BLE001  the probe's error would quote K0, not the run's K:
            return build(K)  # the run's own build raises (or, if only K0 failed, succeeds)
        parts = [_steady_parts(short, longer, longest, r) for r in range(short.num_ranks)]
        if None not in parts:
            return LazySchedule(short, parts, K, short.notes if notes is None else notes)
        steady_after *= 2
    return build(K)


class LazyRow:
    """One rank's row of a :class:`LazySchedule`: iterable (made as it goes) and sized."""

    def __init__(self, schedule: LazySchedule, rank: int) -> None:
        self.schedule, self.rank = schedule, rank

    def __iter__(self) -> Iterator[Action]:
        return self.schedule.row(self.rank)

    def __len__(self) -> int:
        head, body, tail = self.schedule._parts[self.rank]
        return len(head) + self.schedule.extra_windows * len(body) + len(tail)


class LazySchedule:
    """A K-minibatch schedule kept as its short version and a steady window (module docstring).

    Attributes (as :class:`~pipemare_lite.schedules.actions.Schedule`'s): ``name``,
    ``num_ranks``, ``num_microbatches``, ``num_minibatches`` (K), ``chunks``,
    ``weight_mode``, ``warmup_minibatches``, ``notes``, ``placement``; ``ranks`` (one
    :class:`LazyRow` per rank). ``short``: the validated schedule of K0 minibatches, where
    measurements that need a whole schedule (T1's delays) are taken: it already shows the
    steady state.
    """

    def __init__(self, short: Schedule, parts: list[tuple[tuple[Action, ...], ...]],
                 num_minibatches: int, notes: tuple[str, ...]) -> None:
        self.short = short
        self.name, self.num_ranks = short.name, short.num_ranks
        self.num_microbatches, self.chunks = short.num_microbatches, short.chunks
        self.weight_mode, self.warmup_minibatches = short.weight_mode, short.warmup_minibatches
        self.num_minibatches, self.notes = num_minibatches, tuple(notes)
        # the Schedule's derived sizes and layout, read from the short schedule
        self.mode, self.split_backward = short.mode, short.split_backward
        self.num_virtual_stages = short.num_virtual_stages  # P * v
        self.placement = short.placement  # virtual stage -> rank
        self.total_microbatches = self.num_microbatches * num_minibatches  # the whole run's
        self.extra_windows = num_minibatches - short.num_minibatches  # n of the drawing
        self._parts = parts  # per rank: head (w0 .. w_b), steady window w_b, tail (w_b+1 ..)
        self.ranks = tuple(LazyRow(self, r) for r in range(self.num_ranks))

    rank_of = Schedule.rank_of
    round_robin = Schedule.round_robin
    stages_of = Schedule.stages_of
    minibatch_of = Schedule.minibatch_of

    def row(self, rank: int, start: int = 0) -> Iterator[Action]:
        """Rank ``rank``'s actions from position ``start`` on, made one at a time."""
        head, body, tail = self._parts[rank]
        n, N = self.extra_windows, self.num_microbatches
        yield from islice(head, start, None)
        start = max(start - len(head), 0)
        first, offset = divmod(min(start, n * len(body)), len(body))
        for j in range(first + 1, n + 1):  # the steady window's copies w_b+1 .. w_b+n
            yield from _shifted(islice(body, offset, None), j, N)
            offset = 0
        yield from _shifted(islice(tail, max(start - n * len(body), 0), None), n, N)  # the drain

    def materialize(self) -> Schedule:
        """The whole schedule as a validated :class:`Schedule` (for small sizes and tests)."""
        return validate(replace(self.short, num_minibatches=self.num_minibatches,
                                ranks=tuple(tuple(self.row(r)) for r in range(self.num_ranks)),
                                notes=self.notes))


def schedule_key(schedule: Schedule | LazySchedule) -> tuple:
    """A checkpoint's record of the schedule it was saved with: its name and rows, or a lazy
    one's name, length, short rows and steady windows."""
    if isinstance(schedule, LazySchedule):
        return (schedule.name, schedule.num_minibatches, schedule.short.rows(),
                [len(head) for head, _, _ in schedule._parts])
    return (schedule.name, schedule.rows())


def short_schedule(schedule: Schedule | LazySchedule) -> Schedule:
    """The schedule to measure a whole run's delays on: itself, or a lazy one's short one."""
    return schedule.short if isinstance(schedule, LazySchedule) else schedule


def materialized(schedule: Schedule | LazySchedule) -> Schedule:
    """A :class:`Schedule` (for consumers that need every action at once)."""
    return schedule.materialize() if isinstance(schedule, LazySchedule) else schedule


# ---------------------------------------------------------------------- periodicity


def _windows(row) -> list[tuple[Action, ...]]:
    """``row`` cut after each run of updates: window k ends with the updates of minibatch k
    (a valid row ends with an update, since every action of a stage precedes its last)."""
    cuts = [i + 1 for i in range(len(row) - 1)
            if row[i].kind == UPDATE and row[i + 1].kind != UPDATE]
    return [tuple(row[start:end]) for start, end in zip([0, *cuts], [*cuts, len(row)])]


def _shifted(actions, j: int, N: int) -> Iterator[Action]:
    """``actions`` moved ``j`` minibatches on: microbatch indices + j*N, update indices + j."""
    return (Action(a.stage, a.kind, a.index + (j if a.kind == UPDATE else j * N))
            for a in actions)


def _steady_parts(short: Schedule, longer: Schedule, longest: Schedule, rank: int):
    """``rank``'s row of ``short`` as (head w0 .. w_b, steady window w_b, tail w_b+1 ..) for
    a steady window w_b (w_b+1 == w_b shifted by one minibatch) such that ``longer`` and
    ``longest`` are ``short`` with one and two more copies of it inserted after w_b; None
    when there is none."""
    N = short.num_microbatches
    A = _windows(short.ranks[rank])
    for b in range(len(A) - 2, -1, -1):  # the last steady window (furthest from filling)
        if A[b + 1] != tuple(_shifted(A[b], 1, N)):
            continue
        if all(_windows(s.ranks[rank]) == A[: b + 1]
               + [tuple(_shifted(A[b], j, N)) for j in range(1, n + 1)]
               + [tuple(_shifted(w, n, N)) for w in A[b + 1:]]
               for n, s in ((1, longer), (2, longest))):
            return sum(A[: b + 1], ()), A[b], sum(A[b + 1:], ())
    return None
