"""Flat memory of ``fit(executor="dist")`` (issue 44): peak RSS of a run 10x longer.

Two jobs of two gloo ranks (127.0.0.1, a free port, every process ended by ``launch()``),
each a fresh pair of processes: ``fit(executor="dist")`` of a small MLP with 1F1B (and
with the asynchronous ``pipemare``), ``--epochs`` epochs and then 10 times as many, on the
same data, evaluated after every epoch (the gathers included). Each rank reports its peak
resident set (``VmHWM`` of ``/proc/self/status``) and its resident set when training
started; the script prints both runs' peaks per rank and their ratio (the goal: within
5 %). Linux only. No assertions: read the numbers.

``--checkpoints``: the same runs saving a checkpoint every epoch (the executor then keeps
what a checkpoint needs: :mod:`pipemare_lite.engine.distributed.checkpoint`). Also printed:
the first checkpoint's bytes (saved after the same step in both runs: what the planned
length adds to it) and the last one's (it holds the history so far, which grows with the
steps run), and the time a resume at a run's end takes to enter the schedule at its cut (a
rolling plan started there, every rank's row walk): it reads nothing before the cut, so the
time does not grow with the run.

Run: ``nice -n 10 .venv/bin/python benchmarks/bench_dist_memory.py [--checkpoints]
[--epochs 4]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from pipemare_lite.engine.distributed.launch import launch

EPOCHS = 4  # the short run; the long one has 10 times as many
STEPS_PER_EPOCH = 16  # 512 samples, batches of 32


def _kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (VmRSS, VmHWM)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def train(info, method: str, epochs: int, folder: str | None = None) -> dict:
    """Process body: one fit() run; this rank's resident set at the start and its peak;
    with ``folder``, checkpoints every epoch there and their sizes (first and last)."""
    from pipemare_lite.training.datasets import Dataset, digits
    from pipemare_lite.training.loop import fit
    from pipemare_lite.training.models import mlp

    d = digits(seed=0)
    data = Dataset("digits-small", d.x_train[:512], d.y_train[:512], d.x_test[:128],
                   d.y_test[:128], 10, d.input_shape, d.provenance)
    saving, first = {}, []
    if folder is not None:
        path = os.path.join(folder, f"{method}-{epochs}.pt")

        def first_size(step, history):  # step 16's checkpoint, read one step later
            if step == STEPS_PER_EPOCH + 1 and info.rank == 0:
                first.append(os.path.getsize(path))

        saving = dict(checkpoint_path=path, checkpoint_every=STEPS_PER_EPOCH,
                      on_step=first_size)
    start = _kib("VmRSS")
    history = fit(mlp(64, 64, 4, 10, seed=0), data, method=method, num_stages=info.world_size,
                  num_microbatches=4, batch_size=32, epochs=epochs, lr=0.05,
                  executor="dist", progress=False, **saving)
    out = {"start_kib": start, "peak_kib": _kib("VmHWM"), "steps": len(history.loss)}
    if folder is not None and info.rank == 0:
        out.update(first_bytes=first[0], last_bytes=os.path.getsize(saving["checkpoint_path"]))
    return out


def resume_walk_seconds(method: str, epochs: int) -> float:
    """Seconds a resume at the end of an ``epochs`` run takes to enter the schedule at its
    cut: rank 0's RollingPlan started there (planned through) and every rank's RowWalk (the
    PeerProgress of a checkpointing executor)."""
    from pipemare_lite.engine.distributed.checkpoint import RowWalk
    from pipemare_lite.methods import method_options
    from pipemare_lite.methods.registry import build_method_schedule
    from pipemare_lite.schedules.comm_plan import RollingPlan
    from pipemare_lite.schedules.repeat import long_schedule

    options = method_options(method)
    schedule = long_schedule(lambda k: build_method_schedule(
        method, 2, 4, num_minibatches=k, options=options), epochs * STEPS_PER_EPOCH,
        warmup=options.warmup)
    cut = [len(row) for row in schedule.ranks]
    began = time.perf_counter()
    RollingPlan(schedule, 0, start=cut).planned(0, 1, 1)
    for rank, position in enumerate(cut):
        RowWalk(schedule, rank, position)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", action="store_true",
                        help="save a checkpoint every epoch (and print their sizes)")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="the short run's epochs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    short_epochs = args.epochs
    print(f"fit(executor='dist'), P=2, N=4, {STEPS_PER_EPOCH} steps per epoch; {short_epochs} "
          f"epochs vs {10 * short_epochs}"
          + ("; a checkpoint every epoch" if args.checkpoints else ""))
    print(f"{'method':>9} {'rank':>4} {'steps':>11} {'peak MiB short':>14} "
          f"{'peak MiB long':>13} {'long/short':>10}")
    with tempfile.TemporaryDirectory() as folder:
        for method in ("1f1b", "pipemare"):
            where = (folder,) if args.checkpoints else ()
            short = launch(train, 2, args=(method, short_epochs, *where), timeout=600)
            long = launch(train, 2, args=(method, 10 * short_epochs, *where), timeout=600)
            for rank, (a, b) in enumerate(zip(short, long)):
                print(f"{method:>9} {rank:>4} {a['steps']:>5}/{b['steps']:>5} "
                      f"{a['peak_kib'] / 1024:>14.1f} {b['peak_kib'] / 1024:>13.1f} "
                      f"{b['peak_kib'] / a['peak_kib']:>10.3f}")
            if args.checkpoints:
                a, b = short[0], long[0]
                print(f"{method:>9} checkpoint bytes: first {a['first_bytes']}/"
                      f"{b['first_bytes']} (long/short {b['first_bytes'] / a['first_bytes']:.3f})"
                      f", last {a['last_bytes']}/{b['last_bytes']} "
                      f"(long/short {b['last_bytes'] / a['last_bytes']:.3f})")
                walks = [resume_walk_seconds(method, e) for e in (short_epochs, 10 * short_epochs)]
                print(f"{method:>9} a resume at the end enters the schedule at its cut in "
                      f"{walks[0]:.2f} s / {walks[1]:.2f} s")


if __name__ == "__main__":
    main()
