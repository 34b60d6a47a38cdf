"""The messages of a schedule and the order each rank posts them: pure bookkeeping (chapter 11).

Torch-free, so the communication of any schedule can be planned, printed
(:mod:`pipemare_lite.schedules.comm_rows`) and checked without processes. The transport
that sends the tensors, and the argument for why this order cannot deadlock, are in
:mod:`pipemare_lite.engine.distributed.transport`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.validation import execution_order

#: Receives each rank posts per peer before it needs them (see :meth:`PostingOrder.receives_ahead`).
RECEIVES_AHEAD = 2
ACTIVATION, GRADIENT = "activation", "gradient"


@dataclass(frozen=True)
class Message:
    """One tensor from one rank to another.

    Attributes:
        kind: ``"activation"`` (output of ``F(stage, m)``) or ``"gradient"`` (gradient with
            respect to the input of ``stage``, from ``B``/``I(stage, m)``).
        stage: the virtual stage that produces it.
        microbatch: the (global) microbatch index.
        src, dst: sending and receiving rank.
        seq: position in the global message order (also the gloo tag).
    """

    kind: str
    stage: int
    microbatch: int
    src: int
    dst: int
    seq: int

    @property
    def key(self) -> tuple[str, int, int]:
        """``(kind, stage, microbatch)``: unique within a schedule."""
        return (self.kind, self.stage, self.microbatch)

    @property
    def consumer_stage(self) -> int:
        """The stage that uses it: stage+1 for an activation, stage-1 for a gradient."""
        return self.stage + 1 if self.kind == ACTIVATION else self.stage - 1

    def __str__(self) -> str:
        return (f"{self.kind} of stage {self.stage} microbatch {self.microbatch} "
                f"(rank {self.src} -> rank {self.dst}, seq {self.seq})")


@dataclass
class CommPlan:
    """Who sends what to whom, derived from a schedule by :func:`plan_communication`.

    Attributes:
        schedule: the schedule.
        messages: ``key -> Message`` for every tensor that leaves a stage.
        produces: ``(rank, position) -> messages`` the action there produces.
        consumes: ``(rank, position) -> messages`` the action there needs.
        pair_order: ``(rank, peer) -> messages`` between the two ranks (both directions),
            in ``seq`` order; identical for ``(a, b)`` and ``(b, a)``.
    """

    schedule: Schedule
    messages: dict
    produces: dict
    consumes: dict
    pair_order: dict

    def message(self, key: tuple) -> Message:
        """The message with ``key`` (``(kind, stage, microbatch)``)."""
        return self.messages[key]

    def planned(self, rank: int, peer: int, count: int) -> list[Message]:
        """The pair's messages in seq order (all of them: this plan is whole)."""
        return self.pair_order[(rank, peer)]

    def forget(self, key: tuple) -> None:
        """Nothing: a whole plan keeps every message (see :class:`RollingPlan`)."""


def _message_keys(schedule: Schedule, a, split: bool) -> tuple[tuple, tuple]:
    """Keys of the messages action ``a`` produces and of those it needs (none for W, U):
    F sends its activation to the next stage, B (I when split) the input's gradient back."""
    kind, stage = a.kind, a.stage
    if kind == "F":
        return (((ACTIVATION, stage, a.index),) if stage < schedule.num_virtual_stages - 1
                else (), ((ACTIVATION, stage - 1, a.index),) if stage > 0 else ())
    if kind == ("I" if split else "B"):
        return (((GRADIENT, stage, a.index),) if stage > 0 else (),
                ((GRADIENT, stage + 1, a.index),) if stage < schedule.num_virtual_stages - 1
                else ())
    return (), ()


def plan_communication(schedule: Schedule) -> CommPlan:
    """Derive every message of ``schedule`` with its global ``seq`` (introduced in chapter 11).

    The schedule is validated first, so every action runs once and every message an action
    needs is produced by one.

    Raises:
        pipemare_lite.schedules.validation.ScheduleError: the schedule is invalid or deadlocks
            (the report names the stuck actions).
    """
    split = schedule.split_backward
    messages: dict = {}
    produces: dict = {}
    consumes: dict = {}
    pair_order: dict = {}
    for rank, position in execution_order(schedule):  # seq: one execution of the schedule
        sends, needs = _message_keys(schedule, schedule.ranks[rank][position], split)
        for key in needs:  # already produced: the order runs every dependency first
            consumes.setdefault((rank, position), []).append(messages[key])
        for kind, stage, mb in sends:
            dst = schedule.rank_of(stage + 1 if kind == ACTIVATION else stage - 1)
            message = Message(kind, stage, mb, rank, dst, seq=len(messages))
            messages[message.key] = message
            produces.setdefault((rank, position), []).append(message)
            if dst != rank:  # both ends list their pair's messages in seq order
                pair_order.setdefault((rank, dst), []).append(message)
                pair_order.setdefault((dst, rank), []).append(message)
    return CommPlan(schedule, messages, produces, consumes, pair_order)


