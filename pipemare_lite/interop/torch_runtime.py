"""Our schedules in PyTorch's pipelining runtime, PyTorch's schedules in our engine (chapter 11).

:func:`interop_worker` is a process body for
:func:`pipemare_lite.engine.distributed.launch.launch`. For
each
:class:`InteropCase` it runs one training step (gradients only, no update) two or three ways
from the same weights and returns every rank's gradients, to compare bitwise:

- ``schedule`` given (an engine schedule, exported): PyTorch's ``_PipelineScheduleRuntime``
  loads :func:`~pipemare_lite.interop.torch_notation.to_torch_csv` with ``_load_csv``
  (which adds the SEND/RECV itself) and runs ``step()``; our
  :class:`~pipemare_lite.engine.distributed.executor.DistributedExecutor` runs the schedule itself;
- ``torch_class`` given (e.g. ``"ScheduleInterleavedZeroBubble"``, imported): PyTorch builds
  its own schedule and runs ``step()``; its ``pipeline_order`` goes through
  :func:`~pipemare_lite.interop.torch_notation.from_torch_order` into an engine schedule
  that our executor runs.

Each rank builds a ``PipelineStage`` for every (virtual) stage it holds: the schedule's
placement (stage ``s`` on rank ``s % P``, or the V of ZB-V and DualPipeV, rank r holding
r and 2P-1-r) in both runtimes. The batch reaches both as the views PyTorch's
``tensor_split`` makes (matmul rounds differently on unaligned views than on fresh tensors).
Loss scaling, as in :mod:`pipemare_lite.interop.torch_pipelining`: ``"torch"`` keeps PyTorch's
defaults (sum of plain-loss gradients, divided by M: bitwise equal to ours when M is a
power of two), ``"ours"`` gives it ``loss / M`` and ``scale_grads=False`` (bitwise for any M).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch

from pipemare_lite.engine.distributed.executor import DistributedExecutor
from pipemare_lite.interop.torch_notation import from_torch_order, to_torch_csv
from pipemare_lite.interop.torch_pipelining import ScaledLoss
from pipemare_lite.schedules.actions import Schedule, round_robin_placement, v_placement

#: PyTorch schedule classes whose order the engine can import ("Single" ones hold one stage
#: per rank, the others a list; the V ones two stages per rank on the V placement).
SINGLE_STAGE_CLASSES = ("ScheduleGPipe", "Schedule1F1B")
V_CLASSES = ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")
MULTI_STAGE_CLASSES = ("ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble",
                       "ScheduleLoopedBFS", *V_CLASSES)
LOSS_SCALINGS = ("torch", "ours")


@dataclass(frozen=True)
class InteropCase:
    """One step to run in both runtimes (see :func:`interop_worker`).

    Attributes:
        label: a name for the results.
        stages: picklable callable returning all P*v stage modules (seeded, e.g.
            :class:`~pipemare_lite.engine.distributed.executor.PartitionedModel`).
        microbatches: M ``(x, target)`` pairs; concatenated into one batch, which PyTorch
            splits back with ``tensor_split``.
        loss_fn: mean-reduced loss.
        schedule: an engine schedule with one minibatch (export direction), or None.
        torch_class: a PyTorch schedule class name (import direction), or None.
        chunks: stages per rank for ``torch_class`` (ignored with ``schedule``).
        loss_scaling: ``"torch"`` or ``"ours"`` (see the module docstring).
    """

    label: str
    stages: Callable
    microbatches: Sequence
    loss_fn: Callable
    schedule: Schedule | None = None
    torch_class: str | None = None
    chunks: int = 1
    loss_scaling: str = "torch"

    def __post_init__(self) -> None:
        if (self.schedule is None) == (self.torch_class is None):
            raise ValueError(f"case {self.label!r}: give exactly one of schedule, torch_class")
        if self.loss_scaling not in LOSS_SCALINGS:
            raise ValueError(f"case {self.label!r}: loss_scaling {self.loss_scaling!r}; "
                             f"allowed: {', '.join(LOSS_SCALINGS)}")
        known = SINGLE_STAGE_CLASSES + MULTI_STAGE_CLASSES
        if self.torch_class is not None and self.torch_class not in known:
            raise ValueError(f"case {self.label!r}: torch_class {self.torch_class!r}; "
                             f"allowed: {', '.join(known)}")
        if self.torch_class in SINGLE_STAGE_CLASSES and self.chunks != 1:
            raise ValueError(f"case {self.label!r}: {self.torch_class} holds one stage per "
                             f"rank; chunks={self.chunks!r}, allowed: 1")
        if self.torch_class in V_CLASSES and self.chunks != 2:
            raise ValueError(f"case {self.label!r}: {self.torch_class} holds two stages per "
                             f"rank (a V); chunks={self.chunks!r}, allowed: 2")

    @property
    def num_microbatches(self) -> int:
        """M, microbatches in the step."""
        return len(self.microbatches)


def interop_worker(info, cases: Sequence[InteropCase]) -> dict:
    """Process body: each case's step in PyTorch's runtime and in ours.

    Returns this rank's ``{"rank", "pid", "master" (the rendezvous address:port),
    "cases"}``; ``cases`` holds per case ``{"label", "rows" (the engine schedule's rows that
    were run), "torch_grads", "our_grads" ({stage: [gradient of each parameter]}),
    "torch_losses", "our_losses" (on the rank holding the last stage, else empty)}``.
    """
    return {
        "rank": info.rank,
        "pid": os.getpid(),
        "master": f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        "cases": [_run_case(info, case) for case in cases],
    }


def _run_case(info, case: InteropCase) -> dict:
    from torch.distributed import pipelining
    from torch.distributed.pipelining import schedules as torch_schedules

    P, rank, M = info.world_size, info.rank, case.num_microbatches
    chunks = case.schedule.chunks if case.schedule is not None else case.chunks
    num_stages = P * chunks
    if case.schedule is not None:
        placement = case.schedule.placement
    else:
        placement = (v_placement(P, chunks) if case.torch_class in V_CLASSES
                     else round_robin_placement(P, chunks))
    local = [s for s in range(num_stages) if placement[s] == rank]
    modules = case.stages()
    if len(modules) != num_stages:
        raise ValueError(f"case {case.label!r}: stages() gave {len(modules)} modules for "
                         f"{P} ranks x {chunks} chunks")
    torch_stages = [pipelining.PipelineStage(modules[s], s, num_stages, info.device)
                    for s in local]
    ours_scaling = case.loss_scaling == "ours"
    loss_fn = ScaledLoss(case.loss_fn, M) if ours_scaling else case.loss_fn
    options = {"loss_fn": loss_fn, "scale_grads": not ours_scaling}

    if case.schedule is not None:
        schedule = case.schedule
        runtime = torch_schedules._PipelineScheduleRuntime(torch_stages, M, **options)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "schedule.csv")
            with open(path, "w") as f:
                f.write(to_torch_csv(schedule))
            runtime._load_csv(path)  # compute-only: PyTorch adds the SEND/RECV itself
    else:
        cls = getattr(pipelining, case.torch_class)
        single = case.torch_class in SINGLE_STAGE_CLASSES
        runtime = cls(torch_stages[0] if single else torch_stages, M, **options)
        schedule = from_torch_order(runtime.pipeline_order, num_microbatches=M)

    x = torch.cat([mb[0] for mb in case.microbatches]).to(info.device)
    y = torch.cat([mb[1] for mb in case.microbatches]).to(info.device)
    losses: list = []
    holds_first, holds_last = 0 in local, num_stages - 1 in local
    if holds_first and holds_last:
        runtime.step(x, target=y, losses=losses)
    elif holds_first:
        runtime.step(x)
    elif holds_last:
        runtime.step(target=y, losses=losses)
    else:
        runtime.step()
    out = {
        "label": case.label,
        "rows": schedule.rows(),
        "torch_grads": {s: [p.grad.detach().cpu().clone() for p in modules[s].parameters()]
                        for s in local},
        "torch_losses": [float(v.detach()) for v in losses],
    }

    executor = DistributedExecutor(
        schedule, case.stages(), loss_fn=case.loss_fn,
        optimizer_factory=partial(torch.optim.SGD, lr=0.0), rank=rank, device=info.device,
        board=info.board, op_timeout=info.op_timeout, record_gradients=True,
    )
    feed = list(zip(torch.tensor_split(x, M), torch.tensor_split(y, M)))
    result = executor.run(feed)
    out["our_grads"] = {s: result.gradients[s][0] for s in local}
    out["our_losses"] = list(result.loss_by_microbatch.values())
    return out
