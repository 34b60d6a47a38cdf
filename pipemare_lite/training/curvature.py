"""How curved the loss is along each stage's weights: chapter 06's lambda, measured (chapter 07).

The stability bound of delayed gradient descent is a bound on a product: a delay of tau
updates is stable for ``0 < alpha * lam < 2 sin(pi / (2 (2 tau + 1)))``, where ``lam`` is
the curvature of the loss in the direction the step takes. For a network the curvature
along stage s's weights is the **sharpness** of its block of the Hessian: the largest eigenvalue of

    H_s = d^2 loss / d w_s^2     (w_s: all of stage s's parameters, the others held fixed),

the diagonal block of the full Hessian that belongs to stage s. :func:`stage_sharpness` finds
it by power iteration with Hessian-vector products (never forming H_s): start from a random
unit vector v, repeat ``v <- H_s v / ||H_s v||``; the Rayleigh quotient ``v . H_s v`` tends to
the eigenvalue of largest magnitude. When that one is negative (a direction of negative
curvature dominates), the iteration is repeated on ``H_s - mu I`` with ``mu`` that negative
value, whose largest-magnitude eigenvalue is then ``lam_max - mu``: the largest positive
eigenvalue, the one a gradient step oscillates along.

What it does not say: a network is not a quadratic, its curvature changes as it trains, and
the blocks are coupled (the full Hessian is not block-diagonal). The book uses these
numbers to *place* each stage on the stability map, not to predict a step exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import nn

from pipemare_lite.training.evaluation import classification_loss, forward_through


def _unit(vectors: list[torch.Tensor]) -> list[torch.Tensor]:
    norm = torch.sqrt(sum((v * v).sum() for v in vectors))
    return [v / norm for v in vectors]


def _dot(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return float(sum((x * y).sum() for x, y in zip(a, b)))


def power_iteration(hvp: Callable, start: list[torch.Tensor], iterations: int,
                    shift: float = 0.0) -> float:
    """Largest-magnitude eigenvalue of ``H - shift I`` (``hvp(v) = H v``), plus ``shift``."""
    v = _unit(start)
    value = 0.0
    for _ in range(iterations):
        hv = [h - shift * x for h, x in zip(hvp(v), v)]
        value = _dot(hv, v)
        v = _unit(hv)
    return value + shift


def stage_sharpness(
    stages: Sequence[nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    loss_fn: Callable | None = None,
    iterations: int = 20,
    seed: int = 0,
    scales: Sequence[Sequence[torch.Tensor] | None] | None = None,
) -> list[float]:
    """Per stage, the largest eigenvalue of the Hessian of the loss in that stage's weights.

    Args:
        stages: the pipeline's stages in order (``nn.Module`` each; a model cut by
            :func:`pipemare_lite.training.partition.partition`); the loss is that of running ``x``
            through all of them.
        x, y: the samples the loss is measured on (a fixed batch: the same for every stage).
        loss_fn: ``loss_fn(output, target)``, a mean over samples (default: cross-entropy).
        iterations: power-iteration steps per stage (each one Hessian-vector product).
        seed: the random start vector's seed (the global torch RNG is left untouched).
        scales: per stage, one tensor per trainable parameter, ``d ** 0.5`` for a diagonal
            preconditioner ``d`` (or None: none). The eigenvalue is then that of
            ``D^(1/2) H_s D^(1/2)``: the curvature an optimizer that steps ``lr * d * g``
            meets (Adam's ``d = 1 / (sqrt(v_hat) + eps)``: :func:`adam_scales`).

    Returns:
        ``[lam_0, ..., lam_{P-1}]``: stage s's sharpness, in the units of the loss per unit
        of squared weight change, so that ``lr * lam_s`` is the bound's ``alpha * lam``. A
        stage without parameters gets 0.0.
    """
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be a positive integer, got {iterations!r}")
    loss_fn = loss_fn or classification_loss
    generator = torch.Generator().manual_seed(seed)
    values = []
    for index, stage in enumerate(stages):
        params = [p for p in stage.parameters() if p.requires_grad]
        if not params:
            values.append(0.0)
            continue
        loss = loss_fn(forward_through(stages, x), y)
        grads = torch.autograd.grad(loss, params, create_graph=True)
        root = None if scales is None else scales[index]

        def hvp(v, grads=grads, params=params, root=root):
            if root is not None:  # D^(1/2) H D^(1/2) v
                v = [r * t for r, t in zip(root, v)]
            hv = [h.detach() for h in torch.autograd.grad(grads, params, v, retain_graph=True)]
            return hv if root is None else [r * t for r, t in zip(root, hv)]

        start = [torch.randn(p.shape, generator=generator, dtype=p.dtype) for p in params]
        value = power_iteration(hvp, start, iterations)
        if value < 0:  # a negative direction dominated: shift it away, find the top one
            value = power_iteration(hvp, start, iterations, shift=value)
        values.append(value)
    return values


def adam_scales(optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> list:
    """``d ** 0.5`` per parameter for Adam's (or AdamW's) step ``lr * m_hat * d``,
    ``d = 1 / (sqrt(v_hat) + eps)`` with ``v_hat`` the bias-corrected second moment: the
    ``scales`` of :func:`stage_sharpness` for one stage (a parameter without state yet gets
    ``1 / eps``, where Adam's first step is)."""
    roots = []
    for param in params:
        group = next(g for g in optimizer.param_groups if any(p is param for p in g["params"]))
        beta2, eps = group["betas"][1], group["eps"]
        state = optimizer.state.get(param, {})
        if "exp_avg_sq" not in state:
            roots.append(torch.full_like(param, eps ** -0.5))
            continue
        step = float(state["step"])
        v_hat = state["exp_avg_sq"] / (1 - beta2 ** step)
        roots.append((1.0 / (v_hat.sqrt() + eps)).sqrt())
    return roots
