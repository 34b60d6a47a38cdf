"""Building a stage worker: optimizer, LR scheduler, the method's hooks (T2 among them) and T1
on top of them through the ``lr_factor`` hook (chapters 08-11).

Both executors build their :class:`~pipemare_lite.engine.stage.StageWorker` objects here,
so the local executor (one process) and the distributed one (one process per rank) start
every stage from the very same objects; their bitwise agreement depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import nn

from pipemare_lite.engine.recording import Recording
from pipemare_lite.engine.stage import StageWorker
from pipemare_lite.methods.hooks import (
    MethodHooks,
    StageInfo,
    call_factory,
    call_stage_factory,
    check_hooks,
)
from pipemare_lite.methods.lr_rescheduling import LRReschedulingHooks, stage_forward_delays
from pipemare_lite.methods.registry import MethodOptions, get_method, t2_hooks
from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.repeat import short_schedule


def check_method_options(schedule: Schedule, options: MethodOptions) -> None:
    """Raise early if ``options`` cannot run on ``schedule`` (T2, chapter 09, needs an async
    schedule; a method with its own hooks does not take T2's switch) or name a method this
    process does not know."""
    if options.t2 and not schedule.mode.has_discrepancy:
        raise ValueError(f"T2 needs an async schedule; {schedule.name!r} has weight_mode "
                         f"{schedule.weight_mode!r}")
    factory = hooks_factory(options)
    if options.t2 and factory is not t2_hooks:
        raise ValueError(f"method {options.method!r} brings its own hooks; T2 (t2=True) is "
                         "PipeMare's hook and does not compose with them: build it into the "
                         "method's hooks instead")


def hooks_factory(options: MethodOptions):
    """The factory ``info -> MethodHooks | None`` of ``options.method`` (the built-in one,
    T2 when switched on, when no method is named)."""
    return t2_hooks if options.method is None else get_method(options.method).hooks


def build_hooks(schedule: Schedule, stage: int, module: nn.Module, optimizer,
                options: MethodOptions) -> MethodHooks | None:
    """The method's hooks for one stage (see :mod:`pipemare_lite.methods.hooks`)."""
    factory = hooks_factory(options)
    if factory is None:
        return None
    info = StageInfo(
        stage=stage, num_stages=schedule.num_virtual_stages,
        params=[p for p in module.parameters() if p.requires_grad],
        names=[n for n, p in module.named_parameters() if p.requires_grad],
        optimizer=optimizer, schedule=schedule, options=options,
    )
    hooks = call_factory(factory, info, options.method)  # HookError: not factory(info)
    if hooks is not None:  # HookError: not a MethodHooks, or a hook with a wrong signature
        check_hooks(hooks, options.method, stage)
    return hooks


def build_stage_worker(schedule: Schedule, stage: int, module: nn.Module, *, loss_fn: Callable,
                       optimizer_factory: Callable, options: MethodOptions,
                       delays: list[int] | None, device: torch.device | None = None,
                       lr_scheduler_factory: Callable | None = None,
                       record: str | Recording = "full") -> StageWorker:
    """One virtual stage's worker, as every executor builds it (chapters 08, 09 and 11).

    Moves ``module`` to ``device`` (if given), builds its optimizer with
    ``optimizer_factory(trainable params)``, the optional base scheduler with
    ``lr_scheduler_factory(optimizer)`` (either factory is given ``stage=`` too when it takes
    a parameter of that name: :func:`~pipemare_lite.methods.hooks.call_stage_factory`), the
    method's hooks (:func:`build_hooks`: T2 with the stage's gamma when
    ``options.t2`` is on, or a registered method's), and T1 on top of
    them when ``delays`` is given
    (:class:`~pipemare_lite.methods.lr_rescheduling.LRReschedulingHooks`, through the
    ``lr_factor`` hook: ``delays[stage]`` is the stage's tau, from
    :func:`build_stage_workers`; off during the schedule's ``warmup`` W, then
    annealed over ``options.t1_anneal_updates`` or the ``num_minibatches - W``
    asynchronous updates). ``record``: what the worker records
    (:mod:`pipemare_lite.engine.recording`).
    """
    if device is not None:
        module.to(device)
    optimizer = call_stage_factory(optimizer_factory,
                                   [p for p in module.parameters() if p.requires_grad],
                                   stage)
    scheduler = (call_stage_factory(lr_scheduler_factory, optimizer, stage)
                 if lr_scheduler_factory else None)
    hooks = build_hooks(schedule, stage, module, optimizer, options)
    if delays is not None:
        # T1 compensates a delay: it starts at the first asynchronous update (chapter 09)
        warmup = schedule.warmup
        horizon = options.t1_anneal_updates
        horizon = schedule.num_minibatches - warmup if horizon is None else horizon
        hooks = LRReschedulingHooks(hooks, delays[stage], horizon, start=warmup)
    return StageWorker(
        stage, module, optimizer, weight_mode=schedule.weight_mode,
        is_last=stage == schedule.num_virtual_stages - 1,
        num_microbatches=schedule.num_microbatches, num_minibatches=schedule.num_minibatches,
        loss_fn=loss_fn, device=device, lr_scheduler=scheduler, hooks=hooks,
        method=options.method or ("built-in (T2)" if options.t2
                                  else "built-in"),
        record=record,
    )


def build_stage_workers(schedule: Schedule, modules: Mapping[int, nn.Module], *,
                        loss_fn: Callable, optimizer_factory: Callable,
                        options: MethodOptions | None,
                        device_of: Callable[[int], torch.device | None],
                        lr_scheduler_factory: Callable | None = None,
                        record: str | Recording = "full",
                        ) -> tuple[dict[int, StageWorker], list[int] | None]:
    """``({stage: worker}, T1's delays)`` for ``modules`` (``{stage: module}``), as both
    executors build them: ``options`` checked (:func:`check_method_options`), T1's delays
    (chapter 08, None when T1 is off) measured once on the whole run (a long run's short
    form: the same tau), then :func:`build_stage_worker` for each stage on ``device_of(stage)``.
    """
    options = options or MethodOptions()
    check_method_options(schedule, options)
    delays = stage_forward_delays(short_schedule(schedule)) if options.t1 else None
    return {s: build_stage_worker(schedule, s, module, loss_fn=loss_fn,
                                  optimizer_factory=optimizer_factory, options=options,
                                  delays=delays, device=device_of(s),
                                  lr_scheduler_factory=lr_scheduler_factory, record=record)
            for s, module in modules.items()}, delays
