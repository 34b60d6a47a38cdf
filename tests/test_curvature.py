"""Per-stage sharpness (chapter 07) against the Hessian written out in full."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from pipemare_lite.training.curvature import power_iteration, stage_sharpness
from pipemare_lite.training.partition import partition


def _tiny_model():
    torch.manual_seed(3)
    return nn.Sequential(
        nn.Sequential(nn.Linear(3, 4), nn.Tanh()),
        nn.Identity(),  # a stage without parameters
        nn.Sequential(nn.Linear(4, 4), nn.Tanh()),
        nn.Linear(4, 3),
    ).double()


def _block_eigenvalues(stages, x, y, s):
    """All eigenvalues of stage s's Hessian block, from the full matrix (plain definition)."""
    params = list(stages[s].parameters())
    shapes = [p.shape for p in params]
    sizes = [p.numel() for p in params]
    flat = torch.cat([p.detach().reshape(-1) for p in params])

    def loss_of(vector):
        pieces = torch.split(vector, sizes)
        replaced = dict(zip([id(p) for p in params],
                            [v.reshape(shape) for v, shape in zip(pieces, shapes)]))
        out = x
        for stage in stages:
            if stage is stages[s]:
                names = dict(stage.named_parameters())
                state = {n: replaced[id(p)] for n, p in names.items()}
                out = torch.func.functional_call(stage, state, (out,))
            else:
                out = stage(out)
        return F.cross_entropy(out, y)

    hessian = torch.autograd.functional.hessian(loss_of, flat)
    return np.linalg.eigvalsh(hessian.numpy())


def test_sharpness_is_the_largest_eigenvalue_of_each_stage_block():
    model = _tiny_model()
    stages = list(model)
    torch.manual_seed(4)
    x = torch.randn(16, 3, dtype=torch.float64)
    y = torch.randint(0, 3, (16,))
    found = stage_sharpness(stages, x, y, iterations=400)
    assert found[1] == 0.0  # no parameters, no curvature
    for s in (0, 2, 3):
        exact = _block_eigenvalues(stages, x, y, s)
        assert exact.max() > 0
        assert found[s] == pytest.approx(exact.max(), rel=1e-6), s


def test_blocks_follow_the_partition_and_leave_weights_and_grads_alone():
    model = _tiny_model()
    x = torch.randn(8, 3, dtype=torch.float64)
    y = torch.randint(0, 3, (8,))
    before = [p.detach().clone() for p in model.parameters()]
    two = stage_sharpness(partition(model, 2), x, y, iterations=300)
    assert len(two) == 2
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    # a block that contains another one is at least as sharp (eigenvalue interlacing)
    single = stage_sharpness(list(model), x, y, iterations=300)
    assert two[1] >= max(single[2:]) - 1e-9


def test_seeded_and_global_rng_untouched():
    model = _tiny_model()
    x = torch.randn(8, 3, dtype=torch.float64)
    y = torch.randint(0, 3, (8,))
    state = torch.random.get_rng_state()
    first = stage_sharpness(list(model), x, y, iterations=5, seed=7)
    assert torch.equal(state, torch.random.get_rng_state())
    assert first == stage_sharpness(list(model), x, y, iterations=5, seed=7)


def test_a_dominant_negative_eigenvalue_is_shifted_away():
    matrix = torch.diag(torch.tensor([-5.0, 2.0, 1.0], dtype=torch.float64))

    def hvp(v):
        return [matrix @ v[0]]

    start = [torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)]
    assert power_iteration(hvp, start, 200) == pytest.approx(-5.0)
    assert power_iteration(hvp, start, 200, shift=-5.0) == pytest.approx(2.0)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_iterations_are_refused(bad):
    model = _tiny_model()
    with pytest.raises(ValueError, match="iterations must be a positive integer"):
        stage_sharpness(list(model), torch.zeros(2, 3, dtype=torch.float64),
                        torch.zeros(2, dtype=torch.int64), iterations=bad)
