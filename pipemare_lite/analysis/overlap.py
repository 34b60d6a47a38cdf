"""DualPipe's overlapped F&B as one operation: how DeepSeek's table counts the bubble
(chapter 04; docs/schedules.md, section 3).

DeepSeek-V3's table (and https://github.com/deepseek-ai/DualPipe's README) gives DualPipeV
on P devices (PP = 2P stages) a bubble of ``(PP/2 - 1)(F&B + B - 3W)``: 2(P-1) at
F = I = W = 1 with no overlap gain (F&B = F + B = 3). The engine's simulator gives (P-1)
(:func:`~pipemare_lite.analysis.formulas.makespan_dualpipe_v`). Both run the same order; they
differ in one rule. DualPipe runs a main-phase pair, a forward of one chunk and a full
backward of the other, as ONE overlapped operation F&B, which starts when both its inputs
are there (the forward's activation and the backward's gradient). The engine's IR has no
overlapped action: the pair is the forward followed by the backward (I, W), so the forward
starts as soon as ITS input is there and fills the time the rank would otherwise wait for
the gradient. On the way up the ranks that wait is F per hop, (P-1)F in all::

    DeepSeek:  wait ... [ F1 & B0 ]        engine:  [ F1 ] [ B0 ]   (B0's gradient arrives
                        ^ both inputs                ^ F1's input     while F1 runs)

:func:`simulate_overlapped` simulates a schedule with that rule: every forward immediately
followed by the full backward (I then W) of another chunk is one operation of cost
``overlapped``. On DualPipeV its largest idle time per rank is DeepSeek's count exactly,
``(P-1)(F&B + B - 3W)`` (tests/test_dualpipe_bubble.py, P = 2..8, several F&B). Written
plainly, step by step, as :func:`~pipemare_lite.analysis.simulate.simulate_step_by_step`
is. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipemare_lite.analysis.simulate import OpCosts, depends_on
from pipemare_lite.schedules.actions import Action, Schedule
from pipemare_lite.schedules.validation import ScheduleError


@dataclass(frozen=True)
class OverlappedRun:
    """What :func:`simulate_overlapped` measured.

    Attributes:
        makespan: first start to last end.
        busy_per_rank: each rank's summed operation time (an overlapped pair counts once,
            ``overlapped``).
        idle_per_rank: ``makespan - busy``, each rank's bubble.
        pairs_per_rank: how many overlapped pairs each rank ran.
        times: ``{action: (start, end)}``; both actions of a pair have the pair's times.
    """

    makespan: float
    busy_per_rank: tuple[float, ...]
    idle_per_rank: tuple[float, ...]
    pairs_per_rank: tuple[int, ...]
    times: dict


def overlapped_pairs(row) -> list[tuple[Action, ...]]:
    """A rank's row cut into operations: ``(F, I, W)`` where a forward is immediately
    followed by the full backward (I then W of one microbatch) of another stage, DualPipe's
    overlapped pair; every other action alone."""
    row, ops, i = list(row), [], 0
    while i < len(row):
        a = row[i]
        if (a.kind == "F" and i + 2 < len(row) and row[i + 1].kind == "I"
                and row[i + 1].stage != a.stage
                and row[i + 2] == Action(row[i + 1].stage, "W", row[i + 1].index)):
            ops.append(tuple(row[i:i + 3]))
            i += 3
        else:
            ops.append((a,))
            i += 1
    return ops


def simulate_overlapped(schedule: Schedule, costs: OpCosts | None = None,
                        overlapped: float | None = None) -> OverlappedRun:
    """Simulate ``schedule`` with each overlapped pair (:func:`overlapped_pairs`) as ONE
    operation of cost ``overlapped`` (F&B; default F + I + W, no overlap gain) that starts
    when the rank is free and both of its inputs are there. Other actions as in
    :func:`~pipemare_lite.analysis.simulate.simulate_step_by_step` (``costs``; no
    ``costs_per``, multipliers or latency: DeepSeek's count has none)."""
    costs = OpCosts() if costs is None else costs
    duration = {"F": costs.forward, "B": costs.backward, "I": costs.input_grad,
                "W": costs.weight_grad, "U": costs.update}
    pair_cost = costs.forward + costs.input_grad + costs.weight_grad
    pair_cost = pair_cost if overlapped is None else float(overlapped)
    if not pair_cost > 0:
        raise ValueError(f"overlapped={overlapped!r}: allowed: a number > 0 (F&B's time)")
    ops = [overlapped_pairs(row) for row in schedule.ranks]
    times: dict[Action, tuple[float, float]] = {}
    free, busy = [0.0] * schedule.num_ranks, [0.0] * schedule.num_ranks
    next_op, progress = [0] * schedule.num_ranks, True
    while progress:
        progress = False
        for rank, rank_ops in enumerate(ops):
            if next_op[rank] == len(rank_ops):
                continue
            op = rank_ops[next_op[rank]]
            needs = [d for a in op for d in depends_on(a, schedule) if d not in op]
            if any(d not in times for d in needs):
                continue  # blocked: the other ranks first
            start = max([free[rank]] + [times[d][1] for d in needs])
            cost = pair_cost if len(op) == 3 else duration[op[0].kind]
            for a in op:
                times[a] = (start, start + cost)
            free[rank], busy[rank] = start + cost, busy[rank] + cost
            next_op[rank] += 1
            progress = True
    blocked = [str(r[i][0]) for r, i in zip(ops, next_op) if i < len(r)]
    if blocked:
        raise ScheduleError(f"schedule {schedule.name!r} deadlocks at {', '.join(blocked)} "
                            "with overlapped pairs")
    makespan = max(end for _, end in times.values()) - min(s for s, _ in times.values())
    return OverlappedRun(makespan, tuple(busy), tuple(makespan - b for b in busy),
                         tuple(sum(len(op) == 3 for op in r) for r in ops), times)


def deepseek_bubble_dualpipe_v(P: int, overlapped: float, backward: float,
                               weight_grad: float) -> float:
    """DeepSeek-V3's table for DualPipeV on P devices (PP = 2P stages):
    ``(PP/2 - 1)(F&B + B - 3W)``."""
    return (P - 1) * (overlapped + backward - 3 * weight_grad)
