"""The asynchronous lock-step pipeline of PipeMare (introduced in chapter 05, used to chapter 09).

No flush and no stash. At tick t, stage i (0-indexed) runs the forward of microbatch t-i and
the backward of microbatch t-(2P-1-i), when they exist:

    tick:     0    1    2    3      4      5      6        P = 3
    stage 0:  F0   F1   F2   F3     F4     F5 B0  F6 B1
    stage 1:       F0   F1   F2     F3 B0  F4 B1  F5 B2
    stage 2:            F0   F1 B0  F2 B1  F3 B2  F4 B3

The last stage runs B(m) one tick after F(m); stage i's B(m) comes 2(P-1-i)+1 ticks after its
F(m) (2(P-i)+1 with 1-indexed i). Inside a tick the order is F, then B, then U: the forward of
a tick sees the weights as they were when the tick began. With ``backward_first=True`` the
same ticks run B (and its U) before F, so a tick's forward already sees that tick's update:
the F-to-update gap is one microbatch slot shorter (chapter 05 compares both).
"""

from __future__ import annotations

from pipemare_lite.deprecation import accepts_old_keywords
from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.builders.common import make_schedule
from pipemare_lite.schedules.builders.one_f_one_b import clamp_notes
from pipemare_lite.schedules.builders.pipedream import flushed_warmup_order
from pipemare_lite.schedules.validation import check_sizes

#: The note a ``backward_first`` schedule carries (how the staleness analysis can tell).
TICK_ORDER_NOTE_BACKWARD_FIRST = "tick order: B (and U) before F in every tick"


def async_order(stage: int, num_ranks: int, N: int, K: int, warmup: int = 0,
                backward_first: bool = False) -> list:
    """Stage ``stage``'s lock-step order over minibatches ``warmup .. K-1`` (N per update).

    Each tick holds at most one F and one B (then its U); ``backward_first`` puts B first.
    """
    first, end = warmup * N, K * N  # microbatches first .. end-1 run asynchronously
    order = []
    for tick in range(end - first + 2 * num_ranks - 1):
        forward = first + tick - stage
        backward = first + tick - (2 * num_ranks - 1 - stage)
        if first <= forward < end and not backward_first:
            order.append(("F", stage, forward))
        if first <= backward < end:
            order.append(("B", stage, backward))
            if backward % N == N - 1:  # this backward completes a group of N: update
                order.append(("U", stage, backward // N))
        if first <= forward < end and backward_first:
            order.append(("F", stage, forward))
    return order


@accepts_old_keywords({"warmup_minibatches": "warmup"})
def async_pipeline(num_ranks: int, num_microbatches: int, num_minibatches: int = 1,
                   warmup: int = 0, *, backward_first: bool = False) -> Schedule:
    """PipeMare's asynchronous pipeline (``weight_mode="async"``), one update per N microbatches.

    ``num_microbatches`` is N, microbatches per update. The first ``warmup``
    minibatches run as flushed 1F1B (PipeMare-W); T1/T2 are executor options, not order.
    ``backward_first=True`` runs each tick's B (and U) before its F; the schedule's notes
    then say so (its name stays "async").
    """
    P, N, K, W = num_ranks, num_microbatches, num_minibatches, warmup
    check_sizes("async", P, N, K, warmup=W)
    if not isinstance(backward_first, bool):
        raise ValueError(f"backward_first={backward_first!r}: allowed: True or False")
    orders = [flushed_warmup_order(s, P, N, W) + async_order(s, P, N, K, W, backward_first)
              for s in range(P)]
    notes = clamp_notes(P, N) if W else []  # only the flushed warm-up has a 1F1B warm-up
    if backward_first:
        notes.append(TICK_ORDER_NOTE_BACKWARD_FIRST)
    return make_schedule("async", P, N, orders, num_minibatches=K, weight_mode="async",
                         warmup=W, notes=notes)
