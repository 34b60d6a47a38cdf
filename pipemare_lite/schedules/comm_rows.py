"""Communication as rows: each rank's actions with its SENDs and RECVs, in posting order.

A schedule lists compute only (``F``, ``B``, ``I``, ``W``, ``U``); the distributed executor
adds the point-to-point operations by the rule of :mod:`pipemare_lite.engine.distributed.transport`.
This lowering pass writes them into the rows in exactly the order the transport posts them,
walking each rank's actions as the executor's loop does::

    before an action that needs a tensor from another rank:
        post every operation of that pair up to its RECV (rule 2: the pair's seq order),
        then up to `receives_ahead` more receives per peer that are next in their pair's order
    the action itself                          (it waits for its received tensors first)
    after an action that produced a tensor for another rank:
        post the pair's operations up to its SEND, then receives ahead again

Spelled as PyTorch's ``pipeline_order_with_comms``: ``0SEND_F3`` (stage 0 sends the
activation of microbatch 3), ``1RECV_F3``, ``1SEND_B3`` (the gradient of stage 1's input),
``0RECV_B3``. PyTorch's ``_add_send_recv`` places the sends alike and receives in the same
order, but posts a receive where its send falls in a simulated global order; here it is
posted as late as rule 2 allows, plus ``receives_ahead``. ``tests/test_comm_rows.py``
checks the rows against a real gloo run and PyTorch's lowering. Chapter 11. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipemare_lite.schedules.actions import Action, Schedule
from pipemare_lite.schedules.comm_plan import (
    ACTIVATION,
    RECEIVES_AHEAD,
    CommPlan,
    Message,
    PostingOrder,
    plan_communication,
)

SEND, RECV = "SEND", "RECV"


@dataclass(frozen=True)
class CommOp:
    """One operation a rank posts: the ``SEND`` or the ``RECV`` of one :class:`Message`."""

    kind: str
    message: Message

    @property
    def stage(self) -> int:
        """The stage whose row it sits in: the producer for a SEND, the consumer for a RECV."""
        return self.message.stage if self.kind == SEND else self.message.consumer_stage

    @property
    def peer(self) -> int:
        """The rank at the other end."""
        return self.message.dst if self.kind == SEND else self.message.src

    def __str__(self) -> str:
        direction = "F" if self.message.kind == ACTIVATION else "B"
        return f"{self.stage}{self.kind}_{direction}{self.message.microbatch}"


def comm_op(message: Message, rank: int) -> CommOp:
    """The operation ``rank`` posts for ``message``: its SEND if it is the sender, else its RECV."""
    if rank not in (message.src, message.dst):
        raise ValueError(f"rank {rank} neither sends nor receives {message}")
    return CommOp(SEND if message.src == rank else RECV, message)


def comm_row(plan: CommPlan, rank: int, *, receives_ahead: int = RECEIVES_AHEAD) -> list:
    """Rank ``rank``'s actions and :class:`CommOp` s in the order the transport posts them."""
    if receives_ahead < 0:
        raise ValueError(f"receives_ahead must be >= 0, got {receives_ahead}")
    order = PostingOrder(plan, rank)
    row: list = []

    def post(messages: list[Message]) -> None:
        for message in messages:
            if message.src != message.dst:  # same-rank hand-overs are not posted
                row.extend(comm_op(op, rank) for op in order.to_post_for(message))
                row.extend(comm_op(op, rank) for op in order.receives_ahead(receives_ahead))

    for position, action in enumerate(plan.schedule.ranks[rank]):
        post(plan.consumes.get((rank, position), []))  # what the action waits for
        row.append(action)
        post(plan.produces.get((rank, position), []))  # what it sends on
    return row


def comm_rows(schedule: Schedule, *, receives_ahead: int = RECEIVES_AHEAD) -> list[list]:
    """Every rank's :func:`comm_row`: compute actions with SEND/RECV in posting order.

    ``receives_ahead`` is the distributed executor's (``RECEIVES_AHEAD``, 2); 0 posts each
    receive only when it is needed or when its pair's order requires it.
    """
    plan = plan_communication(schedule)
    return [comm_row(plan, rank, receives_ahead=receives_ahead)
            for rank in range(schedule.num_ranks)]


def comm_row_strings(schedule: Schedule, *,
                     receives_ahead: int = RECEIVES_AHEAD) -> list[list[str]]:
    """:func:`comm_rows` as strings (``"0F3"``, ``"0SEND_F3"``): PyTorch's spelling."""
    return [[str(item) for item in row]
            for row in comm_rows(schedule, receives_ahead=receives_ahead)]


def format_comm_rows(rows, *, per_line: int = 8, indent: int = 9) -> str:
    """Rows of :func:`comm_rows` (or their strings) as text: ``rank r:`` then the items,
    ``per_line`` to a line (a communication item is the one with ``_`` in its name)."""
    if per_line < 1:
        raise ValueError(f"per_line must be >= 1, got {per_line}")
    lines = []
    for rank, row in enumerate(rows):
        cells = [f"{item!s:<9}" for item in row]
        for start in range(0, max(len(cells), 1), per_line):
            head = f"rank {rank}:" if start == 0 else ""
            lines.append(f"{head:<{indent}}" + " ".join(cells[start:start + per_line]).rstrip())
    return "\n".join(lines)


def pair_streams(schedule: Schedule, a: int, b: int, *,
                 receives_ahead: int = RECEIVES_AHEAD) -> list[tuple[int, CommOp, CommOp]]:
    """The operations of the pair of ranks ``a``, ``b`` in the order each rank posts them.

    Returns ``(seq, op of a, op of b)`` per message: rule 2 says both ranks post a pair's
    operations in increasing ``seq``, so the i-th operation of ``a`` on the pair and the
    i-th of ``b`` are the two ends of one message (the deadlock-freedom argument). Raises
    RuntimeError if the rows break that (they never should).
    """
    rows = comm_rows(schedule, receives_ahead=receives_ahead)
    left, right = ([op for op in rows[r] if isinstance(op, CommOp) and op.peer == peer]
                   for r, peer in ((a, b), (b, a)))
    if [op.message for op in left] != [op.message for op in right]:
        raise RuntimeError(f"ranks {a} and {b} post their pair's operations in different orders")
    return [(x.message.seq, x, y) for x, y in zip(left, right)]


def compute_only(row) -> list[Action]:
    """A comm row without its communication: the schedule's row again."""
    return [item for item in row if isinstance(item, Action)]
