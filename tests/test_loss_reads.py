"""No host sync per microbatch (issue 44, item 4): the last stage keeps each loss as a
tensor and the executor reads a run's losses to the host at once, at its end: one
``tolist()`` per run (one step in fit), no ``item()`` per microbatch; the values are those
``item()`` gives, bitwise."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from pipemare_lite.engine.local import LocalExecutor
from pipemare_lite.schedules.registry import build_schedule
from tests.references import gradient_accumulation
from tests.test_executor_local import blocks, data

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


def test_a_runs_losses_are_read_once_at_its_end(monkeypatch):
    steps, n = 3, 4
    stages, mbs = blocks(2), data(steps * n)

    def sgd(params):
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)

    plain = nn.Sequential(*copy.deepcopy(stages))
    want = gradient_accumulation(plain, sgd(plain.parameters()), nn.functional.cross_entropy,
                                 mbs, n, steps)  # item() per microbatch, plainly
    executor = LocalExecutor(build_schedule("1f1b", 2, n, num_minibatches=steps), stages,
                             loss_fn=nn.functional.cross_entropy, optimizer_factory=sgd,
                             record="losses")
    reads = {"item": 0, "tolist": 0}
    for name in reads:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            reads[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    got = []
    for step in range(steps):
        got += executor.run(mbs, stop_after_updates=step + 1).losses
    assert reads == {"item": 0, "tolist": steps}
    assert got == want
