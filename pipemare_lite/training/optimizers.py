"""Per-stage optimizers by name, and per-stage gradient clipping (chapter 07).

A pipeline builds one optimizer per stage, over that stage's parameters only, with a
*factory* ``factory(params) -> torch.optim.Optimizer``. :func:`make_optimizer_factory`
turns a name into such a factory:

- ``sgd``: ``torch.optim.SGD(lr, momentum, weight_decay)``;
- ``adam``: ``torch.optim.Adam(lr, weight_decay)`` (L2 weight decay, added to the gradient);
- ``adamw``: ``torch.optim.AdamW(lr, weight_decay)`` (decoupled weight decay);
- ``muon`` (only where ``torch.optim.Muon`` exists): :class:`MuonWithAdamW`, Muon for the
  stage's 2-D parameters (Linear weight matrices, embedding tables) and AdamW for every
  other one (biases, LayerNorm and BatchNorm weights, convolution kernels), because
  ``torch.optim.Muon`` accepts 2-D parameters only. One lr and one weight decay for both.

Adam's and AdamW's momentum lives in their ``betas``: a ``momentum`` given with them is
refused (:func:`check_optimizer_options`) instead of being silently ignored.

Gradient clipping (:func:`with_grad_clipping`). A pipeline stage sees only its own
gradients; clipping the norm over the *whole model* would need every stage's norm before
any stage may update (one all-reduce per update, and a wait on the slowest stage). What a
pipeline can do without communication is clip **per stage**: just before each optimizer
step, the gradients of the stage's parameters (summed over the minibatch's N microbatches,
each loss scaled by 1/N: the minibatch gradient) are scaled so that their joint L2 norm,
over all of that stage's parameters together, is at most ``max_norm``
(``torch.nn.utils.clip_grad_norm_`` on the stage's parameters). With one stage this is
ordinary whole-model clipping.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch.optim import Optimizer

#: Names :func:`make_optimizer_factory` accepts (``muon`` where torch provides it).
OPTIMIZERS = ("sgd", "adam", "adamw") + (("muon",) if hasattr(torch.optim, "Muon") else ())
#: torch.optim.Muon's own default momentum, used by ``muon`` when no momentum is given.
MUON_DEFAULT_MOMENTUM = 0.95


class MuonWithAdamW(Optimizer):
    """Muon on the 2-D parameters, AdamW on the rest, as one optimizer (for ``muon``).

    ``torch.optim.Muon`` orthogonalises 2-D updates and refuses any other shape, so a
    stage's parameters are split by shape: ``p.ndim == 2`` goes to ``torch.optim.Muon(lr,
    momentum, weight_decay)``, everything else to ``torch.optim.AdamW(lr, weight_decay)``.
    The two inner optimizers share this object's param groups (the Muon group first, then
    the AdamW group; an empty part has no group) and its state, so an lr scheduler, T1 and
    the memory accounting see one optimizer whose :meth:`step` steps both.

    Args:
        params: the stage's parameters.
        lr: learning rate of both parts (Muon applies its own shape adjustment,
            ``adjust_lr_fn=None``, i.e. "original").
        momentum: Muon's momentum (Nesterov, as torch's default).
        weight_decay: decoupled weight decay of both parts.
    """

    def __init__(self, params: Iterable[torch.Tensor], *, lr: float,
                 momentum: float = MUON_DEFAULT_MOMENTUM, weight_decay: float = 0.0) -> None:
        params = list(params)
        matrices = [p for p in params if p.ndim == 2]
        others = [p for p in params if p.ndim != 2]
        self._parts: list[Optimizer] = []
        if matrices:
            self._parts.append(torch.optim.Muon(matrices, lr=lr, momentum=momentum,
                                                weight_decay=weight_decay))
        if others:
            self._parts.append(torch.optim.AdamW(others, lr=lr, weight_decay=weight_decay))
        super().__init__([g for part in self._parts for g in part.param_groups], defaults={})
        self._share_groups_and_state()

    def _share_groups_and_state(self) -> None:
        """Point the inner optimizers at this object's group dicts and state."""
        start = 0
        for part in self._parts:
            count = len(part.param_groups)
            part.param_groups = self.param_groups[start:start + count]
            part.state = self.state
            start += count

    @torch.no_grad()
    def step(self, closure: Callable | None = None):
        """One Muon step on the matrices, one AdamW step on the rest."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for part in self._parts:
            part.step()
        return loss

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore both parts (``Optimizer.load_state_dict`` replaces the group dicts)."""
        super().load_state_dict(state_dict)
        self._share_groups_and_state()


