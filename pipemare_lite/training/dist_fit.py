"""``fit(..., executor="dist")``: the training loop over one process per rank (chapter 11).

Every rank runs the same ``fit()`` loop (under ``torchrun`` or :func:`launch`).
:func:`fit_executor` gives it a
:class:`~pipemare_lite.engine.distributed.executor.DistributedExecutor`
with the local executor's contract: each ``run`` is collective (``gather_into``), so all
ranks see the same losses, trace and learning rates, and each rank's copy of the whole
model is current for evaluation. :func:`fit_worker` is the process body that runs ``fit()``
on every rank, for :func:`pipemare_lite.engine.distributed.launch.launch` (``torchrun`` runs
``python -m pipemare_lite.training`` directly).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch.distributed as dist
from torch import nn

from pipemare_lite.engine.distributed.executor import DistributedExecutor
from pipemare_lite.schedules.actions import Schedule


def fit_executor(schedule: Schedule, stage_modules: Sequence[nn.Module], *, loss_fn: Callable,
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
    from pipemare_lite.engine.distributed.launch import current, init_from_env

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
    own = {s: (copy.deepcopy(module) if info.device.type != "cpu" else module)
           for s, module in enumerate(stage_modules) if schedule.rank_of(s) == info.rank}
    return DistributedExecutor(
        schedule, own, loss_fn=loss_fn, optimizer_factory=optimizer_factory,
        method_options=method_options, lr_scheduler_factory=lr_scheduler_factory,
        rank=info.rank, device=info.device, board=info.board, op_timeout=info.op_timeout,
        track_bytes=True, gather_into=stage_modules, checkpoints=checkpoints,
        record="full" if record is None else record,
    )


def fit_worker(info, fit_kwargs: dict) -> dict:
    """Process body: ``fit(**fit_kwargs, executor="dist")`` on every rank (chapter 11).

    ``fit_kwargs`` holds ``model`` as a picklable recipe ``(builder, kwargs)`` (e.g.
    ``(pipemare_lite.training.models.mlp, {...})``) and ``data`` as ``(loader, kwargs)``;
    returns the history as a dict.
    """
    from pipemare_lite.training.loop import fit

    kwargs = dict(fit_kwargs)
    builder, model_kwargs = kwargs.pop("model")
    loader, data_kwargs = kwargs.pop("data")
    history = fit(builder(**model_kwargs), loader(**data_kwargs), executor="dist", **kwargs)
    return history.to_dict()
