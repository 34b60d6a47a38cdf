"""A distributed job leaves nothing behind: no thread, no process group (issue 10).

Twenty tiny jobs run one after another in ONE launch (as tests and sweeps do); after the
last, each rank holds exactly the threads it held after the first. Without processes: a
gloo-style :class:`~pipemare_lite.engine.distributed.faults.Waiter` stops its two helper threads on
``close()``, which may be called twice, and the executor is a context manager.
"""

from __future__ import annotations

import datetime
import functools
import threading

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from pipemare_lite.engine.distributed.executor import DistributedExecutor
from pipemare_lite.engine.distributed.faults import Waiter
from pipemare_lite.engine.distributed.jobs import DistJob
from pipemare_lite.engine.distributed.launch import launch
from pipemare_lite.schedules import build_schedule
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import PartitionedModel
from tests.dist_workers import resources_after_each_job
from tests.timeouts import hard_time_limit

pytestmark = [pytest.mark.dist]

P, M, JOBS = 2, 2, 20


@pytest.fixture(autouse=True)
def hard_timeout():
    """Fail the test (instead of hanging the suite) if it runs longer than 180 s."""
    with hard_time_limit(180):
        yield


def tiny_job() -> DistJob:
    schedule = build_schedule("1f1b", P, M, num_minibatches=1)
    stages = PartitionedModel(mlp, P, kwargs=(("in_features", 4), ("hidden", 4), ("depth", 2),
                                              ("out_features", 3), ("seed", 0)))
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(2, 4, generator=g), torch.randint(0, 3, (2,), generator=g))
            for _ in range(M)]
    return DistJob(schedule, stages, data, F.cross_entropy,
                   functools.partial(torch.optim.SGD, lr=0.1))


def test_twenty_jobs_in_one_launch_hold_the_threads_of_one():
    per_rank = launch(resources_after_each_job, P, args=([tiny_job()] * JOBS,),
                      timeout=150, op_timeout=60)
    for rank, seen in enumerate(per_rank):
        assert len(seen) == JOBS
        first, last = seen[0], seen[-1]
        assert last["threads"] == first["threads"], f"rank {rank}: Python threads grew"
        # OS threads include the runtime's own (gloo, the intra-op pool) that may start or
        # end between samples; a leak grows with the jobs: +1 per job is +15 by the end
        early = max(s["os_threads"] for s in seen[:5])
        late = min(s["os_threads"] for s in seen[-5:])
        assert late <= early, f"rank {rank}: OS threads grew with the jobs ({early} -> {late})"
        assert last["default_group_alive"]
        # no helper thread of a finished job is left: only the launch's own (main, watchdog)
        assert not [name for name in last["threads"] if "waiter" in name], rank


class DoneWork:
    """A Work that has already completed."""

    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True


def test_a_waiter_stops_its_helper_threads_and_closes_twice():
    waiter = Waiter(None, 5.0, polling=False)
    waiter.wait(DoneWork(), "a receive")
    waiter.reap(DoneWork(), None, "a send")
    waiter.drain()
    helpers = [t for t in threading.enumerate() if t.name.startswith("pml-")
               and t.name.endswith("-waiter") and t.is_alive()]
    assert {t.name for t in helpers} >= {"pml-recv-waiter", "pml-send-waiter"}
    started = [thread for thread, _ in waiter._helpers.values()]
    waiter.close()
    waiter.close()  # idempotent
    assert not any(thread.is_alive() for thread in started)
    waiter.wait(DoneWork(), "after close")  # a later wait starts a new helper
    waiter.close()
    assert not waiter._helpers


def test_the_executor_is_a_context_manager_and_closes_twice():
    if dist.is_initialized():
        pytest.skip("another process group is active in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        schedule = build_schedule("1f1b", 1, M, num_minibatches=1)
        job = tiny_job()
        stages = PartitionedModel(mlp, 1, kwargs=job.stages.kwargs)
        with DistributedExecutor(schedule, stages(), loss_fn=F.cross_entropy,
                                 optimizer_factory=job.optimizer_factory) as executor:
            result = executor.run(job.microbatches)
        assert len(result.loss_by_microbatch) == M
        executor.close()  # closing again is harmless
    finally:
        dist.destroy_process_group()
