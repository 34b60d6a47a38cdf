"""A delay-adaptive learning rate: each stage divides its step by one plus the mean delay
of the gradients it applies (a researcher's method, public API only; docs/write-a-method.md).

In an asynchronous pipeline, update k of stage s applies the gradients of minibatch k's
microbatches, each taken ``d_m`` updates after its forward read the weights (the schedule
says how many: ``info.delays()``). This method scales update k's learning rate by::

    factor(k) = 1 / (1 + mean(d_m for m in minibatch k))

so a stage whose gradients are staler steps more carefully; a flushed minibatch (all
``d_m = 0``) keeps the base lr. It changes no weights: only the ``lr_factor`` hook, which the
engine applies to every parameter group for that one update (the optimizer's groups and any
lr scheduler keep the base lr) and records as the update's lr. T1 (``t1=True``) and the base
lr schedule compose with it: their factors multiply.

Registered as ``delay-adaptive`` on import (``--plugin docs.examples.delay_adaptive_lr``).
"""

from __future__ import annotations

from pipemare_lite.methods import MethodHooks, StageInfo, register_method


class DelayAdaptiveLR(MethodHooks):
    """One stage's factor per update, computed from the schedule when the stage is built."""

    def __init__(self, info: StageInfo) -> None:
        delays = info.delays()  # microbatch -> updates between its F and its B on this stage
        n = info.schedule.num_microbatches
        by_update: dict[int, list[int]] = {}
        for microbatch, delay in delays.items():
            by_update.setdefault(microbatch // n, []).append(delay)
        self.factors = {k: 1.0 / (1.0 + sum(d) / len(d)) for k, d in by_update.items()}

    def lr_factor(self, update: int):
        """``1 / (1 + mean delay)`` of the minibatch this update applies (1.0 past the end)."""
        return self.factors.get(update, 1.0)


def delay_adaptive_hooks(info: StageInfo) -> DelayAdaptiveLR:
    """The method's hook factory: one :class:`DelayAdaptiveLR` per stage."""
    return DelayAdaptiveLR(info)


register_method("delay-adaptive", schedule="async", hooks=delay_adaptive_hooks,
                description="async, each stage's lr divided by 1 + its mean gradient delay")
