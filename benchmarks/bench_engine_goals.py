"""Issue 11's speed goals in one table: goal, measured, ratio to the goal, met (prints only).

Each row reuses the measurement of the benchmark that owns it, with fewer repeats so that
the whole table fits in ``make bench`` (well under a minute per goal on 2 loaded cores):

1. ``fit()`` / a plain training loop (``bench_train.py``), width 128 (goal <= 1.5x) and
   width 1024 (goal <= 1.1x): median over back-to-back pairs of CPU times.
2. Executor overhead per action (``bench_executor.py``): (local executor - the same stages
   run by hand) / actions, median over back-to-back pairs; goal <= 20 us. A second row
   measures against a hand loop in the executor's own 1F1B order (bitwise the executor's
   numbers): what is left is the engine's machinery, without the order's own cost.
3. Build + simulate + staleness (``weight_versions`` + ``stage_delays``) at P=128, M=1024
   (``bench_schedules.py``): interleaved (v=2) < 2 s, every other schedule < 1 s; CPU seconds,
   median over the repeats.
4. Per-step cost over a long asynchronous run (``bench_step_cost.py``, local executor):
   mean of the last 10% of the steps / the first 10%; goal <= 1.1.
5. Our distributed executor / ``torch.distributed.pipelining``, one training step, GPipe and
   1F1B at P=2 and 4 (``bench_vs_torch_pipelining.py``): median of paired step ratios;
   goal <= 1.0.

CPU seconds (``time.process_time``, one torch thread) are used wherever one process does the
work: a machine shared with other jobs disturbs them less than wall-clock time. The load
average is printed first; read the numbers with it.

Run: ``.venv/bin/python benchmarks/bench_engine_goals.py [--only train,executor,schedules,
step,pipelining] [--repeats N]``
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmarks

GOALS = ("train", "executor", "schedules", "step", "pipelining")


def row(goal: str, measured: float, target: float, unit: str, note: str = "") -> None:
    """One table line; ``met`` means measured <= target (the goal's direction)."""
    ratio = measured / target
    met = "yes" if measured <= target else "no"
    print(f"{goal:50} {measured:10.3f} {unit:3} {target:8.3f} {ratio:7.2f} {met:>4}  {note}",
          flush=True)


def cpu_seconds(fn, *args, **kwargs) -> float:
    """CPU seconds of this process spent in ``fn(*args, **kwargs)``."""
    start = time.process_time()
    fn(*args, **kwargs)
    return time.process_time() - start


def train_goal(repeats: int) -> None:
    """fit(1f1b) / plain loop per epoch at both widths of ``bench_train.py``."""
    import torch
    from bench_train import SIZES, pipelined, plain_loop

    from pipemare_lite.training.datasets import digits

    torch.set_num_threads(1)
    data = digits()
    pipelined(data, *SIZES[0])  # warm-up: imports, allocator
    for (width, batch), goal in zip(SIZES, (1.5, 1.1)):
        ratios = [pipelined(data, width, batch) / plain_loop(data, width, batch)
                  for _ in range(repeats)]
        row(f"fit / plain loop, width {width}", statistics.median(ratios), goal, "x",
            f"median of {repeats} pairs (range {min(ratios):.2f}-{max(ratios):.2f})")


def executor_goal(repeats: int) -> None:
    """(executor - stages by hand) / actions, as in ``bench_executor.py`` (1F1B, P=4), in CPU
    seconds (``bench_executor.py`` itself reports wall-clock time)."""
    import torch
    from bench_executor import hand_in_schedule_order, hand_staged_epoch, microbatches
    from torch import nn

    from pipemare_lite.engine import LocalExecutor
    from pipemare_lite.schedules import build_schedule
    from pipemare_lite.training.models import mlp
    from pipemare_lite.training.partition import partition

    def executor_run(stages) -> float:  # bench_executor.executor_epoch, timed in CPU seconds
        executor = LocalExecutor(schedule, stages, loss_fn=nn.functional.cross_entropy,
                                 optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=0.01,
                                                                              momentum=0.9))
        return cpu_seconds(executor.run, mbs)

    torch.set_num_threads(1)
    P, N, K, samples = 4, 8, 10, 32
    model = mlp(64, 256, 8, 10, seed=0)
    mbs = microbatches(N * K, samples, 64, 10)
    schedule = build_schedule("1f1b", P, N, num_minibatches=K)
    actions = sum(len(r) for r in schedule.ranks)
    executor_run(partition(copy.deepcopy(model), P))  # warm-up
    gaps, ordered_gaps = [], []
    for _ in range(repeats):
        piped = executor_run(partition(copy.deepcopy(model), P))
        hand = cpu_seconds(hand_staged_epoch, partition(copy.deepcopy(model), P), mbs, N, K, 0.01)
        ordered = cpu_seconds(hand_in_schedule_order, schedule, partition(copy.deepcopy(model), P),
                              mbs, 0.01)
        gaps.append((piped - hand) / actions * 1e6)
        ordered_gaps.append((piped - ordered) / actions * 1e6)
    row("executor overhead per action (1F1B, P=4)", statistics.median(gaps), 20.0, "us",
        f"CPU, median of {repeats} pairs over {actions} actions")
    # the same, against a hand loop in 1F1B's own order: the order's cost left out
    row("  ... against a hand loop in 1F1B's order", statistics.median(ordered_gaps), 20.0, "us",
        f"CPU, median of {repeats} triples")


