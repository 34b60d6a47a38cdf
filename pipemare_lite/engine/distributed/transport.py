"""Point-to-point messages between pipeline ranks, in an order that cannot deadlock (chapter 11).

Every tensor that crosses ranks is known in advance from the schedule: ``F(s, m)`` sends an
*activation* to stage s+1, ``B(s, m)`` (or ``I(s, m)``) sends a *gradient* to stage s-1.
:func:`plan_communication` (torch-free, in :mod:`pipemare_lite.schedules.comm_plan`, with
the posting rule :class:`PostingOrder`) lists these messages and numbers them with a global sequence
number ``seq`` taken from one dependency-respecting execution of the whole schedule
(:func:`pipemare_lite.schedules.validation.execution_order`).

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
which matches by tag, each message also carries its ``seq`` as tag. A job resumed from a
checkpoint numbers what is left from the cut (every rank alike: the argument holds for it).

Shapes: the receiver must allocate the buffer before the data arrives, so every message's
shape and dtype come from a shape probe at start (:mod:`pipemare_lite.engine.distributed.executor`).
Messages between stages on the same rank (P = 1) are handed over in memory.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence

import torch
import torch.distributed as dist

from pipemare_lite.engine import placement
from pipemare_lite.schedules.comm_plan import (
    ACTIVATION,
    GRADIENT,
    CommPlan,
    Message,
    PostingOrder,
    RollingPlan,
)
from pipemare_lite.schedules.comm_rows import comm_op


def tensor_meta(x: torch.Tensor) -> tuple:
    """``(shape, dtype)`` of ``x``: how the shape probe and the buffers know a tensor."""
    return tuple(x.shape), x.dtype


class P2PTransport:
    """Send and receive the plan's messages for one rank with ``torch.distributed``.

    Introduced in chapter 11. It is also the distributed executor's transport for the
    :class:`~pipemare_lite.engine.interpreter.Interpreter` (``first_input``, ``target``,
    ``activation``, ``gradient``, ``deliver``), like the local executor's in-process one:
    the data are read from this rank's copy of the feed, ``microbatches``.

    Args:
        plan: a :class:`~pipemare_lite.schedules.comm_plan.RollingPlan` (this rank's
            messages, planned as it goes: flat memory) or a whole plan from
            :func:`pipemare_lite.schedules.comm_plan.plan_communication`.
        rank: this rank.
        waiter: a :class:`pipemare_lite.engine.distributed.faults.Waiter` (waits that see the abort
            flag and a per-operation timeout, gloo and NCCL).
        backend, device: the process group's backend and where this rank computes. They
            decide where send and receive buffers live (the compute device with NCCL, the
            CPU with gloo, page-locked when the rank computes on CUDA:
            :func:`pipemare_lite.engine.placement.message_device` and
            :func:`~pipemare_lite.engine.placement.pin_messages`; a tensor elsewhere is
            copied there before it is sent) and whether messages carry tags (gloo matches
            them by tag: we pass ``seq``; NCCL ignores tags).
        receives_ahead: receives posted per peer before they are needed (0: only when
            needed or when the order requires), so data can arrive during compute.
        verbose: print every posted send and receive and every completed wait: the text
            trace of the communication, for debugging (the distributed executor's
            ``p2p_verbose`` argument).
        group: the process group its messages go through (None: the default group; the
            executor gives a fresh one after a run stopped early, see
            :func:`~pipemare_lite.engine.distributed.executor.executor_group`).
        posted: a list to which every posted operation is appended as a string in
            PyTorch's spelling (``"0SEND_F3"``, ``"1RECV_F3"``, see
            :mod:`pipemare_lite.schedules.comm_rows`), in posting order, each action's
            name between its receives and its send; None: not recorded.

    The distributed executor's shape probe fills in, at its first run, ``shapes``:
    ``{(stage, stage-0 input (shape, dtype)): (shape, dtype) of the stage's output}``
    (:meth:`meta` reads it), and ``input_meta``: the ``(shape, dtype)`` every stage-0 input
    must have, or None (a lazy feed's, whose probe saw only microbatch 0).
    """

    def __init__(self, plan: CommPlan | RollingPlan, rank: int, *, waiter, backend: str = "gloo",
                 device="cpu", receives_ahead: int = 0, verbose: bool = False,
                 posted: list | None = None, group=None) -> None:
        self.plan = plan
        self.rank = rank
        self.group = group  # the process group of its messages (None: the default one)
        self.shapes: dict | None = None  # from the shape probe
        self.compute_device = torch.device(device)
        self.device = torch.device(placement.message_device(backend, device))
        self.pinned = placement.pin_messages(backend, device)
        self.order = PostingOrder(plan, rank)
        self.use_tags = backend == "gloo"
        self.waiter = waiter
        self.receives_ahead = receives_ahead
        self.verbose = verbose
        self.posted = posted
        self.input_meta: tuple | None = None
        self.microbatches: Sequence = ()  # the current run's feed
        self._recv_work: dict = {}  # key -> (work, buffer)
        # peer -> our sends to it not yet waited for, in seq order: (message, work, tensor)
        self._sends_out: defaultdict[int, deque] = defaultdict(deque)
        self._local: dict = {}  # same-rank hand-over
        #: key -> tensor of every message sent, while a checkpoint may need it (None: not
        #: kept; the executor's ``checkpoints=True`` sets a dict and prunes it)
        self.sent_log: dict | None = None
        self.preloaded: dict = {}  # key -> tensor to this rank, in transit at a checkpoint

    # ------------------------------------------------------------ a checkpoint's state
    def resume(self, positions: list[int], in_transit: dict) -> None:
        """Continue from a checkpoint's cut, before anything is posted: plan only the
        messages produced after every rank's ``positions`` (a
        :class:`~pipemare_lite.schedules.comm_plan.RollingPlan` from there), and take over
        ``in_transit`` (``key -> tensor``: produced before the cut, not yet consumed). Those
        to this rank are handed over (never received: :meth:`activation` and
        :meth:`gradient` return them); those from it are kept for the next checkpoint."""
        if self.order.posted or self._recv_work:
            raise RuntimeError(f"rank {self.rank}: resume() needs a transport that has "
                               "posted nothing yet")
        schedule = self.plan.schedule
        self.plan = RollingPlan(schedule, self.rank, start=list(positions),
                                in_transit=set(in_transit))
        self.order = PostingOrder(self.plan, self.rank)
        for key, tensor in in_transit.items():
            kind, stage, _ = key
            src = schedule.rank_of(stage)
            dst = schedule.rank_of(stage + 1 if kind == ACTIVATION else stage - 1)
            if dst == self.rank:  # a same-rank message stays on the compute device
                self.preloaded[key] = tensor = tensor.to(
                    self.device if src != dst else self.compute_device)
            if src == self.rank and self.sent_log is not None:
                self.sent_log[key] = tensor

    def meta(self, message: Message) -> tuple:
        """``(shape, dtype)`` of ``message``'s tensor, from :attr:`shapes`."""
        key = self.input_meta or tensor_meta(self.microbatches[message.microbatch][0])
        # an activation has the shape of its stage's output; a gradient the shape of its
        # stage's input, i.e. of the previous stage's output
        stage = message.stage if message.kind == ACTIVATION else message.stage - 1
        return self.shapes[(stage, key)]

    def _post(self, op: Message, tensor=None) -> None:
        tag = op.seq if self.use_tags else 0
        if self.posted is not None:
            self.posted.append(str(comm_op(op, self.rank)))
        if self.verbose:
            verb = "post send" if op.src == self.rank else "post recv"
            print(f"[rank {self.rank}] {verb} {op}", flush=True)
        if op.src == self.rank:
            work = dist.isend(tensor, dst=op.dst, group=self.group, tag=tag)
            if self.waiter.polling:  # NCCL: is_completed() tells, the waiter polls it
                self.waiter.reap(work, tensor, str(op), peer=op.dst)
                return
            sends = self._sends_out[op.dst]
            sends.append((op, work, tensor))
            if len(sends) > self.MAX_SENDS_OUT:  # a pair we rarely hear back from
                old, work, tensor = sends.popleft()
                self.waiter.reap(work, tensor, str(old), peer=op.dst)
        else:
            shape, dtype = self.meta(op)
            buffer = torch.empty(shape, dtype=dtype, device=self.device,
                                 pin_memory=self.pinned)
            work = dist.irecv(buffer, src=op.src, group=self.group, tag=tag)
            self._recv_work[op.key] = (work, buffer)

    def send(self, message: Message, tensor) -> None:
        """Post the send of ``tensor`` (non-blocking) after any earlier ops on the pair."""
        tensor = tensor.detach()
        if self.sent_log is not None:
            self.sent_log[message.key] = tensor
        if message.src == message.dst:
            self._local[message.key] = tensor  # its receiver forgets it
            return
        shape, dtype = self.meta(message)
        if tuple(tensor.shape) != tuple(shape) or tensor.dtype != dtype:
            raise RuntimeError(
                f"rank {self.rank}: {message} has shape {tuple(tensor.shape)} {tensor.dtype}, "
                f"the shape probe said {tuple(shape)} {dtype}")
        tensor = tensor.contiguous()
        if tensor.device != self.device:  # e.g. a CUDA activation sent with gloo
            tensor = torch.empty(tensor.shape, dtype=tensor.dtype, device=self.device,
                                 pin_memory=self.pinned).copy_(tensor)
        self._post_through(message, tensor)
        self.plan.forget(message.key)

    # Receive-ahead, on one pair's posting order (rank 1's side of pair 0-1):
    #
    #     pair order:  [recv 0F3] [recv 0F4] [send 1B1] [recv 0F5] [recv 0F6] [send 1B2] ...
    #     recv(0F3):   post recv 0F3; ahead: recv 0F4, then stop at our send 1B1 (a send is
    #                  posted only by the action that made its tensor); wait for 0F3
    #     recv(0F4):   already posted (its Work waits in _recv_work): only the wait
    #     send(1B1):   post send 1B1; ahead: recv 0F5, recv 0F6 (receives_ahead = 2): their
    #                  data can arrive while this rank computes
    #
    # With receives_ahead = 0, send(1B1) posts recv 0F4 first if recv(0F4) has not (rule 2).
    def _post_through(self, message: Message, tensor=None) -> None:
        """Post every op of the pair up to ``message`` (with ``tensor``: our send), then the
        receives ahead."""
        for op in self.order.to_post_for(message):
            self._post(op, tensor if op is message else None)
        for op in self.order.receives_ahead(self.receives_ahead):  # none when 0
            self._post(op)

    # Sends are waited for on the main thread, once they are surely matched (gloo):
    #
    #     rank 0:  send 0F3 (seq 3)  ...  recv 1B1 (seq 7) completes
    #     rank 1 posted recv 0F3 before send 1B1 (rule 2: a pair's ops in seq order), so
    #     0F3's transfer needs nothing more from rank 1: wait for it now, on this thread
    #
    # (a send's Work must be waited for before its tensor is freed, and gloo's
    # is_completed() says False until then). No helper thread and no abort check: such a
    # wait only lasts the transfer. What is left at the end goes to the waiter (close()).
    MAX_SENDS_OUT = 64  # beyond this many per peer, the oldest go to the waiter's thread

    def recv(self, message: Message):
        """Return the tensor of ``message``, waiting for it if needed (and then for our
        earlier sends to its sender, which it proves matched)."""
        if message.src == message.dst:
            self.plan.forget(message.key)
            return self._local.pop(message.key)
        self._post_through(message)
        self.plan.forget(message.key)
        work, buffer = self._recv_work.pop(message.key)
        self.waiter.wait(work, message, peer=message.src)
        if self.verbose:
            print(f"[rank {self.rank}] received {message}", flush=True)
        sends = self._sends_out.get(message.src)
        while sends and sends[0][0].seq < message.seq:
            sent, work, _tensor = sends.popleft()
            self.waiter.finish_matched(work, sent, peer=message.src)
        return buffer

    def close(self) -> None:
        """Wait until every send has completed, then stop the waiter's helper threads (call
        at the end of the run; safe to call twice). If a send fails, the threads are left to
        whoever closes the waiter (the executor's ``close``, without joining them)."""
        for peer, sends in self._sends_out.items():  # not matched by a later receive
            while sends:
                sent, work, tensor = sends.popleft()
                self.waiter.reap(work, tensor, str(sent), peer=peer)
        self.waiter.drain()
        self.waiter.close()
        if self._recv_work:
            left = ", ".join(str(k) for k in self._recv_work)
            raise RuntimeError(f"rank {self.rank}: receives posted but never used: {left}")

    # ------------------------------------------------------------ a run's losses (gloo)
    # fit(executor="dist") shares each run's losses (a float64 tensor) from the last
    # stage's rank with every other rank, outside the schedule's plan: each receiver posts
    # its receive before the run, so the values arrive while it computes, and waits for
    # them on its own thread (a message that is there costs no hand-over). Their gloo tags
    # count down from the top of gloo's 31-bit range; a schedule message's tag is its seq,
    # counted up from 0, so the two meet only past 2**31 - 2**24 messages. With NCCL the
    # executor broadcasts them instead (a pair's p2p stream keeps its posting order, which
    # a message posted before a run and sent after it would break).
    LOSSES_TAG = 2**31 - 1

    def post_losses_receive(self, src: int, count: int, run: int) -> tuple:
        """Post the receive of run ``run``'s ``count`` losses from ``src`` (before the run)."""
        values = torch.empty(count, dtype=torch.float64)
        return values, dist.irecv(values, src=src, group=self.group, tag=self._losses_tag(run))

    def send_losses(self, values: torch.Tensor, run: int) -> None:
        """Send run ``run``'s losses (float64, CPU) to every other rank and wait until each
        has them (:meth:`~.faults.Waiter.wait_here`): each rank posts its receive as it
        begins the run, needing nothing more from this one by then (the previous run's
        losses are sent), so each wait ends once that rank got there."""
        tag = self._losses_tag(run)
        works = [(r, dist.isend(values, dst=r, group=self.group, tag=tag))
                 for r in range(dist.get_world_size()) if r != self.rank]
        for r, work in works:
            self.waiter.wait_here(work, f"the losses of run {run} to reach rank {r}", peer=r)

    def take_losses(self, posted: tuple, src: int, run: int) -> torch.Tensor:
        """The losses whose receive :meth:`post_losses_receive` posted."""
        values, work = posted
        self.waiter.wait_here(work, f"the losses of run {run} from rank {src}", peer=src)
        return values

    def _losses_tag(self, run: int) -> int:
        return self.LOSSES_TAG - run % (1 << 24)

    # ------------------------------------------------------------ the Interpreter's side
    def first_input(self, m: int):
        """Stage 0's input of microbatch m (checked against :attr:`input_meta`)."""
        x = self.microbatches[m][0]
        if self.input_meta is not None and tensor_meta(x) != self.input_meta:
            raise ValueError(
                f"microbatch {m} has input shape {tuple(x.shape)} {x.dtype}, microbatch 0 has "
                f"{self.input_meta}: with a lazy microbatch sequence the distributed executor "
                "needs one shape (pass a list to allow several)")
        return x

    def target(self, m: int):
        """The last stage's target of microbatch m."""
        return self.microbatches[m][1]

    def activation(self, s: int, m: int):
        """Receive the input of F(s, m) from stage s - 1."""
        return self._take((ACTIVATION, s - 1, m))

    def gradient(self, s: int, m: int):
        """Receive the gradient of stage s's output from stage s + 1."""
        return self._take((GRADIENT, s + 1, m))

    def _take(self, key: tuple):
        """The tensor of message ``key``: handed over from a checkpoint (sent before its cut,
        so not in the plan), or received."""
        if key in self.preloaded:
            return self.preloaded.pop(key)
        return self.recv(self.plan.message(key))

    def deliver(self, action, message) -> None:
        """Post the send of the action's output (after noting the action, when recorded)."""
        if self.posted is not None:
            self.posted.append(str(action))
        if message is not None:
            kind, s, m, tensor = message
            message = self.plan.message((kind, s, m))
            if tensor is None:  # a gradient: the stage's output does not depend on its input
                shape, dtype = self.meta(message)
                tensor = torch.zeros(shape, dtype=dtype, device=self.device)
            self.send(message, tensor)
