"""Each stage's learning rate over time (chapter 08): the torch-free formula against the engine.

The references are the engine's own schedulers, stepped as the executor steps them (one
``step()`` per update): :class:`LRRescheduling` on top of the named base schedules of
:mod:`pipemare_lite.training.lr_schedules`, and the ``stage_lr`` a real ``fit`` records.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from pipemare_lite import fit
from pipemare_lite.analysis.stage_lr import (
    base_lr,
    first_unstable_update,
    rescheduling_factor,
    stage_lrs,
)
from pipemare_lite.analysis.theory import stability_bound
from pipemare_lite.figures.widgets.t1 import t1_delays
from pipemare_lite.methods import build_method_schedule
from pipemare_lite.methods.lr_rescheduling import LRRescheduling, stage_forward_delays
from pipemare_lite.training.datasets import Dataset, digits
from pipemare_lite.training.lr_schedules import make_lr_schedule
from pipemare_lite.training.models import mlp

TOTAL = 24


def engine_lrs(lr, tau, total, *, horizon, start=0, schedule="constant", warmup=0,
               step_size=None, gamma=None):
    """The learning rate of each update as the engine's scheduler pair gives it."""
    optimizer = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=lr)
    factory = make_lr_schedule(schedule, total, warmup=warmup, step_size=step_size,
                               gamma=gamma, updates_per_epoch=6)
    base = factory(optimizer) if factory else None
    scheduler = LRRescheduling(optimizer, tau, horizon, base=base, start=start)
    seen = []
    for _ in range(total):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return seen


@pytest.mark.parametrize("schedule, warmup, step_size, gamma", [
    ("constant", 0, None, None), ("constant", 3, None, None), ("cosine", 0, None, None),
    ("cosine", 4, None, None), ("step", 0, 5, 0.5), ("step", 2, None, None),
])
@pytest.mark.parametrize("horizon, start", [(10, 0), (TOTAL, 0), (6, 4), (0, 0)])
def test_stage_lrs_equal_the_engines_scheduler(schedule, warmup, step_size, gamma, horizon,
                                               start):
    delays = [5, 3, 1]
    table = stage_lrs(0.1, delays, TOTAL, horizon=horizon, start=start, schedule=schedule,
                      warmup=warmup, step_size=step_size or 6, gamma=gamma or 0.1)
    for tau, row in zip(delays, table):
        expected = engine_lrs(0.1, tau, TOTAL, horizon=horizon, start=start,
                              schedule=schedule, warmup=warmup, step_size=step_size,
                              gamma=gamma)
        if schedule == "constant" and warmup == 0:
            assert row == expected  # the same products in the same order: bitwise
        else:
            assert row == pytest.approx(expected, rel=1e-12)  # torch's recursion rounds


def test_stage_lrs_are_what_fit_records_with_t1():
    d = digits(seed=0)
    data = Dataset("digits-small", d.x_train[:96], d.y_train[:96], d.x_test[:20], d.y_test[:20],
                   10, d.input_shape, d.provenance)
    torch.manual_seed(0)
    model = mlp(in_features=64, hidden=16, depth=4, out_features=10, seed=0)
    history = fit(model, data, method="async", num_stages=4, num_microbatches=2, batch_size=16,
                  epochs=2, lr=0.05, t1=True, t1_anneal_updates=7, lr_schedule="cosine",
                  progress=False)
    steps = history.steps
    schedule = build_method_schedule("async", 4, 2, num_minibatches=steps)
    delays = stage_forward_delays(schedule)
    assert delays == t1_delays(4, 2)
    table = stage_lrs(0.05, delays, steps, horizon=7, schedule="cosine")
    for recorded, row in zip(history.stage_lr, table):
        assert recorded == pytest.approx(row, rel=1e-12)
    assert table[0][0] == pytest.approx(0.05 / delays[0], rel=1e-15)


@pytest.mark.parametrize("P", [1, 2, 3, 5, 8, 16])
@pytest.mark.parametrize("N", [1, 2, 3, 4, 8])
def test_widget_delays_are_the_measured_ones(P, N):
    minibatches = math.ceil((2 * P - 1) / N) + 3
    measured = stage_forward_delays(build_method_schedule("async", P, N,
                                                          num_minibatches=minibatches))
    assert t1_delays(P, N) == measured


def test_base_lr_closed_forms():
    assert base_lr(5, 0.2, total_updates=10) == 0.2
    assert base_lr(0, 0.2, "cosine", total_updates=10) == 0.2
    assert base_lr(5, 0.2, "cosine", total_updates=10) == pytest.approx(0.1, rel=1e-15)
    assert base_lr(7, 0.2, "step", total_updates=10, step_size=3, gamma=0.5) == 0.05
    assert base_lr(1, 0.2, "cosine", total_updates=10, warmup=3) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="unknown base schedule 'linear'; allowed: constant"):
        base_lr(0, 0.1, "linear", total_updates=4)
    with pytest.raises(ValueError, match="needs step_size"):
        base_lr(0, 0.1, "step", total_updates=4)
    with pytest.raises(ValueError, match="warmup=4 must be in 0..3"):
        base_lr(0, 0.1, "cosine", total_updates=4, warmup=4)
    with pytest.raises(ValueError, match="one tau >= 1 per stage"):
        stage_lrs(0.1, [2, 0], 4, horizon=2)
    with pytest.raises(ValueError, match="tau >= 1"):
        rescheduling_factor(0, 0.5, 4)


def test_first_unstable_update_matches_the_crossing_of_the_bound():
    # constant base: lr * lam * tau**-(1 - k/K) >= b  <=>  k >= K (1 - log(lr lam / b) / log tau)
    for lr, lam, tau, K in [(0.1, 5.0, 8, 40), (0.05, 9.0, 6, 100), (0.3, 2.0, 3, 17)]:
        row = stage_lrs(lr, [tau], K + 5, horizon=K)[0]
        crossing = K * (1 - math.log(lr * lam / stability_bound(tau)) / math.log(tau))
        assert first_unstable_update(row, lam, tau) == math.ceil(crossing)
    row = stage_lrs(0.01, [4], 30, horizon=10)[0]
    assert first_unstable_update(row, 1.0, 4) is None  # lr * lam below the bound: never
    row = stage_lrs(0.5, [4], 30, horizon=10)[0]
    assert first_unstable_update(row, 10.0, 4) == 0  # unstable even divided by tau
    with pytest.raises(ValueError, match="curvature lam must be positive"):
        first_unstable_update(row, 0.0, 4)
