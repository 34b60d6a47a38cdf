"""Nesterov-style look-ahead ("nesterov"): a method in one file through the public API
(introduced in chapter 12).

The idea, after Ajanthan et al., "Nesterov Method for Asynchronous Pipeline Parallel
Optimization" (ICML 2025, arXiv:2505.01099): Nesterov's accelerated gradient evaluates the
gradient at a *look-ahead* point, where the momentum is about to carry the weights; in an
asynchronous pipeline the gradient of microbatch m is applied ``s`` updates after its
forward, so the look-ahead should reach ``s`` updates ahead.

What this file implements, precisely. With momentum ``mu`` (the stage optimizer's own:
``momentum`` of SGD and Muon, ``betas[0]`` of Adam and AdamW, per parameter group) and
``step = w_before - w_after`` of the stage's last update, m's forward and backward run at::

    w_hat = w - (mu + mu**2 + ... + mu**s) * step        s: m's delay, from the schedule

For SGD with momentum (constant lr, no weight decay, ``nesterov=False``) this is exactly
where the weights would be after ``s`` more updates *if no new gradient arrived*: the
momentum already committed, decaying by ``mu`` per update. Weight prediction
(:mod:`~pipemare_lite.methods.weight_prediction`, the base class) assumes the whole last step
repeats, ``w - s * step``; the two agree only as ``mu -> 1``. With ``mu = 0`` nothing is
looked ahead, but the backward still uses the forward's weights (weight stashing).

How it differs from the paper: the paper changes NAG's look-ahead step inside the optimizer
and proves convergence for a fixed delay (its rule is not reproduced here); here the
optimizer is unchanged and only the weights the forward and backward read move along its
momentum: the paper's idea through the hooks, not its algorithm or numbers. Costs: as
``wpred`` (the ``prediction`` bytes). Registered as ``nesterov`` on import
(:mod:`~pipemare_lite.methods.beyond`).
"""

from __future__ import annotations

from pipemare_lite.methods.hooks import StageInfo
from pipemare_lite.methods.registry import register_method
from pipemare_lite.methods.weight_prediction import WeightPrediction


def optimizer_momentum(optimizer, param) -> float:
    """The momentum coefficient ``mu`` the optimizer applies to ``param`` (0 when none)."""
    for group in optimizer.param_groups:
        if any(p is param for p in group["params"]):
            if "momentum" in group:
                return float(group["momentum"])
            if "betas" in group:
                return float(group["betas"][0])
            return 0.0
    raise ValueError("the parameter is in none of the optimizer's param groups")


def look_ahead_factor(mu: float, s: int) -> float:
    """``mu + mu**2 + ... + mu**s``: how many last steps the momentum adds in ``s`` updates."""
    return sum(mu ** k for k in range(1, s + 1))


class NesterovLookAhead(WeightPrediction):
    """One stage's look-ahead: weight prediction with the momentum's decaying sum as scale."""

    def __init__(self, info: StageInfo) -> None:
        super().__init__(info)
        self.momenta = [optimizer_momentum(info.optimizer, p) for p in self.params]

    def forward_weights(self, microbatch: int, version: int):
        """``w_hat = w - look_ahead_factor(mu, s) * step``, kept for the backward."""
        s = self.delays.get(microbatch, 0)
        if s == 0:
            return None
        w_hat = [p.detach() - look_ahead_factor(mu, s) * step
                 for p, step, mu in zip(self.params, self.step, self.momenta)]
        self.predicted[microbatch] = w_hat
        return w_hat


def nesterov_hooks(info: StageInfo) -> NesterovLookAhead:
    """The method's hook factory: one :class:`NesterovLookAhead` per stage."""
    return NesterovLookAhead(info)


register_method("nesterov", schedule="async", weight_mode="async", hooks=nesterov_hooks,
                description="async, forward and backward at the momentum look-ahead s "
                            "updates ahead")
