"""Chapter 12's methods (plugins in one file each, through the public API) against plainly
written hand loops, and locally against launch() on 2 gloo ranks.

- nesterov (pipemare_lite/methods/nesterov.py): the local executor == a loop that runs each
  forward and backward at ``w - (mu + ... + mu**s) * (w_before - w_after)``, bitwise, with
  SGD momentum and with Adam's beta1; with ``mu = 0`` it is plain async;
- dc (pipemare_lite/methods/delay_compensation.py): the local executor == a 2BW loop whose
  update uses ``G + lam0 / (sqrt(ms) + eps) * G * G * mean_m(w_now - w_fwd(m))``, bitwise;
  its buffer is counted as ``dc_buffer``; it resumes from a checkpoint bitwise;
- every chapter-12 method: fit() locally == fit_worker under launch() with 2 ranks, bitwise.
"""

from __future__ import annotations

import copy
import io
from dataclasses import replace

import pytest
import torch
from torch import nn

import pipemare_lite.methods.beyond  # noqa: F401  (registers wpred, nesterov, dc)
from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import METHODS, method_options
from pipemare_lite.methods.delay_compensation import DC_DECAY, DC_EPS, DC_LAMBDA
from pipemare_lite.methods.registry import build_method_schedule
from tests.test_weight_prediction import (  # the same tiny pipeline and plain walker
    blocks,
    data,
    hand_look_ahead,
    hand_loop,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py




# ---------------------------------------------------------------- nesterov
def hand_nesterov(schedule, modules, microbatches, make_optimizer, mu):
    """The look-ahead by hand: ``w - (mu + ... + mu**s) * last_step``."""
    return hand_look_ahead(schedule, modules, microbatches, make_optimizer,
                           lambda s: sum(mu ** k for k in range(1, s + 1)))


def run(name, schedule, modules, microbatches, make_optimizer, **options):
    executor = LocalExecutor(schedule, modules, loss_fn=nn.functional.cross_entropy,
                             optimizer_factory=make_optimizer,
                             method_options=method_options(name, **options))
    return executor, executor.run(microbatches)


OPTIMIZERS = {
    "sgd-0.9": (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 0.9),
    "adam": (lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.8, 0.99)), 0.8),
}


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("P,N,K", [(2, 2, 4), (3, 2, 4)])
def test_nesterov_equals_the_hand_loop_bitwise(optimizer, P, N, K):
    make, mu = OPTIMIZERS[optimizer]
    schedule = build_method_schedule("nesterov", P, N, num_minibatches=K)
    initial, mbs = blocks(P), data(N * K)
    stages = copy.deepcopy(initial)
    _, result = run("nesterov", schedule, stages, mbs, make)
    reference = copy.deepcopy(initial)
    assert result.losses == hand_nesterov(schedule, reference, mbs, make, mu)
    for got, want in zip(stages, reference):
        assert all(torch.equal(a, b) for a, b in zip(got.parameters(), want.parameters()))
    # not weight prediction under another name (its scale is s, not mu + ... + mu**s)
    _, wpred = run("wpred", schedule, copy.deepcopy(initial), mbs, make)
    assert wpred.losses[:N] == result.losses[:N] and wpred.losses != result.losses
    assert max(p["prediction"] for p in result.peak_bytes) > 0


def test_nesterov_without_momentum_is_weight_stashing():
    # mu = 0: no look-ahead, but F and B still share the forward's weights (a stash)
    P, N, K = 3, 2, 4
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.1)  # noqa: E731
    schedule = build_method_schedule("nesterov", P, N, num_minibatches=K)
    _, looked = run("nesterov", schedule, blocks(P), data(N * K), sgd)
    stashed = LocalExecutor(replace(schedule, weight_mode="stash"), blocks(P),
                            loss_fn=nn.functional.cross_entropy, optimizer_factory=sgd,
                            method_options=method_options("async")).run(data(N * K))
    _, plain = run("async", schedule, blocks(P), data(N * K), sgd)
    assert looked.losses == stashed.losses and looked.losses != plain.losses


# ---------------------------------------------------------------- dc
def minibatch_of(m: int, N: int) -> int:
    return m // N


