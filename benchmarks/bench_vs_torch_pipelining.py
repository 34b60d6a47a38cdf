"""Our distributed executor vs ``torch.distributed.pipelining``: time of one training step.

Same model (an MLP, one layer per stage), same data, same P and M, CPU, gloo, one thread
per process. A training step is forward + backward of M microbatches with the schedule
(GPipe or 1F1B) and an SGD update. The two runtimes alternate step by step inside the same
processes (:func:`pipemare_lite.interop.torch_pipelining.compare_with_torch_pipelining`), so both
see
the same machine load; a step's time is the slowest rank's, from a barrier to its end.
Prints the median step times and the ratio ours / PyTorch (below 1: we are faster). No
assertions: a shared CPU is noisy, read the numbers.

Run: ``.venv/bin/python benchmarks/bench_vs_torch_pipelining.py [--repeats 30]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from pipemare_lite.engine.distributed.launch import launch
from pipemare_lite.interop.torch_pipelining import ComparisonJob, compare_with_torch_pipelining
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import PartitionedModel

CASES = [  # schedule, P, M
    ("gpipe", 2, 8),
    ("1f1b", 2, 8),
    ("gpipe", 4, 8),
    ("1f1b", 4, 8),
]
WIDTH, SAMPLES = 256, 32  # features and samples per microbatch


def measure(name: str, P: int, M: int, repeats: int, record: str = "full") -> dict:
    """Median step time of both runtimes (slowest rank per step) and their ratio, with our
    executor recording ``record`` (:mod:`pipemare_lite.engine.recording`); also the
    ratios' range."""
    stages = PartitionedModel(mlp, P, kwargs=(("in_features", WIDTH), ("hidden", WIDTH),
                                              ("depth", P), ("out_features", 10), ("seed", 0)))
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(SAMPLES, WIDTH, generator=g),
             torch.randint(0, 10, (SAMPLES,), generator=g)) for _ in range(M)]
    job = ComparisonJob(name, M, stages, data, F.cross_entropy, "torch", lr=0.01, repeats=repeats,
                        record=record)
    results = launch(compare_with_torch_pipelining, P, args=(job,), timeout=600)
    torch_steps = [max(r["torch_seconds"][i] for r in results) for i in range(repeats)]
    our_steps = [max(r["our_seconds"][i] for r in results) for i in range(repeats)]
    pair_ratios = [o / t for o, t in zip(our_steps, torch_steps)]
    return {
        "torch_ms": 1000 * statistics.median(torch_steps),
        "ours_ms": 1000 * statistics.median(our_steps),
        "ratio": statistics.median(pair_ratios),
        "low": min(pair_ratios), "high": max(pair_ratios),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed steps per runtime")
    args = parser.parse_args()
    print(f"one training step, CPU/gloo, MLP width {WIDTH}, {SAMPLES} samples per microbatch, "
          f"{args.repeats} steps each (median)")
    header = ("schedule", "P", "M", "pytorch ms", "ours ms", "ours/pytorch")
    print("{:>8} {:>2} {:>3} {:>11} {:>9} {:>13}".format(*header))
    for name, P, M in CASES:
        start = time.perf_counter()
        row = measure(name, P, M, args.repeats)
        print(f"{name:>8} {P:>2} {M:>3} {row['torch_ms']:>11.2f} {row['ours_ms']:>9.2f} "
              f"{row['ratio']:>13.2f}   ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
