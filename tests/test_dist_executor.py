"""The distributed executor equals the local one, bitwise (fp32, CPU, one thread per process).

For P = 2, 3, 4 one launch per P runs every method (gpipe, 1f1b, interleaved, zb-h1,
pipedream, 2bw, async, pipemare with T1+T2) over several minibatches; the same schedules
run in this process on :class:`~pipemare_lite.engine.LocalExecutor`, itself tested
against independent references in ``test_executor_local.py``. Compared: every loss, the
gradients each update applied, the final weights, the weight version of every action and
the learning rates. The measured trace is checked for completeness and order.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from pipemare_lite.analysis.utilization import utilization_report
from pipemare_lite.engine import LocalExecutor
from pipemare_lite.engine.distributed.jobs import DistJob, run_distributed_jobs
from pipemare_lite.methods import build_method_schedule, method_options
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import PartitionedModel

pytestmark = [pytest.mark.dist]

M, K, WIDTH, CLASSES, SAMPLES = 4, 3, 6, 5, 3
METHODS = [
    ("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1),
    ("pipedream", 1), ("2bw", 1), ("async", 1), ("pipemare", 1),
]  # fmt: skip


def stages_for(num_virtual_stages: int) -> PartitionedModel:
    """One Linear(+ReLU) layer per virtual stage, seeded: every process builds the same."""
    kwargs = dict(in_features=WIDTH, hidden=8, depth=num_virtual_stages,
                  out_features=CLASSES, seed=3)
    return PartitionedModel(mlp, num_virtual_stages, kwargs=tuple(kwargs.items()))


def microbatches(count: int):
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(SAMPLES, WIDTH, generator=g),
             torch.randint(0, CLASSES, (SAMPLES,), generator=g)) for _ in range(count)]


OPTIMIZER = functools.partial(torch.optim.SGD, lr=0.2, momentum=0.5)


def job_for(method: str, chunks: int, P: int) -> DistJob:
    options = method_options(method, warmup=1 if method == "pipemare" else 0)
    n = M if chunks == 1 else P * -(-M // P)  # interleaving needs a multiple of P
    schedule = build_method_schedule(method, P, n, num_minibatches=K, chunks=chunks,
                                     options=options)
    return DistJob(schedule, stages_for(schedule.num_virtual_stages), microbatches(n * K),
                   F.cross_entropy, OPTIMIZER, options, record_gradients=True)


def run_local(job: DistJob):
    """The same job on the local executor, recording the gradients each update applies."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        executor = LocalExecutor(job.schedule, job.stages(), loss_fn=job.loss_fn,
                                 optimizer_factory=job.optimizer_factory,
                                 method_options=job.method_options)
        gradients = [[] for _ in executor.workers]
        for s, worker in enumerate(executor.workers):
            def update(worker=worker, sink=gradients[s], original=worker.update):
                sink.append([p.grad.clone() for p in worker.params])
                original()
            worker.update = update
        result = executor.run(job.microbatches)
        states = [w.module.state_dict() for w in executor.workers]
        return result, gradients, states
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=[2, 3, 4], ids=lambda p: f"P{p}")
def runs(request):
    P = request.param
    jobs = [job_for(method, chunks, P) for method, chunks in METHODS]
    results = run_distributed_jobs(jobs, timeout=240, op_timeout=60)
    return P, jobs, results


