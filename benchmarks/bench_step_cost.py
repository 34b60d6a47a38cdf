"""Does a step cost the same at the end of a long run as at its start? Prints ratios.

An asynchronous pipeline (``async``, P = 4, N = 4; a small MLP, so the executor's own
bookkeeping is a visible share of a step) runs one long schedule step by step, as ``fit()``
does (``run(microbatches, stop_after_updates=k)`` for k = 1 .. K). Per step: the CPU seconds
of the process (``time.process_time``, one torch thread: a busy shared machine disturbs it
less than wall time). Printed: the mean step time of the first 10% of the steps and of the
last 10%, and their ratio (goal <= 1.1: flat). The very first step (lazy initialization:
imports, optimizer state) and the pipeline's drain (the last P steps run fewer actions)
are left out of the means.

1. The local executor, in this process.
2. The distributed executor (gloo, P = 2 processes via
   :func:`pipemare_lite.engine.distributed.launch.launch`): per step the largest CPU time over the
   ranks.

Run: ``.venv/bin/python benchmarks/bench_step_cost.py [steps]`` (default 3000; the
distributed part runs a third of them). Asserts nothing: timings are not tests (the test
``tests/test_executor_step_cost.py`` counts the records each step reads instead).
"""

from __future__ import annotations

import functools
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.schedules import build_schedule
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import partition

N, FEATURES, HIDDEN, CLASSES, SAMPLES = 4, 16, 32, 4, 4
OPTIMIZER = functools.partial(torch.optim.SGD, lr=0.01)


def microbatches(count: int) -> list:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(SAMPLES, FEATURES, generator=g),
             torch.randint(0, CLASSES, (SAMPLES,), generator=g)) for _ in range(count)]


def step_seconds(executor, data, steps: int) -> list[float]:
    """CPU seconds of each ``run(..., stop_after_updates=k)`` call, k = 1 .. steps."""
    seconds = []
    for k in range(1, steps + 1):
        start = time.process_time()
        executor.run(data, stop_after_updates=k)
        seconds.append(time.process_time() - start)
    return seconds


def dist_step_seconds(info, steps: int) -> list[float]:
    """Process body: this rank's CPU seconds per step of a P-rank async run."""
    from pipemare_lite.engine.distributed.executor import DistributedExecutor

    P = info.world_size
    schedule = build_schedule("async", P, N, num_minibatches=steps)
    stages = partition(mlp(FEATURES, HIDDEN, P, CLASSES, seed=0), P)
    with DistributedExecutor(schedule, stages, loss_fn=F.cross_entropy,
                             optimizer_factory=OPTIMIZER, rank=info.rank, board=info.board,
                             op_timeout=info.op_timeout) as executor:
        return step_seconds(executor, microbatches(N * steps), steps)


def report(label: str, seconds: list[float], P: int) -> None:
    """Print the first-10% and last-10% means (first step and drain left out), the ratio."""
    body = seconds[1:len(seconds) - P]
    tenth = max(1, len(body) // 10)
    first, last = statistics.mean(body[:tenth]), statistics.mean(body[-tenth:])
    print(f"{label}: {len(seconds)} steps; mean step {first * 1e3:.2f} ms in the first 10%, "
          f"{last * 1e3:.2f} ms in the last 10%; ratio last/first {last / first:.3f} "
          "(goal <= 1.1)")


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    torch.set_num_threads(1)
    P = 4
    schedule = build_schedule("async", P, N, num_minibatches=steps)
    executor = LocalExecutor(schedule, partition(mlp(FEATURES, HIDDEN, P, CLASSES, seed=0), P),
                             loss_fn=F.cross_entropy, optimizer_factory=OPTIMIZER)
    report(f"local executor, async P={P} N={N}",
           step_seconds(executor, microbatches(N * steps), steps), P)

    from pipemare_lite.engine.distributed.launch import launch

    P, dist_steps = 2, max(steps // 3, 40)
    per_rank = launch(dist_step_seconds, P, args=(dist_steps,), timeout=1800)
    slowest = [max(times) for times in zip(*per_rank)]
    report(f"distributed executor (gloo), async P={P} N={N}", slowest, P)


if __name__ == "__main__":
    main()
