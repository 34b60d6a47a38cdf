"""Lazy schedules (pipemare_lite.schedules.lazy) are the builders' schedules, made as they go.

The reference is the builder's own materialized K-minibatch schedule: a lazy schedule's
rows equal it action for action for every schedule and method at many sizes; T1's delays
measured on the short schedule equal those of the whole run; a run on the lazy schedule
equals the run on the materialized one bitwise (losses, weights, versions, learning rates,
trace order), through checkpoints too and against the distributed executor; building one
for 5000 minibatches allocates a small fraction of the materialized one.
"""

from __future__ import annotations

import functools
import tracemalloc

import pytest
import torch
import torch.nn.functional as F

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import build_method_schedule, method_options
from pipemare_lite.methods.lr_rescheduling import stage_forward_delays
from pipemare_lite.methods.registry import METHOD_TABLE
from pipemare_lite.schedules import SCHEDULE_NAMES, ScheduleError, build_schedule
from pipemare_lite.schedules.io import from_rows
from pipemare_lite.schedules.lazy import LazySchedule, lazy_schedule, schedule_key
from pipemare_lite.schedules.registry import is_asynchronous
from pipemare_lite.schedules.repeat import repeat_notes, repeat_schedule
from pipemare_lite.training.models import mlp


def builder(name, P, M, W=0):
    """``k -> build_schedule(name, ...)`` with k minibatches."""
    v = 2 if name == "interleaved" else 1
    return lambda k: build_schedule(name, P, M, chunks=v, num_minibatches=k,
                                    warmup=W)


