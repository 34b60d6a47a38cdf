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
               position the schedule fixes (PeerProgress walks every row to it)
    state_dict (collective): each rank's position, stage states and the unconsumed tensors
               it sent, gathered on every rank into the local format
    load_state_dict: each rank takes its stages and position; a message in transit to it is
               handed over from the checkpoint (never received); every message produced
               before the cut is marked posted on both ends of its pair, so both ranks post
               the remaining ones in the same order (the deadlock-freedom argument of
               :mod:`.transport` holds for what is left)

So a checkpoint written by either executor resumes in either, bitwise (fp32, CPU, one
thread per process): ``tests/test_dist_checkpoint.py``. Randomness is not carried across
processes (each rank has its own generator; the book's models draw none): ``rng`` is the
saving process's, for a local resume.
"""

from __future__ import annotations

from pipemare_lite.schedules.comm_plan import ACTIVATION, GRADIENT, _message_keys


def stop_position(schedule, rank: int, start: int, stop_after_updates: int | None) -> int:
    """Where ``rank`` stands after a run from ``start``: the first position at which each of
    its stages has made ``stop_after_updates`` updates (the executor's own stop test), or the
    end of its row."""
    row = schedule.ranks[rank]
    if stop_after_updates is None:
        return len(row)
    stages = schedule.stages_of(rank)
    updates = dict.fromkeys(stages, 0)
    for action in row[:start]:
        if action.kind == "U":
            updates[action.stage] += 1
    position = start
    while position < len(row) and min(updates.values()) < stop_after_updates:
        if row[position].kind == "U":
            updates[row[position].stage] += 1
        position += 1
    return position


class PeerProgress:
    """Every rank's position, the messages sent and not yet consumed, and the microbatches
    whose target is between stage 0's forward and the last stage's: tracked on each rank
    from the schedule alone (no communication)."""

    def __init__(self, schedule) -> None:
        self.schedule = schedule
        self.split = schedule.split_backward
        self.last = schedule.num_virtual_stages - 1
        self.positions = [0] * schedule.num_ranks
        self.unconsumed: set = set()  # message keys produced, not yet consumed
        self.targets: set[int] = set()  # microbatches whose target is in flight

    def _scan(self, spans) -> tuple[set, set, set, set]:
        """Messages produced and consumed, microbatches started (stage 0's F) and ended (the
        last stage's F) by the actions of ``spans``: ``(rank, start, end)`` slices."""
        produced, consumed, started, ended = set(), set(), set(), set()
        for rank, start, end in spans:
            for action in self.schedule.ranks[rank][start:end]:
                sends, needs = _message_keys(self.schedule, action, self.split)
                produced.update(sends)
                consumed.update(needs)
                if action.kind == "F" and action.stage == 0:
                    started.add(action.index)
                if action.kind == "F" and action.stage == self.last:
                    ended.add(action.index)
        return produced, consumed, started, ended

    def advance(self, stop_after_updates: int | None) -> None:
        """Move every rank to where a run with ``stop_after_updates`` leaves it."""
        ends = [max(start, stop_position(self.schedule, rank, start, stop_after_updates))
                for rank, start in enumerate(self.positions)]
        produced, consumed, started, ended = self._scan(
            (rank, start, end) for rank, (start, end) in enumerate(zip(self.positions, ends)))
        self.positions = ends
        self.unconsumed = (self.unconsumed | produced) - consumed
        self.targets = (self.targets | started) - ended

    def restore(self, positions: list[int]) -> set:
        """Set the positions of a checkpoint; return the keys of every message produced
        before them (the ones neither end may post again)."""
        produced, consumed, started, ended = self._scan(
            (rank, 0, end) for rank, end in enumerate(positions))
        self.positions = list(positions)
        self.unconsumed = produced - consumed
        self.targets = started - ended
        return produced


def local_key(key: tuple) -> tuple[str, tuple[int, int]]:
    """A message key ``(kind, stage, m)`` as the local checkpoint files it:
    ``("activations", (stage + 1, m))`` or ``("gradients", (stage - 1, m))``."""
    kind, stage, m = key
    return ("activations", (stage + 1, m)) if kind == ACTIVATION else ("gradients", (stage - 1, m))


def message_key(table: str, key: tuple[int, int]) -> tuple:
    """Inverse of :func:`local_key`."""
    stage, m = key
    return (ACTIVATION, stage - 1, m) if table == "activations" else (GRADIENT, stage + 1, m)
