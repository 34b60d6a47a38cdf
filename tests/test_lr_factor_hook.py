"""The ``lr_factor`` hook (issue #33, item 2): a per-stage, per-update learning rate through
the public API, and T1 moved onto it, bitwise.

- T1 on the hook == the former implementation (``LRRescheduling`` as the stage's scheduler):
  losses and every group's learning rates of four runs through ``fit`` (constant, cosine +
  lr warm-up + PipeMare-W, step with adam, muon's two groups) equal, as float hex, those of
  the old wiring run in this process (meaningful on every machine), and, where the kernel
  fingerprint matches the fixture's, the values recorded at commit 74f6b13
  (``tests/fixtures/t1_before_lr_hook.json``, written by ``tools/make_t1_fixture.py``; the
  rule and the mode each test took: ``tests/recorded_floats.py``, issue 42);
- a checkpoint taken by the old wiring (T1's scheduler state, the groups holding T1's product)
  resumes under the new one and continues bitwise;
- a method's ``lr_factor`` == the same factor given as a per-stage ``LambdaLR`` (a factory
  that takes ``stage``), bitwise; the factor is recorded as the update's lr and never seen by
  the scheduler; a method's factor and T1's multiply.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from pipemare_lite import fit
from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import (
    METHODS,
    LRRescheduling,
    LRReschedulingHooks,
    MethodHooks,
    method_options,
    register_method,
)
from pipemare_lite.methods.registry import build_method_schedule
from pipemare_lite.training.datasets import load
from pipemare_lite.training.executors import EXECUTORS, local_executor, register_executor
from pipemare_lite.training.models import mlp
from tests.recorded_floats import comparison_mode

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py

FIXTURE = Path(__file__).parent / "fixtures" / "t1_before_lr_hook.json"
WIDTH = 6


def hexed(history) -> tuple[list, list]:
    """A history's losses and per-group learning rates as float hex."""
    return ([float(x).hex() for x in history.loss],
            [[[float(x).hex() for x in g] for g in s] for s in history.stage_lr_by_group])


@pytest.fixture
def old_wiring_executor():
    """``fit(..., executor="t1-old-wiring")``: the local executor with T1 wired as before the
    hook (:func:`old_wiring`), for the within-process comparison."""
    register_executor("t1-old-wiring", lambda *a, **k: old_wiring(local_executor(*a, **k)))
    yield "t1-old-wiring"
    EXECUTORS.pop("t1-old-wiring", None)


@pytest.mark.parametrize("case", sorted(json.loads(FIXTURE.read_text())["cases"]))
def test_t1_on_the_hook_equals_the_scheduler_implementation_bitwise(case, old_wiring_executor,
                                                                    request):
    fixture = json.loads(FIXTURE.read_text())
    recorded = fixture["cases"][case]
    mode = comparison_mode(fixture, threads=1, request=request)

    def train(**extra):
        return fit(mlp(64, 16, 3, 10, seed=1), load("digits"), num_stages=3,
                   num_microbatches=2, batch_size=64, epochs=1, progress=False,
                   **recorded["kwargs"], **extra)

    history = train()
    assert hexed(history) == hexed(train(executor=old_wiring_executor))  # every machine
    if mode.bitwise:  # the fixture's machine: the numbers recorded at 74f6b13 come back
        assert hexed(history) == (recorded["loss"], recorded["stage_lr_by_group"])
    assert any(a < b for a, b in zip(history.stage_lr[0], history.stage_lr[-1]))  # T1 acted


def blocks(seed: int = 0) -> list[nn.Sequential]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()),
            nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()), nn.Sequential(nn.Linear(WIDTH, 3))]


def data(count: int = 16):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, WIDTH, generator=g), torch.randint(0, 3, (4,), generator=g))
            for _ in range(count)]


def executor(method, options=None, lr_scheduler_factory=None, momentum=0.9):
    options = options or method_options(method)
    schedule = build_method_schedule(method, 3, 2, num_minibatches=8, options=options)
    return LocalExecutor(schedule, blocks(), loss_fn=nn.functional.cross_entropy,
                         optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=0.1,
                                                                      momentum=momentum),
                         method_options=options, lr_scheduler_factory=lr_scheduler_factory)


def step_lr(optimizer):
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)


def old_wiring(run: LocalExecutor) -> LocalExecutor:
    """The workers as the former build made them: T1 as the stage's LRRescheduling (built on
    top of the base scheduler), the method's own hooks unwrapped."""
    for worker in run.workers:
        hooks = worker.hooks
        assert isinstance(hooks, LRReschedulingHooks)
        worker.hooks = hooks.inner
        worker.lr_scheduler = LRRescheduling(worker.optimizer, hooks.tau, hooks.horizon,
                                             base=worker.lr_scheduler, start=hooks.start)
    return run


