"""Weight prediction, a method written in one file through the public API
(pipemare_lite/methods/weight_prediction.py), against a plainly written hand loop.

- the local executor == a loop that walks the schedule and, per stage, runs the forward at
  ``w - s * (w_before - w_after)`` of the last update and the backward at the same weights,
  bitwise (float32, one thread), with SGD and with momentum;
- the predicted copies are counted in the stage's bytes as ``prediction``;
- stop, checkpoint, load into a fresh executor, continue == an uninterrupted run, bitwise.
"""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch import nn
from torch.func import functional_call

import pipemare_lite.methods.weight_prediction  # noqa: F401  (registers "wpred")
from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import method_options
from pipemare_lite.methods.registry import build_method_schedule
from tests.references import hand_delays

WIDTH, SAMPLES = 8, 4


pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


def blocks(count: int, seed: int = 0) -> list[nn.Sequential]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(WIDTH, WIDTH), *([nn.ReLU()] if i < count - 1 else []))
            for i in range(count)]


def data(count: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(count, SAMPLES, WIDTH, generator=g)
    ts = torch.randint(0, WIDTH, (count, SAMPLES), generator=g)
    return [(xs[i], ts[i]) for i in range(count)]


def sgd(momentum: float):
    return lambda params: torch.optim.SGD(params, lr=0.1, momentum=momentum)


def hand_loop(schedule, modules, microbatches, make_optimizer, forward_weights, update):
    """Walk the schedule by hand. ``forward_weights(s, m, live)`` -> the weights F(m) and
    B(m) use (a dict by name); ``update(s, module, optimizer, finished)`` steps stage s, with
    ``finished`` the microbatches whose backward ran since its last update. Returns the
    losses in microbatch order."""
    P, N = schedule.num_ranks, schedule.num_microbatches
    optimizers = [make_optimizer(list(m.parameters())) for m in modules]
    inputs, grads, kept, losses = {}, {}, {}, {}
    finished = [[] for _ in range(P)]
    position = [0] * P
    while any(position[r] < len(schedule.ranks[r]) for r in range(P)):
        moved = False
        for r in range(P):
            if position[r] == len(schedule.ranks[r]):
                continue
            a = schedule.ranks[r][position[r]]
            s, m, module = a.stage, a.index, modules[a.stage]
            if a.kind == "F" and (s == 0 or (s, m) in inputs):
                x = microbatches[m][0] if s == 0 else inputs.pop((s, m))
                weights = forward_weights(s, m, dict(module.named_parameters()))
                with torch.no_grad():
                    y = functional_call(module, weights, (x,))
                if s == P - 1:
                    losses[m] = nn.functional.cross_entropy(y, microbatches[m][1]).item()
                else:
                    inputs[(s + 1, m)] = y
                kept[(s, m)] = (x, weights)
            elif a.kind == "B" and (s == P - 1 or (s, m) in grads):
                x, weights = kept.pop((s, m))
                leaves = {name: w.detach().clone().requires_grad_() for name, w in weights.items()}
                x = x.clone().requires_grad_(s > 0)
                y = functional_call(module, leaves, (x,))  # recomputed: same values
                if s == P - 1:
                    root, grad_y = nn.functional.cross_entropy(y, microbatches[m][1]) / N, None
                else:
                    root, grad_y = y, grads.pop((s, m))
                torch.autograd.backward(root, grad_y)
                for name, p in module.named_parameters():
                    g = leaves[name].grad
                    p.grad = g if p.grad is None else p.grad + g  # summed in backward order
                if s > 0:
                    grads[(s - 1, m)] = x.grad
                finished[s].append(m)
            elif a.kind == "U":
                update(s, module, optimizers[s], finished[s])
                optimizers[s].zero_grad(set_to_none=True)
                finished[s] = []
            else:
                continue
            position[r] += 1
            moved = True
        assert moved, "the hand loop is stuck: the schedule's dependencies are broken"
    return [losses[m] for m in sorted(losses)]


def hand_look_ahead(schedule, modules, microbatches, make_optimizer, scale):
    """Prediction by hand: F and B of microbatch m run at ``w - scale(s) * step``, ``s`` its
    delay, ``step`` the stage's last update (no look-ahead at ``s == 0``); returns the
    losses in microbatch order."""
    steps = [{name: torch.zeros_like(p) for name, p in m.named_parameters()} for m in modules]
    delays = [hand_delays(schedule.ranks[s], s) for s in range(schedule.num_ranks)]

    def forward_weights(s, m, live):
        d = delays[s][m]
        factor = scale(d)
        return {name: p.detach() - factor * steps[s][name] if d else p.detach()
                for name, p in live.items()}

    def update(s, module, optimizer, finished):
        before = {name: p.detach().clone() for name, p in module.named_parameters()}
        optimizer.step()
        steps[s] = {name: before[name] - p.detach() for name, p in module.named_parameters()}

    return hand_loop(schedule, modules, microbatches, make_optimizer, forward_weights, update)


def hand_weight_prediction(schedule, modules, microbatches, make_optimizer):
    """Weight prediction by hand: ``w - s * step``."""
    return hand_look_ahead(schedule, modules, microbatches, make_optimizer, lambda s: s)


def run_wpred(schedule, modules, microbatches, make_optimizer, **run):
    executor = LocalExecutor(schedule, modules, loss_fn=nn.functional.cross_entropy,
                             optimizer_factory=make_optimizer,
                             method_options=method_options("wpred"))
    return executor, executor.run(microbatches, **run)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("P,N,K", [(2, 2, 4), (3, 2, 4)])
def test_weight_prediction_equals_the_hand_loop_bitwise(momentum, P, N, K):
    schedule = build_method_schedule("wpred", P, N, num_minibatches=K)
    initial, mbs = blocks(P), data(N * K)
    stages = copy.deepcopy(initial)
    _, result = run_wpred(schedule, stages, mbs, sgd(momentum))
    reference = copy.deepcopy(initial)
    assert result.losses == hand_weight_prediction(schedule, reference, mbs, sgd(momentum))
    for got, want in zip(stages, reference):
        for a, b in zip(got.parameters(), want.parameters()):
            assert torch.equal(a, b)
    # and it is not plain async under another name: the prediction changes the numbers
    plain = LocalExecutor(schedule, copy.deepcopy(initial), loss_fn=nn.functional.cross_entropy,
                          optimizer_factory=sgd(momentum),
                          method_options=method_options("async")).run(mbs)
    assert plain.losses[:N] == result.losses[:N]  # nothing to predict before the first step
    assert plain.losses != result.losses


def test_predicted_copies_are_counted_as_prediction_bytes():
    P, N, K = 3, 2, 4
    schedule = build_method_schedule("wpred", P, N, num_minibatches=K)
    stages = blocks(P)
    _, result = run_wpred(schedule, stages, data(N * K), sgd(0.0))
    for s, module in enumerate(stages):
        copy_bytes = sum(p.nbytes for p in module.parameters())
        delays = hand_delays(schedule.ranks[s], s)
        in_flight, most = set(), 0  # microbatches holding a predicted copy, after each action
        for a in schedule.ranks[s]:
            if a.kind == "F" and delays[a.index] > 0:
                in_flight.add(a.index)
            elif a.kind == "B":
                in_flight.discard(a.index)
            most = max(most, len(in_flight))
        assert most > 0
        # the step buffer plus the copies in flight at the peak
        assert result.peak_bytes[s]["prediction"] == copy_bytes * (1 + most)
        assert result.peak_bytes[s]["stash"] == 0 and result.peak_bytes[s]["t2_buffer"] == 0


def test_weight_prediction_resumes_mid_flight_bitwise():
    P, N, K, stop = 3, 2, 5, 2
    schedule = build_method_schedule("wpred", P, N, num_minibatches=K)
    initial, mbs = blocks(P), data(N * K)
    straight_stages = copy.deepcopy(initial)
    _, straight = run_wpred(schedule, straight_stages, mbs, sgd(0.9))
    first, part1 = run_wpred(schedule, copy.deepcopy(initial), mbs, sgd(0.9),
                             stop_after_updates=stop)
    assert any(w.hooks.predicted for w in first.workers)  # copies really are in flight
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed = copy.deepcopy(initial)
    second = LocalExecutor(schedule, resumed, loss_fn=nn.functional.cross_entropy,
                           optimizer_factory=sgd(0.9), method_options=method_options("wpred"))
    second.load_state_dict(torch.load(buffer, weights_only=False))
    part2 = second.run(mbs)
    assert part1.losses + part2.losses == straight.losses
    for got, want in zip(resumed, straight_stages):
        for a, b in zip(got.parameters(), want.parameters()):
            assert torch.equal(a, b)


def test_t2_does_not_compose_with_a_method_that_brings_its_own_hooks():
    schedule = build_method_schedule("wpred", 2, 2, num_minibatches=2)
    with pytest.raises(ValueError, match="brings its own hooks"):
        LocalExecutor(schedule, blocks(2), loss_fn=nn.functional.cross_entropy,
                      optimizer_factory=sgd(0.0),
                      method_options=method_options("wpred", t2=True))
