"""Our distributed GPipe and 1F1B against PyTorch's own ``torch.distributed.pipelining``.

Same model, same data, same seed, one thread per process, gloo. Two scalings:

- ``loss_scaling="ours"``: PyTorch is told to do what our StageWorker does (its loss_fn
  returns ``loss / N`` and ``scale_grads=False``): losses (ours divided by N) and gradients
  agree bitwise, for any N;
- ``loss_scaling="torch"``: PyTorch's defaults (plain loss, gradients summed then divided
  by N): losses agree bitwise; gradients agree bitwise when N is a power of two (dividing
  by 2^k is exact) and to rounding otherwise.

The data reach both runtimes as views of one concatenated batch (PyTorch's
``tensor_split``): the matmul kernels round differently on such unaligned views than on
separately allocated tensors, so feeding ours other tensors would differ in the last bits.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pipemare_lite.engine.distributed.launch import launch
from pipemare_lite.interop.torch_pipelining import ComparisonJob, compare_with_torch_pipelining
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import PartitionedModel

pytestmark = [pytest.mark.dist, pytest.mark.slow]

CASES = [  # (schedule, P, N, loss scaling)
    ("gpipe", 2, 3, "ours"),
    ("1f1b", 3, 3, "ours"),
    ("1f1b", 2, 4, "torch"),
    ("gpipe", 3, 3, "torch"),
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: "-".join(map(str, c)))
def case(request):
    name, P, N, scaling = request.param
    stages = PartitionedModel(mlp, P, kwargs=(("in_features", 6), ("hidden", 8), ("depth", P),
                                              ("out_features", 5), ("seed", 1)))
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(3, 6, generator=g), torch.randint(0, 5, (3,), generator=g))
            for _ in range(N)]
    job = ComparisonJob(name, N, stages, data, F.cross_entropy, scaling)
    return request.param, launch(compare_with_torch_pipelining, P, args=(job,), timeout=120)


def test_losses_agree_bitwise(case):
    (name, P, N, scaling), results = case
    last = results[-1]
    assert len(last["torch_losses"]) == len(last["our_losses"]) == N
    ours = [float(torch.tensor(v) / N) for v in last["our_losses"]] if scaling == "ours" \
        else last["our_losses"]
    assert ours == last["torch_losses"]


def test_gradients_agree(case):
    (name, P, N, scaling), results = case
    bitwise = scaling == "ours" or (N & (N - 1)) == 0  # N a power of two
    for r in results:
        assert len(r["torch_grads"]) == len(r["our_grads"]) > 0
        for theirs, ours in zip(r["torch_grads"], r["our_grads"]):
            if bitwise:
                assert torch.equal(theirs, ours), f"rank {r['rank']}"
            else:  # sum-then-divide by 3 vs divide-then-sum: equal up to rounding
                torch.testing.assert_close(theirs, ours, rtol=1e-6, atol=1e-7)
