"""The private torch calls of the hot path sit in pipemare_lite.torch_compat (issue 44): it
checks torch's version, falls back to the public calls, and training gives the same bits
both ways; each way calls what it says it calls."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.graph

from pipemare_lite import torch_compat
from pipemare_lite.training.datasets import Dataset, digits
from pipemare_lite.training.loop import fit
from pipemare_lite.training.models import mlp

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def public_only():
    previous = torch_compat.use_private(False)
    yield
    torch_compat.use_private(previous)


def _train(method: str, **options):
    d = digits(seed=0)
    data = Dataset("digits-small", d.x_train[:96], d.y_train[:96], d.x_test[:16],
                   d.y_test[:16], 10, d.input_shape, d.provenance)
    model = mlp(64, 16, 4, 10, seed=1)
    history = fit(model, data, method=method, num_stages=4, num_microbatches=4,
                  batch_size=32, epochs=2, lr=0.05, momentum=0.9, progress=False, **options)
    return history.loss, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize(("method", "options"), [("1f1b", {}), ("pipemare", {"t2": True})])
def test_the_same_bits_with_and_without_the_private_calls(method, options):
    assert torch_compat.private_in_use()  # this torch (2.13) is a checked one
    loss, weights = _train(method, **options)
    previous = torch_compat.use_private(False)
    try:
        public_loss, public_weights = _train(method, **options)
    finally:
        torch_compat.use_private(previous)
    assert loss == public_loss
    assert all(torch.equal(a.view(torch.int32), b.view(torch.int32))
               for a, b in zip(weights, public_weights))


def _trap(*args, **kwargs):
    raise AssertionError("a private torch call with the shortcuts off")


def test_the_public_way_calls_no_private_function(public_only, monkeypatch):
    monkeypatch.setitem(torch_compat._PRIVATE, "engine_run_backward", _trap)
    monkeypatch.setattr(torch, "_foreach_sub", _trap)
    monkeypatch.setattr(torch, "_foreach_mul", _trap)
    monkeypatch.setitem(torch_compat._PRIVATE, "profiling", _trap)  # the shortcut's first
    loss, _ = _train("pipemare", t2=True)
    assert len(loss) == 6


def test_the_private_way_calls_the_shortcuts(monkeypatch):
    calls = []
    engine_call = torch_compat._PRIVATE["engine_run_backward"]

    def counted(*args, **kwargs):
        calls.append("backward")
        return engine_call(*args, **kwargs)

    monkeypatch.setitem(torch_compat._PRIVATE, "engine_run_backward", counted)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch_compat.backward(model(torch.ones(2, 3)).sum(), None)
    before = model.weight.detach().clone()
    stepped = []
    monkeypatch.setattr(torch.optim.SGD, "_optimizer_step_code",
                        lambda self: stepped.append("step"))
    torch_compat.optimizer_step(optimizer)
    assert calls == ["backward"] and stepped == ["step"]
    assert torch.equal(model.weight.detach(), before - 0.1 * model.weight.grad)


@pytest.mark.parametrize(("version", "checked"), [
    ("2.13.0+cpu", True), ("2.4.1", True), ("2.3.0", False), ("1.13.1", False),
    ("3.0.0", False), ("nightly", False)])
def test_the_version_check(version, checked):
    assert torch_compat.version_checked(version) is checked


def test_an_unchecked_torch_or_missing_names_get_the_public_calls(monkeypatch):
    monkeypatch.setattr(torch.autograd.graph, "_engine_run_backward", None, raising=False)
    monkeypatch.delattr(torch.autograd.graph, "_engine_run_backward")
    assert torch_compat._resolve() is None  # a torch without the name
    monkeypatch.setattr(torch_compat, "_PRIVATE", None)
    previous = torch_compat.use_private(True)  # asked for, not available: public
    try:
        assert not torch_compat.private_in_use()
        model = torch.nn.Linear(3, 1)
        torch_compat.backward(model(torch.ones(2, 3)).sum(), None)
        assert model.weight.grad is not None
    finally:
        torch_compat._use = previous


def test_the_environment_switch_gives_the_public_calls():
    import os
    import subprocess
    import sys

    child = "from pipemare_lite import torch_compat as c; print(c.private_in_use())"
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         env={**os.environ, "PIPEMARE_PUBLIC_TORCH": "1"}, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
