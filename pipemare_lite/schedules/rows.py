"""A row that repeats: one rank's actions of a long run, held as one window (chapter 02).

A schedule of K minibatches is mostly one pattern K times. A flushing schedule is exactly
that (its builder describes one minibatch); one that overlaps minibatches (PipeDream, 2BW,
async) fills, settles into a steady window, and drains. :class:`PeriodicRow` holds both::

    head | window+0 | window+1 | ... | window+(n-1) | tail+(n-1)        n = repeats

    "w+j": w moved j minibatches on: every microbatch index + j*N, every update index + j.

A flushing builder's row has no head and no tail (``window`` is one minibatch, ``repeats``
is K); a long asynchronous run's has the filling (and warm-up) as its head and the drain as
its tail (:func:`pipemare_lite.schedules.repeat.long_schedule` finds them). Either way the
row is a ``Sequence`` of :class:`~pipemare_lite.schedules.actions.Action`: ``len`` and
``row[i]`` are O(1), iteration makes the actions as it goes, and it equals the tuple of the
same actions. A run of 10^6 actions is held as a few hundred. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from itertools import islice

from pipemare_lite.schedules.actions import UPDATE, Action


def shift(action: Action, j: int, num_microbatches: int) -> Action:
    """``action`` moved ``j`` minibatches on: microbatch index + j*N, update index + j."""
    if j == 0:
        return action
    step = j if action.kind == UPDATE else j * num_microbatches
    moved = object.__new__(Action)  # the fields of a valid action moved on stay valid:
    set_field = object.__setattr__  # skip __init__'s checks (see builders.common.actions_of)
    set_field(moved, "stage", action.stage)
    set_field(moved, "kind", action.kind)
    set_field(moved, "index", action.index + step)
    return moved


def shifted(actions, j: int, num_microbatches: int) -> Iterator[Action]:
    """Every action of ``actions`` moved ``j`` minibatches on (see :func:`shift`)."""
    if j == 0:
        return iter(actions)
    return (shift(a, j, num_microbatches) for a in actions)


class PeriodicRow(Sequence):
    """``head``, then ``window`` ``repeats`` times (copy j moved j minibatches on), then
    ``tail`` moved ``repeats - 1`` minibatches on (see the module docstring).

    With ``repeats=1`` it is ``head + window + tail``: the row's short form, a schedule a
    few minibatches long (:meth:`copies` makes any number of copies).
    """

    __slots__ = ("head", "window", "repeats", "tail", "num_microbatches", "_length", "_recent")

    def __init__(self, head: Sequence[Action], window: Sequence[Action], repeats: int,
                 tail: Sequence[Action], num_microbatches: int) -> None:
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
            raise ValueError(f"repeats={repeats!r}: allowed: an integer >= 1")
        if not window:
            raise ValueError("a periodic row needs a non-empty window to repeat")
        self.head, self.window, self.tail = tuple(head), tuple(window), tuple(tail)
        self.repeats, self.num_microbatches = repeats, num_microbatches
        self._length = len(self.head) + repeats * len(self.window) + len(self.tail)
        self._recent: dict[int, tuple[Action, ...]] = {}  # see _copy

    def _copy(self, j: int) -> tuple[Action, ...]:
        """Window copy ``j`` (moved j minibatches on), made once for the few readers that
        walk the row side by side (a distributed rank reads its row, plans its messages
        from every row, and counts the last stage's losses from that rank's row); only the
        last few copies are kept, so memory stays flat."""
        recent = self._recent
        actions = recent.get(j)
        if actions is None:
            if len(recent) >= 4:
                del recent[min(recent)]
            actions = recent[j] = tuple(shifted(self.window, j, self.num_microbatches))
        return actions

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i):
        if isinstance(i, slice):  # as a tuple's slice: a tuple
            return tuple(self[k] for k in range(*i.indices(self._length)))
        if i < 0:
            i += self._length
        if not 0 <= i < self._length:
            raise IndexError(f"row index {i} out of range (length {self._length})")
        head, width = len(self.head), len(self.window)
        if i < head:
            return self.head[i]
        j, offset = divmod(i - head, width)
        if j < self.repeats:
            return shift(self.window[offset], j, self.num_microbatches)
        return shift(self.tail[i - head - self.repeats * width], self.repeats - 1,
                     self.num_microbatches)

    def __iter__(self) -> Iterator[Action]:
        return self.iter_from(0)

    def iter_from(self, start: int) -> Iterator[Action]:
        """The actions from position ``start`` on, made one at a time (O(1) to start)."""
        start = min(max(start, 0), self._length)
        head, width, N = len(self.head), len(self.window), self.num_microbatches
        yield from islice(self.head, start, None)
        first, offset = divmod(max(start - head, 0), width)
        for j in range(first, self.repeats):
            yield from (self._copy(j)[offset:] if offset else self._copy(j))
            offset = 0
        body_end = head + self.repeats * width
        yield from shifted(islice(self.tail, max(start - body_end, 0), None),
                           self.repeats - 1, N)

    def copies(self, repeats: int) -> PeriodicRow | tuple[Action, ...]:
        """The same row with ``repeats`` copies of its window (a tuple when one)."""
        if repeats == 1:
            return self.head + self.window + self.tail
        return PeriodicRow(self.head, self.window, repeats, self.tail, self.num_microbatches)

    @property
    def short(self) -> tuple[Action, ...]:
        """``head + window + tail``: every kind and stage of action the row holds."""
        return self.head + self.window + self.tail

    def __eq__(self, other) -> bool:
        if isinstance(other, PeriodicRow) and (
                other.head, other.window, other.repeats, other.tail, other.num_microbatches) == (
                self.head, self.window, self.repeats, self.tail, self.num_microbatches):
            return True
        if not isinstance(other, (tuple, PeriodicRow)):
            return NotImplemented  # a list is not equal to a tuple either
        return len(other) == self._length and all(a == b for a, b in zip(self, other))

    def __hash__(self) -> int:
        return hash(tuple(self))  # equal to the tuple of its actions, so hashed as it

    def __repr__(self) -> str:
        def text(actions) -> str:
            return " ".join(map(str, actions))
        return (f"PeriodicRow(head=[{text(self.head)}], window=[{text(self.window)}] x "
                f"{self.repeats}, tail=[{text(self.tail)}], N={self.num_microbatches})")


def copies_of(schedule) -> int:
    """How many copies of its window each periodic row of ``schedule`` holds (the same on
    every rank), or 0 when no row is periodic."""
    counts = [getattr(row, "repeats", 0) for row in schedule.ranks]
    if len(set(counts)) > 1:
        raise ValueError(f"schedule {schedule.name!r}: its rows repeat their windows {counts} "
                         "times (0: not periodic); allowed: the same number on every rank")
    return counts[0] if counts else 0


def with_copies(schedule, repeats: int):
    """``schedule`` with each periodic row cut (or grown) to ``repeats`` copies of its window,
    ``num_minibatches`` changed to match: its short forms (``repeats`` 1, 2, 3) are the
    schedules :func:`~pipemare_lite.schedules.validation.validate` checks."""
    have = copies_of(schedule)
    if have == 0:
        return schedule
    return replace(schedule, num_minibatches=schedule.num_minibatches - have + repeats,
                   ranks=tuple(row.copies(repeats) for row in schedule.ranks))
