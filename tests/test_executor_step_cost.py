"""A step's cost does not grow with the run: each executor visits only that step's records.

Counted, not timed (issue 10): before every step the stage workers' record dicts
(loss_by_microbatch, forward/backward versions, distances) are swapped for
:class:`CountingDict` copies that count every item the executor reads (iteration, lookups,
membership). In the steady state
of an asynchronous pipeline (past the fill, before the drain) every step runs the same
actions, so a flat cost means the same count at step 10 and at step 50; scanning the whole
history (``islice`` over the records, copying every key into a set) makes the count grow by
one step's records per step.
Timings are in ``benchmarks/bench_step_cost.py``.
"""

from __future__ import annotations

import datetime
import functools

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.engine.distributed.executor import DistributedExecutor
from pipemare_lite.schedules import build_schedule
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import partition

N, K, STEADY = 2, 60, 10  # microbatches per step, steps, steps of fill (and of drain)
RECORDS = ("loss_by_microbatch", "forward_versions", "backward_versions", "distances")
OPTIMIZER = functools.partial(torch.optim.SGD, lr=0.05)


class CountingDict(dict):
    """A dict that counts the items read from it (each item an iteration yields, each lookup)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.visits = 0

    def __iter__(self):
        for key in super().__iter__():
            self.visits += 1
            yield key

    def keys(self):
        return list(iter(self))

    def items(self):
        for key, value in super().items():
            self.visits += 1
            yield key, value

    def values(self):
        for _, value in self.items():
            yield value

    def __getitem__(self, key):
        self.visits += 1
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.visits += 1
        return super().get(key, default)

    def __contains__(self, key):
        self.visits += 1
        return super().__contains__(key)

    def pop(self, key, *default):
        self.visits += 1
        return super().pop(key, *default)


def visits_per_step(executor, workers, data) -> list[int]:
    """Run K steps one at a time; the record items the executor read during each."""
    counts = []
    for k in range(1, K + 1):
        dicts = []
        for worker in workers:
            for name in RECORDS:
                counting = CountingDict(getattr(worker, name))
                setattr(worker, name, counting)
                dicts.append(counting)
        executor.run(data, stop_after_updates=k)
        counts.append(sum(d.visits for d in dicts))
    return counts


def data(count: int):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(2, 4, generator=g), torch.randint(0, 3, (2,), generator=g))
            for _ in range(count)]


def stages(P: int):
    return partition(mlp(4, 4, P, 3, seed=0), P)


def assert_flat(counts: list[int]) -> None:
    steady = counts[STEADY - 1:K - STEADY]  # the pipeline fills and drains at the ends
    assert max(steady) == min(steady), (
        f"records visited per step grow with the run: step {STEADY}: {steady[0]}, "
        f"step {K - STEADY}: {steady[-1]}")


def test_the_local_executor_visits_only_the_steps_records():
    schedule = build_schedule("async", 4, N, num_minibatches=K)
    executor = LocalExecutor(schedule, stages(4), loss_fn=F.cross_entropy,
                             optimizer_factory=OPTIMIZER)
    assert_flat(visits_per_step(executor, executor.workers, data(N * K)))


def test_the_distributed_executor_visits_only_the_steps_records():
    if dist.is_initialized():
        pytest.skip("another process group is active in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        schedule = build_schedule("async", 1, N, num_minibatches=K)
        with DistributedExecutor(schedule, stages(1), loss_fn=F.cross_entropy,
                                 optimizer_factory=OPTIMIZER) as executor:
            counts = visits_per_step(executor, list(executor.workers.values()), data(N * K))
    finally:
        dist.destroy_process_group()
    assert_flat(counts)
