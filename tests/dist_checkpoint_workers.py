"""Process bodies for tests/test_dist_checkpoint.py (importable by every launched rank)."""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from pipemare_lite.engine.distributed.executor import DistributedExecutor
from pipemare_lite.methods import method_options
from pipemare_lite.methods.registry import build_method_schedule

WIDTH, MINIBATCHES, N = 6, 6, 2


def setup(method: str):
    """The run both executors make: schedule, options, fresh stage modules, microbatches."""
    options = method_options(method)
    schedule = build_method_schedule(method, 2, N, num_minibatches=MINIBATCHES, options=options)
    torch.manual_seed(0)
    stages = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()), nn.Sequential(nn.Linear(WIDTH, 3))]
    g = torch.Generator().manual_seed(1)
    mbs = [(torch.randn(4, WIDTH, generator=g), torch.randint(0, 3, (4,), generator=g))
           for _ in range(MINIBATCHES * N)]
    return schedule, options, stages, mbs


def sgd(params):
    """Each stage's optimizer."""
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


@contextmanager
def _checkpointing_executor(schedule, options, stages, state: bytes | None):
    """A checkpointing DistributedExecutor, loaded from ``state`` (``torch.save`` bytes) if
    given."""
    import io

    with DistributedExecutor(schedule, stages, loss_fn=nn.functional.cross_entropy,
                             optimizer_factory=sgd, method_options=options,
                             checkpoints=True) as executor:
        if state is not None:
            executor.load_state_dict(torch.load(io.BytesIO(state), weights_only=False))
        yield executor


def dist_run(info, method: str, stop: int | None = None, state: bytes | None = None) -> dict:
    """Run on the distributed executor: from ``state`` (a checkpoint as ``torch.save``
    bytes, as fit() writes it) if given, to ``stop`` updates if given (then return the
    checkpoint too)."""
    schedule, options, stages, mbs = setup(method)
    with _checkpointing_executor(schedule, options, stages, state) as executor:
        result = executor.run(mbs, stop_after_updates=stop)
        out = {"losses": result.loss_by_microbatch, "weights": result.state_dicts,
               "lrs": result.learning_rates}
        if stop is not None:
            out["state"] = executor.state_dict()
            executor.run(mbs)  # and it goes on: the checkpoint disturbed nothing
    return out


def lazy_setup(num_minibatches: int):
    """:func:`setup` for pipemare on a long (periodic) schedule of ``num_minibatches`` minibatches
    (as ``fit()`` makes its run's schedule)."""
    from pipemare_lite.schedules.repeat import long_schedule

    options = method_options("pipemare")
    schedule = long_schedule(lambda k: build_method_schedule(
        "pipemare", 2, N, num_minibatches=k, options=options), num_minibatches,
        warmup=options.warmup)
    _, _, stages, _ = setup("pipemare")
    g = torch.Generator().manual_seed(1)
    mbs = [(torch.randn(4, WIDTH, generator=g), torch.randint(0, 3, (4,), generator=g))
           for _ in range(schedule.total_microbatches)]
    return schedule, options, stages, mbs


def lazy_run(info, num_minibatches: int, stop: int | None = None,
             state: bytes | None = None) -> dict:
    """:func:`dist_run` on :func:`lazy_setup`'s run; also what the executor holds: whether
    it kept the schedule it was given, whether its row is a tuple, its plan's type, and the
    messages and targets its progress tracks."""
    schedule, options, stages, mbs = lazy_setup(num_minibatches)
    with _checkpointing_executor(schedule, options, stages, state) as executor:
        result = executor.run(mbs, stop_after_updates=stop)
        out = {"losses": result.loss_by_microbatch, "weights": result.state_dicts,
               "same_schedule": executor.schedule is schedule,
               "row_is_tuple": isinstance(executor.schedule.ranks[info.rank], (tuple, list)),
               "plan": type(executor.transport.plan).__name__,
               "in_flight": len(executor._progress.unconsumed) + len(executor._progress.targets)}
        if stop is not None:
            out["state"] = executor.state_dict()
    return out