def schedules_goal(repeats: int) -> None:
    """CPU seconds of build + simulate + staleness for every schedule at P=128, M=1024."""
    from pipemare_lite.analysis.simulate import simulate
    from pipemare_lite.analysis.staleness import stage_delays, weight_versions
    from pipemare_lite.schedules import SCHEDULE_NAMES, build_schedule

    P, M = 128, 1024
    for name in SCHEDULE_NAMES:
        chunks = 2 if name == "interleaved" else 1
        goal = 2.0 if name == "interleaved" else 1.0
        seconds = []
        for _ in range(repeats):
            gc.collect()  # every repeat starts from the same heap
            start = time.process_time()
            schedule = build_schedule(name, P, M, chunks=chunks)
            simulate(schedule)
            stage_delays(weight_versions(schedule))
            seconds.append(time.process_time() - start)
            del schedule
        row(f"build+simulate+staleness {name} P={P} M={M}", statistics.median(seconds), goal,
            "s", f"CPU, median of {repeats}")


def step_goal(steps: int) -> None:
    """Last 10% / first 10% of the per-step CPU time, local executor (``bench_step_cost.py``)."""
    import torch
    import torch.nn.functional as F
    from bench_step_cost import OPTIMIZER, N, microbatches, step_seconds

    from pipemare_lite.engine import LocalExecutor
    from pipemare_lite.schedules import build_schedule
    from pipemare_lite.training.models import mlp
    from pipemare_lite.training.partition import partition

    torch.set_num_threads(1)
    P = 4
    executor = LocalExecutor(build_schedule("async", P, N, num_minibatches=steps),
                             partition(mlp(16, 32, P, 4, seed=0), P),
                             loss_fn=F.cross_entropy, optimizer_factory=OPTIMIZER)
    seconds = step_seconds(executor, microbatches(N * steps), steps)
    body = seconds[1:len(seconds) - P]  # as bench_step_cost.report: no first step, no drain
    tenth = max(1, len(body) // 10)
    ratio = statistics.mean(body[-tenth:]) / statistics.mean(body[:tenth])
    row(f"step cost last/first 10% (async P={P}, local)", ratio, 1.1, "x",
        f"{steps} steps, CPU")


def pipelining_goal(repeats: int) -> None:
    """Ours / torch.distributed.pipelining per step (``bench_vs_torch_pipelining.py``)."""
    from bench_vs_torch_pipelining import CASES, measure

    for name, P, M in CASES:
        result = measure(name, P, M, repeats)
        row(f"ours / torch pipelining, {name} P={P} M={M}", result["ratio"], 1.0, "x",
            f"median of {repeats} paired steps ({result['ours_ms']:.1f} vs "
            f"{result['torch_ms']:.1f} ms)")


def main(argv: list[str] | None = None) -> None:
    """Print the table (one goal after the other, each as soon as it is measured)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(GOALS),
                        help=f"comma-separated goals to measure (of {', '.join(GOALS)})")
    parser.add_argument("--repeats", type=int, default=None,
                        help="repeats per goal (default: 3 train, 5 executor, 2 schedules, "
                             "15 pipelining steps)")
    parser.add_argument("--steps", type=int, default=1000, help="steps of the step-cost run")
    args = parser.parse_args(argv)
    chosen = args.only.split(",")
    unknown = sorted(set(chosen) - set(GOALS))
    if unknown:
        parser.error(f"unknown goal(s) {', '.join(unknown)}; allowed: {', '.join(GOALS)}")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"{'goal':50} {'measured':>14} {'target':>8} {'ratio':>7} {'met':>4}  how")
    repeats = args.repeats
    if "train" in chosen:
        train_goal(repeats or 3)
    if "executor" in chosen:
        executor_goal(repeats or 5)
    if "schedules" in chosen:
        schedules_goal(repeats or 2)
    if "step" in chosen:
        step_goal(args.steps)
    if "pipelining" in chosen:
        pipelining_goal(repeats or 15)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
