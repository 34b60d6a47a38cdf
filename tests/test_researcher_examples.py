"""The researcher's method and schedule of issue #33, kept in docs/examples as tested
examples (docs/write-a-method.md, docs/write-a-schedule.md), each through the public API only:

- ``eager-1f1b`` (docs/examples/eager_1f1b.py): the rows its docstring draws; trains bitwise
  like plain gradient accumulation and like 1F1B; resumes from a checkpoint bitwise;
- ``delay-adaptive`` (docs/examples/delay_adaptive_lr.py): its factors equal ``1 / (1 + mean
  delay)`` counted by hand along the schedule, and training with it equals plain async with
  the same factors as a per-stage ``LambdaLR`` (a factory told its stage), bitwise;
- both under launch() with two ranks (plugins imported there) equal fit() locally, bitwise.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import docs.examples.delay_adaptive_lr  # noqa: F401  (registers "delay-adaptive")
import docs.examples.eager_1f1b  # noqa: F401  (registers "eager-1f1b")
from pipemare_lite import fit
from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import method_options
from pipemare_lite.methods.registry import build_method_schedule
from pipemare_lite.schedules import build_schedule
from pipemare_lite.training.datasets import load
from pipemare_lite.training.models import mlp
from tests.references import gradient_accumulation, hand_delays
from tests.timeouts import hard_time_limit

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py

WIDTH = 6


def blocks(seed: int = 0) -> list[nn.Sequential]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()),
            nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()), nn.Sequential(nn.Linear(WIDTH, 3))]


def data(count: int):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, WIDTH, generator=g), torch.randint(0, 3, (4,), generator=g))
            for _ in range(count)]


def sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


# ------------------------------------------------------------------ eager-1f1b
def test_eager_1f1b_rows_are_the_ones_its_docstring_draws():
    rows = build_schedule("eager-1f1b", 3, 4).rows()
    assert [" ".join(a for a in row if "U" not in a) for row in rows] == [
        "0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3",
        "1F0 1F1 1F2 1B0 1F3 1B1 1B2 1B3",
        "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3",
    ]


def test_eager_1f1b_equals_plain_gradient_accumulation_and_resumes_bitwise():
    schedule = build_schedule("eager-1f1b", 3, 4, num_minibatches=3)
    mbs = data(12)
    run = LocalExecutor(schedule, blocks(), loss_fn=nn.functional.cross_entropy,
                        optimizer_factory=sgd)
    losses = run.run(mbs).losses
    model = nn.Sequential(*blocks())
    reference = gradient_accumulation(model, sgd(model.parameters()), nn.functional.cross_entropy,
                                      mbs, 4, 3)
    assert losses == reference
    for p, q in zip([p for w in run.workers for p in w.params], model.parameters()):
        assert torch.equal(p, q)
    first = LocalExecutor(schedule, blocks(), loss_fn=nn.functional.cross_entropy,
                          optimizer_factory=sgd)
    head = first.run(mbs, stop_after_updates=1).losses
    second = LocalExecutor(schedule, blocks(), loss_fn=nn.functional.cross_entropy,
                           optimizer_factory=sgd)
    second.load_state_dict(first.state_dict())
    assert head + second.run(mbs).losses == losses


def test_eager_1f1b_trains_like_1f1b_with_fit():
    common = dict(num_stages=2, num_microbatches=4, batch_size=64, epochs=1, lr=0.05,
                  progress=False)
    eager = fit(mlp(64, 16, 2, 10, seed=0), load("digits"), schedule="eager-1f1b", **common)
    plain = fit(mlp(64, 16, 2, 10, seed=0), load("digits"), method="1f1b", **common)
    assert eager.loss == plain.loss and eager.stage_lr == plain.stage_lr
    assert eager.config["schedule"] == "eager-1f1b"


# ------------------------------------------------------------------ delay-adaptive
def test_delay_adaptive_equals_async_with_the_same_factors_as_a_per_stage_scheduler():
    options = method_options("delay-adaptive")
    schedule = build_method_schedule("delay-adaptive", 3, 2, num_minibatches=8, options=options)
    factors = []
    for stage in range(3):
        delays = hand_delays(schedule.ranks[schedule.rank_of(stage)], stage)
        factors.append([1.0 / (1.0 + (delays[2 * k] + delays[2 * k + 1]) / 2) for k in range(8)])
    assert factors[0][3] < factors[2][3] <= 1.0 and factors[0][0] == 1.0  # stale: smaller

    def per_stage(optimizer, *, stage):
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda k: factors[stage][k] if k < 8 else 1.0)

    mbs = data(16)
    method = LocalExecutor(schedule, blocks(), loss_fn=nn.functional.cross_entropy,
                           optimizer_factory=sgd, method_options=options).run(mbs)
    plain = LocalExecutor(build_method_schedule("async", 3, 2, num_minibatches=8), blocks(),
                          loss_fn=nn.functional.cross_entropy, optimizer_factory=sgd,
                          lr_scheduler_factory=per_stage).run(mbs)
    assert method.losses == plain.losses
    assert method.learning_rates == plain.learning_rates
    assert method.learning_rates[0][3] == 0.1 * factors[0][3]


# ------------------------------------------------------------------ under launch()
@pytest.mark.dist
@pytest.mark.slow
def test_both_examples_under_launch_equal_fit_locally_bitwise():
    from pipemare_lite.engine.distributed.launch import launch
    from pipemare_lite.training.dist_fit import fit_worker

    model = dict(in_features=64, hidden=16, depth=2, out_features=10, seed=0)
    runs = [dict(schedule="eager-1f1b", num_microbatches=4),
            dict(method="delay-adaptive", num_microbatches=2)]
    for run in runs:
        common = dict(num_stages=2, batch_size=64, epochs=1, lr=0.05, progress=False, **run)
        local = fit(mlp(**model), load("digits"), **common).to_dict()
        with hard_time_limit(240):
            ranks = launch(fit_worker, 2, timeout=200, num_threads=1,
                           imports=["docs.examples.eager_1f1b", "docs.examples.delay_adaptive_lr"],
                           args=(dict(common, model=(mlp, model),
                                      data=(load, {"name": "digits"})),))
        for key in ("loss", "stage_lr", "evals"):
            assert ranks[0][key] == local[key], key
