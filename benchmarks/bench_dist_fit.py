"""``fit(executor="dist")`` against the local executor and PyTorch's pipelining runtime
(issue 44): training steps per second, printed as ratios, at P = 2 and 4.

The same MLP (two Linear+ReLU layers per stage, width ``WIDTH``), the same 1F1B schedule
(N = 4 microbatches of 32 samples), SGD, CPU, one thread per process, ``STEPS`` steps:

- local: ``fit(executor="local", record="losses")`` on rank 0 while the others wait;
- dist: ``fit(executor="dist", record="losses")``, one process per rank (gloo on
  127.0.0.1, a free port: :func:`~pipemare_lite.engine.distributed.launch.launch`);
- torch: ``torch.distributed.pipelining``'s ``Schedule1F1B`` with one ``PipelineStage`` per
  rank and an SGD step per training step, in the same processes right before ours.

Each is run ``--rounds`` times, the three alternating in the same processes (torch's
first in even rounds, last in odd ones, so neither always follows the other), and the
medians are printed. Steps per second: ``steps / history.wall_seconds`` for fit (set-up
excluded; its first step, with the shape probe and the one barrier, and the final gather
included), ``steps / seconds`` between two barriers for torch's (its first step, where it
infers shapes and builds its buffers, included alike). The ratios are also taken round by
round (each pair ran back to back, so a machine that slows down between rounds moves
both): their median and range are printed too. Every process is ended by ``launch()``
(it joins them). No assertions: a shared CPU is noisy, read the numbers. The goal of issue
44: dist / torch >= 1 / 1.1 (dist within 1.1x of torch's time).

Run: ``nice -n 10 .venv/bin/python benchmarks/bench_dist_fit.py [--steps 60]``
"""

from __future__ import annotations

import argparse
import time
from statistics import median

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from pipemare_lite.engine.distributed.launch import launch
from pipemare_lite.training.loop import fit

WIDTH, N, MICRO = 128, 4, 32  # features, microbatches per step, samples per microbatch


def model(P: int) -> nn.Sequential:
    """2P Linear+ReLU pairs (two per stage) and a head on the last stage, seeded."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(2 * P):
        layers += [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU())]
    layers[-1] = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10))
    return nn.Sequential(*layers)


def data(steps: int) -> TensorDataset:
    """``steps`` minibatches of N * MICRO samples, seeded."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(steps * N * MICRO, WIDTH, generator=g)
    return TensorDataset(x, torch.randint(0, 10, (len(x),), generator=g))


def settings(P: int, steps: int) -> dict:
    """fit()'s settings, one epoch of ``steps`` steps, no evaluation data."""
    return dict(method="1f1b", num_stages=P, num_microbatches=N, batch_size=N * MICRO,
                epochs=1, lr=0.01, record="losses", progress=False)


def torch_steps_per_second(info, P: int, steps: int) -> float:
    """PyTorch's Schedule1F1B on this rank's stage, ``steps`` training steps."""
    import torch.distributed as dist
    from torch.distributed import pipelining

    from pipemare_lite.training.partition import partition

    stage_module = partition(model(P), P)[info.rank]
    stage = pipelining.PipelineStage(stage_module, info.rank, P, info.device)
    runtime = pipelining.Schedule1F1B(stage, N, loss_fn=F.cross_entropy)
    optimizer = torch.optim.SGD(stage_module.parameters(), lr=0.01)
    feed = data(steps).tensors
    batch = N * MICRO

    def step(k: int) -> None:
        x, y = feed[0][k * batch:(k + 1) * batch], feed[1][k * batch:(k + 1) * batch]
        if info.rank == 0:
            runtime.step(x)
        elif info.rank == P - 1:
            runtime.step(target=y, losses=[])
        else:
            runtime.step()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    dist.barrier()
    start = time.perf_counter()
    for k in range(steps):  # the first builds torch's buffers (fit's first probes shapes)
        step(k)
    dist.barrier()
    return steps / (time.perf_counter() - start)


def three_runtimes(info, P: int, steps: int, rounds: int) -> dict:
    """Process body: ``rounds`` times torch's runtime, ``fit(executor="dist")`` and (rank 0
    alone, the others waiting in a barrier) ``fit(executor="local")``, alternating so that
    all three see the same machine load; steps per second of each round."""
    import torch.distributed as dist

    rates: dict = {"torch": [], "dist": [], "local": []}
    for k in range(rounds):
        if k % 2 == 0:
            rates["torch"].append(torch_steps_per_second(info, P, steps))
        history = fit(model(P), data(steps), executor="dist", **settings(P, steps))
        rates["dist"].append(steps / history.wall_seconds)
        if k % 2 == 1:
            rates["torch"].append(torch_steps_per_second(info, P, steps))
        if info.rank == 0:
            local = fit(model(P), data(steps), executor="local", **settings(P, steps))
            rates["local"].append(steps / local.wall_seconds)
        dist.barrier()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5, help="medians of this many runs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"1F1B, N={N} x {MICRO} samples, width {WIDTH}, {args.steps} steps, "
          "record='losses', gloo on 127.0.0.1, 1 thread per process")
    print(f"{'P':>2} {'local st/s':>10} {'dist st/s':>10} {'torch st/s':>10} "
          f"{'dist/local':>10} {'dist/torch':>10}   dist/torch round by round: median (range)")
    for P in (2, 4):
        ranks = launch(three_runtimes, P, args=(P, args.steps, args.rounds), timeout=300)
        local_rate = median(ranks[0]["local"])
        dist_rate = median(ranks[0]["dist"])  # every rank's fit() times the same steps
        torch_rates = [min(r["torch"][k] for r in ranks) for k in range(args.rounds)]
        torch_rate = median(torch_rates)
        paired = [d / t for d, t in zip(ranks[0]["dist"], torch_rates)]
        print(f"{P:>2} {local_rate:>10.1f} {dist_rate:>10.1f} {torch_rate:>10.1f} "
              f"{dist_rate / local_rate:>10.2f} {dist_rate / torch_rate:>10.2f}   "
              f"{median(paired):.2f} ({min(paired):.2f}-{max(paired):.2f})")


if __name__ == "__main__":
    main()
