"""How much does the pipeline engine cost? fit() with a sync method vs a plain loop.

Both train the same MLP on the digits for the same epochs, batch size and microbatches:
the plain loop runs the whole model on one device with gradient accumulation; fit() cuts
it into P stages and runs the 1F1B schedule on the local executor (which adds schedule
bookkeeping, saved-tensor hooks and per-action timing). Goal: fit() <= 1.5x the plain loop
per epoch. Beside them, the same stages run by hand in stage order (no engine): the part of
the ratio that cutting the model into stages costs by itself. Prints the times and the
ratio; asserts nothing (timings are not tests). Times are CPU seconds of this process
(``time.process_time``, one torch thread), so a busy machine shared with other jobs
disturbs them less than wall-clock time.

    .venv/bin/python benchmarks/bench_train.py
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from bench_executor import staged_forward_backward

from pipemare_lite import fit
from pipemare_lite.training.data_feed import epoch_order
from pipemare_lite.training.datasets import digits, microbatches
from pipemare_lite.training.evaluation import evaluate
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import partition

EPOCHS, N, P, LR = 3, 4, 4, 0.05
#: (hidden width, batch size): a small model where per-action overhead dominates, and a
#: larger one where the arithmetic does.
SIZES = ((128, 64), (1024, 256))


def steps_of(data, batch: int):
    """Each step's microbatches, epoch after epoch, in fit()'s order of the samples."""
    steps = len(data.x_train) // batch
    for epoch in range(EPOCHS):
        order = epoch_order(len(data.x_train), 0, epoch)
        for k in range(steps):
            idx = order[k * batch : (k + 1) * batch]
            yield microbatches(data.x_train[idx], data.y_train[idx], N)


def plain_loop(data, width: int, batch: int) -> float:
    """Seconds per epoch of one-device gradient accumulation over the same minibatches."""
    model = mlp(64, width, P, 10, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    start = time.process_time()
    for step in steps_of(data, batch):
        for x, y in step:
            (F.cross_entropy(model(x), y) / N).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (time.process_time() - start) / EPOCHS


def hand_staged_loop(data, width: int, batch: int) -> float:
    """Seconds per epoch of the same stages as fit() cuts, run by hand in stage order on the
    same minibatches (``bench_executor.staged_forward_backward``, one optimizer per stage):
    what cutting the model into stages costs by itself, without the engine, the floor under
    fit() / plain loop."""
    stages = partition(mlp(64, width, P, 10, seed=0), P)
    optimizers = [torch.optim.SGD(s.parameters(), lr=LR) for s in stages]
    start = time.process_time()
    for step in steps_of(data, batch):
        for x, y in step:
            staged_forward_backward(stages, x, y, N)
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return (time.process_time() - start) / EPOCHS


def pipelined(data, width: int, batch: int, record: str | None = None) -> float:
    """Seconds per epoch of fit() with 1F1B (training only: evaluation time subtracted);
    ``record``: fit's recording level (None: its default)."""
    model = mlp(64, width, P, 10, seed=0)
    start = time.process_time()
    fit(
        model,
        data,
        method="1f1b",
        num_stages=P,
        num_microbatches=N,
        batch_size=batch,
        epochs=EPOCHS,
        lr=LR,
        progress=False,
        **({} if record is None else {"record": record}),
    )
    total = time.process_time() - start
    eval_start = time.process_time()
    evaluate(model, data.x_test, data.y_test)
    return (total - EPOCHS * (time.process_time() - eval_start)) / EPOCHS


def main() -> None:
    """Time both loops at each size and print the ratios."""
    torch.set_num_threads(1)
    data = digits()
    pipelined(data, *SIZES[0])  # warm up imports and allocator
    print(f"mlp depth {P}, N={N}, P={P}, {EPOCHS} epochs of digits, 1 thread, best of 3")
    for width, batch in SIZES:
        plain = min(plain_loop(data, width, batch) for _ in range(3))
        hand = min(hand_staged_loop(data, width, batch) for _ in range(3))
        piped = min(pipelined(data, width, batch) for _ in range(3))
        print(
            f"width {width:5d}, batch {batch:4d}: plain {plain * 1e3:8.1f} ms/epoch, "
            f"stages by hand {hand * 1e3:8.1f} ({hand / plain:4.2f}x), "
            f"fit(1f1b) {piped * 1e3:8.1f} ms/epoch, ratio {piped / plain:5.2f}x "
            "(goal <= 1.5x)"
        )


if __name__ == "__main__":
    main()
