"""T2, discrepancy correction: extrapolate the backward's weights back towards the forward's
(introduced in chapter 09).

Without stashing, microbatch m's forward read version ``v_F`` and its backward reads the
newer ``v_B``: the computed gradient belongs to no single model (the *discrepancy*).
PipeMare keeps one weight-sized buffer per stage, an exponential moving average of recent
weight changes::

    delta <- gamma * delta + (1 - gamma) * (w_new - w_old)      after every update

and lets the backward use ``w - d * delta`` with ``d = v_B - v_F`` (the number of updates
between this microbatch's F and its B): a linear extrapolation back to roughly the weights
the forward saw, at the cost of one buffer instead of ``d`` stashed copies. ``gamma`` is a
hyperparameter (the book sweeps it in chapter 09); ``d == 0`` (warm-up, flushed minibatches)
leaves the weights untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pipemare_lite import torch_compat as compat
from pipemare_lite.methods.hooks import MethodHooks


class DiscrepancyCorrection:
    """One stage's T2 state: the ``delta`` buffer and its update rule."""

    def __init__(self, params: Sequence[torch.Tensor], gamma: float) -> None:
        gamma = float(gamma)
        if not 0.0 <= gamma < 1.0:
            raise ValueError(f"T2 gamma must be in [0, 1), got {gamma!r}")
        self.params = list(params)
        self.live = [p.detach() for p in self.params]  # the live weights, outside autograd
        self.gamma = gamma
        self.delta = [torch.zeros_like(p, memory_format=torch.contiguous_format)
                      for p in self.params]
        self._bytes = sum(d.nbytes for d in self.delta)  # fixed: delta keeps its shapes

    def snapshot(self) -> list[torch.Tensor]:
        """Copies of the weights before an update (``w_old``)."""
        return [p.detach().clone() for p in self.params]

    def after_update(self, old: Sequence[torch.Tensor]) -> None:
        """``delta <- gamma * delta + (1 - gamma) * (w_new - w_old)``, out of place.

        Per tensor ``g * d + (1 - g) * (w - o)``, computed for all of the stage's tensors at
        once by multi-tensor kernels (``torch._foreach_*``, through
        :mod:`pipemare_lite.torch_compat`): the same operations in the same order, so
        the same bits, without one Python call per tensor and operation.
        """
        g = self.gamma
        change = compat.foreach_sub(self.live, list(old))  # w_new - w_old
        compat.foreach_mul_(change, 1.0 - g)                # (1 - g) * (w_new - w_old)
        delta = compat.foreach_mul(self.delta, g)           # g * delta
        compat.foreach_add_(delta, change)                  # g * delta + (1 - g) * (...)
        self.delta = delta

    def backward_weights(self, distance: int) -> list[torch.Tensor]:
        """``w - distance * delta`` (per tensor, by multi-tensor kernels as above); the live
        weights themselves when ``distance == 0``."""
        if distance == 0:
            return list(self.live)
        return compat.foreach_sub(self.live, compat.foreach_mul(self.delta, distance))

    def buffer_bytes(self) -> int:
        """Bytes of the ``delta`` buffer (one weight-sized copy)."""
        return self._bytes

    def state_dict(self) -> dict:
        """``gamma`` and a copy of ``delta``."""
        return {"gamma": self.gamma, "delta": [d.clone() for d in self.delta]}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.gamma = float(state["gamma"])
        self.delta = [d.to(p.device).clone() for d, p in zip(state["delta"], self.params)]


class DiscrepancyHooks(MethodHooks):
    """T2 as a method's hooks (:mod:`pipemare_lite.methods.hooks`): PipeMare goes through the
    same extension point as any new method. Holds one weight-sized buffer (``t2_buffer``)."""

    def __init__(self, params: Sequence[torch.Tensor], gamma: float) -> None:
        self.correction = DiscrepancyCorrection(params, gamma)
        self._old: list[torch.Tensor] | None = None

    def backward_weights(self, microbatch: int, forward_version: int, version: int):
        """``w - (version - forward_version) * delta``."""
        return self.correction.backward_weights(version - forward_version)

    def before_update(self) -> None:
        """Keep ``w_old``."""
        self._old = self.correction.snapshot()

    def after_update(self) -> None:
        """``delta <- gamma * delta + (1 - gamma) * (w_new - w_old)``."""
        self.correction.after_update(self._old)
        self._old = None

    def bytes_held(self) -> dict[str, int]:
        """The ``delta`` buffer, as ``t2_buffer``."""
        return {"t2_buffer": self.correction.buffer_bytes()}

    def state_dict(self) -> dict:
        """``gamma`` and ``delta`` (the layout older checkpoints stored under ``"t2"``)."""
        return self.correction.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output (or an old checkpoint's ``"t2"`` entry)."""
        self.correction.load_state_dict(state)

