"""Point-to-point messages between pipeline ranks, in an order that cannot deadlock (chapter 11).

Every tensor that crosses ranks is known in advance from the schedule: ``F(s, m)`` sends an
*activation* to stage s+1, ``B(s, m)`` (or ``I(s, m)``) sends a *gradient* to stage s-1.
:func:`plan_communication` lists these messages and numbers them with a global sequence
number ``seq`` taken from one dependency-respecting execution of the whole schedule
(:func:`pipemare_lite.schedules.validate.execution_order`).

The ordering rule (one rule for gloo and NCCL, every schedule, sync or async):

1. sends are never blocking: ``isend`` right after the action that produced the tensor;
2. on each pair of ranks, both ranks *post* their operations for that pair in increasing
   ``seq``; a receive is posted (``irecv`` into a buffer of the known shape) at the latest
   when it is needed, earlier if a later-``seq`` operation on the same pair must be posted
   first, and a few ahead when they are next in the pair's order (the data can then
   arrive while the rank computes);
3. a rank only blocks when an action needs a received tensor.

Why it cannot deadlock. NCCL runs the operations of a pair of ranks on one stream per rank
*in posting order*, both directions included, and a send completes only when its receive
runs. Rule 2 makes the two streams of a pair list the same messages in the same order::

    seq:          3           7           9
    rank 0:  [send act 0F3] [recv grad 1B1] [send act 0F4]     (pair 0-1 stream, rank 0)
    rank 1:  [recv act 0F3] [send grad 1B1] [recv act 0F4]     (pair 0-1 stream, rank 1)

so the heads of the two streams always match. If posting op k needs the ops before it on
the pair posted, those are receives (post them: non-blocking) or sends from earlier actions
of this rank (already posted, because ``seq`` follows every rank's own action order). A
rank waits only for a message some action will produce; sends never block; so the run
follows the schedule's dependency graph, which validation proved acyclic. With gloo,
which matches by tag, each message also carries its ``seq`` as tag.

Shapes: the receiver must allocate the buffer before the data arrives, so every message's
shape and dtype come from a shape probe at start (:mod:`pipemare_lite.executor.dist`).
Messages between stages on the same rank (P = 1) are handed over in memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipemare_lite.schedules.actions import Schedule

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
        return (
            f"{self.kind} of stage {self.stage} microbatch {self.microbatch} "
            f"(rank {self.src} -> rank {self.dst}, seq {self.seq})"
        )


@dataclass
class CommPlan:
    """Who sends what to whom, derived from a schedule (see the module docstring).

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

    def sends_of(self, rank: int) -> list[Message]:
        """Messages ``rank`` sends to another rank, in seq order."""
        return sorted(
            (m for m in self.messages.values() if m.src == rank and m.dst != rank),
            key=lambda m: m.seq,
        )

    def recvs_of(self, rank: int) -> list[Message]:
        """Messages ``rank`` receives from another rank, in seq order."""
        return sorted(
            (m for m in self.messages.values() if m.dst == rank and m.src != rank),
            key=lambda m: m.seq,
        )


def _produced(schedule: Schedule, stage: int, kind: str, index: int, split: bool):
    """Keys of the messages an action produces (none for W and U)."""
    last = schedule.num_virtual_stages - 1
    if kind == "F" and stage < last:
        return [(ACTIVATION, stage, index)]
    if kind == ("I" if split else "B") and stage > 0:
        return [(GRADIENT, stage, index)]
    return []


def _consumed(schedule: Schedule, stage: int, kind: str, index: int, split: bool):
    """Keys of the messages an action needs (an I/B needs the next stage's gradient)."""
    last = schedule.num_virtual_stages - 1
    if kind == "F" and stage > 0:
        return [(ACTIVATION, stage - 1, index)]
    if kind == ("I" if split else "B") and stage < last:
        return [(GRADIENT, stage + 1, index)]
    return []


