"""Start a distributed run from Python or a notebook and gather its result (chapter 11).

:func:`run_distributed` is the distributed twin of ``LocalExecutor(...).run(...)``: it
launches one process per rank (:func:`~pipemare_lite.engine.distributed.launch.launch`), runs
the :class:`~pipemare_lite.engine.distributed.executor.DistributedExecutor` in each, and
merges their results. :func:`run_distributed_jobs` runs several jobs in one launch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import nn

from pipemare_lite.engine.distributed.executor import DistributedExecutor
from pipemare_lite.engine.distributed.fault_injection import Fault
from pipemare_lite.engine.distributed.launch import launch
from pipemare_lite.engine.distributed.results import DistRunResult, RankResult, merge_rank_results
from pipemare_lite.methods.registry import MethodOptions
from pipemare_lite.schedules.actions import Schedule

# ---------------------------------------------------------------------- from Python


@dataclass
class DistJob:
    """One distributed run, described so that it can be pickled to every process (chapter 11).

    ``stages`` is a picklable callable returning all ``num_virtual_stages`` modules (each
    rank calls it and keeps its own), e.g. :class:`PartitionedModel`. ``loss_fn``,
    ``optimizer_factory`` and ``lr_scheduler_factory`` must be picklable too: module-level
    functions or ``functools.partial`` objects (``partial(torch.optim.SGD, lr=0.1)``),
    not lambdas.
    """

    schedule: Schedule
    stages: Callable[[], Sequence[nn.Module]]
    microbatches: Sequence
    loss_fn: Callable
    optimizer_factory: Callable
    method_options: MethodOptions | None = None
    lr_scheduler_factory: Callable | None = None
    record_gradients: bool = False
    track_bytes: bool = False
    fault: Fault | None = None
    p2p_verbose: bool | None = None
    record_posts: bool = False

    def executor_options(self) -> dict:
        """The :class:`DistributedExecutor` arguments among the fields (all but ``schedule``,
        ``stages`` and ``microbatches``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in ("schedule", "stages", "microbatches")}


def dist_worker(info, jobs: Sequence[DistJob]) -> list[RankResult]:
    """Process body used by :func:`run_distributed_jobs`: run each job in turn (chapter 11)."""
    results = []
    for job in jobs:
        with DistributedExecutor(
            job.schedule, job.stages(), rank=info.rank, device=info.device, board=info.board,
            op_timeout=info.op_timeout, **job.executor_options(),
        ) as executor:
            results.append(executor.run(job.microbatches))
    return results


def run_distributed_jobs(jobs: Sequence[DistJob], **launch_kwargs) -> list[DistRunResult]:
    """Run several jobs with the same number of ranks in ONE launch (chapter 11).

    Starting processes costs far more than a small run; tests and sweeps share a launch.
    ``launch_kwargs`` go to :func:`pipemare_lite.engine.distributed.launch.launch` (``timeout``,
    ``op_timeout``, ``backend``, ``start_method``, ``master_addr``).
    """
    jobs = list(jobs)
    if not jobs:
        return []
    sizes = {job.schedule.num_ranks for job in jobs}
    if len(sizes) != 1:
        raise ValueError(f"jobs in one launch need the same number of ranks, got {sorted(sizes)}")
    per_rank = launch(dist_worker, sizes.pop(), args=(jobs,), **launch_kwargs)
    return [merge_rank_results(job.schedule, [rank_results[i] for rank_results in per_rank])
            for i, job in enumerate(jobs)]



def run_distributed(schedule: Schedule, stages: Callable[[], Sequence[nn.Module]],
                    microbatches: Sequence, *, loss_fn: Callable, optimizer_factory: Callable,
                    **options) -> DistRunResult:
    """Run ``schedule`` with one process per rank and return the gathered result (chapter 11).

    The distributed twin of ``LocalExecutor(schedule, stages(), ...).run(microbatches)``:
    same losses, versions and final weights, bitwise on CPU. ``options`` are
    :class:`DistJob`'s other fields (``method_options``, ``fault``, ``record_posts`` ...;
    see there what must be picklable) and :func:`run_distributed_jobs`'s launch arguments.
    """
    fields = {f.name for f in dataclasses.fields(DistJob)}
    job = DistJob(schedule, stages, microbatches, loss_fn, optimizer_factory,
                  **{k: v for k, v in options.items() if k in fields})
    launch_kwargs = {k: v for k, v in options.items() if k not in fields}
    return run_distributed_jobs([job], **launch_kwargs)[0]
