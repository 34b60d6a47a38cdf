"""No host sync per microbatch (issue 44): the last stage keeps its losses as tensors and
reads them to the host once per run (one ``tolist()`` per step under ``fit()``, whatever
the number of microbatches); nothing else on the hot path reads a tensor's value at the
``losses`` recording level. Every host read of a tensor (``item``, ``tolist``, ``float``,
``int``, ``bool``) is counted with torch.Tensor patched."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from pipemare_lite.training.loop import fit

pytestmark = pytest.mark.usefixtures("one_thread")

READS = ("item", "tolist", "__float__", "__int__", "__bool__")


def _count_reads(monkeypatch) -> dict:
    counts = dict.fromkeys(READS, 0)
    for name in READS:
        real = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _real=real, **kwargs):
            counts[_name] += 1
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


@pytest.mark.parametrize("method", ["1f1b", "pipemare"])
@pytest.mark.parametrize("num_microbatches", [2, 8])
def test_one_host_read_per_step_at_the_losses_level(monkeypatch, method, num_microbatches):
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(96, 6, generator=g), torch.randn(96, 1, generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
    counts = _count_reads(monkeypatch)
    history = fit(model, TensorDataset(x, y), method=method, num_stages=2,
                  num_microbatches=num_microbatches, batch_size=16, epochs=1, lr=0.01,
                  loss_fn=F.mse_loss, record="losses", progress=False)
    monkeypatch.undo()
    steps = len(history.loss)
    assert steps == 6
    assert counts == {**dict.fromkeys(READS, 0), "tolist": steps}, counts
