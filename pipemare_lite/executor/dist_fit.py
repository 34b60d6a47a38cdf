"""``fit(..., executor="dist")``: the training loop over one process per rank (chapter 11).

:class:`DistExecutor` gives :func:`pipemare_lite.train.fit` the local executor's contract
(``run``, ``workers``) on top of :class:`~pipemare_lite.executor.dist.DistributedExecutor`;
:func:`fit_worker` is the process body that runs ``fit()`` on every rank, for
:func:`pipemare_lite.launch.launch` (``torchrun`` runs ``pipemare_lite.train`` directly).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from pipemare_lite.executor import faults
from pipemare_lite.executor.dist import DistributedExecutor, merge_rank_results
from pipemare_lite.executor.stage import StageWorker
from pipemare_lite.methods.registry import MethodOptions
from pipemare_lite.schedules.actions import Schedule


class DistExecutor:
    """``fit(..., executor="dist")``: the local executor's contract over processes (chapter 11).

    Every rank runs the same ``fit()`` loop (under ``torchrun`` or :func:`launch`); this
    object runs the rank's share of each step (:class:`DistributedExecutor`), then gathers
    every rank's result (so all ranks see the same losses, trace and learning rates and
    take the same decisions) and broadcasts every stage's weights from its owner (so each
    rank's copy of the whole model is current for evaluation). Costs one gather and one
    broadcast per stage tensor per step: fine for the book's models.

    Not supported: ``devices`` (rank r computes on ``cuda:<local rank>`` or the CPU) and
    checkpoints (``state_dict`` raises).
    """

    def __init__(self, schedule: Schedule, stage_modules: Sequence[nn.Module], *,
                 loss_fn: Callable, optimizer_factory: Callable,
                 method_options: MethodOptions | None = None, devices=None,
                 lr_scheduler_factory: Callable | None = None) -> None:
        from pipemare_lite.launch import current, init_from_env

        if devices is not None:
            raise ValueError("executor 'dist' puts each rank on its own device (cuda:<local rank> "
                             f"or the CPU); devices={devices!r} is for the local executor")
        info = current()
        if info is None:
            if dist.is_initialized():
                raise RuntimeError("a process group exists but was not made by pipemare_lite; "
                                   "start with torchrun or pipemare_lite.launch.launch")
            info = init_from_env()
        self.schedule = schedule
        self.stage_modules = list(stage_modules)
        # fit() evaluates the model where it was built (CPU); on a GPU the rank trains copies
        # of its stages and the broadcast below writes the weights back into the originals
        own = [s for s in range(len(self.stage_modules)) if schedule.rank_of(s) == info.rank]
        modules = {s: (copy.deepcopy(self.stage_modules[s]) if info.device.type != "cpu"
                       else self.stage_modules[s]) for s in own}
        self.engine = DistributedExecutor(
            schedule, modules, loss_fn=loss_fn, optimizer_factory=optimizer_factory,
            method_options=method_options, lr_scheduler_factory=lr_scheduler_factory,
            rank=info.rank, device=info.device, board=info.board, op_timeout=info.op_timeout,
            track_bytes=True,
        )

    @property
    def workers(self) -> list[StageWorker]:
        """This rank's stage workers."""
        return list(self.engine.workers.values())

    def run(self, microbatches: Sequence, *, stop_after_updates: int | None = None):
        """One call of every rank; returns the same :class:`DistRunResult` on all ranks."""
        mine = self.engine.run(microbatches, stop_after_updates=stop_after_updates)
        mine.state_dicts = {}  # weights travel by broadcast below, not in the gather
        gathered = [None] * dist.get_world_size()
        with faults.communication("gathering the ranks' results"):
            dist.all_gather_object(gathered, mine)
            self._broadcast_weights()
        return merge_rank_results(self.schedule, gathered)

    def _broadcast_weights(self) -> None:
        """Every stage's weights from its owner into every rank's copy of the model."""
        device = self.engine.device
        with torch.no_grad():
            for s, module in enumerate(self.stage_modules):
                owner = self.schedule.rank_of(s)
                targets = list(module.state_dict().values())
                if owner == self.engine.rank:
                    sources = list(self.engine.workers[s].module.state_dict().values())
                else:
                    sources = [torch.empty_like(t, device=device) for t in targets]
                for source, target in zip(sources, targets):
                    buffer = source.detach().to(device)
                    dist.broadcast(buffer, src=owner)
                    if buffer.data_ptr() != target.data_ptr():
                        target.copy_(buffer)

    def close(self) -> None:
        """Stop the engine's helper threads (fit() calls it when the run ends)."""
        self.engine.close()

    def state_dict(self) -> dict:
        """Not supported with the distributed executor."""
        raise NotImplementedError("checkpoints are not supported with executor 'dist'; "
                                  "use executor 'local' for checkpoint/resume")

    def load_state_dict(self, state: dict) -> None:
        """Not supported with the distributed executor."""
        self.state_dict()


def fit_worker(info, fit_kwargs: dict) -> dict:
    """Process body: ``fit(**fit_kwargs, executor="dist")`` on every rank (chapter 11).

    ``fit_kwargs`` holds ``model`` as a picklable recipe ``(builder, kwargs)`` (e.g.
    ``(pipemare_lite.models.mlp, {...})``) and ``data`` as ``(loader, kwargs)``; returns the
    history as a dict.
    """
    from pipemare_lite.train import fit

    kwargs = dict(fit_kwargs)
    builder, model_kwargs = kwargs.pop("model")
    loader, data_kwargs = kwargs.pop("data")
    history = fit(builder(**model_kwargs), loader(**data_kwargs), executor="dist", **kwargs)
    return history.to_dict()
