"""Our distributed executor next to PyTorch's own ``torch.distributed.pipelining``
(introduced in chapter 11).

:func:`compare_with_torch_pipelining` is a process body for
:func:`pipemare_lite.engine.distributed.launch.launch`: one training step with each runtime from the
same weights (losses and gradients to compare bitwise), then optionally timed steps, alternating.
Used by
``tests/test_vs_torch_pipelining.py`` and ``benchmarks/bench_vs_torch_pipelining.py``.

PyTorch's own runtime runs GPipe and 1F1B with the same per-rank order as our builders
(any flushed schedule of ours in PyTorch's runtime, and PyTorch's schedules in ours:
:mod:`pipemare_lite.interop.torch_runtime`). Loss scaling differs: PyTorch back-propagates
each microbatch's plain loss, sums the gradients, then divides them by N
(``scale_grads=True``), while our StageWorker back-propagates ``loss / N``. The two agree
bitwise when N is a power of two (dividing by 2^k is exact and commutes with sums), not
in general. ``loss_scaling="ours"`` makes PyTorch do exactly what we do: its loss_fn
returns ``loss / N`` and ``scale_grads=False``; its reported losses are then ``loss / N``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist

from pipemare_lite.engine.distributed.executor import DistributedExecutor

#: Our schedule name -> PyTorch's schedule class name.
TORCH_SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}


@dataclass(frozen=True)
class ScaledLoss:
    """``loss_fn(output, target) / divisor``, picklable: gives PyTorch our loss scaling
    (chapter 11)."""

    loss_fn: Callable
    divisor: int

    def __call__(self, output, target):
        """The scaled loss."""
        return self.loss_fn(output, target) / self.divisor


@dataclass
class ComparisonJob:
    """One model, one batch, both runtimes (chapter 11; see :func:`compare_with_torch_pipelining`).

    Attributes:
        schedule_name: ``gpipe`` or ``1f1b``.
        num_microbatches: N.
        stages: picklable callable returning the P stage modules.
        microbatches: N ``(x, target)`` pairs, concatenated into one batch; PyTorch splits
            it back with ``tensor_split`` and our executor is fed the same views.
        loss_fn: mean-reduced loss.
        loss_scaling: ``"ours"`` (PyTorch given our scaling: bitwise for any N) or
            ``"torch"`` (PyTorch's defaults: bitwise when N is a power of two).
        lr: SGD learning rate of the optimizer step that ends each timed training step.
        repeats: timed training steps of each runtime (after one untimed warm-up step).
        record: what our executor records (:mod:`pipemare_lite.engine.recording`): the
            cheapest level, ``"losses"``, is what a run that asks for no trace pays.
    """

    schedule_name: str
    num_microbatches: int
    stages: Callable
    microbatches: Sequence
    loss_fn: Callable
    loss_scaling: str = "ours"
    lr: float = 0.0
    repeats: int = 0
    record: str = "full"


def compare_with_torch_pipelining(info, job: ComparisonJob) -> dict:
    """Process body: one training step with PyTorch's runtime and with ours (chapter 11).

    Both start from the same weights (``job.stages()`` is seeded). Returns, per rank:
    ``torch_losses`` / ``our_losses`` (last rank), ``torch_grads`` / ``our_grads`` (this
    rank's stage, after the first step, before any update), and, when ``repeats > 0``,
    ``torch_seconds`` / ``our_seconds`` per training step (each a list of ``repeats``;
    forward, backward and an SGD step, from a barrier to this rank's end of the step, ours
    including the barrier ``run()`` itself starts with; the two runtimes alternate step by
    step so that both see the same machine load).
    """
    from torch.distributed import pipelining

    if job.schedule_name not in TORCH_SCHEDULES:
        raise ValueError(f"schedule {job.schedule_name!r}: allowed {', '.join(TORCH_SCHEDULES)}")
    if job.loss_scaling not in ("ours", "torch"):
        raise ValueError(f"loss_scaling {job.loss_scaling!r}: allowed 'ours', 'torch'")
    P, N, rank = info.world_size, job.num_microbatches, info.rank
    out: dict = {"rank": rank}

    # PyTorch's runtime
    module = job.stages()[rank].to(info.device)
    stage = pipelining.PipelineStage(module, rank, P, info.device)
    ours_scaling = job.loss_scaling == "ours"
    loss_fn = ScaledLoss(job.loss_fn, N) if ours_scaling else job.loss_fn
    schedule_class = getattr(pipelining, TORCH_SCHEDULES[job.schedule_name])
    runtime = schedule_class(stage, N, loss_fn=loss_fn, scale_grads=not ours_scaling)
    x = torch.cat([mb[0] for mb in job.microbatches]).to(info.device)
    y = torch.cat([mb[1] for mb in job.microbatches]).to(info.device)
    optimizer = torch.optim.SGD(module.parameters(), lr=job.lr)

    def torch_step() -> list:
        losses: list = []
        if rank == 0:
            runtime.step(x)
        elif rank == P - 1:
            runtime.step(target=y, losses=losses)
        else:
            runtime.step()
        return losses

    # ours: the same step repeated, as the minibatches of one schedule
    from pipemare_lite.schedules import build_schedule

    schedule = build_schedule(job.schedule_name, P, N, num_minibatches=1 + job.repeats)
    executor = DistributedExecutor(
        schedule, job.stages(), loss_fn=job.loss_fn,
        optimizer_factory=partial(torch.optim.SGD, lr=job.lr), rank=rank, device=info.device,
        board=info.board, op_timeout=info.op_timeout, record_gradients=True,
        record=job.record,
    )
    # PyTorch cuts the batch with tensor_split: views into one buffer, not separately
    # allocated tensors. Matmul kernels round differently on such (unaligned) views, so we
    # feed our executor the very same views to compare bitwise.
    feed = list(zip(torch.tensor_split(x, N), torch.tensor_split(y, N))) * (1 + job.repeats)

    # the first step of each: numbers to compare (before any update)
    losses = torch_step()
    out["torch_losses"] = [float(v.detach()) for v in losses]
    out["torch_grads"] = [p.grad.detach().cpu().clone() for p in module.parameters()]
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    first = executor.run(feed, stop_after_updates=1)
    out["our_losses"] = list(first.loss_by_microbatch.values())
    out["our_grads"] = first.gradients[rank][0]
    executor.record_gradients = False  # copying gradients is not part of a training step

    # timed steps, alternating so that both see the same machine load
    out["torch_seconds"], out["our_seconds"] = [], []
    for k in range(2, 2 + job.repeats):
        dist.barrier()
        start = time.perf_counter()
        torch_step()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if info.device.type == "cuda":  # timings mean nothing without waiting for the GPU
            torch.cuda.synchronize(info.device)
        out["torch_seconds"].append(time.perf_counter() - start)
        # timed as PyTorch's step, from the same barrier, whatever our executor records
        # (run()'s own barrier is part of our step's cost)
        dist.barrier()
        start = time.perf_counter()
        executor.run(feed, stop_after_updates=k)
        out["our_seconds"].append(time.perf_counter() - start)
    executor.close()
    return out
