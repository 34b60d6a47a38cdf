"""ZB-H1 and ZB-H2: 1F1B with the backward split into I and W (introduced in chapter 04).

Qi et al. (2023), "Zero Bubble Pipeline Parallelism". The backward of a stage is two jobs:
``I`` (gradient w.r.t. the stage input, needed by the previous stage: on the critical path)
and ``W`` (gradient w.r.t. the stage weights, needed only by the update: can wait). Sending
I upstream first and doing W later lets W fill the bubble of the drain.

    stage 0:  F F F F I W F I W ... I W I W            (defers no W)
    stage 3:        F I F I F I F I W ... I W W W W    (defers 3 Ws to the end)

ZB-H2 (same paper, section 3.2) buys the rest of the bubble with memory: up to 2P-1
microbatches in flight on every stage (ZB-H1: P), so the first stages keep running forwards
while the first input gradient travels back, and every rank runs gap-free from its first
forward to its last W: the schedule is a parallelogram, and with a rank-local flush the next
minibatch fills the slope (zero bubble in the steady state).
"""

from __future__ import annotations

from collections import deque

from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.builders.common import flushed_schedule
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
    mbs = list(range(num_microbatches))
    minibatch = [[(kind, stage, m) for kind, m in zb_h1_order(stage, num_ranks, mbs)]
                 for stage in range(num_ranks)]
    return flushed_schedule("zb-h1", num_ranks, num_microbatches, minibatch, num_minibatches,
                            notes=notes)


def zb_h2_orders(num_ranks: int, num_microbatches: int) -> list[list[tuple[str, int]]]:
    """Every stage's ZB-H2 order for one minibatch as ``(kind, microbatch)`` pairs.

    Made by the rule of the paper's heuristic scheduler (Qi et al., section 4), played in
    lock-step ticks with F = I = W = 1: at each tick each stage runs the first of

    1. I of its oldest microbatch whose output gradient has arrived (the critical path);
    2. F of its next microbatch, if it holds fewer than 2P-1 activations (the memory cap);
    3. the oldest waiting W (fills what would be idle).

    An action run at tick t is visible to the neighbours from tick t+1.
    """
    P, M, cap = num_ranks, num_microbatches, 2 * num_ranks - 1
    forward_done: list[dict[int, int]] = [{} for _ in range(P)]  # stage -> {m: tick it ended}
    input_done: list[dict[int, int]] = [{} for _ in range(P)]
    waiting_w: list[deque[int]] = [deque() for _ in range(P)]
    orders: list[list[tuple[str, int]]] = [[] for _ in range(P)]
    tick = 0
    while any(len(order) < 3 * M for order in orders):
        chosen = []
        for s in range(P):
            f, i = len(forward_done[s]), len(input_done[s])  # next F and I microbatch
            held = f - (i - len(waiting_w[s]))  # F done, W not yet
            if i < f and (s == P - 1 or input_done[s + 1].get(i, tick) < tick):
                chosen.append(("I", i))
            elif f < M and held < cap and (s == 0 or forward_done[s - 1].get(f, tick) < tick):
                chosen.append(("F", f))
            elif waiting_w[s]:
                chosen.append(("W", waiting_w[s][0]))
            else:
                chosen.append(None)
        for s, action in enumerate(chosen):  # all stages move at once
            if action is None:
                continue
            kind, m = action
            orders[s].append(action)
            if kind == "F":
                forward_done[s][m] = tick
            elif kind == "I":
                input_done[s][m] = tick
                waiting_w[s].append(m)
            else:
                waiting_w[s].popleft()
        tick += 1
    return orders


def zb_h2(num_ranks: int, num_microbatches: int, num_minibatches: int = 1) -> Schedule:
    """ZB-H2 with a flush (one update after the last W) per minibatch: see
    :func:`zb_h2_orders`. Qi, Wan, Huang, Lin (2023), "Zero Bubble Pipeline Parallelism"
    (arXiv:2401.10241), section 3.2, figure 3."""
    check_sizes("zb-h2", num_ranks, num_microbatches, num_minibatches)
    minibatch = [[(kind, stage, m) for kind, m in order]
                 for stage, order in enumerate(zb_h2_orders(num_ranks, num_microbatches))]
    return flushed_schedule("zb-h2", num_ranks, num_microbatches, minibatch, num_minibatches)