@pytest.mark.slow
@pytest.mark.parametrize("method", [m for m, _ in METHODS])
def test_distributed_equals_local_bitwise(runs, method):
    P, jobs, results = runs
    i = [m for m, _ in METHODS].index(method)
    job, dist_result = jobs[i], results[i]
    local, local_grads, local_states = run_local(job)

    assert dist_result.loss_by_microbatch == local.loss_by_microbatch
    assert len(dist_result.losses) == job.schedule.total_microbatches
    for s, (d_grads, l_grads) in enumerate(zip(dist_result.gradients, local_grads)):
        assert len(d_grads) == len(l_grads) == K, f"stage {s}: one gradient set per update"
        for k, (dg, lg) in enumerate(zip(d_grads, l_grads)):
            for dp, lp in zip(dg, lg):
                assert torch.equal(dp, lp), f"{method} P={P} stage {s} update {k} gradient"
    for s, (ds, ls) in enumerate(zip(dist_result.state_dicts, local_states)):
        assert ds.keys() == ls.keys()
        for name in ds:
            assert torch.equal(ds[name], ls[name]), f"{method} P={P} stage {s} {name}"
    assert dist_result.trace.extra["versions"] == local.trace.extra["versions"]
    assert dist_result.forward_versions == local.forward_versions
    assert dist_result.backward_versions == local.backward_versions
    assert dist_result.learning_rates == local.learning_rates
    assert dist_result.group_learning_rates == local.group_learning_rates
    assert dist_result.update_norms == local.update_norms
    if method == "pipemare":  # T1 off in the flushed warm-up minibatch (W = 1): base lr
        assert all(rates[0] == OPTIMIZER.keywords["lr"] for rates in local.learning_rates.values())


@pytest.mark.slow
def test_trace_is_complete_ordered_and_measured(runs):
    P, jobs, results = runs
    for job, result in zip(jobs, results):
        trace = result.trace
        assert trace.source == "measured" and trace.unit == "s"
        assert sorted(str(e.action) for e in trace.entries) == sorted(
            str(a) for row in job.schedule.ranks for a in row)
        for rank, row in enumerate(job.schedule.ranks):
            mine = trace.for_rank(rank)
            assert [e.action for e in mine] == list(row)  # run in schedule order
            for a, b in zip(mine, mine[1:]):
                assert a.start <= a.end <= b.start
        # a backward starts after its forward ended (same rank: same clock; across ranks
        # the barrier-aligned origins may differ by a scheduling delay, so not checked)
        ends = {(e.action.stage, e.action.kind, e.action.index): e.end for e in trace.entries}
        for e in trace.entries:
            if e.action.kind in ("B", "I"):
                assert e.start >= ends[(e.action.stage, "F", e.action.index)]


@pytest.mark.slow
def test_the_measured_trace_feeds_the_simulators_gantt(runs):
    from pipemare_lite.analysis.simulate import simulate
    from pipemare_lite.figures.viz.gantt_chart import gantt_pair

    P, jobs, results = runs
    figure = gantt_pair(simulate(jobs[1].schedule), results[1].trace)
    drawn = sum(len(trace.x) for trace in figure.data if trace.x is not None)
    assert drawn >= 2 * len(results[1].trace.entries)  # every action, planned and measured


@pytest.mark.slow
def test_utilization_report_compares_with_the_simulator(runs):
    P, jobs, results = runs
    report = utilization_report(results[0].trace)
    busy = sum(e.duration for e in results[0].trace.entries)
    expected = busy / (P * results[0].trace.makespan)
    assert report["measured"] == pytest.approx(expected)
    assert 0 < report["simulated"] <= 1 and 0 < report["measured"] <= 1
    assert len(report["measured_per_rank"]) == P


@pytest.mark.slow
def test_fit_with_the_distributed_executor_equals_local():
    from pipemare_lite import fit
    from pipemare_lite.engine.distributed.launch import launch
    from pipemare_lite.training.datasets import load
    from pipemare_lite.training.dist_fit import fit_worker

    options = dict(method="pipemare", num_stages=2, num_microbatches=2, batch_size=64,
                   epochs=1, lr=0.05, progress=False)
    model = dict(in_features=64, hidden=16, depth=2, out_features=10, seed=0)
    histories = launch(fit_worker, 2, timeout=240, args=(
        dict(options, model=(mlp, model), data=(load, {"name": "digits"})),))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        local = fit(mlp(**model), load("digits"), **options).to_dict()
    finally:
        torch.set_num_threads(threads)
    for history in histories:  # every rank gathered the same history
        for key in ("loss", "evals", "stage_lr", "forward_delay", "memory_bytes_by_stage"):
            assert history[key] == local[key], key
