"""The momentum-aware T1 ("pipemare-m", issue 43): its effective delay against chapter 06's
bound, and its runs against a plainly written reference, bitwise.

The reference: async with the built-in T2 (same gamma, same warm-up) and, as each stage's
lr scheduler, a ``LambdaLR`` that multiplies by ``tau_eff ** (-p_k)``, written here from the
definition (``tau_eff = b(0, m) / b(tau, m)``, ``p_k`` T1's exponent) with the delays counted
here from the schedule's actions, not through the method's code.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from pipemare_lite.analysis.theory import spectral_radius
from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import method_options
from pipemare_lite.methods.momentum_rescheduling import NAME, effective_delay
from pipemare_lite.methods.registry import build_method_schedule, get_method

pytestmark = pytest.mark.usefixtures("one_thread")

WIDTH, P, N, K, W = 6, 3, 2, 8, 2


def stable_step_by_scan(tau: int, momentum: float) -> float:
    """The largest alpha * lam with every smaller step stable, by a fine scan (reference)."""
    step = 1e-4
    alpha = step
    while spectral_radius(alpha, 1.0, tau, momentum) < 1.0:
        alpha += step
    return alpha - step


@pytest.mark.parametrize("tau", [1, 2, 4])
def test_effective_delay_is_the_ratio_of_the_stable_steps(tau):
    expected = stable_step_by_scan(0, 0.9) / stable_step_by_scan(tau, 0.9)
    assert effective_delay(tau, 0.9) == pytest.approx(expected, rel=0.01)


def test_with_momentum_0_9_one_update_of_delay_costs_38_times_the_step():
    # chapter 06's numbers quoted by issue 43: b(0) = 3.8, b(1) = 0.10 at m = 0.9
    assert effective_delay(1, 0.9) == pytest.approx(38.0, rel=1e-6)
    # without momentum the cost is the plain bound's ratio, near T1's tau
    assert effective_delay(1, 0.0) == pytest.approx(2.0, rel=1e-6)
    assert effective_delay(0, 0.9) == 1.0


def test_effective_delay_refuses_a_momentum_outside_0_1():
    with pytest.raises(ValueError, match="momentum must be in"):
        effective_delay(2, 1.0)


def blocks(seed: int = 0) -> list[nn.Sequential]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()),
            nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()), nn.Sequential(nn.Linear(WIDTH, 3))]


def data(count: int = K * N):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, WIDTH, generator=g), torch.randint(0, 3, (4,), generator=g))
            for _ in range(count)]


def forward_delays_by_hand(schedule) -> list[int]:
    """Per stage, the most updates between a microbatch's forward and its update (>= 1)."""
    delays = [0] * P
    for row in schedule.ranks:
        updates, forward_at = 0, {}
        for action in row:
            if action.kind == "F":
                forward_at[action.index] = updates
            elif action.kind in ("B", "I"):
                delay = updates - forward_at[action.index]
                delays[action.stage] = max(delays[action.stage], delay)
            elif action.kind == "U":
                updates += 1
    return [max(d, 1) for d in delays]


@pytest.mark.parametrize("momentum", [0.9, 0.0])
def test_pipemare_m_equals_t2_with_the_factor_as_a_scheduler_bitwise(momentum):
    options = method_options(NAME, warmup=W, gamma=0.7)
    schedule = build_method_schedule(NAME, P, N, num_minibatches=K, options=options)

    def sgd(params):
        return torch.optim.SGD(params, lr=0.1, momentum=momentum)

    method = LocalExecutor(schedule, blocks(), loss_fn=nn.functional.cross_entropy,
                           optimizer_factory=sgd, method_options=options).run(data())

    taus = forward_delays_by_hand(schedule)

    def factor(stage, k):
        if k < W:
            return 1.0
        p = 1.0 - min((k - W) / (K - W), 1.0)
        return effective_delay(taus[stage], momentum) ** (-p)

    def scheduler(optimizer, *, stage):
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: factor(stage, k))

    reference_options = method_options("async", t2=True, gamma=0.7,
                                       warmup=W)
    reference_schedule = build_method_schedule("async", P, N, num_minibatches=K,
                                               options=reference_options)
    reference = LocalExecutor(reference_schedule, blocks(), loss_fn=nn.functional.cross_entropy,
                              optimizer_factory=sgd, method_options=reference_options,
                              lr_scheduler_factory=scheduler).run(data())
    assert method.losses == reference.losses
    assert method.learning_rates == reference.learning_rates
    assert taus[0] > taus[-1]  # the stages' delays differ, so the factors do
    first_async = method.learning_rates[0][W]
    assert math.isclose(first_async, 0.1 / effective_delay(taus[0], momentum), rel_tol=1e-6)


def test_pipemare_m_is_a_built_in_method_with_t2_and_the_async_schedule():
    spec = get_method(NAME)
    assert spec.weight_mode == "async" and spec.builder == "async"
    assert not spec.options.t1  # the method brings its own factor, not T1's
