"""Methods: registry, weight-version mechanism, T1 scheduler and T2 buffer (chapters 05-09).

Each piece is checked against its definition written out plainly (closed forms or a
direct computation), independently of the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from pipemare_lite.methods import (
    METHODS,
    DiscrepancyCorrection,
    LRRescheduling,
    WeightVersions,
    build_method_schedule,
    get_method,
    method_options,
    rescheduling_factor,
    stage_forward_delays,
)
from pipemare_lite.methods.versions import param_ref
from pipemare_lite.schedules import build_schedule


# ---------------------------------------------------------------- registry
def test_unknown_method_lists_the_allowed_names():
    with pytest.raises(ValueError) as info:
        get_method("pipemaer")
    message = str(info.value)
    assert "'pipemaer'" in message
    for name in ("gpipe", "1f1b", "interleaved", "zb-h1", "pipedream", "2bw", "async",
                 "pipemare"):
        assert name in message


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_method_builds_a_schedule_with_its_weight_mode(name):
    spec = get_method(name)
    chunks = 2 if name == "interleaved" else 1
    schedule = build_method_schedule(name, 2, 4, num_minibatches=2, chunks=chunks)
    assert schedule.weight_mode == spec.weight_mode
    assert schedule.num_minibatches == 2 and schedule.chunks == chunks


def test_pipemare_switches_each_technique_on_its_own():
    defaults = get_method("pipemare").options
    assert defaults.t1 and defaults.t2
    only_t2 = method_options("pipemare", t1=False)
    assert not only_t2.t1 and only_t2.t2
    warm = method_options("pipemare", warmup=2)
    schedule = build_method_schedule("pipemare", 2, 2, num_minibatches=4, options=warm)
    assert schedule.warmup == 2
    per_stage = method_options("pipemare", gamma=(0.1, 0.2))
    assert per_stage.gamma_for(1) == 0.2
    with pytest.raises(ValueError, match="no entry for stage 2"):
        per_stage.gamma_for(2)


# ---------------------------------------------------------------- versions mechanism
def test_inplace_update_breaks_a_plain_backward_but_not_the_hooked_one():
    torch.manual_seed(0)
    layer = nn.Linear(3, 2)
    x = torch.randn(4, 3, requires_grad=True)
    y = layer(x).sum()
    with torch.no_grad():
        layer.weight.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()

    # hooked: the backward reads the version we hand it (here: a stashed copy)
    stash = [p.detach().clone() for p in layer.parameters()]
    index_of = {id(p): i for i, p in enumerate(layer.parameters())}
    x.grad = None
    with torch.autograd.graph.saved_tensors_hooks(
            lambda t: param_ref(t, index_of) or t,
            lambda r: r.materialize(stash) if not isinstance(r, torch.Tensor) else r):
        y = layer(x).sum()
    with torch.no_grad():
        layer.weight.add_(1.0)
    y.backward()
    # grad_x = ones @ W_stashed, written out
    torch.testing.assert_close(x.grad, torch.ones(4, 2) @ stash[0], rtol=0, atol=0)


def test_stash_keeps_one_copy_per_distinct_needed_version():
    p = nn.Parameter(torch.zeros(3))
    versions = WeightVersions([p], "stash", num_microbatches=1, num_minibatches=3)
    versions.acquire(0)
    versions.acquire(0)  # two microbatches forwarded at version 0
    versions.before_update()
    with torch.no_grad():
        p.add_(1.0)
    versions.after_update()
    versions.acquire(1)
    versions.before_update()
    with torch.no_grad():
        p.add_(1.0)
    versions.after_update()
    assert sorted(versions.held) == [0, 1]
    assert torch.equal(versions.weights(0)[0], torch.zeros(3))
    assert torch.equal(versions.weights(1)[0], torch.ones(3))
    versions.release(0)
    assert 0 in versions.held  # one reader of version 0 left
    versions.release(0)
    versions.release(1)
    assert versions.held == {} and versions.held_bytes() == 0
    with pytest.raises(RuntimeError, match="not held"):
        versions.weights(0)


def test_2bw_forward_reads_the_previous_version():
    p = nn.Parameter(torch.zeros(2))
    versions = WeightVersions([p], "2bw", num_microbatches=2, num_minibatches=3)
    assert [versions.forward_version(m) for m in range(6)] == [0, 0, 0, 0, 1, 1]


# ---------------------------------------------------------------- T1
def test_t1_factor_is_tau_to_minus_p():
    for k, expected in [(0, 4.0 ** -1), (1, 4.0 ** -0.75), (2, 4.0 ** -0.5), (4, 1.0), (9, 1.0)]:
        assert rescheduling_factor(k, tau=4, horizon=4) == pytest.approx(expected, rel=1e-15)
    with pytest.raises(ValueError, match="tau >= 1"):
        rescheduling_factor(0, tau=0.5, horizon=4)


def test_t1_factor_is_one_during_warm_up_then_starts_its_clock():
    # W = 2 warm-up updates, then p = 1 - (k - W) / K
    W, K, tau = 2, 4, 4.0
    for k, expected in [(0, 1.0), (1, 1.0), (2, tau ** -1), (3, tau ** -0.75), (4, tau ** -0.5),
                        (6, 1.0), (20, 1.0)]:
        assert rescheduling_factor(k, tau=tau, horizon=K, start=W) == pytest.approx(
            expected, rel=1e-15)
    with pytest.raises(ValueError, match="start W"):
        rescheduling_factor(0, tau=2, horizon=4, start=-1)


def test_t1_scheduler_with_a_start_keeps_the_base_lr_until_then():
    lr, tau, horizon, start = 0.3, 3, 4, 2
    p = nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([p], lr=lr)
    scheduler = LRRescheduling(optimizer, tau, horizon, start=start)
    seen = []
    for _ in range(8):
        seen.append(optimizer.param_groups[0]["lr"])
        p.grad = torch.ones(2)
        optimizer.step()
        scheduler.step()
    expected = [0.3, 0.3, 0.3 / 3, 0.3 * 3 ** -0.75, 0.3 * 3 ** -0.5, 0.3 * 3 ** -0.25, 0.3, 0.3]
    assert seen == pytest.approx(expected, rel=1e-15)
    with pytest.raises(ValueError, match="start W"):
        LRRescheduling(optimizer, tau, horizon, start=-1)


@pytest.mark.parametrize("optimizer_cls", [torch.optim.SGD, torch.optim.Adam])
def test_t1_scheduler_applies_the_formula_each_update(optimizer_cls):
    lr, tau, horizon = 0.3, 3, 5
    p = nn.Parameter(torch.ones(2))
    optimizer = optimizer_cls([p], lr=lr)
    scheduler = LRRescheduling(optimizer, tau, horizon)
    seen = []
    for _ in range(8):
        seen.append(optimizer.param_groups[0]["lr"])
        p.grad = torch.ones(2)
        optimizer.step()
        scheduler.step()
    expected = [lr * tau ** -(1 - min(k / horizon, 1)) for k in range(8)]
    assert seen == pytest.approx(expected, rel=1e-15)
    assert scheduler.get_last_lr() == pytest.approx([lr], rel=1e-15)


def test_t1_multiplies_on_top_of_a_base_schedule_and_restores_from_state():
    lr, tau, horizon = 0.2, 2, 4
    p = nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([p], lr=lr, momentum=0.9)
    base = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.5)
    scheduler = LRRescheduling(optimizer, tau, horizon, base=base)
    seen = []
    for _ in range(3):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    state = scheduler.state_dict()
    for _ in range(3):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    expected = [lr * 0.5 ** k * tau ** -(1 - min(k / horizon, 1)) for k in range(6)]
    assert seen == pytest.approx(expected, rel=1e-14)

    fresh = torch.optim.SGD([nn.Parameter(torch.ones(1))], lr=lr, momentum=0.9)
    fresh_base = torch.optim.lr_scheduler.ExponentialLR(fresh, gamma=0.5)
    restored = LRRescheduling(fresh, tau, horizon, base=fresh_base)
    restored.load_state_dict(state)
    fresh.param_groups[0]["lr"] = restored.get_last_lr()[0]
    again = []
    for _ in range(3):
        again.append(fresh.param_groups[0]["lr"])
        fresh.step()
        restored.step()
    assert again == seen[3:]


def test_t1_delays_are_measured_from_the_schedule():
    # lock-step async pipeline, one microbatch per update: stage s's forward weights are
    # 2(P-1-s)+1 microbatch slots old when its gradient lands (0-indexed s; the design's
    # closed form 2(P-i)+1 with 1-indexed i)
    P = 4
    schedule = build_schedule("async", P, 1, num_minibatches=12)
    assert stage_forward_delays(schedule) == [2 * (P - 1 - s) + 1 for s in range(P)]
    # N microbatches per update: ceil((2(P-i)+1)/N) updates, the notes' closed form
    for N in (2, 3):
        schedule = build_schedule("async", P, N, num_minibatches=8)
        assert stage_forward_delays(schedule) == [
            math.ceil((2 * (P - i) + 1) / N) for i in range(1, P + 1)]
    # flushed schedules have no delay; T1 clamps to 1 (no change)
    assert stage_forward_delays(build_schedule("gpipe", P, 2, num_minibatches=3)) == [1] * P


# ---------------------------------------------------------------- T2
def test_t2_delta_is_an_ema_of_weight_changes_and_corrects_the_backward():
    gamma = 0.75
    p = nn.Parameter(torch.tensor([1.0, 2.0]))
    t2 = DiscrepancyCorrection([p], gamma)
    steps = [torch.tensor([0.5, -1.0]), torch.tensor([0.25, 0.0]), torch.tensor([-1.0, 1.0])]
    delta = torch.zeros(2)
    for step in steps:
        old = t2.snapshot()
        with torch.no_grad():
            p.add_(step)
        t2.after_update(old)
        delta = gamma * delta + (1 - gamma) * step
        torch.testing.assert_close(t2.delta[0], delta)
    torch.testing.assert_close(t2.backward_weights(2)[0], p.detach() - 2 * delta)
    assert t2.backward_weights(0)[0].data_ptr() == p.data_ptr()  # d = 0: the live weights
    with pytest.raises(ValueError, match="gamma must be in"):
        DiscrepancyCorrection([p], 1.0)
