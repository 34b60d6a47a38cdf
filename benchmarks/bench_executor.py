"""Speed of the local executor (chapter 10): prints ratios, asserts nothing.

1. Synchronous 1F1B on the local executor vs plain single-device training of the same
   model on the same microbatches (gradient accumulation): time per epoch and the ratio
   (goal <= 1.5x). Beside them, the same stages driven by a hand-written loop (no
   executor: detach between stages, one backward per stage, one optimizer per stage):
   what cutting the model into stages costs by itself. The gap between that loop and the
   executor, divided by the number of actions, is the executor's own cost per action. A
   second hand loop runs the stages in the executor's own 1F1B order (microbatches in
   flight, as the schedule requires): the gap to it leaves out what the order itself costs.
2. Asynchronous, fine-grained (one MLP layer per stage, P = 16): microbatches per second.

Run: ``.venv/bin/python benchmarks/bench_executor.py`` (CPU, one thread, fixed seeds). Plain
and executor epochs alternate and the ratio is the median over back-to-back pairs, because a
shared CPU is noisy.
"""

from __future__ import annotations

import copy
import statistics
import time

import torch
from torch import nn

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import MethodOptions
from pipemare_lite.schedules import build_schedule
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import partition


def microbatches(count: int, samples: int, features: int, classes: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(samples, features, generator=g),
             torch.randint(0, classes, (samples,), generator=g)) for _ in range(count)]


def plain_epoch(model, mbs, N, K, lr):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    start = time.perf_counter()
    for k in range(K):
        for x, t in mbs[k * N:(k + 1) * N]:
            (nn.functional.cross_entropy(model(x), t) / N).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def staged_forward_backward(stages, x, t, N) -> None:
    """One microbatch through the stages by hand: detached between stages, then one
    backward per stage from the last (its loss / N) to the first, as the pipeline's numbers
    require."""
    inputs, outputs = [], []
    for i, stage in enumerate(stages):
        x = x.detach().requires_grad_(i > 0)
        inputs.append(x)
        x = stage(x)
        outputs.append(x)
    torch.autograd.backward(nn.functional.cross_entropy(x, t) / N)
    for i in range(len(stages) - 2, -1, -1):
        torch.autograd.backward(outputs[i], inputs[i + 1].grad)


def hand_staged_epoch(stages, mbs, N, K, lr):
    """The stages run one after the other by hand (:func:`staged_forward_backward`)."""
    optimizers = [torch.optim.SGD(s.parameters(), lr=lr, momentum=0.9) for s in stages]
    start = time.perf_counter()
    for k in range(K):
        for x, t in mbs[k * N:(k + 1) * N]:
            staged_forward_backward(stages, x, t, N)
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def hand_in_schedule_order(schedule, stages, mbs, lr):
    """The same stages run by hand in the local executor's own order (round-robin over the
    ranks, one ready F, B or U each per round): the executor's tensor work and order, without
    its machinery (hooks, versions, interpreter, recorder). One stage per rank."""
    optimizers = [torch.optim.SGD(s.parameters(), lr=lr, momentum=0.9) for s in stages]
    last, N = len(stages) - 1, schedule.num_microbatches
    rows, position = schedule.ranks, [0] * len(schedule.ranks)
    inputs, grads, graphs = {}, {}, {}  # (stage, microbatch) -> received / in flight
    start = time.perf_counter()
    while any(p < len(row) for p, row in zip(position, rows)):
        for rank, row in enumerate(rows):
            if position[rank] == len(row):
                continue
            a = row[position[rank]]
            s, m = a.stage, a.index
            if (a.kind == "F" and s > 0 and (s, m) not in inputs) or (
                    a.kind == "B" and s < last and (s, m) not in grads):
                continue  # its input has not arrived: the rank waits this round
            position[rank] += 1
            if a.kind == "F":
                x = mbs[m][0] if s == 0 else inputs.pop((s, m)).requires_grad_()
                y = stages[s](x)
                if s == last:
                    y = nn.functional.cross_entropy(y, mbs[m][1]) / N
                else:
                    inputs[(s + 1, m)] = y.detach()
                graphs[(s, m)] = (x, y)
            elif a.kind == "B":
                x, y = graphs.pop((s, m))
                torch.autograd.backward(y, grads.pop((s, m), None))
                if s > 0:
                    grads[(s - 1, m)] = x.grad
            else:
                optimizers[s].step()
                optimizers[s].zero_grad(set_to_none=True)
    return time.perf_counter() - start


