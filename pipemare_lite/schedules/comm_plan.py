"""The messages of a schedule and the order each rank posts them: pure bookkeeping (chapter 11).

Torch-free, so the communication of any schedule can be planned, printed
(:mod:`pipemare_lite.schedules.comm_rows`) and checked without processes. The transport
that sends the tensors, and the argument for why this order cannot deadlock, are in
:mod:`pipemare_lite.engine.distributed.transport`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import takewhile

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


def _message_keys(schedule: Schedule, a, split: bool) -> tuple[list, list]:
    """Keys of the messages action ``a`` produces and of those it needs (none for W, U):
    F sends its activation to the next stage, B (I when split) the input's gradient back."""
    last = schedule.num_virtual_stages - 1
    if a.kind == "F":
        return ([(ACTIVATION, a.stage, a.index)] if a.stage < last else [],
                [(ACTIVATION, a.stage - 1, a.index)] if a.stage > 0 else [])
    if a.kind == ("I" if split else "B"):
        return ([(GRADIENT, a.stage, a.index)] if a.stage > 0 else [],
                [(GRADIENT, a.stage + 1, a.index)] if a.stage < last else [])
    return [], []


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


class PostingOrder:
    """The posting rule (rule 2 of :mod:`pipemare_lite.engine.distributed.transport`) for one rank.

    :meth:`to_post_for` says which operations must be posted, in order, so that a message
    can be sent or waited for. Shared by the transport, the lowering into rows
    (:mod:`~pipemare_lite.schedules.comm_rows`) and the tests' in-order network model.
    """

    def __init__(self, plan: CommPlan, rank: int) -> None:
        self.plan, self.rank = plan, rank
        self.cursor = {peer: 0 for (r, peer) in plan.pair_order if r == rank}
        self.posted: set = set()

    def to_post_for(self, message: Message) -> list[Message]:
        """Operations to post now (in order) so that ``message``'s own operation is posted.

        Empty when ``message`` is already posted (a receive posted early). Operations in
        :attr:`posted` ahead of the cursor are passed over (a checkpoint's resume marks what
        was sent before it, on both ends of each pair). Raises RuntimeError if a *send*
        would have to be posted out of its own action's turn: that would mean the plan does
        not follow this rank's action order.
        """
        if message.key in self.posted:
            return []
        peer = message.dst if message.src == self.rank else message.src
        order = self.plan.pair_order[(self.rank, peer)]
        start = self.cursor[peer]
        for i in range(start, len(order)):
            op = order[i]
            if op is message:
                todo = [earlier for earlier in order[start:i + 1]
                        if earlier.key not in self.posted]
                self.cursor[peer] = i + 1
                self.posted.update(earlier.key for earlier in todo)
                return todo
            if op.src == self.rank and op.key not in self.posted:
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
        todo = []
        for peer, start in self.cursor.items():
            order = self.plan.pair_order[(self.rank, peer)]
            if not self.posted.isdisjoint(op.key for op in order[start:start + limit]):
                ahead, i = [], start  # pass over what a checkpoint's resume marked posted
                while i < len(order) and len(ahead) < limit:
                    if order[i].key not in self.posted:
                        if order[i].dst != self.rank:
                            break
                        ahead.append(order[i])
                    i += 1
                self.cursor[peer] = i
                todo += ahead
                continue
            ahead = list(takewhile(lambda op: op.dst == self.rank, order[start:start + limit]))
            self.cursor[peer] = start + len(ahead)
            todo += ahead
        self.posted.update(op.key for op in todo)
        return todo
