"""ZB-H1: 1F1B with the backward split into I and W (introduced in chapter 04).

Qi et al. (2023), "Zero Bubble Pipeline Parallelism". The backward of a stage is two jobs:
``I`` (gradient w.r.t. the stage input, needed by the previous stage: on the critical path)
and ``W`` (gradient w.r.t. the stage weights, needed only by the update: can wait). Sending
I upstream first and doing W later lets W fill the bubble of the drain.

    stage 0:  F F F F I W F I W ... I W I W            (defers no W)
    stage 3:        F I F I F I F I W ... I W W W W    (defers 3 Ws to the end)
"""

from __future__ import annotations

from collections import deque

from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.builders.common import make_schedule, microbatches_of
from pipemare_lite.schedules.builders.one_f_one_b import clamp_notes
from pipemare_lite.schedules.validation import check_sizes


def zb_h1_order(stage: int, num_ranks: int, microbatches: list[int]) -> list[tuple[str, int]]:
    """One stage's ZB-H1 order for one minibatch as ``(kind, microbatch)`` pairs.

    Warm-up and steady state are 1F1B's with B replaced by I; stage s keeps its last s weight
    gradients waiting (W lags I by s microbatches) and runs them in the drain. Stage s then
    holds at most (P-1-s) + 1 + s = P microbatches' activations: the same peak as stage 0 of
    1F1B, so the schedule needs no more memory than 1F1B's busiest rank.
    """
    warmup = min(num_ranks - 1 - stage, len(microbatches))
    order = [("F", m) for m in microbatches[:warmup]]
    pending_w: deque[int] = deque()

    def input_grad(m: int) -> None:
        order.append(("I", m))
        pending_w.append(m)
        if len(pending_w) > stage:  # keep `stage` weight gradients back for the drain
            order.append(("W", pending_w.popleft()))

    for i, m in enumerate(microbatches[warmup:]):
        order.append(("F", m))
        input_grad(microbatches[i])
    for m in microbatches[len(microbatches) - warmup :]:
        input_grad(m)
    order += [("W", m) for m in pending_w]
    return order


def zb_h1(num_ranks: int, num_microbatches: int, num_minibatches: int = 1) -> Schedule:
    """ZB-H1 with a flush (one update after the last W) per minibatch."""
    check_sizes("zb-h1", num_ranks, num_microbatches, num_minibatches)
    notes = clamp_notes(num_ranks, num_microbatches)
    orders = []
    for stage in range(num_ranks):
        order = []
        for k in range(num_minibatches):
            mbs = microbatches_of(k, num_microbatches)
            order += [(kind, stage, m) for kind, m in zb_h1_order(stage, num_ranks, mbs)]
            order.append(("U", stage, k))
        orders.append(order)
    return make_schedule("zb-h1", num_ranks, num_microbatches, orders,
                         num_minibatches=num_minibatches, notes=notes)
