"""Long schedules are ordinary Schedules with periodic rows (pipemare_lite.schedules.repeat, .rows).

References, written plainly here: a flushing builder's K-minibatch schedule is its
one-minibatch schedule laid out K times (microbatch j of minibatch k is k*N + j, update k),
and gpipe and 1F1B are also written from their definitions; an asynchronous one is its
builder's own materialized K-minibatch schedule. Every builder's rows equal them action for
action at many sizes, as do long runs (``long_schedule``) and repeated patterns; a periodic
row indexes, slices, iterates from any position, hashes and pickles like the tuple of its
actions; a long schedule is validated by its short forms, never walked whole; T1's delays
measured on the short form equal those of the whole run; a run on a long schedule equals the
run on the materialized one bitwise (losses, weights, versions, learning rates, trace order),
through checkpoints too and against the distributed executor; building one for 5000
minibatches allocates a small fraction of the materialized one; the checkpoint key is the one
checkpoints have always recorded.
"""

from __future__ import annotations

import functools
import pickle
import tracemalloc

import pytest
import torch
import torch.nn.functional as F

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import build_method_schedule, method_options
from pipemare_lite.methods.lr_rescheduling import stage_forward_delays
from pipemare_lite.methods.registry import METHOD_TABLE
from pipemare_lite.schedules import SCHEDULE_NAMES, Action, ScheduleError, build_schedule
from pipemare_lite.schedules import rows as rows_module
from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.io import from_rows
from pipemare_lite.schedules.registry import is_asynchronous
from pipemare_lite.schedules.repeat import (
    is_long_run,
    long_schedule,
    materialized,
    repeat_notes,
    repeat_schedule,
    schedule_key,
    short_schedule,
)
from pipemare_lite.schedules.rows import PeriodicRow
from pipemare_lite.schedules.validation import validate
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


def laid_out(one, K):
    """Rows of the one-minibatch schedule ``one`` run K times, written plainly."""
    N = one.num_microbatches
    return tuple(tuple(Action(a.stage, a.kind, a.index + (k if a.kind == "U" else k * N))
                       for k in range(K) for a in row) for row in one.ranks)


def _gpipe_row(s, N, K):
    """Stage s of GPipe from its definition: per minibatch all F, all B, then U."""
    row = []
    for k in range(K):
        row += [Action(s, "F", k * N + m) for m in range(N)]
        row += [Action(s, "B", k * N + m) for m in range(N)]
        row.append(Action(s, "U", k))
    return tuple(row)


def one_f_one_b_reference(P, N, K):
    """1F1B from its definition: stage s runs min(P-1-s, N) forwards, then one forward and
    one backward while forwards remain, then the backwards left, then the update."""
    ranks = []
    for s in range(P):
        row = []
        for k in range(K):
            first = k * N
            warm = min(P - 1 - s, N)
            forwards, backwards = list(range(first, first + N)), list(range(first, first + N))
            row += [Action(s, "F", m) for m in forwards[:warm]]
            for m in forwards[warm:]:
                row += [Action(s, "F", m), Action(s, "B", backwards.pop(0))]
            row += [Action(s, "B", m) for m in backwards]
            row.append(Action(s, "U", k))
        ranks.append(tuple(row))
    return tuple(ranks)


def reference(name, P, M, W, K):
    """The K-minibatch rows of schedule ``name``, without the builder's repetition."""
    if is_asynchronous(name):
        return tuple(tuple(row) for row in builder(name, P, M, W)(K).ranks)
    one = builder(name, P, M)(1)
    assert all(isinstance(row, tuple) for row in one.ranks)  # one minibatch: plain tuples
    return laid_out(one, K)


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_every_builder_equals_its_plain_reference(name):
    for P, M, W in sizes(name):
        for K in (1, 2, 5):
            if W >= K and W:
                continue
            made = builder(name, P, M, W)(K)
            assert made.ranks == reference(name, P, M, W, K), (name, P, M, W, K)
            assert made.num_minibatches == K
            if not is_asynchronous(name) and K > 1:  # flushing: one minibatch, repeated
                assert all(isinstance(row, PeriodicRow) and row.repeats == K
                           for row in made.ranks)


