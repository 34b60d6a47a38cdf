"""The engines ``fit()`` runs on (chapters 07 and 11): :data:`EXECUTORS` maps a name to a
factory; ``"local"`` runs every stage in this process
(:class:`~pipemare_lite.engine.local.LocalExecutor`), ``"dist"`` this rank's stages of a
job with one process per rank
(:class:`~pipemare_lite.engine.distributed.executor.DistributedExecutor`, under torchrun or
:func:`~pipemare_lite.engine.distributed.launch.launch`); :func:`register_executor` adds one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from torch import nn

from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.torch_compat import copy_module

if TYPE_CHECKING:
    from pipemare_lite.engine.distributed.executor import DistributedExecutor


def local_executor(schedule, stages, *, loss_fn, optimizer_factory, method_options, devices,
                   lr_scheduler_factory=None, record="full"):
    """``fit(..., executor="local")``'s engine: every stage in this process (chapter 07)."""
    from pipemare_lite.engine.local import LocalExecutor

    return LocalExecutor(
        schedule,
        stages,
        loss_fn=loss_fn,
        optimizer_factory=optimizer_factory,
        method_options=method_options,
        devices=devices,
        lr_scheduler_factory=lr_scheduler_factory,
        record=record,
    )


def dist_executor(schedule: Schedule, stage_modules: Sequence[nn.Module], *, loss_fn: Callable,
                  optimizer_factory: Callable, method_options=None, devices=None,
                  lr_scheduler_factory: Callable | None = None,
                  checkpoints: bool = False, record=None) -> DistributedExecutor:
    """``fit()``'s engine for this rank (registered as ``EXECUTORS["dist"]``, chapter 11).

    Joins the process group (:func:`pipemare_lite.engine.distributed.launch.init_from_env`
    when no launcher made one). Not supported: ``devices`` (rank r computes on
    ``cuda:<local rank>`` or the CPU). ``checkpoints``: keep what ``state_dict()`` needs
    (``fit()`` asks for it with a ``checkpoint_path``; every rank computes the checkpoint,
    rank 0 writes the file).
    ``record``: what the executor records (:mod:`pipemare_lite.engine.recording`; the
    numbers trained are the same at every level).
    """
    # imported here: torch.distributed loads only when a run asks for this executor
    import torch.distributed as dist

    from pipemare_lite.engine.distributed.executor import DistOptions, DistributedExecutor
    from pipemare_lite.engine.distributed.launch import init_from_env
    from pipemare_lite.engine.distributed.rank import current

    if devices is not None:
        raise ValueError("executor 'dist' puts each rank on its own device (cuda:<local rank> "
                         f"or the CPU); devices={devices!r} is for the local executor")
    info = current()
    if info is None:
        if dist.is_initialized():
            raise RuntimeError(
                "a process group exists but was not made by pipemare_lite; start with torchrun "
                "or pipemare_lite.engine.distributed.launch.launch")
        info = init_from_env()
    stage_modules = list(stage_modules)
    # fit() evaluates the model where it was built (CPU); on a GPU the rank trains copies of
    # its stages and the gather writes the weights back into the originals
    own = {s: (copy_module(module) if info.device.type != "cpu" else module)
           for s, module in enumerate(stage_modules) if schedule.rank_of(s) == info.rank}
    return DistributedExecutor(
        schedule, own, loss_fn=loss_fn, optimizer_factory=optimizer_factory,
        method_options=method_options, lr_scheduler_factory=lr_scheduler_factory,
        options=DistOptions(rank=info.rank, device=info.device, board=info.board,
                            op_timeout=info.op_timeout, track_bytes=True,
                            gather_into=stage_modules, checkpoints=checkpoints,
                            record="full" if record is None else record),
    )


#: name -> ``factory(schedule, stage_modules, *, loss_fn, optimizer_factory, method_options,
#: devices, record)`` returning an object with the LocalExecutor contract (``record``: a
#: :class:`~pipemare_lite.engine.recording.Recording`, which the factory may exceed: results
#: may hold more than asked); fit adds ``lr_scheduler_factory=`` only when the run has an lr
#: schedule.
EXECUTORS: dict[str, Callable] = {"local": local_executor, "dist": dist_executor}


def register_executor(name: str, factory: Callable) -> None:
    """Make ``fit(..., executor=name)`` use ``factory`` (see :data:`EXECUTORS`; chapter 11)."""
    EXECUTORS[name] = factory