def sizes(name):
    """(P, M, W) the builder accepts, over small and unequal sizes."""
    for P in (1, 2, 3, 4, 8):
        for M in (1, 2, 3, 4, 8):
            if (name == "interleaved" and M % P or name == "2bw" and M < P - 1
                    or name == "dualpipev" and M < 2 * P):
                continue
            for W in (0, 1, 3) if is_asynchronous(name) else (0,):
                yield P, M, W


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_lazy_rows_equal_the_builders_schedule(name):
    for P, M, W in sizes(name):
        build = builder(name, P, M, W)
        for K in (W + 12, W + 45):  # the shorter may be too short (then it is materialized)
            lazy = lazy_schedule(build, K, warmup_minibatches=W)
            assert isinstance(lazy, LazySchedule) or K < W + 45, (name, P, M, W, K)
            full = build(K)
            whole = lazy.materialize() if isinstance(lazy, LazySchedule) else lazy
            assert whole.ranks == full.ranks, (name, P, M, W, K)
            assert (whole.notes, whole.weight_mode, whole.num_minibatches) == (
                full.notes, full.weight_mode, full.num_minibatches)
            assert [len(row) for row in lazy.ranks] == [len(row) for row in full.ranks]
            for rank in range(P):  # resuming mid-row starts at the right action
                for start in (0, 5, len(full.ranks[rank]) // 2, len(full.ranks[rank]) - 1):
                    assert tuple(lazy.row(rank, start)) == full.ranks[rank][start:]


@pytest.mark.parametrize("method", [row[0] for row in METHOD_TABLE])
def test_t1_delays_on_the_short_schedule_equal_the_whole_runs(method):
    schedule_name = dict((row[0], row[1]) for row in METHOD_TABLE)[method]
    for P, M, W in sizes(schedule_name):
        options = method_options(method, warmup=W)
        v = 2 if schedule_name == "interleaved" else 1

        def build(k, P=P, M=M, options=options, v=v):
            return build_method_schedule(method, P, M, chunks=v, num_minibatches=k,
                                         options=options)
        for K in (W + 45, W + 80):
            lazy = lazy_schedule(build, K, warmup_minibatches=W)
            assert isinstance(lazy, LazySchedule), (method, P, M, W, K)
            assert stage_forward_delays(lazy.short) == stage_forward_delays(build(K)), (
                method, P, M, W, K)


def test_a_repeated_pattern_is_lazy_and_equal():
    pattern = from_rows([["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]],
                        name="custom", num_microbatches=2)
    lazy = lazy_schedule(lambda k: repeat_schedule(pattern, k), 50, notes=repeat_notes(pattern, 50))
    assert isinstance(lazy, LazySchedule)
    full = repeat_schedule(pattern, 50)
    assert lazy.materialize().ranks == full.ranks and lazy.notes == full.notes


def test_short_runs_and_bad_sizes_go_to_the_builder():
    assert not isinstance(lazy_schedule(builder("async", 4, 2), 5), LazySchedule)
    for K, P in ((100001, 4), (0, 4), (2.5, 4), (50, 0)):  # the builder's own errors
        with pytest.raises(ScheduleError) as expected:
            builder("async", P, 2)(K)
        with pytest.raises(ScheduleError) as got:
            lazy_schedule(builder("async", P, 2), K)
        assert str(got.value) == str(expected.value)
    with pytest.raises(ScheduleError, match="too small"):  # a size error, K left aside
        lazy_schedule(builder("2bw", 4, 2), 50)


def test_a_non_periodic_builder_is_materialized():
    def build(k):  # a gpipe whose last minibatch differs more the longer it is: no window
        rows = [[f"{s}F{m}" for m in range(2 * k)] + [f"{s}B{m}" for m in range(2 * k)]
                for s in range(2)]
        return from_rows(rows, name="custom", num_microbatches=2 * k)
    made = lazy_schedule(build, 40)
    assert not isinstance(made, LazySchedule) and made.num_microbatches == 80


def test_building_5000_minibatches_lazily_allocates_far_less():
    def peak(make):
        tracemalloc.start()
        made = make()
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return made, top

    lazy, lazy_peak = peak(lambda: lazy_schedule(builder("async", 2, 4), 5000))
    full, full_peak = peak(lambda: builder("async", 2, 4)(5000))
    assert isinstance(lazy, LazySchedule) and sum(map(len, lazy.ranks)) == sum(
        map(len, full.ranks)) == 90_000
    assert lazy_peak * 50 < full_peak, (lazy_peak, full_peak)


# ---------------------------------------------------------------------- runs, bitwise

RUNS = {  # label: (method, P, N, chunks, warmup, K)
    "gpipe": ("gpipe", 3, 2, 1, 0, 14),
    "pipedream": ("pipedream", 3, 2, 1, 0, 14),
    "2bw": ("2bw", 3, 2, 1, 0, 14),
    "async": ("async", 3, 2, 1, 0, 14),
    "pipemare-t1-t2": ("pipemare", 3, 2, 1, 0, 14),
    "async-warmup": ("pipemare", 3, 2, 1, 2, 16),
    "interleaved": ("interleaved", 2, 2, 2, 0, 12),
    "wpred": ("wpred", 3, 2, 1, 0, 14),
}


def make_schedules(method, P, N, chunks, warmup, K):
    options = method_options(method, warmup=warmup)

    def build(k):
        return build_method_schedule(method, P, N, chunks=chunks, num_minibatches=k,
                                     options=options)
    lazy = lazy_schedule(build, K, warmup_minibatches=warmup)
    assert isinstance(lazy, LazySchedule)
    return lazy, build(K), options


def executor_for(schedule, options):
    torch.manual_seed(0)
    stages = list(mlp(6, 8, schedule.num_virtual_stages, 5, seed=3))
    return LocalExecutor(schedule, stages, loss_fn=F.cross_entropy, method_options=options,
                         optimizer_factory=functools.partial(torch.optim.SGD, lr=0.2,
                                                             momentum=0.5))


def feed(count):
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(3, 6, generator=g), torch.randint(0, 5, (3,), generator=g))
            for _ in range(count)]


def step_by_step(executor, data, K, save_at=None, options=None):
    """Run K steps one update at a time; with ``save_at``, swap in a fresh executor restored
    from a state_dict at that step. Returns every step's result and the final executor."""
    results = []
    for k in range(1, K + 1):
        results.append(executor.run(data, stop_after_updates=k))
        if k == save_at:
            state = executor.state_dict()
            executor = executor_for(executor.schedule, options)
            executor.load_state_dict(state)
    return results, executor


def summary(results, executor):
    return {
        "losses": [r.loss_by_microbatch for r in results],
        "versions": [r.trace.extra["versions"] for r in results],
        "order": [[(e.rank, str(e.action)) for e in r.trace.entries] for r in results],
        "lrs": [r.learning_rates for r in results],
        "backward": [r.backward_versions for r in results],
        "weights": [{k: v.clone() for k, v in w.module.state_dict().items()}
                    for w in executor.workers],
    }


def same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if key == "weights":
            for wa, wb in zip(a[key], b[key]):
                assert all(torch.equal(wa[n], wb[n]) for n in wa), key
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("label", RUNS)
def test_a_lazy_run_equals_the_materialized_run_bitwise(label, one_thread):
    lazy, full, options = make_schedules(*RUNS[label])
    K, data = full.num_minibatches, feed(full.total_microbatches)
    reference = summary(*step_by_step(executor_for(full, options), data, K))
    lazy_run = step_by_step(executor_for(lazy, options), data, K)
    same(summary(*lazy_run), reference)
    assert lazy_run[1].finished
    # through a checkpoint in the middle of the run (the rows restart at the saved positions)
    same(summary(*step_by_step(executor_for(lazy, options), data, K, save_at=5,
                               options=options)), reference)


def test_a_checkpoint_names_the_lazy_schedule(one_thread):
    lazy, full, options = make_schedules(*RUNS["async"])
    data = feed(full.total_microbatches)
    executor = executor_for(lazy, options)
    executor.run(data, stop_after_updates=2)
    state = executor.state_dict()
    assert state["schedule"] == schedule_key(lazy) and state["schedule"][1] == 14
    other, _, _ = make_schedules("async", 3, 2, 1, 0, 15)
    with pytest.raises(ValueError, match="other actions"):
        executor_for(other, options).load_state_dict(state)


@pytest.mark.dist
@pytest.mark.slow
def test_the_distributed_executor_equals_a_lazy_local_run(one_thread):
    from pipemare_lite.engine.distributed.jobs import DistJob, run_distributed_jobs
    from pipemare_lite.training.partition import PartitionedModel

    lazy, full, options = make_schedules("pipemare", 2, 2, 1, 1, 13)
    data = feed(full.total_microbatches)
    stages = PartitionedModel(mlp, 2, kwargs=tuple(dict(
        in_features=6, hidden=8, depth=2, out_features=5, seed=3).items()))
    optimizer = functools.partial(torch.optim.SGD, lr=0.2, momentum=0.5)
    job = DistJob(full, stages, data, F.cross_entropy, optimizer, options)
    (dist_result,) = run_distributed_jobs([job], timeout=240, op_timeout=60)
    local = LocalExecutor(lazy, stages(), loss_fn=F.cross_entropy, optimizer_factory=optimizer,
                          method_options=options)
    result = local.run(data)
    assert dist_result.loss_by_microbatch == result.loss_by_microbatch
    assert dist_result.trace.extra["versions"] == result.trace.extra["versions"]
    assert dist_result.learning_rates == result.learning_rates
    for ds, worker in zip(dist_result.state_dicts, local.workers):
        assert all(torch.equal(ds[n], t) for n, t in worker.module.state_dict().items())
