"""The book's three small networks, each an ``nn.Sequential`` (introduced in chapter 01).

Every model is a flat ``nn.Sequential`` whose children are the units a pipeline may put on
separate stages: one hidden layer of the MLP, one residual block of the ResNet, one
Transformer block. :func:`pipemare_lite.training.partition.partition` cuts between children, so
"one layer per stage" (PipeMare's fine-grained setting, chapter 07) is simply
``num_stages == len(model)``.

Initialisation is deterministic: each builder takes a ``seed`` and draws its weights from
that seed alone, without disturbing the caller's global random state.

Normalisation under microbatching. A pipeline splits a minibatch into microbatches and
runs each one separately. BatchNorm would then normalise with the statistics of a
microbatch, not of the minibatch, so a pipelined run would not equal the single-device
run it is meant to reproduce, and its running-statistics buffers would be a second kind of
state to version under asynchrony. The ResNet therefore uses GroupNorm and the Transformer
LayerNorm: both normalise each sample on its own, so the result does not depend on how the
batch is cut, and both carry only ordinary parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _seeded(build, seed: int) -> nn.Sequential:
    """Run ``build()`` with the global torch RNG seeded by ``seed``, then restore it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build()


# --------------------------------------------------------------------------- MLP


def mlp(
    in_features: int, hidden: int, depth: int, out_features: int, *, seed: int = 0
) -> nn.Sequential:
    """A multilayer perceptron with ``depth`` linear layers, one child per layer.

    Children 0 .. depth-2 are ``Linear + ReLU`` blocks (the first also flattens its input,
    so images of any shape work); the last child is the output ``Linear`` producing logits.
    ``len(mlp(...)) == depth``, so ``depth`` stages put one layer on each.
    """
    _check_positive(in_features=in_features, hidden=hidden, depth=depth, out_features=out_features)

    def build() -> nn.Sequential:
        layers: list[nn.Module] = []
        width = in_features
        for i in range(depth - 1):
            block = [nn.Flatten()] if i == 0 else []
            block += [nn.Linear(width, hidden), nn.ReLU()]
            layers.append(nn.Sequential(*block))
            width = hidden
        head = nn.Linear(width, out_features)
        layers.append(nn.Sequential(nn.Flatten(), head) if depth == 1 else head)
        model = nn.Sequential(*layers)
        # He initialisation for the ReLU layers: PyTorch's default shrinks the signal by
        # about 1/sqrt(3) per layer, so a deep MLP would barely train at first.
        for layer in model.modules():
            if isinstance(layer, nn.Linear) and layer is not head:
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                nn.init.zeros_(layer.bias)
        return model

    return _seeded(build, seed)


# --------------------------------------------------------------------------- ResNet


class ToImage(nn.Module):
    """Reshape flat inputs ``(B, C*H*W)`` to images ``(B, C, H, W)``; images pass through."""

    def __init__(self, channels: int, image_size: int) -> None:
        super().__init__()
        self.channels, self.image_size = channels, image_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            return x.view(x.shape[0], self.channels, self.image_size, self.image_size)
        return x


def _group_norm(channels: int) -> nn.GroupNorm:
    # Up to 8 groups, each holding a whole number of channels; per-sample statistics.
    groups = math.gcd(channels, 8)
    return nn.GroupNorm(groups, channels)


