"""Checkpoints of the distributed executor, in the local executor's format (chapter 11).

A local checkpoint (:meth:`pipemare_lite.engine.LocalExecutor.state_dict`) holds every rank's
position, every stage's state, and the messages *in transit*: tensors a stage has produced
and the next one has not consumed yet (``activations[(s, m)]``: the input of F(s, m);
``gradients[(s, m)]``: the gradient B(s, m) starts from; ``targets[m]`` for microbatches
between stage 0's forward and the last stage's). Between two runs of the distributed
executor the same tensors exist, but spread over processes and, for the in-transit ones,
inside ``torch.distributed`` sends that may not have arrived. So::

    sender:    keeps every tensor it sends (SentLog) until it knows the receiver consumed it;
               it knows without asking: at run(stop_after_updates=k) every rank stops at a
               position the schedule fixes (PeerProgress walks every row to it,
               holding only what is in flight)
    state_dict (collective): each rank's position, stage states and the unconsumed tensors
               it sent, gathered on every rank into the local format
    load_state_dict: each rank takes its stages and position; a message in transit to it is
               handed over from the checkpoint (never received); every message produced
               before the cut is left out of the message plan on both ends of its pair
               (a RollingPlan started at the cut), so both ranks post the remaining ones in
               the same order (the deadlock-freedom argument of :mod:`.transport` holds for
               what is left)

Nothing here holds the whole run: a long run's periodic rows are made as they are read,
the plan rolls, and a checkpoint holds what is in flight (its size and a rank's memory do
not grow with the run's planned length; ``benchmarks/bench_dist_memory.py --checkpoints``
measures both). So a checkpoint written by either executor resumes in either, bitwise
(fp32, CPU, one thread per process): ``tests/test_dist_checkpoint.py``. Randomness is not
carried across processes (each rank has its own generator; the book's models draw none):
``rng`` is the saving process's, for a local resume.
"""

from __future__ import annotations

from collections.abc import Iterator

from pipemare_lite.schedules.comm_plan import ACTIVATION, GRADIENT, _message_keys
from pipemare_lite.schedules.repeat import schedule_key


class RowWalk:
    """One rank's row read on from a position, as the executor runs it: :meth:`run` stops
    where each of the rank's stages has made ``stop_after_updates`` updates (the executor's
    own stop test on its stages' weight versions). Holds one row iterator (a periodic row stays
    unmade, and is entered at ``start`` without reading what is before it).

    ``versions``: each of the rank's stages' update count at ``start`` (its weight version,
    as a checkpoint holds it); None: 0 (a run from the start)."""

    def __init__(self, schedule, rank: int, start: int = 0,
                 versions: dict[int, int] | None = None) -> None:
        stages = schedule.stages_of(rank)
        self.updates = {s: 0 if versions is None else versions[s] for s in stages}
        self.position = start
        self._row = schedule.row(rank, start)

    def run(self, stop_after_updates: int | None) -> Iterator:
        """Yield the actions a run with ``stop_after_updates`` takes from here (None: to the
        row's end)."""
        while stop_after_updates is None or min(self.updates.values()) < stop_after_updates:
            action = next(self._row, None)
            if action is None:
                return
            self.position += 1
            if action.kind == "U":
                self.updates[action.stage] += 1
            yield action


class PeerProgress:
    """Every rank's position, the messages sent and not yet consumed, and the microbatches
    whose target is between stage 0's forward and the last stage's: tracked on each rank
    from the schedule alone (no communication), one :class:`RowWalk` per rank. What it holds
    is what is in flight, however long the run.

    ``start``: resume at a checkpoint's cut, ``(positions, versions, in-transit message keys,
    in-flight targets)`` as the checkpoint holds them (``versions``: every stage's)."""

    def __init__(self, schedule, start: tuple | None = None) -> None:
        self.schedule = schedule
        self.split = schedule.split_backward
        self.last = schedule.num_virtual_stages - 1
        positions, versions, unconsumed, targets = start or (
            [0] * schedule.num_ranks, None, (), ())
        self.walks = [RowWalk(schedule, rank, p, versions) for rank, p in enumerate(positions)]
        self.unconsumed: set = set(unconsumed)  # message keys produced, not yet consumed
        self.targets: set[int] = set(targets)  # microbatches whose target is in flight

    @property
    def positions(self) -> list[int]:
        """Every rank's position."""
        return [walk.position for walk in self.walks]

    def advance(self, stop_after_updates: int | None) -> None:
        """Move every rank to where a run with ``stop_after_updates`` leaves it."""
        produced, consumed, started, ended = set(), set(), set(), set()
        for walk in self.walks:
            for action in walk.run(stop_after_updates):
                sends, needs = _message_keys(self.schedule, action, self.split)
                produced.update(sends)
                consumed.update(needs)
                if action.kind == "F" and action.stage == 0:
                    started.add(action.index)
                if action.kind == "F" and action.stage == self.last:
                    ended.add(action.index)
        self.unconsumed = (self.unconsumed | produced) - consumed
        self.targets = (self.targets | started) - ended


def same_schedule(key: tuple, schedule) -> bool:
    """Whether a checkpoint's record of its schedule (:func:`schedule_key`) names
    ``schedule``; also the whole rows ``(name, rows)`` that a distributed checkpoint of a
    long periodic schedule recorded before this executor kept them unmade (compared row by
    row as they are made: never materialized)."""
    if key == schedule_key(schedule):
        return True
    return (len(key) == 2 and key[0] == schedule.name and len(key[1]) == schedule.num_ranks
            and all(len(saved) == len(row) and all(map(str.__eq__, map(str, row), saved))
                    for saved, row in zip(key[1], schedule.ranks)))


def local_key(key: tuple) -> tuple[str, tuple[int, int]]:
    """A message key ``(kind, stage, m)`` as the local checkpoint files it:
    ``("activations", (stage + 1, m))`` or ``("gradients", (stage - 1, m))``."""
    kind, stage, m = key
    return ("activations", (stage + 1, m)) if kind == ACTIVATION else ("gradients", (stage - 1, m))


def message_key(table: str, key: tuple[int, int]) -> tuple:
    """Inverse of :func:`local_key`."""
    stage, m = key
    return (ACTIVATION, stage - 1, m) if table == "activations" else (GRADIENT, stage + 1, m)