def test_t1_hook_equals_old_wiring_and_old_checkpoints_resume_bitwise():
    options = method_options("pipemare", t1_anneal_updates=5)
    new = executor("pipemare", options, step_lr).run(data())
    old_run = old_wiring(executor("pipemare", options, step_lr))
    old = old_run.run(data())
    assert new.losses == old.losses and new.group_learning_rates == old.group_learning_rates
    assert new.learning_rates[0][0] < new.learning_rates[2][0]  # T1 divided stage 0's lr

    first = old_wiring(executor("pipemare", options, step_lr))
    head = first.run(data(), stop_after_updates=3)
    state = first.state_dict()  # old format: LRRescheduling's state, groups at T1's lr
    assert "_base_values" in state["stages"][0]["lr_scheduler"]
    resumed = executor("pipemare", options, step_lr)
    resumed.load_state_dict(state)
    tail = resumed.run(data())
    assert head.losses + tail.losses == old.losses
    assert {s: head.learning_rates[s] + tail.learning_rates[s]
            for s in head.learning_rates} == old.learning_rates


class HalfOnStageZero(MethodHooks):
    """Stage 0 learns at lr * 0.5 ** (k % 3): a factor per stage and update."""

    def __init__(self, info):
        self.stage = info.stage

    def lr_factor(self, update):
        """0.5 ** (update % 3) on stage 0, None (unchanged) elsewhere."""
        return 0.5 ** (update % 3) if self.stage == 0 else None


def lambda_per_stage(optimizer, *, stage):
    """The same factor as a per-stage scheduler: the factory is told its stage."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda k: 0.5 ** (k % 3) if stage == 0 else 1.0)


@pytest.fixture
def half_method():
    register_method("half-stage-0", schedule="async", hooks=HalfOnStageZero)
    yield "half-stage-0"
    METHODS.pop("half-stage-0", None)


def test_method_lr_factor_equals_a_per_stage_scheduler_bitwise(half_method):
    hooked = executor(half_method)
    result = hooked.run(data())
    plain = executor("async", lr_scheduler_factory=lambda_per_stage).run(data())
    assert result.losses == plain.losses
    assert result.learning_rates == plain.learning_rates
    assert result.learning_rates[0][:3] == [0.1, 0.05, 0.025]
    assert set(result.learning_rates[1]) == {0.1}
    # the factor is for its update only: the groups hold the base lr again
    assert [w.optimizer.param_groups[0]["lr"] for w in hooked.workers] == [0.1, 0.1, 0.1]


def test_method_factor_and_t1_multiply(half_method):
    both = executor(half_method, method_options(half_method, t1=True))
    result = both.run(data())
    t1 = executor("async", method_options("async", t1=True)).run(data())
    ratios = [a / b for a, b in zip(result.learning_rates[0], t1.learning_rates[0])]
    assert ratios[:4] == pytest.approx([1.0, 0.5, 0.25, 1.0])
    assert result.learning_rates[1] == t1.learning_rates[1]


def test_optimizer_factory_is_told_its_stage():
    seen = []

    def per_stage(params, *, stage):
        seen.append(stage)
        return torch.optim.SGD(params, lr=0.1 * (stage + 1))

    schedule = build_method_schedule("1f1b", 3, 2, num_minibatches=1)
    run = LocalExecutor(schedule, blocks(), loss_fn=nn.functional.cross_entropy,
                        optimizer_factory=per_stage)
    result = run.run(data(2))
    assert seen == [0, 1, 2]
    assert [rates[0] for rates in result.learning_rates.values()] == pytest.approx([0.1, 0.2, 0.3])


def test_fit_factories_are_told_their_stage_even_with_gradient_clipping():
    seen = {"optimizer": [], "schedule": []}

    def optimizer(params, stage):
        seen["optimizer"].append(stage)
        return torch.optim.SGD(params, lr=0.05)

    def schedule(opt, *, stage):
        seen["schedule"].append(stage)
        return torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 / (stage + 1))

    history = fit(mlp(64, 16, 3, 10, seed=1), load("digits"), method="1f1b", num_stages=3,
                  num_microbatches=2, batch_size=256, epochs=1, progress=False,
                  optimizer=optimizer, lr_schedule=schedule, clip_grad_norm=1.0)
    assert seen == {"optimizer": [0, 1, 2], "schedule": [0, 1, 2]}
    assert [rates[0] for rates in history.stage_lr] == pytest.approx([0.05, 0.025, 0.05 / 3])
