"""The loss a pipeline trains on and the test-set evaluation (introduced in chapter 07).

:func:`pipemare_lite.training.loop.fit` hands :func:`classification_loss` to the executor (the last
stage computes it per microbatch) and calls :func:`evaluate` on the test set after every
epoch, running the test inputs through the stages in order, wherever each stage lives.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


def classification_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy averaged over samples (and positions, for per-token logits)."""
    if output.dim() > 2:  # (B, T, V) logits against (B, T) targets
        return F.cross_entropy(output.reshape(-1, output.shape[-1]), target.reshape(-1))
    return F.cross_entropy(output, target)


def forward_through(stages: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """Run ``x`` through the stages in order, moving it to each stage's device."""
    for stage in stages:
        device = next((p.device for p in stage.parameters()), x.device)
        x = stage(x.to(device))
    return x


@torch.no_grad()
def evaluate(model, x: torch.Tensor, y: torch.Tensor, batch_size: int = 512) -> dict:
    """Mean loss and accuracy on ``(x, y)`` (per position for sequences).

    ``model`` is a module or a list of stages (possibly on different devices).
    """
    stages = list(model) if isinstance(model, (list, tuple)) else [model]
    total_loss, correct, count = 0.0, 0, 0
    for i in range(0, len(x), batch_size):
        xb, yb = x[i : i + batch_size], y[i : i + batch_size]
        out = forward_through(stages, xb).cpu()
        logits = out.reshape(-1, out.shape[-1])
        targets = yb.reshape(-1)
        total_loss += float(F.cross_entropy(logits, targets, reduction="sum"))
        correct += int((logits.argmax(-1) == targets).sum())
        count += targets.numel()
    return {"loss": total_loss / count, "accuracy": correct / count}
