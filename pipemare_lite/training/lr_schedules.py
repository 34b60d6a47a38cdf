"""Base learning-rate schedules by name, as torch ``LRScheduler`` factories (chapter 08).

``fit(lr_schedule=...)`` gives every stage a scheduler built by
``factory(optimizer) -> torch.optim.lr_scheduler.LRScheduler``. :func:`make_lr_schedule`
builds the factory from a name; PipeMare's T1
(:class:`~pipemare_lite.methods.lr_rescheduling.LRRescheduling`) multiplies on top of it, so
stage i's update k uses ``lr(k) * tau_i ** (-p_k)``.

Counting. The scheduler is stepped once per optimizer update of its stage (after the
update), so ``lr(k)`` is the learning rate of the stage's update k (0-indexed). In ``fit``
every stage makes one update per step (minibatch), hence ``total_updates = epochs *
(training samples // batch_size)``, the same for every stage.

The schedules, for base lr ``lr``, ``W = warmup`` updates of linear warm-up and ``T =
total_updates``:

- ``constant``: ``lr(k) = lr``;
- ``cosine``: ``lr(k) = lr * (1 + cos(pi * (k - W) / (T - W))) / 2`` for ``k >= W``
  (``CosineAnnealingLR(T_max=T - W, eta_min=0)``): it would reach 0 at update T, one past
  the last, so the last update still has a small positive lr;
- ``step``: ``lr(k) = lr * gamma ** floor((k - W) / step_size)`` for ``k >= W``
  (``StepLR``); ``step_size`` defaults to one epoch's updates and ``gamma`` to 0.1;
- linear warm-up, any of them: ``lr(k) = lr * (k + 1) / (W + 1)`` for ``k < W``
  (``LinearLR(start_factor=1/(W+1), total_iters=W)``, joined to the schedule by
  ``SequentialLR`` at update W). Not to be confused with PipeMare-W's ``warmup`` of
  ``fit``, which runs the first minibatches *flushed*: the two are independent.

torch computes cosine and linear recursively, so ``lr(k)`` agrees with the closed forms
above to rounding, and bitwise with a plain loop stepping the same torch schedulers.
"""

from __future__ import annotations

from collections.abc import Callable

from torch.optim import Optimizer
from torch.optim.lr_scheduler import (
    CosineAnnealingLR,
    LinearLR,
    LRScheduler,
    SequentialLR,
    StepLR,
)

#: Names :func:`make_lr_schedule` accepts.
LR_SCHEDULES = ("constant", "cosine", "step")
#: ``step``'s decay factor when none is given.
DEFAULT_STEP_GAMMA = 0.1


class LRScheduleFactory:
    """``factory(optimizer) -> LRScheduler`` for one named schedule (see the module docstring).

    Built by :func:`make_lr_schedule`, which checks the arguments; one call per stage.
    """

    def __init__(self, name: str, total_updates: int, warmup: int, step_size: int,
                 gamma: float) -> None:
        self.name, self.total_updates, self.warmup = name, total_updates, warmup
        self.step_size, self.gamma = step_size, gamma

    def __call__(self, optimizer: Optimizer) -> LRScheduler | None:
        """The stage's scheduler: warm-up (if any) followed by the named schedule."""
        warm = None
        if self.warmup:
            warm = LinearLR(optimizer, start_factor=1 / (self.warmup + 1), end_factor=1.0,
                            total_iters=self.warmup)
        if self.name == "constant":
            return warm  # after its W updates LinearLR keeps the base lr: constant
        if self.name == "cosine":
            main = CosineAnnealingLR(optimizer, T_max=self.total_updates - self.warmup)
        else:
            main = StepLR(optimizer, step_size=self.step_size, gamma=self.gamma)
        if warm is None:
            return main
        return SequentialLR(optimizer, [warm, main], milestones=[self.warmup])

    def __repr__(self) -> str:
        return (f"LRScheduleFactory({self.name!r}, total_updates={self.total_updates}, "
                f"warmup={self.warmup}, step_size={self.step_size}, gamma={self.gamma})")


def make_lr_schedule(
    name: str,
    total_updates: int,
    *,
    warmup: int = 0,
    step_size: int | None = None,
    gamma: float | None = None,
    updates_per_epoch: int | None = None,
) -> Callable | None:
    """The factory for schedule ``name``, or None for a constant lr without warm-up.

    Args:
        name: one of :data:`LR_SCHEDULES`.
        total_updates: updates each stage makes in the run (cosine's horizon).
        warmup: W, updates of linear warm-up (``lr_warmup`` of ``fit``).
        step_size, gamma: ``step`` only: decay by ``gamma`` (default 0.1) every
            ``step_size`` updates (default ``updates_per_epoch``: once per epoch).
        updates_per_epoch: updates per epoch, for ``step``'s default step size.

    Bad values are refused with the value and what is allowed. Returning None for
    ``constant`` keeps a constant-lr run exactly what it was without any scheduler.
    """
    if name not in LR_SCHEDULES:
        raise ValueError(f"unknown lr_schedule {name!r}; allowed: {', '.join(LR_SCHEDULES)} "
                         "or a factory optimizer -> torch.optim.lr_scheduler.LRScheduler")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise ValueError(f"lr_warmup must be an integer >= 0 (updates), got {warmup!r}")
    if warmup >= total_updates:
        raise ValueError(f"lr_warmup={warmup} updates leaves none of the run's {total_updates} "
                         f"updates for the {name!r} schedule; use fewer than {total_updates}")
    if name != "step" and (step_size is not None or gamma is not None):
        given = [f"{n}={v!r}" for n, v in (("lr_step_size", step_size), ("lr_gamma", gamma))
                 if v is not None]
        raise ValueError(f"{', '.join(given)} only applies to lr_schedule 'step', not {name!r}")
    if name == "step":
        step_size = updates_per_epoch if step_size is None else step_size
        if not isinstance(step_size, int) or isinstance(step_size, bool) or step_size < 1:
            raise ValueError(f"lr_step_size must be a positive integer (updates), "
                             f"got {step_size!r}")
        gamma = DEFAULT_STEP_GAMMA if gamma is None else gamma
        if not (isinstance(gamma, (int, float)) and 0 < gamma <= 1):
            raise ValueError(f"lr_gamma must be a number in (0, 1], got {gamma!r}")
    if name == "constant" and warmup == 0:
        return None
    return LRScheduleFactory(name, total_updates, warmup, step_size, gamma)
