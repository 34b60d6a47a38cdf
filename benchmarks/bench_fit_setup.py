"""fit()'s set-up for a long run: CPU seconds and tracemalloc peak (issue 11, lazy schedules).

Times everything ``fit`` does before its first step (the schedule of the whole run, the
stages, the executor) for ``--method`` (async) with P=8, N=4 and 5000 minibatches, on a
small MLP: ``python benchmarks/bench_fit_setup.py [--method pipemare] [--steps 5000]``.
The first pass is timed (CPU seconds, the machine is shared), the second is traced with
``tracemalloc`` (its peak is the set-up's memory). No pass/fail; prints one line per pass.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import torch

from pipemare_lite.training import loop as train
from pipemare_lite.training.datasets import Dataset
from pipemare_lite.training.models import mlp


class _SetUpDone(Exception):
    """Raised at the end of the set-up: fit stops before training."""


def data(steps: int, batch: int) -> Dataset:
    """A random dataset of exactly ``steps`` minibatches (features 8, 4 classes)."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(steps * batch, 8, generator=g), torch.randint(0, 4, (steps * batch,))
    return Dataset("random", x, y, x[:8], y[:8], 4, (8,), "random numbers")


def set_up(method: str, P: int, N: int, steps: int) -> None:
    """Run fit() until its set-up is done."""
    real = train.TrainingRun

    class Stopped(real):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            raise _SetUpDone

    train.TrainingRun = Stopped
    try:
        train.fit(mlp(8, 16, P, 4), data(steps, N), method=method, num_stages=P,
                  num_microbatches=N, batch_size=N, epochs=1, lr=0.01, progress=False)
    except _SetUpDone:
        pass
    finally:
        train.TrainingRun = real


def main() -> None:
    """Print the set-up's CPU seconds and tracemalloc peak."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="async")
    parser.add_argument("--stages", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5000)
    args = parser.parse_args()
    sizes = (args.method, args.stages, args.microbatches, args.steps)
    set_up(args.method, args.stages, args.microbatches, 2)  # imports and caches warm
    cpu = time.process_time()
    set_up(*sizes)
    cpu = time.process_time() - cpu
    tracemalloc.start()
    set_up(*sizes)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"fit set-up {args.method} P={args.stages} N={args.microbatches} "
          f"steps={args.steps}: {cpu:.3f} CPU s, tracemalloc peak {peak / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