def stream_order(schedule, start: list[int] | None = None,
                 in_transit=()) -> Iterator[tuple[int, object]]:
    """:func:`~pipemare_lite.schedules.validation.execution_order` made as it is read:
    ``(rank, action)`` in the same order, from rows read one action at a time (a long run's
    periodic rows are never materialized). The same greedy walk as
    :func:`~pipemare_lite.schedules.validation.code_order` (each rank runs as far as its
    dependencies allow, then parks on what it waits for), paused at every action: a pause
    changes nothing, so the order is the same. An action waits only for the messages it
    needs: its other dependencies sit before it in its own row (the schedule must be valid;
    a long run's periodic one is). Holds the messages produced and not yet consumed, and
    the parked ranks.

    ``start``, ``in_transit``: the rest of the run from every rank's position at a
    checkpoint's cut, where the messages with keys ``in_transit`` were produced and not yet
    consumed (a valid order of what is left, though not the whole run's order cut there).
    """
    for rank, action, _sends in _walk(schedule, start, in_transit):
        yield rank, action


def _walk(schedule, start: list[int] | None, in_transit) -> Iterator[tuple[int, object, tuple]]:
    """:func:`stream_order` with the keys of the messages each action sends (the rolling
    plan numbers them, without working them out again)."""
    split = schedule.split_backward
    rows = [schedule.row(r, 0 if start is None else start[r]) for r in range(schedule.num_ranks)]
    heads = [next(row, None) for row in rows]
    available = set(in_transit)  # messages produced and not yet consumed
    waiter: dict[tuple, int] = {}  # message key -> the rank parked on it
    ready = deque(range(schedule.num_ranks))
    while ready:
        rank = ready.popleft()
        action = heads[rank]
        while action is not None:
            sends, needs = _message_keys(schedule, action, split)
            missing = next((key for key in needs if key not in available), None)
            if missing is not None:  # park this rank until that message is produced
                waiter[missing] = rank
                break
            available.difference_update(needs)
            available.update(sends)
            yield rank, action, sends
            action = heads[rank] = next(rows[rank], None)
            for key in sends:
                if key in waiter:
                    ready.append(waiter.pop(key))


class RollingPlan:
    """One rank's part of :func:`plan_communication`, made as the rank needs it (chapter 11).

    The same messages with the same ``seq`` (read from :func:`stream_order`), but only
    those this rank sends or receives, planned a little ahead of the rank and forgotten
    once used: its memory stays flat however long the run (``fit(executor="dist")`` on a
    long run, :mod:`pipemare_lite.schedules.repeat`). :class:`PostingOrder` reads it like
    a :class:`CommPlan`.

    ``start``, ``in_transit``: resume at a checkpoint's cut (every rank's position there,
    and the keys of the messages produced before it and not yet consumed): the messages of
    what is left, numbered from 0 in :func:`stream_order`'s order from the cut. What was
    sent before the cut is not planned; every rank of the resumed job plans the same, so
    both ends of each pair post the rest in the same order (the argument of
    :mod:`pipemare_lite.engine.distributed.transport` holds for what is left).
    """

    def __init__(self, schedule, rank: int, start: list[int] | None = None,
                 in_transit=()) -> None:
        self.schedule, self.rank = schedule, rank
        self.split = schedule.split_backward
        self._order = _walk(schedule, start, in_transit)
        self._seq = 0
        self.messages: dict = {}  # key -> Message, this rank's, planned and not yet used
        peers = {schedule.rank_of(s + d) for s in schedule.stages_of(rank) for d in (-1, 1)
                 if 0 <= s + d < schedule.num_virtual_stages} - {rank}
        self.pair_order = {(rank, peer): [] for peer in sorted(peers)}
        self.exhausted = False

    def _advance(self) -> bool:
        """Plan the messages of the next action of the execution order (False at the end)."""
        item = next(self._order, None)
        if item is None:
            self.exhausted = True
            return False
        src, _action, sends = item
        for kind, stage, mb in sends:
            dst = self.schedule.rank_of(stage + 1 if kind == ACTIVATION else stage - 1)
            message = Message(kind, stage, mb, src, dst, seq=self._seq)
            self._seq += 1
            if self.rank in (src, dst):
                self.messages[message.key] = message
                if src != dst:
                    self.pair_order[(self.rank, dst if src == self.rank else src)].append(
                        message)
        return True

    def message(self, key: tuple) -> Message:
        """The message with ``key``, planning ahead until it is there."""
        while key not in self.messages:
            if not self._advance():
                raise KeyError(f"rank {self.rank}: no message {key} in the schedule")
        return self.messages[key]

    def planned(self, rank: int, peer: int, count: int) -> list[Message]:
        """The pair's planned messages, at least ``count`` of them unless the run ends first."""
        order = self.pair_order[(rank, peer)]
        while len(order) < count and self._advance():
            pass
        return order

    def forget(self, key: tuple) -> None:
        """Drop a message this rank has used (sent, or received and taken)."""
        self.messages.pop(key, None)


