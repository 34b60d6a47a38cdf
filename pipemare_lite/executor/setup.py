"""Building a stage worker: optimizer, LR scheduler, T1 on top, T2's gamma (chapters 08-11).

Both executors build their :class:`~pipemare_lite.executor.stage.StageWorker` objects here,
so the local executor (one process) and the distributed one (one process per rank) start
every stage from the very same objects; their bitwise agreement depends on it.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from pipemare_lite.executor.stage import StageWorker
from pipemare_lite.methods.lr_rescheduling import LRRescheduling, stage_forward_delays
from pipemare_lite.methods.registry import MethodOptions
from pipemare_lite.schedules.actions import Schedule


def check_method_options(schedule: Schedule, options: MethodOptions) -> None:
    """Raise early if ``options`` cannot run on ``schedule`` (T2, chapter 09, needs an async
    schedule)."""
    if options.discrepancy_correction and schedule.weight_mode != "async":
        raise ValueError(f"T2 needs an async schedule; {schedule.name!r} has weight_mode "
                         f"{schedule.weight_mode!r}")


def rescheduling_delays(schedule: Schedule, options: MethodOptions) -> list[int] | None:
    """T1's delay per virtual stage (chapter 08, measured from the schedule), or None when
    T1 is off."""
    return stage_forward_delays(schedule) if options.lr_rescheduling else None


def build_stage_worker(
    schedule: Schedule,
    stage: int,
    module: nn.Module,
    *,
    loss_fn: Callable,
    optimizer_factory: Callable,
    options: MethodOptions,
    delays: list[int] | None,
    device: torch.device | None = None,
    lr_scheduler_factory: Callable | None = None,
) -> StageWorker:
    """One virtual stage's worker, as every executor builds it (chapters 08, 09 and 11).

    Moves ``module`` to ``device`` (if given), builds its optimizer with
    ``optimizer_factory(trainable params)``, the optional base scheduler with
    ``lr_scheduler_factory(optimizer)``, T1 (:class:`LRRescheduling`) on top of it when
    ``delays`` is given (``delays[stage]`` is the stage's tau, from
    :func:`rescheduling_delays`; off during the schedule's ``warmup_minibatches`` W, then
    annealed over ``options.rescheduling_horizon`` or the ``num_minibatches - W``
    asynchronous updates), and T2 with the stage's gamma when
    ``options.discrepancy_correction`` is on.
    """
    if device is not None:
        module.to(device)
    optimizer = optimizer_factory([p for p in module.parameters() if p.requires_grad])
    scheduler = lr_scheduler_factory(optimizer) if lr_scheduler_factory else None
    if delays is not None:
        # T1 compensates a delay: it starts at the first asynchronous update (chapter 09)
        warmup = schedule.warmup_minibatches
        horizon = options.rescheduling_horizon
        horizon = schedule.num_minibatches - warmup if horizon is None else horizon
        scheduler = LRRescheduling(optimizer, delays[stage], horizon, base=scheduler,
                                   start=warmup)
    return StageWorker(
        stage, module, optimizer, weight_mode=schedule.weight_mode,
        is_last=stage == schedule.num_virtual_stages - 1,
        num_microbatches=schedule.num_microbatches, num_minibatches=schedule.num_minibatches,
        loss_fn=loss_fn, device=device, lr_scheduler=scheduler,
        discrepancy_gamma=options.gamma_for(stage) if options.discrepancy_correction else None,
    )
