"""The paper's headline arithmetic, recomputed by the engine (chapter 10).

PipeMare's abstract (arXiv:1910.05124 v2) states "up to 2.7x less memory or 4.3x higher
pipeline utilization". This module redoes both sums with the book's own instruments:

- **4.3x**: an asynchronous pipeline's steady-state utilization over GPipe's at the same
  P and N, ``(N+P-1)/N`` (:func:`pipemare_lite.analysis.formulas.async_speedup_over_gpipe`), with
  P = 107 fine-grained stages and N = 32: the simulator measures both utilizations.
- **2.7x**: whether a memory ratio of that size can come out of the weight-sized memory
  (weights, stashes, T2's buffer, optimizer state) depends on the layer profile, on N and
  on what is compared. :func:`resnet50_layers` derives a ResNet-50-like profile from its
  public layer shapes (He et al., 2016; the torchvision layout), one entry per layer with
  weights, so that the memory model (:mod:`pipemare_lite.analysis.memory`) can be run over it.

Why 107: ResNet-50 has 53 convolutions (the stem, 3 per bottleneck block in 16 blocks and
4 projection shortcuts), 53 batch norms, one after each, and one fully connected layer:
53 + 53 + 1 = 107 layers with weights, one pipeline stage each. The skip connections cross
stages; a real pipeline would pass them along, which changes activations, not weights.

Counts are derived here from the shapes, never typed: a convolution k x k from c_in to
c_out channels has k*k*c_in*c_out weights (no bias: a batch norm follows); a batch norm
2*c (scale and shift; its running statistics are buffers, not trained weights); the
classifier 2048*1000 + 1000. A layer's activation is its output per sample (a proxy for
what its backward keeps: a convolution saves its input, the previous layer's output).
Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipemare_lite.analysis.memory import OPTIMIZER_STATES, MemoryProfile

#: ResNet-50's four stages: (bottleneck blocks, inner width, stride of the first block).
RESNET50_STAGES = ((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2))
#: A bottleneck's output has ``EXPANSION`` times its inner width.
EXPANSION = 4


@dataclass(frozen=True)
class Layer:
    """One layer with weights: its name, kind, trained parameters and output per sample.

    Attributes:
        name: e.g. ``"layer2.0.conv2"`` (torchvision's module names).
        kind: ``"conv"``, ``"bn"`` or ``"fc"``.
        params: trained parameters (weights and biases; no buffers).
        output_elements: elements of the layer's output for one sample.
    """

    name: str
    kind: str
    params: int
    output_elements: int


def _conv(name, c_in, c_out, k, size) -> Layer:
    return Layer(name, "conv", k * k * c_in * c_out, c_out * size * size)


def _bn(name, c, size) -> Layer:
    return Layer(name, "bn", 2 * c, c * size * size)


def resnet50_layers(image_size: int = 224, num_classes: int = 1000) -> list[Layer]:
    """ResNet-50's 107 layers with weights, in forward order, derived from its shapes.

    The stem is a 7x7 convolution with stride 2 and a 3x3 max pool with stride 2 (so a
    224 image is 56 x 56 entering the first stage); each stage's first block strides its
    3x3 convolution (torchvision's "v1.5") and adds a 1x1 projection shortcut, listed
    after the block's third convolution, as torchvision registers it.
    """
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 32 \
            or image_size % 32:
        raise ValueError(f"image_size={image_size!r}: allowed: a multiple of 32, >= 32")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(f"num_classes={num_classes!r}: allowed: an integer >= 1")
    size = image_size // 2
    layers = [_conv("conv1", 3, 64, 7, size), _bn("bn1", 64, size)]
    size //= 2  # max pool
    channels = 64
    for stage, (blocks, width, stride) in enumerate(RESNET50_STAGES, start=1):
        for b in range(blocks):
            name = f"layer{stage}.{b}"
            out_size = size // stride if b == 0 else size
            layers += [
                _conv(f"{name}.conv1", channels, width, 1, size), _bn(f"{name}.bn1", width, size),
                _conv(f"{name}.conv2", width, width, 3, out_size),
                _bn(f"{name}.bn2", width, out_size),
                _conv(f"{name}.conv3", width, width * EXPANSION, 1, out_size),
                _bn(f"{name}.bn3", width * EXPANSION, out_size),
            ]
            if b == 0:  # projection shortcut: new width (and stride)
                layers += [_conv(f"{name}.downsample.0", channels, width * EXPANSION, 1, out_size),
                           _bn(f"{name}.downsample.1", width * EXPANSION, out_size)]
            channels, size = width * EXPANSION, out_size
    layers.append(Layer("fc", "fc", channels * num_classes + num_classes, num_classes))
    return layers


def group_layers(layers: list[Layer], num_stages: int) -> list[list[Layer]]:
    """Consecutive layers in ``num_stages`` stages of nearly equal layer counts.

    The first ``len(layers) % num_stages`` stages get one layer more (like splitting a
    list into chunks); balancing by time would need a cost per layer, which we do not have.
    """
    n = len(layers)
    if isinstance(num_stages, bool) or not isinstance(num_stages, int) \
            or not 1 <= num_stages <= n:
        raise ValueError(f"num_stages={num_stages!r}: allowed: an integer in 1..{n}")
    base, extra = divmod(n, num_stages)
    stages, start = [], 0
    for s in range(num_stages):
        end = start + base + (1 if s < extra else 0)
        stages.append(layers[start:end])
        start = end
    return stages


def layer_profile(layers: list[Layer], num_stages: int, *, optimizer: str = "momentum",
                  microbatch_size: int = 1, dtype_bytes: int = 4) -> MemoryProfile:
    """A :class:`~pipemare_lite.analysis.memory.MemoryProfile` of ``layers`` cut into
    ``num_stages``.

    Per stage: its layers' parameters, and the activations of ``microbatch_size`` samples
    (the sum of its layers' outputs), both in ``dtype_bytes`` per element.
    """
    if isinstance(microbatch_size, bool) or not isinstance(microbatch_size, int) \
            or microbatch_size < 1:
        raise ValueError(f"microbatch_size={microbatch_size!r}: allowed: an integer >= 1")
    stages = group_layers(layers, num_stages)
    return MemoryProfile.from_counts(
        [sum(layer.params for layer in stage) for stage in stages],
        [microbatch_size * sum(layer.output_elements for layer in stage) for stage in stages],
        optimizer=optimizer, dtype_bytes=dtype_bytes)


def weight_memory(method: str, profile: MemoryProfile, num_microbatches: int) -> dict[str, int]:
    """Weights, stash, T2 buffer and optimizer state of ``method``, summed over the stages.

    Peaks from the memory model over a run long enough to reach the steady state
    (:func:`pipemare_lite.methods.tradeoff.long_enough`); ``"pipemare"`` counts T2's buffer.
    Activations are left out: they depend on the schedule, not on how the method treats the weights.
    """
    from pipemare_lite.analysis.memory import memory_by_kind
    from pipemare_lite.methods.tradeoff import long_enough, method_schedule

    P = len(profile.param_bytes)
    schedule, t2 = method_schedule(method, P, num_microbatches,
                                   long_enough(P, num_microbatches))
    peaks = memory_by_kind(schedule, profile, t2=t2)
    kinds = ("weights", "stash", "t2_buffer", "optimizer")
    return {kind: sum(d[kind] for d in peaks) for kind in kinds}


def pipedream_stash_closed_form(profile: MemoryProfile, num_microbatches: int) -> int:
    """PipeDream's stash bytes in steady state: stage s keeps ceil((P-1-s)/N) old copies.

    The copies equal PipeDream's forward delay (chapter 05); weighted by each stage's
    parameter bytes, so a profile whose weights sit in the last stages stashes little.
    """
    P = len(profile.param_bytes)
    return sum(math.ceil((P - 1 - s) / num_microbatches) * b
               for s, b in enumerate(profile.param_bytes))


def weight_memory_ratio(profile: MemoryProfile, num_microbatches: int,
                        over: str = "pipemare", baseline: str = "pipedream") -> float:
    """``baseline``'s weight-sized memory over ``over``'s (weights + stash + T2 + optimizer)."""
    num = sum(weight_memory(baseline, profile, num_microbatches).values())
    den = sum(weight_memory(over, profile, num_microbatches).values())
    if den == 0:
        raise ValueError("the profile has no parameter bytes; the ratio is undefined")
    return num / den


def ratio_closed_form(stash_copies: float, optimizer: str) -> float:
    """PipeDream over PipeMare with ``stash_copies`` model copies stashed on average.

    PipeDream holds 1 + c + k weight-sized copies (weights, c stashed, k optimizer states),
    PipeMare 1 + 1 + k (weights, T2's delta, optimizer). Solving for 2.7x gives the copies
    the claim needs: :func:`stash_copies_needed`.
    """
    k = OPTIMIZER_STATES[optimizer]
    return (1 + stash_copies + k) / (2 + k)


def stash_copies_needed(ratio: float, optimizer: str) -> float:
    """The average stashed copies of the whole model that make :func:`ratio_closed_form` = ratio."""
    if not ratio > 0:
        raise ValueError(f"ratio={ratio!r}: allowed: a number > 0")
    k = OPTIMIZER_STATES[optimizer]
    return ratio * (2 + k) - 1 - k
