"""The executor-overhead benchmark compares the executor with hand loops; the one in the
executor's own order must do the executor's tensor work, or its gap would measure something
else. Checked here: it ends with the executor's weights, bitwise."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
from torch import nn

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.schedules import build_schedule
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import partition

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_executor import hand_in_schedule_order, microbatches  # noqa: E402


def test_hand_loop_in_1f1b_order_ends_with_the_executors_weights_bitwise():
    torch.set_num_threads(1)
    P, N, K = 4, 4, 3
    model = mlp(16, 32, P, 10, seed=0)
    mbs = microbatches(N * K, 8, 16, 10)
    schedule = build_schedule("1f1b", P, N, num_minibatches=K)
    by_hand = partition(copy.deepcopy(model), P)
    hand_in_schedule_order(schedule, by_hand, mbs, 0.01)
    executed = partition(copy.deepcopy(model), P)
    LocalExecutor(schedule, executed, loss_fn=nn.functional.cross_entropy,
                  optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=0.01, momentum=0.9)
                  ).run(mbs)
    for hand_stage, stage in zip(by_hand, executed):
        for p, q in zip(hand_stage.parameters(), stage.parameters(), strict=True):
            assert torch.equal(p, q)
    initial = partition(copy.deepcopy(model), P)
    assert not torch.equal(next(initial[0].parameters()), next(executed[0].parameters()))
