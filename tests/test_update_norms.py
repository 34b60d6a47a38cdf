"""Per-stage update norms (chapter 07's evidence of where async goes wrong), against a plain
computation: an optimizer that measures its own step with numpy."""

import math
import re

import numpy as np
import pytest
import torch

from pipemare_lite import fit
from pipemare_lite.engine.stage import update_norm
from pipemare_lite.training.datasets import digits
from pipemare_lite.training.models import mlp


class MeasuringSGD(torch.optim.SGD):
    """SGD that writes down, per step, ||w after - w before|| (numpy, float64) and whether
    every weight is still finite."""

    def __init__(self, params, **kwargs):
        super().__init__(params, **kwargs)
        self.norms, self.finite = [], []

    def step(self, closure=None):
        params = [p for g in self.param_groups for p in g["params"]]
        before = [p.detach().numpy().astype(np.float64) for p in params]
        result = super().step(closure)
        after = [p.detach().numpy().astype(np.float64) for p in params]
        with np.errstate(invalid="ignore", over="ignore"):
            total = sum(float(((a - b) ** 2).sum()) for a, b in zip(after, before))
        self.norms.append(math.sqrt(total) if math.isfinite(total) else math.nan)
        self.finite.append(all(np.isfinite(a).all() for a in after))
        return result


def _run(method, lr, epochs=1, **kwargs):
    made = []

    def factory(params):
        made.append(MeasuringSGD(params, lr=lr, momentum=0.9))
        return made[-1]

    data = digits()
    history = fit(mlp(64, 32, 4, 10, seed=1), data, method=method, num_stages=4,
                  num_microbatches=2, batch_size=32, epochs=epochs, optimizer=factory,
                  progress=False, **kwargs)
    return history, made  # fit builds one optimizer per stage, in stage order


@pytest.mark.parametrize("method", ["1f1b", "async", "pipemare"])
def test_update_norms_equal_the_optimizers_own_measurement(method):
    history, optimizers = _run(method, 0.05)
    assert len(history.stage_update_norm) == 4
    for s, (engine, plain) in enumerate(zip(history.stage_update_norm, optimizers)):
        assert len(engine) == len(plain.norms) == history.steps, s
        assert engine == pytest.approx(plain.norms, rel=1e-12), s
        assert all(v > 0 for v in engine)


def test_the_first_non_finite_update_is_where_the_weights_turn_non_finite():
    history, optimizers = _run("async", 50.0, epochs=2)
    assert history.diverged
    turned = []
    for engine, plain in zip(history.stage_update_norm, optimizers):
        first_bad = next((k for k, ok in enumerate(plain.finite) if not ok), None)
        first_nan = next((k for k, v in enumerate(engine) if not math.isfinite(v)), None)
        assert first_nan == first_bad
        turned.append(first_bad)
    assert any(k is not None for k in turned), "the run should leave a non-finite weight"


def test_divergence_step_is_the_step_the_report_names():
    history, _ = _run("async", 50.0, epochs=2)
    step = int(re.search(r"diverged at step (\d+)", history.divergence).group(1))
    assert history.divergence_step == step
    calm, _ = _run("1f1b", 0.05)
    assert calm.divergence_step is None and not calm.diverged


def test_update_norm_is_exact_in_float64_and_never_overflows_finite_weights():
    before = [torch.zeros(3), torch.ones(2)]
    after = [torch.tensor([3.0, 0.0, 4.0]), torch.ones(2)]
    assert update_norm(before, after) == 5.0
    huge = [torch.full((4,), 3e38)]  # finite float32; its square overflows float32
    assert update_norm([torch.zeros(4)], huge) == pytest.approx(6e38)
    assert math.isnan(update_norm([torch.zeros(2)], [torch.tensor([1.0, math.nan])]))
    assert math.isinf(update_norm([torch.zeros(1)], [torch.tensor([math.inf])]))
    assert update_norm([], []) == 0.0