def hand_dc(schedule, modules, microbatches, make_optimizer):
    """2BW by hand (F and B of minibatch k at version max(k-1, 0)) with DC-ASGD-a at U."""
    N = schedule.num_microbatches
    versions = [[{n: p.detach().clone() for n, p in m.named_parameters()}] for m in modules]
    squares = [{n: torch.zeros_like(p) for n, p in m.named_parameters()} for m in modules]
    read = {}  # (stage, microbatch) -> version its forward read

    def forward_weights(s, m, live):
        v = max(minibatch_of(m, N) - 1, 0)
        read[(s, m)] = v
        return versions[s][v]

    def update(s, module, optimizer, finished):
        now = len(versions[s]) - 1
        for name, p in module.named_parameters():
            g = p.grad
            offsets = [p.detach() - versions[s][read[(s, m)]][name] if read[(s, m)] < now
                       else torch.zeros_like(p) for m in finished]
            d = sum(offsets) / len(offsets)
            squares[s][name] = DC_DECAY * squares[s][name] + (1 - DC_DECAY) * g * g
            lam = DC_LAMBDA / (squares[s][name].sqrt() + DC_EPS)
            p.grad = g + lam * g * g * d
        optimizer.step()
        versions[s].append({n: p.detach().clone() for n, p in module.named_parameters()})

    return hand_loop(schedule, modules, microbatches, make_optimizer, forward_weights, update)


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_dc_equals_the_hand_2bw_loop_with_the_correction_bitwise(optimizer):
    P, N, K = 3, 2, 5
    make = {"adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01),
            "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)}[optimizer]
    schedule = build_method_schedule("dc", P, N, num_minibatches=K)
    initial, mbs = blocks(P), data(N * K)
    stages = copy.deepcopy(initial)
    _, result = run("dc", schedule, stages, mbs, make)
    reference = copy.deepcopy(initial)
    assert result.losses == hand_dc(schedule, reference, mbs, make)
    for got, want in zip(stages, reference):
        assert all(torch.equal(a, b) for a, b in zip(got.parameters(), want.parameters()))
    # the correction changes the numbers: not 2BW under another name
    _, plain = run("2bw", schedule, copy.deepcopy(initial), mbs, make)
    assert plain.losses[:2 * N] == result.losses[:2 * N]  # no delay before update 2 applies
    assert plain.losses != result.losses
    weights = [sum(p.nbytes for p in m.parameters()) for m in initial]
    # the mean-square buffer plus the one kept step of 2BW's one-step delay
    assert [p["dc_buffer"] for p in result.peak_bytes] == [2 * w for w in weights]


def test_dc_resumes_mid_flight_bitwise():
    P, N, K, stop = 3, 2, 5, 3
    make = lambda ps: torch.optim.AdamW(ps, lr=0.01)  # noqa: E731
    schedule = build_method_schedule("dc", P, N, num_minibatches=K)
    initial, mbs = blocks(P), data(N * K)
    straight_stages = copy.deepcopy(initial)
    _, straight = run("dc", schedule, straight_stages, mbs, make)
    first = LocalExecutor(schedule, copy.deepcopy(initial), loss_fn=nn.functional.cross_entropy,
                          optimizer_factory=make, method_options=method_options("dc"))
    part1 = first.run(mbs, stop_after_updates=stop)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed = copy.deepcopy(initial)
    second = LocalExecutor(schedule, resumed, loss_fn=nn.functional.cross_entropy,
                           optimizer_factory=make, method_options=method_options("dc"))
    second.load_state_dict(torch.load(buffer, weights_only=False))
    part2 = second.run(mbs)
    assert part1.losses + part2.losses == straight.losses
    for got, want in zip(resumed, straight_stages):
        assert all(torch.equal(a, b) for a, b in zip(got.parameters(), want.parameters()))


def test_the_plugin_registers_its_methods_in_methods():
    for name, module in (("wpred", "weight_prediction"), ("nesterov", "nesterov"),
                         ("dc", "delay_compensation")):
        assert METHODS[name].module == f"pipemare_lite.methods.{module}"


# ---------------------------------------------------------------- every rank
BEYOND = "pipemare_lite.methods.beyond"
RUNS = {
    "wpred": dict(num_microbatches=2, optimizer="sgd", lr=0.05, momentum=0.9),
    "nesterov": dict(num_microbatches=2, optimizer="sgd", lr=0.05, momentum=0.9),
    "dc": dict(num_microbatches=2, optimizer="adamw", lr=0.003),
}
SAME = ("loss", "evals", "stage_lr", "forward_delay", "memory_bytes_by_stage", "memory_bytes")


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(RUNS))
def test_chapter_12_methods_are_bitwise_equal_locally_and_under_launch(method):
    from pipemare_lite import fit
    from pipemare_lite.engine.distributed.launch import launch
    from pipemare_lite.training.datasets import load
    from pipemare_lite.training.dist_fit import fit_worker
    from pipemare_lite.training.models import mlp

    options = dict(method=method, num_stages=2, batch_size=64, epochs=1, progress=False,
                   **RUNS[method])
    model = dict(in_features=64, hidden=16, depth=2, out_features=10, seed=0)
    local = fit(mlp(**model), load("digits"), **options).to_dict()
    launched = launch(fit_worker, 2, timeout=240, imports=[BEYOND], args=(
        dict(options, model=(mlp, model), data=(load, {"name": "digits"})),))
    for history in launched:
        for key in SAME:
            assert history[key] == local[key], key


def test_the_command_line_trains_the_methods_through_the_plugin(capsys):
    import json

    from pipemare_lite.cli import main

    for method in ("nesterov", "dc"):
        assert main(["train", "--plugin", BEYOND, "--method", method, "--stages", "2",
                     "--microbatches", "2", "--batch-size", "64", "--epochs", "1",
                     "--width", "16", "--json", "--no-progress"]) == 0
        summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        kind = {"nesterov": "prediction", "dc": "dc_buffer"}[method]
        assert summary["steps"] > 0 and summary["memory_bytes"][kind] > 0


# ---------------------------------------------------------------- built in, imported on use
LAZY_BUILT_INS = r"""
import sys
import pipemare_lite.methods.registry as registry
from pipemare_lite.methods.tradeoff import tradeoff_table  # the table's reader: torch-free
assert "torch" not in sys.modules and "wpred" not in registry.METHODS
assert registry.get_method("dc").module == "pipemare_lite.methods.delay_compensation"
try:  # a chapter-12 name is taken before its file is imported: refused, not shadowed
    registry.register_method("wpred", schedule="async")
except ValueError as error:
    assert "already registered (by pipemare_lite.methods.weight_prediction)" in str(error)
else:
    raise AssertionError("registering 'wpred' over the built-in was accepted")
from pipemare_lite.methods import METHODS
print(" ".join(sorted(METHODS)))
"""


def test_chapter_12_methods_are_built_in_but_imported_on_first_use():
    """``pipemare_lite.methods`` and its table load no torch; the first lookup of a chapter
    12 name imports the file that registers it; the package lists all of them."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", LAZY_BUILT_INS], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == sorted(
        ["gpipe", "1f1b", "interleaved", "zb-h1", "pipedream", "2bw", "async", "pipemare",
         "wpred", "nesterov", "dc", "pipemare-m"])
