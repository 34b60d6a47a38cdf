"""ZB-V: zero bubble on a V placement, two chunks per rank (introduced in chapter 04).

Qi, Wan, Huang, Lin (2024), "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv:2401.10241),
section 6; the order is PyTorch 2.13's ``ScheduleZBVZeroBubble._calculate_single_rank_operations``
(``torch/distributed/pipelining/schedules.py``), step for step, which
``tests/test_torch_runtime_interop.py`` compares with the installed PyTorch.

The model is cut into 2P chunks and placed as a V: rank r holds chunks r and 2P-1-r, so a
microbatch goes down the ranks and comes back up, and the turn at the bottom (chunk P-1 ->
chunk P, both on rank P-1) and the loss (chunk 2P-1, on rank 0 beside chunk 0) cost no
message. Backwards are split (I, then W later) and the W's fill the bubbles::

    P = 2, M = 4      rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2
    rank 0:  0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 ...
    rank 1:      1F0 2F0 1F1 2F1 2I0 2W0 2F2 2I1 ...   (row printed by `schedule zb-v`)
"""

from __future__ import annotations

from pipemare_lite.schedules.actions import Schedule, v_placement
from pipemare_lite.schedules.builders.common import flushed_schedule
from pipemare_lite.schedules.validation import check_sizes


def zb_v_order(rank: int, num_ranks: int, num_microbatches: int) -> list[tuple[str, int, int]]:
    """One rank's ZB-V order for one minibatch as ``(kind, chunk, microbatch)`` triples,
    chunk 0 (stage ``rank``, going down) or 1 (stage ``2P-1-rank``, coming back).

    PyTorch's four phases: warm-up (chunk 0 forwards, then chunk 1 forwards interleaved,
    then chunk 1 F-I-W triples), steady state (F-I-W on chunk 0, then on chunk 1),
    cool-down (I's of both chunks, W's of chunk 0 between them), then the W's left over.
    With fewer than 2P-1 microbatches PyTorch plans 2P-1 and drops the extra ones; so do we.
    """
    P, M = num_ranks, num_microbatches
    planned = max(2 * P - 1, M)
    order: list[tuple[str, int, int]] = []
    count = {(kind, chunk): 0 for kind in "FIW" for chunk in (0, 1)}

    def add(kind: str, chunk: int) -> None:
        order.append((kind, chunk, count[kind, chunk]))
        count[kind, chunk] += 1

    for _ in range(2 * (P - rank) - 1):  # warm-up 1: chunk 0 forwards
        add("F", 0)
    for _ in range(rank):  # warm-up 2: the first chunk-1 forwards, alternating
        add("F", 1)
        add("F", 0)
    for _ in range(P - rank):  # warm-up 3: chunk 1 runs F-I-W
        add("F", 1)
        add("I", 1)
        add("W", 1)
    while count["F", 1] < count["F", 0] or count["F", 0] < planned:  # steady state
        if count["F", 0] < planned:
            add("F", 0)
        add("I", 0)
        add("W", 0)
        add("F", 1)
        add("I", 1)
        add("W", 1)
    for _ in range(rank):  # cool-down: input gradients first, weight gradients wait
        add("I", 0)
        add("I", 1)
    for _ in range(P - rank):
        add("I", 0)
        add("W", 0)
    while count["W", 1] < count["I", 1]:
        add("W", 1)
    while count["W", 0] < count["I", 0]:
        add("W", 0)
    return [(kind, chunk, m) for kind, chunk, m in order if m < M]


def zb_v(num_ranks: int, num_microbatches: int, num_minibatches: int = 1) -> Schedule:
    """ZB-V with 2P virtual stages on the V placement and a flush per minibatch.

    Any M >= 1 is accepted (PyTorch's rule: below 2P-1 microbatches, the missing ones are
    dropped from the 2P-1 plan). Each rank updates both its chunks after its last W.
    """
    P, M = num_ranks, num_microbatches
    check_sizes("zb-v", P, M, num_minibatches, chunks=2)
    minibatch = [[(kind, (rank, 2 * P - 1 - rank)[chunk], m)  # chunk 0, chunk 1 of the rank
                  for kind, chunk, m in zb_v_order(rank, P, M)] for rank in range(P)]
    return flushed_schedule("zb-v", P, M, minibatch, num_minibatches, chunks=2,
                            placement=v_placement(P))
