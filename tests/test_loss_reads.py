"""No host sync per microbatch (issue 44, item 4): the last stage keeps each loss as a
tensor and the executor reads a run's losses to the host at once, at its end: one
``tolist()`` per run (one step in fit), no ``item()`` per microbatch; the values are those
``item()`` gives, bitwise. Under ``fit(record="losses")`` that read is the only host read
of a tensor (``item``, ``tolist``, ``float``, ``int``, ``bool``), whatever N."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from pipemare_lite.engine.local import LocalExecutor
from pipemare_lite.schedules.registry import build_schedule
from pipemare_lite.training.loop import fit
from tests.references import gradient_accumulation
from tests.test_executor_local import blocks, data

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


def _count_reads(monkeypatch, names) -> dict:
    """Count every call of the torch.Tensor methods ``names`` (host reads of a value)."""
    reads = dict.fromkeys(names, 0)
    for name in names:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            reads[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return reads


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
    reads = _count_reads(monkeypatch, ("item", "tolist"))
    got = []
    for step in range(steps):
        got += executor.run(mbs, stop_after_updates=step + 1).losses
    assert reads == {"item": 0, "tolist": steps}
    assert got == want


HOST_READS = ("item", "tolist", "__float__", "__int__", "__bool__")


@pytest.mark.parametrize("method", ["1f1b", "pipemare"])
@pytest.mark.parametrize("num_microbatches", [2, 8])
def test_fit_reads_one_value_per_step_at_the_losses_level(monkeypatch, method,
                                                          num_microbatches):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 6, generator=g), torch.randn(96, 1, generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    reads = _count_reads(monkeypatch, HOST_READS)
    history = fit(model, TensorDataset(x, y), method=method, num_stages=2,
                  num_microbatches=num_microbatches, batch_size=16, epochs=1, lr=0.01,
                  loss_fn=F.mse_loss, record="losses", progress=False)
    monkeypatch.undo()
    assert len(history.loss) == 6
    assert reads == {**dict.fromkeys(HOST_READS, 0), "tolist": 6}, reads
