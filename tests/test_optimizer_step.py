"""The engine's optimizer step (pipemare_lite.torch_compat.optimizer_step) skips torch's
profiling wrapper only when nothing would see it: the same numbers bitwise, and every hook,
lr scheduler and profiler still sees a step (issue #35)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from pipemare_lite.torch_compat import optimizer_step as _optimizer_step

pytestmark = pytest.mark.usefixtures("one_thread")


def _pair(optimizer=torch.optim.SGD, **options):
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    twin = copy.deepcopy(model)
    return (model, optimizer(model.parameters(), **options),
            twin, optimizer(twin.parameters(), **options))


def _grads(*models, seed=0):
    g = torch.Generator().manual_seed(seed)
    for params in zip(*(m.parameters() for m in models)):
        grad = torch.randn(params[0].shape, generator=g)
        for p in params:
            p.grad = grad.clone()


@pytest.mark.parametrize(("optimizer", "options"), [
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=1e-3)),
    (torch.optim.AdamW, dict(lr=1e-2)),
])
def test_the_same_numbers_as_the_public_step(optimizer, options):
    model, opt, twin, twin_opt = _pair(optimizer, **options)
    for step in range(4):
        _grads(model, twin, seed=step)
        opt.step()
        _optimizer_step(twin_opt)
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_hooks_an_lr_scheduler_and_the_profiler_still_see_the_step():
    model, opt, _, _ = _pair(lr=0.1)
    seen = []
    handle = opt.register_step_pre_hook(lambda o, args, kwargs: seen.append("pre"))
    _grads(model)
    _optimizer_step(opt)
    handle.remove()
    assert seen == ["pre"]
    handle = register_optimizer_step_post_hook(
        lambda o, args, kwargs: seen.append("global post"))
    _optimizer_step(opt)
    handle.remove()
    assert seen == ["pre", "global post"]
    scheduler = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    _optimizer_step(opt)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "lr_scheduler.step() before optimizer.step()"
        scheduler.step()
    assert opt.param_groups[0]["lr"] == 0.05
    with torch.autograd.profiler.profile() as prof:
        _optimizer_step(opt)
    assert any(e.name.startswith("Optimizer.step#SGD") for e in prof.function_events)
