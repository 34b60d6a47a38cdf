"""The paper's arithmetic (chapter 10): ResNet-50's layers from their shapes, the 4.3x
utilization ratio and the memory ratios, against plainly written references."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from pipemare_lite.analysis.formulas import async_speedup_over_gpipe
from pipemare_lite.analysis.memory import MemoryProfile, memory_by_kind
from pipemare_lite.analysis.simulate import OpCosts, simulate_and_measure
from pipemare_lite.experiments.paper_arithmetic import (
    group_layers,
    layer_profile,
    pipedream_stash_closed_form,
    ratio_closed_form,
    resnet50_layers,
    stash_copies_needed,
    weight_memory,
    weight_memory_ratio,
)
from pipemare_lite.schedules import build_schedule


class Bottleneck(nn.Module):
    """torchvision's ResNet-50 bottleneck (v1.5: the stride on the 3x3), written out."""

    def __init__(self, c_in, width, stride):
        super().__init__()
        out = 4 * width
        self.conv1, self.bn1 = nn.Conv2d(c_in, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or c_in != out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, out, 1, stride, bias=False),
                                            nn.BatchNorm2d(out))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + (x if self.downsample is None else self.downsample(x)))


def torch_resnet50():
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    c = 64
    for blocks, width, stride in ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)):
        for b in range(blocks):
            layers.append(Bottleneck(c, width, stride if b == 0 else 1))
            c = 4 * width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 1000))


def test_resnet50_layers_match_a_torch_build_layer_by_layer():
    model = torch_resnet50()
    weighted = [m for m in model.modules()
                if isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.Linear))]
    outputs = []
    hooks = [m.register_forward_hook(lambda m, i, o: outputs.append(o[0].numel()))
             for m in weighted]
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, 224, 224))
    for h in hooks:
        h.remove()
    # the forward calls the projection shortcut after conv3/bn3, as the module lists it
    ours = resnet50_layers()
    assert [layer.kind for layer in ours] == [
        {nn.Conv2d: "conv", nn.BatchNorm2d: "bn", nn.Linear: "fc"}[type(m)] for m in weighted]
    assert [layer.params for layer in ours] == [sum(p.numel() for p in m.parameters())
                                                for m in weighted]
    assert [layer.output_elements for layer in ours] == outputs
    assert len(ours) == 107
    # torchvision's model documentation lists 25,557,032 parameters for resnet50
    assert sum(p.numel() for p in model.parameters()) == sum(x.params for x in ours) == 25_557_032


def test_group_layers_keeps_every_layer_in_order():
    layers = resnet50_layers()
    for P in (1, 2, 16, 106, 107):
        stages = group_layers(layers, P)
        assert len(stages) == P and [x for s in stages for x in s] == layers
        assert max(map(len, stages)) - min(map(len, stages)) <= 1
    with pytest.raises(ValueError, match="num_stages=108"):
        group_layers(layers, 108)
    with pytest.raises(ValueError, match="image_size=100"):
        resnet50_layers(image_size=100)


def test_layer_profile_sums_params_and_scales_activations():
    layers = resnet50_layers()
    p = layer_profile(layers, 4, optimizer="adam", microbatch_size=3)
    stages = group_layers(layers, 4)
    assert p.param_bytes == [4 * sum(x.params for x in s) for s in stages]
    assert p.activation_bytes == [12 * sum(x.output_elements for x in s) for s in stages]
    assert p.optimizer == "adam"


def test_the_4_3x_is_the_simulated_ratio_at_p107_n32():
    P, N = 107, 32
    gpipe = simulate_and_measure(build_schedule("gpipe", P, N), OpCosts())[1].utilization
    steady = simulate_and_measure(build_schedule("async", P, N, num_minibatches=9),
                                  OpCosts())[1].full_pipeline_utilization
    assert steady == 1.0
    assert steady / gpipe == pytest.approx(async_speedup_over_gpipe(P, N)) == 138 / 32
    assert round(138 / 32, 1) == 4.3 and async_speedup_over_gpipe(P, 8) == 14.25  # "14.3x"


def _equal_profile(P, optimizer="momentum"):
    return MemoryProfile([400 * (s + 1) for s in range(P)], [0] * P, optimizer)


@pytest.mark.parametrize("P,N", [(2, 1), (4, 1), (4, 2), (5, 3), (8, 2), (8, 8), (6, 4)])
def test_pipedream_stash_closed_form_equals_the_memory_model(P, N):
    profile = _equal_profile(P)
    assert weight_memory("pipedream", profile, N)["stash"] == \
        pipedream_stash_closed_form(profile, N) == \
        sum(math.ceil((P - 1 - s) / N) * b for s, b in enumerate(profile.param_bytes))


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_weight_memory_by_method(optimizer):
    P, N = 5, 4
    profile = _equal_profile(P, optimizer)
    W = sum(profile.param_bytes)
    k = {"sgd": 0, "momentum": 1, "adam": 2}[optimizer]
    assert weight_memory("1f1b", profile, N) == \
        {"weights": W, "stash": 0, "t2_buffer": 0, "optimizer": k * W}
    assert weight_memory("2bw", profile, N)["stash"] == W
    assert weight_memory("async", profile, N)["t2_buffer"] == 0
    assert weight_memory("pipemare", profile, N) == \
        {"weights": W, "stash": 0, "t2_buffer": W, "optimizer": k * W}
    # the ratio is the closed form in average stashed copies
    c = pipedream_stash_closed_form(profile, N) / W
    assert weight_memory_ratio(profile, N) == pytest.approx(ratio_closed_form(c, optimizer))


def test_stash_copies_needed_inverts_the_ratio():
    for optimizer in ("sgd", "momentum", "adam"):
        c = stash_copies_needed(2.7, optimizer)
        assert ratio_closed_form(c, optimizer) == pytest.approx(2.7)
    assert stash_copies_needed(2.7, "momentum") == pytest.approx(6.1)
    with pytest.raises(ValueError, match="ratio=0"):
        stash_copies_needed(0, "sgd")


def test_weight_memory_agrees_with_memory_by_kind_on_a_resnet50_profile():
    profile = layer_profile(resnet50_layers(), 107)
    schedule = build_schedule("pipedream", 107, 32, num_minibatches=9)
    peaks = memory_by_kind(schedule, profile)
    assert weight_memory("pipedream", profile, 32)["stash"] == sum(d["stash"] for d in peaks)
