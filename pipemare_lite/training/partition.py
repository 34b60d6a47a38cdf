"""Split a model into pipeline stages (introduced in chapter 01).

Three kinds of model (:func:`partition`):

- an ``nn.Sequential``: cut between its children (below);
- a list of modules: the same, each module a layer; as many modules as stages makes each
  module one stage (a plain list of stage modules);
- any other ``nn.Module``: traced and cut by PyTorch's own splitter
  (``torch.distributed.pipelining.pipeline()``, :mod:`pipemare_lite.training.split_module`)
  at the submodules that ``balance`` names, e.g. ``balance=["layer3"]``.

A pipeline puts consecutive layers of an ``nn.Sequential`` on consecutive stages. The
split is contiguous, every layer lands on exactly one stage, and no stage is empty, so
running the stages one after the other *is* the model (same modules, same parameters:
the stages share them with the original, nothing is copied).

How many layers go to each stage is the ``balance``:

- ``None``: as even as possible by layer count, earlier stages taking the remainder;
- ``"params"``: minimise the largest stage's parameter count (memory balance);
- ``"time"``: minimise the largest stage's measured forward+backward time on a sample
  input (speed balance; the slowest stage sets a pipeline's pace);
- a list of ints: explicit layer counts per stage.

Cost balancing solves the "linear partition" problem exactly: cut a sequence of costs into
k contiguous non-empty parts so the largest part sum is smallest.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

BALANCE_MODES = ("params", "time")


def _named_layers(model_or_layers) -> list[tuple[str, nn.Module]]:
    if isinstance(model_or_layers, nn.Sequential):
        return list(model_or_layers.named_children())
    if isinstance(model_or_layers, torch.Tensor) or not hasattr(model_or_layers, "__iter__"):
        raise TypeError("partition needs an nn.Module, an nn.Sequential or a list of modules, "
                        f"got {type(model_or_layers).__name__}")
    layers = list(model_or_layers)
    for i, layer in enumerate(layers):
        if not isinstance(layer, nn.Module):
            raise TypeError(f"layer {i} is a {type(layer).__name__}, not an nn.Module")
    return [(str(i), layer) for i, layer in enumerate(layers)]


def even_balance(num_layers: int, num_stages: int) -> list[int]:
    """Layer counts as even as possible: ``even_balance(7, 3) == [3, 2, 2]``."""
    base, extra = divmod(num_layers, num_stages)
    return [base + (1 if s < extra else 0) for s in range(num_stages)]


def balance_by_cost(costs: Sequence[float], num_stages: int) -> list[int]:
    """Contiguous non-empty split of ``costs`` into ``num_stages`` parts, smallest max part.

    Exact dynamic programme over (layers used, stages used); ties go to the split that
    puts more layers on earlier stages. Returns layer counts per stage.
    """
    n = len(costs)
    if not 1 <= num_stages <= n:
        raise ValueError(f"cannot split {n} layers into {num_stages} non-empty stages")
    prefix = [0.0]
    for c in costs:
        if c < 0:
            raise ValueError(f"layer costs must be non-negative, got {c}")
        prefix.append(prefix[-1] + float(c))
    inf = float("inf")
    # best[k][i]: smallest max part sum when the first i layers form k stages
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = 0.0
    for k in range(1, num_stages + 1):
        for i in range(k, n - (num_stages - k) + 1):
            for j in range(i - 1, k - 2, -1):  # last stage holds layers j .. i-1
                value = max(best[k - 1][j], prefix[i] - prefix[j])
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    counts, i = [], n
    for k in range(num_stages, 0, -1):
        j = cut[k][i]
        counts.append(i - j)
        i = j
    return counts[::-1]


def layer_params(layers: Sequence[nn.Module]) -> list[int]:
    """Number of parameters of each layer."""
    return [sum(p.numel() for p in layer.parameters()) for layer in layers]


def layer_times(layers: Sequence[nn.Module], sample: torch.Tensor, repeats: int = 3) -> list[float]:
    """Median forward+backward seconds of each layer on ``sample`` (passed through in order)."""
    times = []
    x = sample
    for layer in layers:
        runs = []
        for _ in range(repeats):
            inp = x.detach().requires_grad_(x.is_floating_point())
            start = time.perf_counter()
            out = layer(inp)
            if out.requires_grad:
                out.sum().backward()
            runs.append(time.perf_counter() - start)
        layer.zero_grad(set_to_none=True)
        times.append(sorted(runs)[len(runs) // 2])
        with torch.no_grad():
            x = layer(x)
    return times


def partition(
    model_or_layers,
    num_stages: int,
    *,
    balance: None | str | Sequence[int] = None,
    sample: torch.Tensor | None = None,
) -> list[nn.Sequential]:
    """Split ``model_or_layers`` into ``num_stages`` contiguous stages.

    Args:
        model_or_layers: an ``nn.Sequential`` (split between its children), a list of
            modules (layers, or one module per stage), or any other ``nn.Module`` (split by
            ``torch.distributed.pipelining.pipeline()`` at the split points ``balance``
            names: :func:`~pipemare_lite.training.split_module.split_module`).
        num_stages: how many stages; at most the number of layers.
        balance: ``None``, ``"params"``, ``"time"`` or explicit layer counts per stage; for
            any other ``nn.Module``, the names of the submodules where stages 1..P-1 begin
            (or ``{name: SplitPoint}``).
        sample: an input batch (one microbatch), needed for ``balance="time"`` and to trace
            a module that is no ``nn.Sequential``.

    Returns:
        ``num_stages`` ``nn.Sequential`` objects holding the original modules (shared, not
        copied) under their original child names; for a traced module, stage modules
        sharing its parameters.
    """
    if isinstance(model_or_layers, nn.Module) and not isinstance(model_or_layers,
                                                                 (nn.Sequential, nn.ModuleList)):
        if not isinstance(num_stages, int) or isinstance(num_stages, bool) or num_stages < 1:
            raise ValueError(f"num_stages must be a positive integer, got {num_stages!r}")
        if num_stages == 1 and not balance:
            return [model_or_layers]
        from pipemare_lite.training.split_module import split_module

        return split_module(model_or_layers, num_stages, balance or [], sample)
    named = _named_layers(model_or_layers)
    num_layers = len(named)
    if not isinstance(num_stages, int) or isinstance(num_stages, bool) or num_stages < 1:
        raise ValueError(f"num_stages must be a positive integer, got {num_stages!r}")
    if num_stages > num_layers:
        raise ValueError(
            f"cannot split {num_layers} layers into {num_stages} stages: at most {num_layers} "
            "stages (one layer each)"
        )
    layers = [layer for _, layer in named]
    if balance is None:
        counts = even_balance(num_layers, num_stages)
    elif isinstance(balance, str):
        if balance == "params":
            counts = balance_by_cost(layer_params(layers), num_stages)
        elif balance == "time":
            if sample is None:
                raise ValueError("balance='time' needs a sample input: partition(..., sample=x)")
            counts = balance_by_cost(layer_times(layers, sample), num_stages)
        else:
            raise ValueError(
                f"unknown balance mode {balance!r}; allowed: None, "
                f"{', '.join(repr(m) for m in BALANCE_MODES)} or a list of layer counts"
            )
    else:
        bad = [c for c in balance if isinstance(c, bool) or int(c) != c]
        if bad:
            raise ValueError(f"balance {list(balance)} must hold whole layer counts; got {bad}")
        counts = [int(c) for c in balance]
        if len(counts) != num_stages:
            raise ValueError(f"balance {counts} has {len(counts)} entries for {num_stages} stages")
        if any(c < 1 for c in counts):
            raise ValueError(f"balance {counts} has an empty stage; every stage needs >= 1 layer")
        if sum(counts) != num_layers:
            raise ValueError(
                f"balance {counts} sums to {sum(counts)} but the model has {num_layers} layers"
            )
    stages, start = [], 0
    for count in counts:
        stages.append(nn.Sequential(OrderedDict(named[start : start + count])))
        start += count
    return stages


@dataclass(frozen=True)
class PartitionedModel:
    """A picklable recipe for stage modules: ``partition(model_fn(**kwargs), num_stages)``.

    Introduced in chapter 11: a distributed job pickles it to every rank (e.g.
    :func:`pipemare_lite.engine.distributed.jobs.run_distributed`). ``model_fn`` is a module-level
    builder such as
    :func:`pipemare_lite.training.models.mlp`; it must be deterministic (seeded) so every rank
    builds the same weights.
    """

    model_fn: Callable
    num_stages: int
    kwargs: tuple = ()
    balance: object = None

    def __call__(self) -> list[nn.Module]:
        """Build the model and split it."""
        return partition(self.model_fn(**dict(self.kwargs)), self.num_stages,
                         balance=self.balance)
