"""The distributed engine (chapter 11): one process per rank over torch.distributed (gloo on
CPU, NCCL on GPUs).

One concept per module: :mod:`.executor` (one rank's engine), :mod:`.transport` (its
point-to-point messages), :mod:`.shape_probe` (message shapes before the first action),
:mod:`.results` (each rank's result, merged), :mod:`.jobs` (start a run from Python),
:mod:`.launch` (processes on this machine: :func:`~.launch.launch`), :mod:`.torchrun` and
:mod:`.lost` (under
torchrun), :mod:`.faults` (a failure ends the job with a report),
:mod:`.fault_injection` (make one on purpose), :mod:`.checkpoint` (in-flight state),
:mod:`.main_guard` (the ``if __name__ == "__main__"`` check).
"""

from pipemare_lite.engine.distributed.executor import DistOptions, DistributedExecutor
from pipemare_lite.engine.distributed.fault_injection import FAULT_KINDS, Fault
from pipemare_lite.engine.distributed.jobs import (
    DistJob,
    dist_worker,
    run_distributed,
    run_distributed_jobs,
)
from pipemare_lite.engine.distributed.launch import LaunchError
from pipemare_lite.engine.distributed.results import DistRunResult, RankResult, merge_rank_results
from pipemare_lite.engine.distributed.shape_probe import probe_output_meta

__all__ = [
    "DistributedExecutor", "DistOptions", "Fault", "FAULT_KINDS", "DistJob", "dist_worker",
    "run_distributed", "run_distributed_jobs", "LaunchError", "DistRunResult", "RankResult",
    "merge_rank_results", "probe_output_meta",
]
