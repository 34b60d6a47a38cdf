"""Interleaved 1F1B (Megatron-LM's virtual pipeline): v chunks per rank (introduced in chapter 04).

The model is cut into P*v pieces; virtual stage s lives on rank s % P, so a microbatch visits
every rank v times. Each piece is 1/v of a rank's work, so the fill and drain shrink by v:

    rank 0: [s0] [s4]        P = 4, v = 2: virtual stages 0..7
    rank 1: [s1] [s5]        microbatch path: r0 r1 r2 r3 r0 r1 r2 r3
    rank 2: [s2] [s6]
    rank 3: [s3] [s7]
"""

from __future__ import annotations

from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.builders.common import flushed_schedule
from pipemare_lite.schedules.builders.one_f_one_b import one_f_one_b_order
from pipemare_lite.schedules.validation import ScheduleError, check_sizes


def _virtual_step(k: int, rank: int, P: int, v: int, backward: bool) -> tuple[int, int]:
    """(virtual stage, microbatch offset) of a rank's k-th forward (or backward) step.

    Megatron's order: P microbatches through chunk 0, the same P through chunk 1, ... then the
    next group of P. Backwards visit the chunks in reverse.
    """
    chunk = (k // P) % v
    if backward:
        chunk = v - 1 - chunk
    microbatch = (k // (P * v)) * P + k % P
    return chunk * P + rank, microbatch


def interleaved(num_ranks: int, num_microbatches: int, chunks: int = 2,
                num_minibatches: int = 1) -> Schedule:
    """Interleaved 1F1B with ``chunks`` model chunks per rank and a flush per minibatch.

    Requires M to be a multiple of P (Megatron's original rule: microbatches move through
    the chunks in groups of P). Rank r warms up with 2(P-1-r) + (v-1)P forwards (capped at
    v*M), then alternates F and B. With ``chunks=1`` it is exactly :func:`one_f_one_b`.
    """
    P, M, v = num_ranks, num_microbatches, chunks
    check_sizes("interleaved", P, M, num_minibatches, chunks=v)
    if v > 1 and M % P != 0:
        multiples = ", ".join(str(P * i) for i in range(1, 4))
        raise ScheduleError(
            f"interleaved: num_microbatches={M} must be a multiple of num_ranks={P} "
            f"when chunks={v} > 1 (allowed: {multiples}, ...)"
        )
    steps = v * M  # forward steps of a rank per minibatch (one per chunk and microbatch)
    minibatch = []
    for rank in range(P):
        warmup = P - 1 - rank if v == 1 else min(2 * (P - 1 - rank) + (v - 1) * P, steps)
        minibatch.append([(kind, *_virtual_step(step, rank, P, v, backward=kind == "B"))
                          for kind, step in one_f_one_b_order(list(range(steps)), warmup)])
    return flushed_schedule("interleaved", P, M, minibatch, num_minibatches, chunks=v)
