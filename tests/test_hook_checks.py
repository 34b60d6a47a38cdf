"""What a method's hooks return is checked where the engine uses it (issue #33, items 1 and 7).

Before, a ``backward_weights`` returning ``p.t().contiguous()`` trained on garbage without a
word (the backward rebuilds a saved ``weight.t()`` view with ``as_strided`` over whatever
storage it is handed), too few tensors were ignored, a float64 weight or a factory without
``info`` gave raw torch or Python errors. Each now stops with the method, the hook, the stage
and (for weights) the parameter named; every test below shows the message it expects.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import METHODS, HookError, MethodHooks, method_options, register_method
from pipemare_lite.methods.registry import build_method_schedule
from pipemare_lite.methods.versions import ParamRef

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py

WIDTH = 6


def blocks(seed: int = 0) -> list[nn.Sequential]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()), nn.Sequential(nn.Linear(WIDTH, 3))]


def data(count: int = 8):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, WIDTH, generator=g), torch.randint(0, 3, (4,), generator=g))
            for _ in range(count)]


@pytest.fixture
def method():
    """Register hooks as a throw-away method ``check-me`` on the async schedule; run it."""
    def run(hooks_factory, *, schedule="async", stop=None):
        register_method("check-me", schedule=schedule, hooks=hooks_factory,
                        replace_existing=True)
        options = method_options("check-me")
        sched = build_method_schedule("check-me", 2, 2, num_minibatches=4, options=options)
        executor = LocalExecutor(sched, blocks(), loss_fn=nn.functional.cross_entropy,
                                 optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=0.1),
                                 method_options=options)
        return executor.run(data(), stop_after_updates=stop)
    yield run
    METHODS.pop("check-me", None)


class Backward(MethodHooks):
    """Returns ``make(params)`` as the backward's weights."""

    def __init__(self, info, make):
        self.params, self.make = list(info.params), make

    def backward_weights(self, microbatch, forward_version, version):
        """The weights ``make`` builds."""
        return self.make(self.params)


def backward_returning(make):
    return lambda info: Backward(info, make)


def test_transposed_weight_is_refused_with_method_hook_stage_and_parameter(method):
    transposed = backward_returning(lambda ps: [p.detach().t().contiguous() if p.dim() == 2
                                                else p.detach() for p in ps])
    with pytest.raises(HookError) as error:
        method(transposed)
    message = str(error.value)
    assert message.startswith("method 'check-me', hook backward_weights, stage 1, parameter 0 "
                              "('0.weight'): shape (6, 3), the parameter's is (3, 6)")
    assert "allowed: a tensor of shape (3, 6), torch.float32, on cpu" in message


def test_too_few_tensors_are_refused(method):
    with pytest.raises(HookError, match=r"method 'check-me', hook backward_weights, stage 1: "
                       r"returned 1 tensor\(s\) for 2 parameter\(s\) \(0.weight, 0.bias\); "
                       r"allowed: one per parameter"):
        method(backward_returning(lambda ps: [p.detach() for p in ps[:1]]))


def test_float64_weights_are_refused_before_torch_mixes_dtypes(method):
    class Forward(MethodHooks):
        def __init__(self, info):
            self.params = list(info.params)

        def forward_weights(self, microbatch, version):
            return [p.detach().double() for p in self.params]

    with pytest.raises(HookError, match=r"method 'check-me', hook forward_weights, stage 0, "
                       r"parameter 0 \('0.weight'\): dtype torch.float64, the parameter's is "
                       r"torch.float32"):
        method(Forward)


def test_not_a_list_and_not_a_tensor_are_refused(method):
    with pytest.raises(HookError, match=r"hook backward_weights, stage 1: returned generator; "
                       r"allowed: None or a list of 2 tensors"):
        method(backward_returning(lambda ps: (p.detach() for p in ps)))
    with pytest.raises(HookError, match=r"parameter 1 \('0.bias'\): got float, not a tensor"):
        method(backward_returning(lambda ps: [ps[0].detach(), 0.0]))
    # numpy arrays have a shape, a dtype and (numpy 2) a device: named as not tensors
    with pytest.raises(HookError, match=r"parameter 0 \('0.weight'\): got numpy.ndarray, not "
                       r"a tensor; allowed: a torch tensor of shape .*torch.from_numpy"):
        method(backward_returning(lambda ps: [p.detach().numpy() for p in ps]))


def test_factory_without_info_is_refused_with_its_signature(method):
    def no_info():
        return None

    with pytest.raises(HookError, match=r"method 'check-me', stage 0: the hooks factory "
                       r".*no_info\(\) must take one argument, info \(a StageInfo\)"):
        method(no_info)


def test_hook_with_wrong_signature_is_refused_when_the_stage_is_built(method):
    class Wrong(MethodHooks):
        def __init__(self, info):
            pass

        def backward_weights(self, microbatch):  # forgot forward_version, version
            return None

    with pytest.raises(HookError) as error:
        method(Wrong)
    assert str(error.value) == (
        "method 'check-me', hook backward_weights, stage 0: Wrong.backward_weights(microbatch) "
        "cannot be called as backward_weights(microbatch, forward_version, version); allowed: "
        "def backward_weights(self, microbatch, forward_version, version)")


def test_factory_returning_something_else_is_refused(method):
    with pytest.raises(HookError, match=r"method 'check-me', stage 0: its hooks factory "
                       r"returned 42; allowed: a MethodHooks \(subclass\) instance or None"):
        method(lambda info: 42)


def test_bad_lr_factor_is_refused(method):
    class Negative(MethodHooks):
        def __init__(self, info):
            pass

        def lr_factor(self, update):
            return -1.0 if update == 2 else None

    with pytest.raises(HookError, match=r"method 'check-me', hook lr_factor, stage \d, update 2: "
                       r"returned -1.0; allowed: None, a finite number >= 0"):
        method(Negative)


def test_right_weights_in_other_layouts_give_the_live_weights_numbers(method):
    """A correct version need not be a fresh contiguous tensor: a slice of one flat buffer
    (storage offset > 0) and a non-contiguous copy give the same numbers as the live weights
    (the backward's ``weight.t()`` view is rebuilt relative to the tensor's own offset)."""
    reference = method(None)

    def in_one_buffer(ps):
        flat = torch.cat([p.detach().reshape(-1) for p in ps])
        out, at = [], 0
        for p in ps:
            out.append(flat[at:at + p.numel()].view_as(p))
            at += p.numel()
        return out

    def non_contiguous(ps):
        return [p.detach().t().contiguous().t() if p.dim() == 2 else p.detach() for p in ps]

    for make in (in_one_buffer, non_contiguous):
        result = method(backward_returning(make))
        assert result.loss_by_microbatch == reference.loss_by_microbatch


def test_param_ref_rebuilds_a_view_relative_to_the_tensors_offset():
    weight = torch.arange(6.0).reshape(2, 3)
    ref = ParamRef(0, ((3, 2), (1, 3), 0))
    buffer = torch.cat([torch.full((5,), -1.0), weight.reshape(-1)])
    assert torch.equal(ref.materialize([buffer[5:].view(2, 3)]), weight.t())
    assert torch.equal(ref.materialize([weight.t().contiguous().t()]), weight.t())