def check_optimizer_options(name: str, momentum: float | None, weight_decay: float) -> None:
    """Refuse a bad optimizer name or an option the optimizer would silently ignore."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; allowed: {', '.join(OPTIMIZERS)}")
    if momentum is not None and not (isinstance(momentum, (int, float)) and momentum >= 0):
        raise ValueError(f"momentum must be a number >= 0, got {momentum!r}")
    if momentum is not None and not momentum < 1:  # never forgets a gradient: grows unbounded
        raise ValueError(f"momentum must be a number in [0, 1), got {momentum!r}")
    if not (isinstance(weight_decay, (int, float)) and weight_decay >= 0):
        raise ValueError(f"weight_decay must be a number >= 0, got {weight_decay!r}")
    if not weight_decay < math.inf:
        raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay!r}")
    if name in ("adam", "adamw") and momentum:
        raise ValueError(
            f"momentum={momentum} has no effect with optimizer {name!r} (its momentum is in "
            "its betas); drop the momentum, or use optimizer 'sgd' or 'muon'"
        )


def make_optimizer_factory(
    name: str, lr: float, momentum: float | None = 0.0, weight_decay: float = 0.0
) -> Callable:
    """``factory(params) -> optimizer`` for a name in :data:`OPTIMIZERS`.

    Every stage builds its own optimizer over its own parameters with the factory.
    ``momentum`` is SGD's (None: 0) or Muon's (None: torch's default 0.95); a non-zero
    momentum with ``adam``/``adamw`` is refused.
    """
    check_optimizer_options(name, momentum, weight_decay)
    if name == "sgd":
        return lambda params: torch.optim.SGD(
            params, lr=lr, momentum=momentum or 0.0, weight_decay=weight_decay
        )
    if name == "adam":
        return lambda params: torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return lambda params: torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    muon_momentum = MUON_DEFAULT_MOMENTUM if momentum is None else momentum
    return lambda params: MuonWithAdamW(
        params, lr=lr, momentum=muon_momentum, weight_decay=weight_decay
    )


def with_grad_clipping(factory: Callable, max_norm: float) -> Callable:
    """``factory`` whose optimizers first clip the stage's gradient norm to ``max_norm``.

    The clip runs as a step pre-hook (``Optimizer.register_step_pre_hook``), so it happens
    right before every ``optimizer.step()``, on the gradients of all the parameters the
    optimizer holds (the stage's): their joint L2 norm is brought to at most ``max_norm``
    by ``torch.nn.utils.clip_grad_norm_`` (see the module docstring for why per stage).
    """
    if not (isinstance(max_norm, (int, float)) and not isinstance(max_norm, bool)
            and max_norm > 0 and max_norm != float("inf")):
        raise ValueError(f"clip_grad_norm must be a positive finite number, got {max_norm!r}")

    def clip_before_step(optimizer: Optimizer, args, kwargs) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, max_norm)

    def clipped_factory(params, *, stage: int = 0):
        from pipemare_lite.methods.hooks import call_stage_factory

        optimizer = call_stage_factory(factory, params, stage)  # stage= if factory takes it
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"the optimizer factory returned {type(optimizer).__name__}, "
                            "not a torch.optim.Optimizer")
        optimizer.register_step_pre_hook(clip_before_step)
        return optimizer

    return clipped_factory