def plan_communication(schedule: Schedule) -> CommPlan:
    """Derive every message of ``schedule`` with its global ``seq`` (introduced in chapter 11).

    Raises:
        pipemare_lite.schedules.validate.ScheduleError: the schedule deadlocks (the report
            names the stuck actions) or a message is consumed but never produced.
    """
    from pipemare_lite.schedules.validate import ScheduleError, execution_order

    split = schedule.split_backward
    messages: dict = {}
    produces: dict = {}
    consumes: dict = {}
    for rank, position in execution_order(schedule):
        action = schedule.ranks[rank][position]
        made = []
        for kind, stage, mb in _produced(schedule, action.stage, action.kind, action.index, split):
            key = (kind, stage, mb)
            if key in messages:
                raise ScheduleError(f"{action} on rank {rank} produces {kind} {key} twice")
            dst_stage = stage + 1 if kind == ACTIVATION else stage - 1
            message = Message(
                kind, stage, mb, rank, schedule.rank_of(dst_stage), seq=len(messages)
            )
            messages[key] = message
            made.append(message)
        if made:
            produces[(rank, position)] = made
    for rank, position, action in schedule.actions():
        keys = _consumed(schedule, action.stage, action.kind, action.index, split)
        needed = []
        for key in keys:
            if key not in messages:
                raise ScheduleError(
                    f"{action} on rank {rank} needs {key}, which no action produces"
                )
            needed.append(messages[key])
        if needed:
            consumes[(rank, position)] = needed
    pair_order: dict = {}
    for message in sorted(messages.values(), key=lambda m: m.seq):
        if message.src == message.dst:
            continue
        pair_order.setdefault((message.src, message.dst), []).append(message)
        pair_order.setdefault((message.dst, message.src), []).append(message)
    return CommPlan(schedule, messages, produces, consumes, pair_order)


class PostingOrder:
    """Rule 2 of the module docstring for one rank, without any tensors (pure bookkeeping).

    :meth:`to_post_for` says which operations must be posted, in order, so that message
    ``m`` can be sent or waited for. Shared by :class:`P2PTransport` and the tests' model of
    an in-order (NCCL-like) network.
    """

    def __init__(self, plan: CommPlan, rank: int) -> None:
        self.plan = plan
        self.rank = rank
        self.cursor = {peer: 0 for (r, peer) in plan.pair_order if r == rank}
        self.posted: set = set()

    def to_post_for(self, message: Message) -> list[Message]:
        """Operations to post now (in order) so that ``message``'s own operation is posted.

        Empty when ``message`` is already posted (a receive posted early). Raises
        RuntimeError if a *send* would have to be posted out of its own action's turn:
        that would mean the plan does not follow this rank's action order.
        """
        if message.key in self.posted:
            return []
        peer = message.dst if message.src == self.rank else message.src
        order = self.plan.pair_order[(self.rank, peer)]
        start = self.cursor[peer]
        todo = []
        for i in range(start, len(order)):
            op = order[i]
            if op.src == self.rank and op is not message:
                raise RuntimeError(
                    f"rank {self.rank}: posting {message} needs the earlier send {op} first, "
                    "but that send has not been produced yet (plan does not match the schedule)"
                )
            todo.append(op)
            if op is message:
                self.cursor[peer] = i + 1
                for posted in todo:
                    self.posted.add(posted.key)
                return todo
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
            i = start
            while i < len(order) and i - start < limit and order[i].dst == self.rank:
                todo.append(order[i])
                self.posted.add(order[i].key)
                i += 1
            self.cursor[peer] = i
        return todo