class PostingOrder:
    """The posting rule (rule 2 of :mod:`pipemare_lite.engine.distributed.transport`) for one rank.

    :meth:`to_post_for` says which operations must be posted, in order, so that a message
    can be sent or waited for. Shared by the transport, the lowering into rows
    (:mod:`~pipemare_lite.schedules.comm_rows`) and the tests' in-order network model.
    """

    def __init__(self, plan: CommPlan | RollingPlan, rank: int) -> None:
        self.plan, self.rank = plan, rank
        self.cursor = {peer: 0 for (r, peer) in plan.pair_order if r == rank}
        self.posted: set = set()
        self.trims = isinstance(plan, RollingPlan)  # forget what is behind the cursors
        self._used: set = set()  # (rolling) keys whose own turn came, still in the order
        self._pending: set = set()  # (rolling) trimmed keys posted ahead, not yet used

    def _trim(self, peer: int) -> None:
        """Drop a rolling plan's pair entries behind the cursor (all posted), in batches of
        64; a receive posted ahead and not yet used stays in :attr:`posted` until its use."""
        start = self.cursor[peer]
        if not self.trims or start < 64:
            return
        order = self.plan.pair_order[(self.rank, peer)]
        for op in order[:start]:
            if op.key in self._used:
                self._used.discard(op.key)
                self.posted.discard(op.key)
            else:
                self._pending.add(op.key)
        del order[:start]
        self.cursor[peer] = 0

    def to_post_for(self, message: Message) -> list[Message]:
        """Operations to post now (in order) so that ``message``'s own operation is posted.

        Empty when ``message`` is already posted (a receive posted early). Raises
        RuntimeError if a *send* would have to be posted out of its own action's turn: that
        would mean the plan does not follow this rank's action order.
        """
        if message.key in self.posted:
            if message.key in self._pending:  # trimmed already: forget it now
                self._pending.discard(message.key)
                self.posted.discard(message.key)
            elif self.trims:
                self._used.add(message.key)
            return []
        peer = message.dst if message.src == self.rank else message.src
        order = self.plan.pair_order[(self.rank, peer)]
        start = self.cursor[peer]
        for i in range(start, len(order)):
            op = order[i]
            if op is message:
                todo = order[start:i + 1]  # nothing ahead of the cursor is posted yet
                self.cursor[peer] = i + 1
                self.posted.update(earlier.key for earlier in todo)
                if self.trims:
                    self._used.add(message.key)
                    self._trim(peer)
                return todo
            if op.src == self.rank:
                raise RuntimeError(
                    f"rank {self.rank}: posting {message} needs the earlier send {op} first, "
                    "but that send has not been produced yet (plan does not match the schedule)")
        raise RuntimeError(f"rank {self.rank}: {message} is not in the plan for pair {peer}")

    def receives_ahead(self, limit: int) -> list[Message]:
        """Up to ``limit`` receives per peer that may be posted now, ahead of need.

        Only the receives next in a pair's order, before this rank's next send on that
        pair: posting them keeps both ranks' per-pair order (rule 2), and the data of a
        message can then arrive while this rank still computes.
        """
        todo, rank = [], self.rank
        for peer, start in self.cursor.items():
            order = self.plan.planned(rank, peer, start + limit)
            end, stop = start, min(len(order), start + limit)
            while end < stop and order[end].dst == rank:  # receives, up to our next send
                end += 1
            if end > start:
                self.cursor[peer] = end
                todo += order[start:end]
        self.posted.update(op.key for op in todo)
        return todo