def test_gpipe_and_1f1b_equal_their_definitions():
    for P in (1, 2, 3, 5):
        for N in (1, 2, 4, 7):
            for K in (1, 3, 4):
                assert build_schedule("gpipe", P, N, num_minibatches=K).ranks == \
                    tuple(_gpipe_row(s, N, K) for s in range(P))
                assert build_schedule("1f1b", P, N, num_minibatches=K).ranks == \
                    one_f_one_b_reference(P, N, K)


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_long_rows_equal_the_reference(name):
    for P, M, W in sizes(name):
        build = builder(name, P, M, W)
        for K in (W + 12, W + 45):  # the shorter may be too short (then it is built whole)
            long = long_schedule(build, K, warmup=W)
            assert isinstance(long, Schedule) and (is_long_run(long) or K < W + 45), (
                name, P, M, W, K)
            full = reference(name, P, M, W, K)
            assert long.ranks == full, (name, P, M, W, K)
            built = build(K)
            assert (long.notes, long.weight_mode, long.num_minibatches) == (
                built.notes, built.weight_mode, built.num_minibatches)
            assert [len(row) for row in long.ranks] == [len(row) for row in full]
            for rank in range(P):  # resuming mid-row starts at the right action
                for start in (0, 5, len(full[rank]) // 2, len(full[rank]) - 1):
                    assert tuple(long.row(rank, start)) == full[rank][start:]


def test_a_periodic_row_is_a_sequence_like_the_tuple_of_its_actions():
    row = long_schedule(builder("async", 3, 2, 1), 30, warmup=1).ranks[1]
    assert isinstance(row, PeriodicRow) and row.head and row.tail and row.repeats > 3
    whole = tuple(row)
    assert len(row) == len(whole)
    assert [row[i] for i in range(len(row))] == list(whole)
    assert [row[-i] for i in range(1, len(row) + 1)] == [whole[-i] for i in range(1, len(row) + 1)]
    for start, stop, step in ((0, 7, 1), (5, 40, 1), (3, 60, 4), (50, 10, 1), (-9, None, 1)):
        assert row[start:stop:step] == whole[start:stop:step]
    assert [tuple(row.iter_from(k)) for k in range(len(row) + 2)] == [
        whole[k:] for k in range(len(row) + 2)]
    assert row == whole and whole == row and hash(row) == hash(whole)
    assert row != whole[:-1] and row != list(whole)  # as a tuple: a list is not equal
    assert pickle.loads(pickle.dumps(row)) == row
    with pytest.raises(IndexError):
        row[len(row)]
    with pytest.raises(ValueError, match="repeats=0"):
        PeriodicRow((), whole[:3], 0, (), 2)


def test_a_long_schedule_is_validated_by_its_short_forms_never_walked_whole(monkeypatch):
    calls = []
    shift = rows_module.shift
    monkeypatch.setattr(rows_module, "shift", lambda a, j, N: calls.append(1) or shift(a, j, N))
    big = build_schedule("gpipe", 4, 8, num_minibatches=100_000)  # 6.8 million actions
    assert validate(big) is big and len(calls) < 2000, len(calls)
    long = long_schedule(builder("async", 4, 2, 1), 100_000, warmup=1)
    assert is_long_run(long) and len(calls) < 20_000, len(calls)
    # an invalid short form is refused: here a window that never updates
    bad = Schedule("custom", 1, 1, (PeriodicRow((), (Action(0, "F", 0), Action(0, "B", 0)),
                                                50, (), 1),), num_minibatches=50)
    with pytest.raises(ScheduleError, match="missing 0U0"):
        validate(bad)


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
            long = long_schedule(build, K, warmup=W)
            assert is_long_run(long), (method, P, M, W, K)
            short = short_schedule(long)
            assert short.num_minibatches < K and short.ranks == build(short.num_minibatches).ranks
            assert stage_forward_delays(short) == stage_forward_delays(materialized(build(K))), (
                method, P, M, W, K)


def test_a_repeated_pattern_is_periodic_and_equal():
    pattern = from_rows([["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]],
                        name="custom", num_microbatches=2)
    plain = laid_out(pattern, 50)
    repeated = repeat_schedule(pattern, 50)
    assert all(isinstance(row, PeriodicRow) and not row.head and not row.tail
               for row in repeated.ranks)
    assert repeated.ranks == plain and repeated.notes == repeat_notes(pattern, 50)
    long = long_schedule(lambda k: repeat_schedule(pattern, k), 50, notes=repeat_notes(pattern, 50))
    assert is_long_run(long) and long.ranks == plain and long.notes == repeated.notes


def test_short_runs_and_bad_sizes_go_to_the_builder():
    assert not is_long_run(long_schedule(builder("async", 4, 2), 5))
    for K, P in ((100001, 4), (0, 4), (2.5, 4), (50, 0)):  # the builder's own errors
        with pytest.raises(ScheduleError) as expected:
            builder("async", P, 2)(K)
        with pytest.raises(ScheduleError) as got:
            long_schedule(builder("async", P, 2), K)
        assert str(got.value) == str(expected.value)
    with pytest.raises(ScheduleError, match="too small"):  # a size error, K left aside
        long_schedule(builder("2bw", 4, 2), 50)


def test_a_non_periodic_builder_is_built_whole():
    def build(k):  # a gpipe whose last minibatch differs more the longer it is: no window
        rows = [[f"{s}F{m}" for m in range(2 * k)] + [f"{s}B{m}" for m in range(2 * k)]
                for s in range(2)]
        return from_rows(rows, name="custom", num_microbatches=2 * k)
    made = long_schedule(build, 40)
    assert not is_long_run(made) and made.num_microbatches == 80


def test_building_thousands_of_minibatches_allocates_far_less():
    def peak(make):
        tracemalloc.start()
        made = make()
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return made, top

    long, long_peak = peak(lambda: long_schedule(builder("async", 2, 4), 5000))
    full, full_peak = peak(lambda: builder("async", 2, 4)(5000))
    assert is_long_run(long) and sum(map(len, long.ranks)) == sum(
        map(len, full.ranks)) == 90_000
    assert long_peak * 50 < full_peak, (long_peak, full_peak)
    flushed, flushed_peak = peak(lambda: builder("1f1b", 2, 4)(2000))  # the builder itself
    plain, plain_peak = peak(lambda: laid_out(builder("1f1b", 2, 4)(1), 2000))
    assert flushed.ranks == plain and flushed_peak * 50 < plain_peak, (flushed_peak, plain_peak)


def test_the_checkpoint_key_is_the_one_checkpoints_always_recorded():
    build = builder("async", 3, 2)
    long = long_schedule(build, 40)
    # a long run: its name, length, the rows of build(K0) (the probe's K0: 4, 8, 16 ...) and
    # where each rank's steady window ends in them, as the LazySchedule of earlier versions
    # recorded it
    K0 = 40 - long.ranks[0].repeats + 1
    assert K0 in (4, 8, 16)
    K0_rows = build(K0).rows()
    assert schedule_key(long) == ("async", 40, K0_rows,
                                  [len(row.head) + len(row.window) for row in long.ranks])
    for rank, row in enumerate(long.ranks):  # the window ends after an update in build(K0)
        end = len(row.head) + len(row.window)
        assert K0_rows[rank][end - 1][1] == "U" and K0_rows[rank][end][1] != "U"
    # any other schedule, a flushing builder's periodic one included: name and rows
    gpipe = build_schedule("gpipe", 2, 2, num_minibatches=9)
    assert schedule_key(gpipe) == ("gpipe", gpipe.rows()) == ("gpipe", materialized(gpipe).rows())


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
    long = long_schedule(build, K, warmup=warmup)
    assert is_long_run(long)
    return long, materialized(build(K)), options


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
def test_a_long_run_equals_the_materialized_run_bitwise(label, one_thread):
    lazy, full, options = make_schedules(*RUNS[label])
    K, data = full.num_minibatches, feed(full.total_microbatches)
    reference = summary(*step_by_step(executor_for(full, options), data, K))
    lazy_run = step_by_step(executor_for(lazy, options), data, K)
    same(summary(*lazy_run), reference)
    assert lazy_run[1].finished
    # through a checkpoint in the middle of the run (the rows restart at the saved positions)
    same(summary(*step_by_step(executor_for(lazy, options), data, K, save_at=5,
                               options=options)), reference)


def test_a_checkpoint_names_the_long_schedule(one_thread):
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
def test_the_distributed_executor_equals_a_long_local_run(one_thread):
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