def executor_epoch(schedule, stages, mbs, lr, options=None):
    executor = LocalExecutor(schedule, stages, loss_fn=nn.functional.cross_entropy,
                             optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=lr,
                                                                          momentum=0.9),
                             method_options=options)
    start = time.perf_counter()
    executor.run(mbs)
    return time.perf_counter() - start


def best_of(repeats, fn):
    return min(fn() for _ in range(repeats))


def main() -> None:
    torch.set_num_threads(1)
    features, hidden, classes = 64, 256, 10

    P, N, K, samples = 4, 8, 10, 32
    model = mlp(features, hidden, 8, classes, seed=0)
    mbs = microbatches(N * K, samples, features, classes)
    schedule = build_schedule("1f1b", P, N, num_minibatches=K)
    plain_epoch(copy.deepcopy(model), mbs, N, K, 0.01)  # warm-up (lazy init)
    executor_epoch(schedule, partition(copy.deepcopy(model), P), mbs, 0.01)
    plain, piped, hand, ordered = [], [], [], []
    for _ in range(7):  # alternating, so that each triple sees about the same CPU load
        plain.append(plain_epoch(copy.deepcopy(model), mbs, N, K, 0.01))
        piped.append(executor_epoch(schedule, partition(copy.deepcopy(model), P), mbs, 0.01))
        hand.append(hand_staged_epoch(partition(copy.deepcopy(model), P), mbs, N, K, 0.01))
        ordered.append(hand_in_schedule_order(schedule, partition(copy.deepcopy(model), P), mbs,
                                              0.01))
    ratios = sorted(e / p for p, e in zip(plain, piped))
    hand_ratios = sorted(h / p for p, h in zip(plain, hand))
    actions = sum(len(row) for row in schedule.ranks)
    per_action = statistics.median((e - h) / actions for e, h in zip(piped, hand))
    per_action_ordered = statistics.median((e - o) / actions for e, o in zip(piped, ordered))
    print(f"sync 1F1B, P={P}, N={N}, K={K}, MLP 8x{hidden}, {samples} samples/microbatch")
    print(f"  plain single-device epoch : {min(plain) * 1e3:8.1f} ms (best of {len(plain)})")
    print(f"  stages by hand, no engine : {min(hand) * 1e3:8.1f} ms (best of {len(hand)})")
    print(f"  by hand, in 1F1B's order  : {min(ordered) * 1e3:8.1f} ms (best of {len(ordered)})")
    print(f"  local executor epoch      : {min(piped) * 1e3:8.1f} ms (best of {len(piped)})")
    print(f"  ratio executor / plain    : {statistics.median(ratios):8.2f}x median of "
          f"back-to-back pairs (range {ratios[0]:.2f}-{ratios[-1]:.2f}; goal <= 1.5x)")
    print(f"  ratio by hand / plain     : {statistics.median(hand_ratios):8.2f}x (the floor)")
    print(f"  executor cost per action  : {per_action * 1e6:8.1f} us median over "
          f"{actions} actions")
    print(f"  ... against 1F1B's order  : {per_action_ordered * 1e6:8.1f} us (the order's own "
          "cost left out)")

    P, N, K, samples = 16, 4, 10, 16
    model = mlp(features, 64, P, classes, seed=1)
    mbs = microbatches(N * K, samples, features, classes, seed=1)
    schedule = build_schedule("async", P, N, num_minibatches=K)
    pipemare = MethodOptions(t1=True, t2=True)
    for label, options in [("async", None), ("pipemare T1+T2", pipemare)]:
        seconds = best_of(3, lambda options=options: executor_epoch(
            schedule, partition(copy.deepcopy(model), P), mbs, 0.01, options))
        print(f"{label}, P={P} (one layer per stage), N={N}, K={K}: "
              f"{N * K / seconds:8.1f} microbatches/s")


if __name__ == "__main__":
    main()