class P2PTransport:
    """Send and receive the plan's messages for one rank with ``torch.distributed``.

    Introduced in chapter 11.

    Args:
        plan: from :func:`plan_communication`.
        rank: this rank.
        meta: ``message -> (shape, dtype)`` of its tensor (from the shape probe).
        device: where send and receive buffers live (``cuda:<local rank>`` with NCCL, the
            CPU with gloo: :func:`pipemare_lite.executor.placement.message_device`); a
            tensor elsewhere is copied there before it is sent.
        pinned: CPU buffers in page-locked memory (gloo with CUDA compute,
            :func:`pipemare_lite.executor.placement.pin_messages`).
        waiter: waits on Works; the distributed executor passes a
            :class:`pipemare_lite.executor.faults.Waiter` (abort flag, per-operation
            timeout, gloo and NCCL); default: plain blocking waits.
        use_tags: gloo matches messages by tag (we pass ``seq``); NCCL ignores tags.
        receives_ahead: receives posted per peer before they are needed (0: only when
            needed or when the order requires), so data can arrive during compute.
        verbose: print every posted send and receive and every completed wait (the
            environment variable ``PIPEMARE_P2P_VERBOSE=1`` turns it on in the distributed
            executor): the text trace of the communication, for debugging.
    """

    def __init__(
        self,
        plan: CommPlan,
        rank: int,
        meta: Callable[[Message], tuple],
        *,
        device=None,
        pinned: bool = False,
        waiter=None,
        use_tags: bool = True,
        receives_ahead: int = 0,
        verbose: bool = False,
    ) -> None:
        import torch

        self.plan = plan
        self.rank = rank
        self.meta = meta
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.pinned = pinned
        self.order = PostingOrder(plan, rank)
        self.use_tags = use_tags
        self.waiter = waiter or _BlockingWaiter()
        self.receives_ahead = receives_ahead
        self.verbose = verbose
        self._recv_work: dict = {}  # key -> (work, buffer)
        self._local: dict = {}  # same-rank hand-over

    def _post(self, op: Message, tensor=None) -> None:
        import torch
        import torch.distributed as dist

        tag = op.seq if self.use_tags else 0
        if self.verbose:
            verb = "post send" if op.src == self.rank else "post recv"
            print(f"[rank {self.rank}] {verb} {op}", flush=True)
        if op.src == self.rank:
            self.waiter.reap(dist.isend(tensor, dst=op.dst, tag=tag), tensor, str(op),
                             peer=op.dst)
        else:
            shape, dtype = self.meta(op)
            buffer = torch.empty(shape, dtype=dtype, device=self.device,
                                 pin_memory=self.pinned)
            self._recv_work[op.key] = (dist.irecv(buffer, src=op.src, tag=tag), buffer)

    def send(self, message: Message, tensor) -> None:
        """Post the send of ``tensor`` (non-blocking) after any earlier ops on the pair."""
        tensor = tensor.detach()
        if message.src == message.dst:
            self._local[message.key] = tensor
            return
        shape, dtype = self.meta(message)
        if tuple(tensor.shape) != tuple(shape) or tensor.dtype != dtype:
            raise RuntimeError(
                f"rank {self.rank}: {message} has shape {tuple(tensor.shape)} {tensor.dtype}, "
                f"the shape probe said {tuple(shape)} {dtype}"
            )
        tensor = tensor.contiguous()
        if tensor.device != self.device:  # e.g. a CUDA activation sent with gloo
            import torch

            staged = torch.empty(tensor.shape, dtype=tensor.dtype, device=self.device,
                                 pin_memory=self.pinned)
            tensor = staged.copy_(tensor)
        for op in self.order.to_post_for(message):
            self._post(op, tensor if op is message else None)
        self._post_ahead()

    def _post_ahead(self) -> None:
        if self.receives_ahead:
            for op in self.order.receives_ahead(self.receives_ahead):
                self._post(op)

    def recv(self, message: Message):
        """Return the tensor of ``message``, waiting for it if needed."""
        if message.src == message.dst:
            return self._local.pop(message.key)
        for op in self.order.to_post_for(message):
            self._post(op)
        self._post_ahead()
        work, buffer = self._recv_work.pop(message.key)
        self.waiter.wait(work, str(message), peer=message.src)
        if self.verbose:
            print(f"[rank {self.rank}] received {message}", flush=True)
        return buffer

    def close(self) -> None:
        """Wait until every send has completed, then stop the waiter's helper threads (call
        at the end of the run; safe to call twice)."""
        try:
            self.waiter.drain()
        except BaseException:
            self.waiter.close(wait=0)  # a failed run: report it now, do not join
            raise
        self.waiter.close()
        if self._recv_work:
            left = ", ".join(str(k) for k in self._recv_work)
            raise RuntimeError(f"rank {self.rank}: receives posted but never used: {left}")


class _BlockingWaiter:
    """Plain blocking waits (no abort, no timeout): the default outside the executor."""

    def __init__(self) -> None:
        self._sends: list = []

    def wait(self, work, what: str, peer: int | None = None) -> None:
        work.wait()

    def reap(self, work, keep_alive, what: str, peer: int | None = None) -> None:
        self._sends.append((work, keep_alive))

    def drain(self) -> None:
        for work, _ in self._sends:
            work.wait()
        self._sends = []

    def close(self, wait: float = 0.0) -> None:
        """Nothing to stop: this waiter has no threads."""
