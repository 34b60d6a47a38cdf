"""DualPipeV: DeepSeek's DualPipe folded onto one V (introduced in chapter 04).

DeepSeek-AI (2024), "DeepSeek-V3 Technical Report" (arXiv:2412.19437), section 3.2.1
(DualPipe); the single-copy "V" variant is the one in https://github.com/deepseek-ai/DualPipe
(``dualpipe/dualpipev.py``). The order is PyTorch 2.13's
``ScheduleDualPipeV._calculate_single_rank_operations``
(``torch/distributed/pipelining/schedules.py``), step for step, which
``tests/test_torch_runtime_interop.py`` compares with the installed PyTorch.

Placement is ZB-V's: rank r holds chunks r and 2P-1-r. The main phase runs a forward of one
chunk together with a backward of the other ("F0B1-F1B0"): on a GPU DualPipe overlaps the
two so that one's communication hides behind the other's compute.

How the IR writes it. The engine's IR has no "overlapped" action and a schedule's backwards
are all B or all I + W. So, explicitly:

- an overlapped step (PyTorch's ``OVERLAP_F_B`` with sub-actions F and a full B) is the
  forward followed by the backward, as PyTorch's runtime itself runs the sub-actions;
- a full backward B(s, m) is the pair I(s, m), W(s, m), adjacent.

Each rank's order of computations is therefore exactly PyTorch's (I then W computes the
same numbers as B; the interop test checks the gradients bitwise), and the simulator runs
the overlapped pair back to back, which is what one device does without DeepSeek's
communication overlap::

    PyTorch:  ... (1F5;2B1)OVERLAP_F_B ...  2I3 ... 2W3 ...
    engine:   ... 1F5 2I1 2W1 ...           2I3 ... 2W3 ...

Its bubble. At F = I = W = 1 the simulator gives each rank (P-1) idle per minibatch;
DeepSeek-V3's table gives 2(P-1) ((PP/2 - 1)(F&B + B - 3W), PP = 2P). The difference is
that one rule: DeepSeek's F&B is one operation that waits for both inputs, while the
engine's forward starts as soon as its own input is there and fills the wait for the
gradient ((P-1)F in all). :func:`pipemare_lite.analysis.overlap.simulate_overlapped` runs
this order with DeepSeek's rule and gets their count exactly (docs/schedules.md, section 3).
"""

from __future__ import annotations

from pipemare_lite.schedules.actions import Schedule, v_placement
from pipemare_lite.schedules.builders.common import flushed_schedule
from pipemare_lite.schedules.validation import ScheduleError, check_sizes


def dualpipe_v_order(rank: int, num_ranks: int, num_microbatches: int
                     ) -> list[tuple[str, int, int]]:
    """One rank's DualPipeV order for one minibatch as ``(kind, chunk, microbatch)`` triples
    (chunk 0: stage ``rank``; chunk 1: stage ``2P-1-rank``), in PyTorch's eight steps.

    A full backward is written I, W (see the module docstring); a split one is I now and
    its W later, from a queue, oldest first.
    """
    P, M = num_ranks, num_microbatches
    order: list[tuple[str, int, int]] = []
    count = {(kind, chunk): 0 for kind in "FI" for chunk in (0, 1)}
    waiting_w: list[tuple[int, int]] = []  # (chunk, microbatch) of split backwards' W

    def forward(chunk: int) -> None:
        order.append(("F", chunk, count["F", chunk]))
        count["F", chunk] += 1

    def backward(chunk: int, split: bool = False) -> None:
        m = count["I", chunk]
        count["I", chunk] += 1
        order.append(("I", chunk, m))
        if split:
            waiting_w.append((chunk, m))
        else:  # a full B: its W right away
            order.append(("W", chunk, m))

    def weight() -> None:
        if waiting_w:
            chunk, m = waiting_w.pop(0)
            order.append(("W", chunk, m))

    for _ in range(2 * (P - rank - 1)):  # 1: F0
        forward(0)
    for _ in range(rank + 1):  # 2: F0 F1
        forward(0)
        forward(1)
    for _ in range(P - rank - 1):  # 3: I1 W F1 (zero bubble)
        backward(1, split=True)
        weight()
        forward(1)
    for _ in range(M - 2 * P + rank + 1):  # 4: the main phase, (F0 B1) (F1 B0) overlapped
        forward(0)  # on the last rank the first pair is not overlapped: the same order here
        backward(1)
        forward(1)
        backward(0)
    for _ in range(P - rank - 1):  # 5: B1, (F1 B0)
        backward(1)
        forward(1)
        backward(0)
    split = False
    for i in range(rank + 1):  # 6: B1 B0, the second half with split backwards
        if i == (rank + 1) // 2 and rank % 2 == 1:
            split = True
        backward(1, split)
        if i == (rank + 1) // 2 and rank % 2 == 0:
            split = True
        backward(0, split)
    for _ in range(P - rank - 1):  # 7: W, B0
        weight()
        backward(0, split)
    for _ in range(rank + 1):  # 8: the W's left
        weight()
    return order


def dualpipe_v(num_ranks: int, num_microbatches: int, num_minibatches: int = 1) -> Schedule:
    """DualPipeV with 2P virtual stages on the V placement and a flush per minibatch.

    Needs M >= 2P microbatches (PyTorch's rule: the main phase runs M - 2P + rank + 1
    times on rank ``rank``). Each rank updates both its chunks after its last W.
    """
    P, M = num_ranks, num_microbatches
    check_sizes("dualpipev", P, M, num_minibatches, chunks=2)
    if M < 2 * P:
        raise ScheduleError(f"dualpipev: num_microbatches={M} with num_ranks={P}; allowed: "
                            f"num_microbatches >= 2P = {2 * P} (one per virtual stage)")
    minibatch = [[(kind, (rank, 2 * P - 1 - rank)[chunk], m)  # chunk 0, chunk 1 of the rank
                  for kind, chunk, m in dualpipe_v_order(rank, P, M)] for rank in range(P)]
    return flushed_schedule("dualpipev", P, M, minibatch, num_minibatches, chunks=2,
                            placement=v_placement(P))
