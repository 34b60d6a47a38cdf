"""How much does the pipeline engine cost? fit() with a sync method vs a plain loop.

Both train the same MLP on the digits for the same epochs, batch size and microbatches:
the plain loop runs the whole model on one device with gradient accumulation; fit() cuts
it into P stages and runs the 1F1B schedule on the local executor (which adds schedule
bookkeeping, saved-tensor hooks and per-action timing). Goal: fit() <= 1.5x the plain loop
per epoch. Prints the times and the ratio; asserts nothing (timings are not tests).

    .venv/bin/python benchmarks/bench_train.py
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from pipemare_lite.datasets import digits, microbatches
from pipemare_lite.models import mlp
from pipemare_lite.train import epoch_order, fit

EPOCHS, BATCH, N, P, LR = 3, 64, 4, 4, 0.05


def plain_loop(data) -> float:
    """Seconds per epoch of one-device gradient accumulation over the same minibatches."""
    model = mlp(64, 128, P, 10, seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    steps = len(data.x_train) // BATCH
    start = time.perf_counter()
    for epoch in range(EPOCHS):
        order = epoch_order(len(data.x_train), 0, epoch)
        for k in range(steps):
            idx = order[k * BATCH : (k + 1) * BATCH]
            for x, y in microbatches(data.x_train[idx], data.y_train[idx], N):
                (F.cross_entropy(model(x), y) / N).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    return (time.perf_counter() - start) / EPOCHS


def pipelined(data) -> float:
    """Seconds per epoch of fit() with 1F1B (training only: evaluation time subtracted)."""
    model = mlp(64, 128, P, 10, seed=0)
    start = time.perf_counter()
    fit(
        model,
        data,
        method="1f1b",
        num_stages=P,
        num_microbatches=N,
        batch_size=BATCH,
        epochs=EPOCHS,
        lr=LR,
        progress=False,
    )
    total = time.perf_counter() - start
    from pipemare_lite.train import evaluate

    eval_start = time.perf_counter()
    evaluate(model, data.x_test, data.y_test)
    return (total - EPOCHS * (time.perf_counter() - eval_start)) / EPOCHS


def main() -> None:
    torch.set_num_threads(1)
    data = digits()
    pipelined(data)  # warm up imports and allocator
    plain = min(plain_loop(data) for _ in range(3))
    piped = min(pipelined(data) for _ in range(3))
    print(f"mlp depth {P}, width 128, batch {BATCH}, N={N}, P={P}, {EPOCHS} epochs, 1 thread")
    print(f"plain loop     : {plain * 1e3:8.1f} ms/epoch")
    print(f"fit(1f1b)      : {piped * 1e3:8.1f} ms/epoch")
    print(f"ratio          : {piped / plain:8.2f}x  (goal <= 1.5x)")


if __name__ == "__main__":
    main()