class ResidualBlock(nn.Module):
    """``relu(x + norm(conv(relu(norm(conv(x))))))``: one pipeline-stage-sized unit.

    The skip connection lives inside the module, so cutting the network between blocks
    never has to carry two tensors from one stage to the next.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm1 = _group_norm(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm2 = _group_norm(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return torch.relu(x + out)


def small_resnet(
    channels: int = 16,
    blocks: int = 6,
    num_classes: int = 10,
    in_channels: int = 1,
    image_size: int = 8,
    *,
    seed: int = 0,
) -> nn.Sequential:
    """A small ResNet: stem, ``blocks`` residual blocks, head (``blocks + 2`` children).

    The stem is ``conv3x3 + GroupNorm + ReLU`` (it also reshapes flat inputs of length
    ``in_channels * image_size**2``); the head averages each channel over the four
    quadrants of the image (2x2 pooling) and applies a linear classifier. Resolution is kept
    (no striding): the images are 8x8.
    """
    _check_positive(
        channels=channels,
        blocks=blocks,
        num_classes=num_classes,
        in_channels=in_channels,
        image_size=image_size,
    )

    def build() -> nn.Sequential:
        stem = nn.Sequential(
            ToImage(in_channels, image_size),
            nn.Conv2d(in_channels, channels, 3, padding=1, bias=False),
            _group_norm(channels),
            nn.ReLU(),
        )
        body = [ResidualBlock(channels) for _ in range(blocks)]
        # Pool to 2x2, not 1x1: where a stroke sits matters for digits, and a fully global
        # average throws that away (training then stalls around 60% on the 8x8 digits).
        head = nn.Sequential(
            nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(4 * channels, num_classes)
        )
        return nn.Sequential(stem, *body, head)

    return _seeded(build, seed)


# --------------------------------------------------------------------------- Transformer


class TokenEmbedding(nn.Module):
    """Token embedding plus a learned position embedding: ``(B, T)`` ints -> ``(B, T, d)``."""

    def __init__(self, vocab: int, d_model: int, seq_len: int) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.token = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(seq_len, d_model)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[-1] > self.seq_len:
            raise ValueError(f"sequence length {tokens.shape[-1]} exceeds seq_len={self.seq_len}")
        positions = torch.arange(tokens.shape[-1], device=tokens.device)
        return self.token(tokens) + self.position(positions)


class SelfAttention(nn.Module):
    """Multi-head self-attention written out (no fused kernel), without a causal mask.

    The tasks here (reverse, sort) read the whole input sequence to produce each output
    position, so every position may attend to every other.
    """

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, d_model = x.shape
        head_dim = d_model // self.heads
        q, k, v = self.qkv(x).split(d_model, dim=-1)
        # (B, T, d) -> (B, heads, T, head_dim)
        q, k, v = (t.view(batch, length, self.heads, head_dim).transpose(1, 2) for t in (q, k, v))
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(head_dim), dim=-1)
        mixed = (weights @ v).transpose(1, 2).reshape(batch, length, d_model)
        return self.out(mixed)


class TransformerBlock(nn.Module):
    """A pre-norm Transformer block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))``."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attention = SelfAttention(d_model, heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.feedforward = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.feedforward(self.norm2(x))


def tiny_transformer(
    vocab: int = 16,
    d_model: int = 32,
    heads: int = 2,
    layers: int = 4,
    seq_len: int = 8,
    *,
    seed: int = 0,
) -> nn.Sequential:
    """A tiny encoder-only Transformer: embedding, ``layers`` blocks, head.

    Input ``(B, T)`` token ids, output ``(B, T, vocab)`` logits, one prediction per
    position (for sequence-to-sequence toy tasks of equal length such as reversal and
    sorting). ``layers + 2`` children.
    """
    _check_positive(vocab=vocab, d_model=d_model, heads=heads, layers=layers, seq_len=seq_len)
    if d_model % heads:
        raise ValueError(f"d_model={d_model} is not divisible by heads={heads}")

    def build() -> nn.Sequential:
        embed = TokenEmbedding(vocab, d_model, seq_len)
        body = [TransformerBlock(d_model, heads) for _ in range(layers)]
        head = nn.Sequential(nn.LayerNorm(d_model), nn.Linear(d_model, vocab))
        return nn.Sequential(embed, *body, head)

    return _seeded(build, seed)


#: Model builders by the name the CLI uses (plugins add theirs: :func:`register_model`).
MODELS = {"mlp": mlp, "resnet": small_resnet, "transformer": tiny_transformer}


@dataclass(frozen=True)
class ModelPlugin:
    """A model a plugin registered for the command line (:func:`register_model`)."""

    build: Callable
    split_points: Sequence[str] | Callable | None = None
    dataset: str = "signals"

    def balance(self, num_stages: int):
        """The split points for ``num_stages`` stages (``fit``'s ``balance``), or None."""
        points = self.split_points
        return points(num_stages) if callable(points) else points


#: Models that plugins registered, by name (also in :data:`MODELS`).
MODEL_PLUGINS: dict[str, ModelPlugin] = {}


def register_model(name: str, build: Callable, *, split_points=None,
                   dataset: str = "signals") -> None:
    """Make ``--model name`` build a user's model (issue 44): from a ``--plugin`` module
    (:mod:`pipemare_lite.plugins`), in every process of the run, torchrun's ranks included.

    ``build(data=dataset, num_stages=P, seed=seed)`` returns the model (deterministic in
    ``seed``: every rank builds the same weights): an ``nn.Sequential``, a list of stage
    modules, or any ``nn.Module`` with ``split_points``, the submodules where stages
    1..P-1 begin (a list, or a function ``P -> list``), for torch's splitter
    (:mod:`pipemare_lite.training.split_module`). ``dataset``: the default ``--dataset``.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"a model's name is an identifier, got {name!r}")
    if name in MODELS and name not in MODEL_PLUGINS:
        raise ValueError(f"model {name!r} is one of the book's ({', '.join(MODELS)}); "
                         "choose another name")
    if not callable(build):
        raise ValueError(f"build must be a function build(data, num_stages, seed), got "
                         f"{build!r}")
    MODELS[name] = build
    MODEL_PLUGINS[name] = ModelPlugin(build, split_points, dataset)
