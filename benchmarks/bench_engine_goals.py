"""Issues 11 and 35's speed goals in one table: goal, measured, ratio to the goal, met
(prints only).

Each row reuses the measurement of the benchmark that owns it, with fewer repeats so that
the whole table fits in ``make bench`` (well under a minute per goal on 2 loaded cores).
Rows marked ``[losses]`` run the cheapest recording level, ``[full]`` the fullest
(:mod:`pipemare_lite.engine.recording`); on code without recording levels, ``[as is]``.

1. ``fit()`` / a plain training loop (``bench_train.py``), width 128 (goal <= 1.5x) and
   width 1024 (goal <= 1.1x): median over back-to-back pairs of CPU times.
2. Executor overhead per action (``bench_executor.py``): (local executor - the same stages
   run by hand) / actions, median over back-to-back pairs; goal <= 20 us (cheapest level),
   <= 40 us (full). A second row measures against a hand loop in the executor's own 1F1B
   order (bitwise the executor's numbers): what is left is the engine's machinery, without
   the order's own cost.
3. Build + simulate + staleness (``weight_versions`` + ``stage_delays``) at P=128, M=1024
   (``bench_schedules.py``): interleaved (v=2) < 2 s, every other schedule < 1 s; CPU seconds,
   median over the repeats.
4. Per-step cost over a long asynchronous run (``bench_step_cost.py``, local executor):
   mean of the last 10% of the steps / the first 10%; goal <= 1.1.
5. Our distributed executor / ``torch.distributed.pipelining``, one training step, GPipe and
   1F1B at P=2 and 4 (``bench_vs_torch_pipelining.py``): median of paired step ratios;
   goal <= 1.0.
6. The book's experiment (:data:`pipemare_lite.experiments.design.RESNET`, 16 units)
   trained by ``fit()`` at P=16 (N=2, batch 16, SGD with momentum, cosine schedule): 1F1B
   at every recording level and PipeMare (async + T1 + T2, most of the experiment's rows
   are asynchronous) at ``fit()``'s default: CPU milliseconds per update (per step: every
   stage updates once) against a plain loop doing the same updates on one device, median
   over back-to-back pairs (no goal of its own: it decides how many seeds the experiment
   affords). Evaluation is left out of both.

CPU seconds (``time.process_time``, one torch thread) are used wherever one process does the
work: a machine shared with other jobs disturbs them less than wall-clock time. The load
average is printed first; read the numbers with it.

Run: ``.venv/bin/python benchmarks/bench_engine_goals.py [--only train,executor,schedules,
step,pipelining] [--repeats N]``
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmarks

GOALS = ("train", "executor", "schedules", "step", "pipelining", "resnet")


def levels() -> tuple:
    """The recording levels to measure: cheapest and fullest, or None on code without."""
    import inspect

    try:  # fit's settings: a FitConfig's fields, or (older code) fit's own parameters
        from pipemare_lite.training.config import FitConfig

        settings = {f.name for f in dataclasses.fields(FitConfig)}
    except ImportError:
        from pipemare_lite import fit

        settings = set(inspect.signature(fit).parameters)
    return ("losses", "full") if "record" in settings else (None,)


def label(level) -> str:
    return "[as is]" if level is None else f"[{level}]"


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
    from bench_train import SIZES, hand_staged_loop, pipelined, plain_loop

    from pipemare_lite.training.datasets import digits

    torch.set_num_threads(1)
    data = digits()
    pipelined(data, *SIZES[0])  # warm-up: imports, allocator
    for (width, batch), goal in zip(SIZES, (1.5, 1.1)):
        ratios = {level: [] for level in levels()}
        by_hand = []  # the same stages run by hand: the floor the cut alone sets
        for _ in range(repeats):  # the levels alternate with the plain loop
            for level, found in ratios.items():
                found.append(pipelined(data, width, batch, level)
                             / plain_loop(data, width, batch))
            by_hand.append(hand_staged_loop(data, width, batch) / plain_loop(data, width, batch))
        for level, found in ratios.items():
            row(f"fit / plain loop, width {width} {label(level)}", statistics.median(found),
                goal, "x",
                f"median of {repeats} pairs (range {min(found):.2f}-{max(found):.2f})")
        row("  ... the same stages by hand / plain loop", statistics.median(by_hand), goal, "x",
            f"no engine: what the cut alone costs (range {min(by_hand):.2f}-{max(by_hand):.2f})")


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

    def executor_run(stages, level) -> float:  # bench_executor.executor_epoch, in CPU seconds
        executor = LocalExecutor(schedule, stages, loss_fn=nn.functional.cross_entropy,
                                 optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=0.01,
                                                                              momentum=0.9),
                                 **({} if level is None else {"record": level}))
        return cpu_seconds(executor.run, mbs)

    torch.set_num_threads(1)
    P, N, K, samples = 4, 8, 10, 32
    model = mlp(64, 256, 8, 10, seed=0)
    mbs = microbatches(N * K, samples, 64, 10)
    schedule = build_schedule("1f1b", P, N, num_minibatches=K)
    actions = sum(len(r) for r in schedule.ranks)
    chosen = levels()
    for level in chosen:
        executor_run(partition(copy.deepcopy(model), P), level)  # warm-up
    gaps = {level: [] for level in chosen}
    ordered_gaps = {level: [] for level in chosen}
    # what each part of the fullest level adds to the cheapest: one Recording flag on at a
    # time, against the cheapest level in the same repeat (code with recording levels only)
    parts = recording_parts() if "full" in chosen else {}
    part_costs = {name: [] for name in parts}
    for _ in range(repeats):
        hand = cpu_seconds(hand_staged_epoch, partition(copy.deepcopy(model), P), mbs, N, K, 0.01)
        ordered = cpu_seconds(hand_in_schedule_order, schedule, partition(copy.deepcopy(model), P),
                              mbs, 0.01)
        for level in chosen:
            piped = executor_run(partition(copy.deepcopy(model), P), level)
            gaps[level].append((piped - hand) / actions * 1e6)
            ordered_gaps[level].append((piped - ordered) / actions * 1e6)
        if parts:
            cheapest = executor_run(partition(copy.deepcopy(model), P), "losses")
            for name, one_flag in parts.items():
                with_it = executor_run(partition(copy.deepcopy(model), P), one_flag)
                part_costs[name].append((with_it - cheapest) / actions * 1e6)
    for level in chosen:
        goal = 40.0 if level == "full" else 20.0
        row(f"executor overhead per action (1F1B, P=4) {label(level)}",
            statistics.median(gaps[level]), goal, "us",
            f"CPU, median of {repeats} pairs over {actions} actions")
        # the same, against a hand loop in 1F1B's own order: the order's cost left out
        row("  ... against a hand loop in 1F1B's order", statistics.median(ordered_gaps[level]),
            goal, "us", f"CPU, median of {repeats} triples")
    for name, costs in part_costs.items():
        print(f"{f'  [full] = [losses] + ... {name}':50} {statistics.median(costs):10.3f} us "
              f"per action more than [losses] (range {min(costs):.1f} to {max(costs):.1f})",
              flush=True)


def recording_parts() -> dict:
    """``{flag: the cheapest Recording with only that flag on}`` for each flag of
    :class:`~pipemare_lite.engine.recording.Recording` (what ``full`` adds to ``losses``)."""
    from pipemare_lite.engine.recording import RECORDINGS

    cheapest = RECORDINGS["losses"]
    return {f.name: dataclasses.replace(cheapest, **{f.name: True})
            for f in dataclasses.fields(cheapest) if not getattr(cheapest, f.name)}


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
    """Ours / torch.distributed.pipelining per step (``bench_vs_torch_pipelining.py``), our
    executor at the cheapest and the fullest recording level (each level its own job)."""
    import inspect

    from bench_vs_torch_pipelining import CASES, measure

    # the distributed executor has recording levels only on code that has them
    from pipemare_lite.engine.distributed.executor import DistributedExecutor

    dist_levels = (levels() if "record" in inspect.signature(DistributedExecutor).parameters
                   else (None,))
    for name, P, M in CASES:
        for level in dist_levels:
            result = measure(name, P, M, repeats, **({} if level is None else {"record": level}))
            row(f"ours / torch pipelining, {name} P={P} M={M} {label(level)}", result["ratio"],
                1.0, "x", f"median of {repeats} paired steps, range {result['low']:.2f}-"
                f"{result['high']:.2f} ({result['ours_ms']:.1f} vs {result['torch_ms']:.1f} ms)")


def resnet_goal(repeats: int) -> None:
    """CPU ms per update of the experiment's ResNet at P=16 (fit) against a plain loop."""
    import torch
    import torch.nn.functional as F

    from pipemare_lite import fit
    from pipemare_lite.experiments import paper_shape_design as design
    from pipemare_lite.training.data_feed import epoch_order
    from pipemare_lite.training.datasets import microbatches
    from pipemare_lite.training.evaluation import evaluate

    torch.set_num_threads(1)
    setting = design.RESNET
    data = design.load_data(setting)
    batch, N, P = setting.batch_size, setting.num_microbatches, 16
    steps = len(data.x_train) // batch
    lr = setting.lr_grid[2]

    def plain() -> float:  # one epoch, one device, the same updates (one optimizer)
        model = design.build_model(setting, data, 0)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=setting.momentum)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
        order = epoch_order(len(data.x_train), 0, 0)
        start = time.process_time()
        for k in range(steps):
            idx = order[k * batch:(k + 1) * batch]
            for x, y in microbatches(data.x_train[idx], data.y_train[idx], N):
                (F.cross_entropy(model(x), y) / N).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            schedule.step()
        return time.process_time() - start

    def pipelined(method, level) -> float:  # one epoch of fit(), as the experiment trains a row
        model = design.build_model(setting, data, 0)
        start = time.process_time()
        fit(model, data, method=method, num_stages=P, num_microbatches=N, batch_size=batch,
            epochs=1, lr=lr, optimizer=setting.optimizer, momentum=setting.momentum,
            lr_schedule="cosine", eval_every=10 * steps, progress=False,
            **({} if level is None else {"record": level}))
        total = time.process_time() - start
        start = time.process_time()
        evaluate(model, data.x_test, data.y_test)  # fit's one evaluation, left out
        return total - (time.process_time() - start)

    runs = ([("1f1b", None), ("pipemare", None)] if levels() == (None,) else
            [("1f1b", "losses"), ("1f1b", "history"), ("1f1b", "full"), ("pipemare", "history")])
    pipelined(*runs[0])  # warm-up
    plains, seconds = [], {run: [] for run in runs}
    for _ in range(repeats):
        plains.append(plain())
        for run in runs:
            seconds[run].append(pipelined(*run))
    plain_ms = statistics.median(plains) / steps * 1e3
    print(f"{'ResNet P=16: plain loop, CPU ms per update':50} {plain_ms:10.2f} ms "
          f"({statistics.median(plains):.2f} CPU s per {steps}-step epoch)", flush=True)
    for (method, level), found in seconds.items():
        ratios = [s / p for s, p in zip(found, plains)]
        ms = statistics.median(found) / steps * 1e3
        print(f"{f'ResNet P=16: fit {method}, ms per update ' + label(level):50} {ms:10.2f} ms "
              f"({statistics.median(found):.2f} CPU s per epoch; fit / plain "
              f"{statistics.median(ratios):.2f}x, median of {repeats} pairs)", flush=True)


def main(argv: list[str] | None = None) -> None:
    """Print the table (one goal after the other, each as soon as it is measured)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(GOALS),
                        help=f"comma-separated goals to measure (of {', '.join(GOALS)})")
    parser.add_argument("--repeats", type=int, default=None,
                        help="repeats per goal (default: 3 train, 5 executor, 2 schedules, "
                             "15 pipelining steps, 3 resnet)")
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
    if "resnet" in chosen:
        resnet_goal(repeats or 3)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
