"""Flat memory of ``fit(executor="dist")`` (issue 44): peak RSS of a run 10x longer.

Two jobs of two gloo ranks (127.0.0.1, a free port, every process ended by ``launch()``),
each a fresh pair of processes: ``fit(executor="dist")`` of a small MLP with 1F1B (and
with the asynchronous ``pipemare``), ``EPOCHS`` epochs and then 10 times as many, on the
same data, evaluated after every epoch (the gathers included). Each rank reports its peak
resident set (``VmHWM`` of ``/proc/self/status``) and its resident set when training
started; the script prints both runs' peaks per rank and their ratio (the goal: within
5 %). Linux only. No assertions: read the numbers.

Run: ``nice -n 10 .venv/bin/python benchmarks/bench_dist_memory.py``
"""

from __future__ import annotations

import torch

from pipemare_lite.engine.distributed.launch import launch

EPOCHS = 4  # the short run; the long one has 10 times as many


def _kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (VmRSS, VmHWM)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def train(info, method: str, epochs: int) -> dict:
    """Process body: one fit() run; this rank's resident set at the start and its peak."""
    from pipemare_lite.training.datasets import Dataset, digits
    from pipemare_lite.training.loop import fit
    from pipemare_lite.training.models import mlp

    d = digits(seed=0)
    data = Dataset("digits-small", d.x_train[:512], d.y_train[:512], d.x_test[:128],
                   d.y_test[:128], 10, d.input_shape, d.provenance)
    start = _kib("VmRSS")
    history = fit(mlp(64, 64, 4, 10, seed=0), data, method=method, num_stages=info.world_size,
                  num_microbatches=4, batch_size=32, epochs=epochs, lr=0.05,
                  executor="dist", progress=False)
    return {"start_kib": start, "peak_kib": _kib("VmHWM"), "steps": len(history.loss)}


def main() -> None:
    torch.set_num_threads(1)
    print(f"fit(executor='dist'), P=2, N=4, 16 steps per epoch; {EPOCHS} epochs vs "
          f"{10 * EPOCHS}")
    print(f"{'method':>9} {'rank':>4} {'steps':>11} {'peak MiB short':>14} "
          f"{'peak MiB long':>13} {'long/short':>10}")
    for method in ("1f1b", "pipemare"):
        short = launch(train, 2, args=(method, EPOCHS), timeout=300)
        long = launch(train, 2, args=(method, 10 * EPOCHS), timeout=300)
        for rank, (a, b) in enumerate(zip(short, long)):
            print(f"{method:>9} {rank:>4} {a['steps']:>5}/{b['steps']:>5} "
                  f"{a['peak_kib'] / 1024:>14.1f} {b['peak_kib'] / 1024:>13.1f} "
                  f"{b['peak_kib'] / a['peak_kib']:>10.3f}")


if __name__ == "__main__":
    main()
