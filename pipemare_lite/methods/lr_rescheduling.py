"""T1, learning-rate rescheduling: divide a stale stage's step by its delay, then anneal
(introduced in chapter 08).

Delayed gradient descent with delay ``tau`` is stable only for step sizes below about
``pi / (2 tau + 1)`` times the curvature limit (chapter 06), so PipeMare starts each stage
with its step divided by its delay and anneals back to the normal schedule over ``K``
updates: stage i at update k uses ``lr(k) * tau_i ** (-p_k)``, ``p_k`` falling from 1 to 0
(the formula, torch-free so figures can draw it: :mod:`pipemare_lite.analysis.stage_lr`'s
:func:`~pipemare_lite.analysis.stage_lr.rescheduling_factor`, re-exported here).
``tau_i >= 1`` is the stage's forward delay in updates, *measured* from the schedule
(:func:`stage_forward_delays`), never taken from a formula.

The book's choice for warm-up plus T1: T1 compensates a delay, so it is off (factor 1)
while the pipeline is flushed, and its annealing clock starts at the first asynchronous
update W; by default ``K`` is the number of asynchronous minibatches (``num_minibatches -
W``). How the paper (Yang et al., PipeMare, MLSys 2021) combines warm-up with T1 is recalled
from its published form, not quoted from its text: read this as the book's definition.

Two forms of the same factor: the engine applies T1 through the public ``lr_factor`` hook
(:class:`LRReschedulingHooks`, wrapped around the method's own hooks, so a method of your
own gets T1 with ``t1=True``); :class:`LRRescheduling` is the same rule as a
``torch.optim.lr_scheduler.LRScheduler``, for a plain training loop (chapter 08). A test
(``tests/test_lr_factor_hook.py``) checks that both give bitwise the same learning rates.
"""

from __future__ import annotations

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from pipemare_lite.analysis.stage_lr import rescheduling_factor  # the formula, torch-free
from pipemare_lite.methods.hooks import MethodHooks
from pipemare_lite.schedules.actions import Schedule

__all__ = ["LRRescheduling", "LRReschedulingHooks", "rescheduling_factor",
           "stage_forward_delays"]


def stage_forward_delays(schedule: Schedule) -> list[int]:
    """Each virtual stage's forward delay in updates, measured from the schedule, at least 1.

    Read from the staleness analysis (:func:`pipemare_lite.analysis.staleness.weight_versions`):
    for microbatch m on stage s, ``version_applied - version_at_forward``. The stage's delay
    is the largest over its microbatches (the position inside a minibatch changes it by
    one; flushed warm-up minibatches have 0), clamped to >= 1 as T1 requires.
    """
    from pipemare_lite.analysis.staleness import weight_versions

    delays = [0] * schedule.num_virtual_stages
    for row in weight_versions(schedule).rows:
        if row.forward_delay is not None:
            delays[row.stage] = max(delays[row.stage], row.forward_delay)
    return [max(d, 1) for d in delays]


class LRRescheduling(LRScheduler):
    """PipeMare's T1 as a ``torch.optim.lr_scheduler.LRScheduler`` for one stage.

    Args:
        optimizer: the stage's optimizer (any ``torch.optim`` optimizer).
        tau: the stage's forward delay in updates (>= 1), e.g. from
            :func:`stage_forward_delays`.
        horizon: K, the number of updates over which the factor anneals to 1.
        start: W, the first update T1 acts on (PipeMare-W's flushed warm-up minibatches
            come before it and keep the base learning rate); the anneal runs from W to W + K.
        base: optional scheduler for the same optimizer giving ``lr(k)``; construct it
            *before* this one. T1 multiplies on top of it and keeps the base's own values
            apart, so the base never sees T1's factor (chainable schedulers stay exact).

    ``step()`` after each ``optimizer.step()``, as with any scheduler; ``get_last_lr()``
    is the learning rate the next update will use.
    """

    def __init__(self, optimizer: Optimizer, tau: float, horizon: int,
                 base: LRScheduler | None = None, start: int = 0) -> None:
        rescheduling_factor(0, tau, horizon, start)  # refuses a bad tau, K or W now, not later
        if base is not None and base.optimizer is not optimizer:
            raise ValueError("the base scheduler must drive the same optimizer as T1")
        self.tau, self.horizon, self.start, self.base = float(tau), int(horizon), int(start), base
        self._base_values: list[float] = []
        super().__init__(optimizer)

    def get_lr(self) -> list[float]:
        """Base values times ``tau ** (-p_k)`` for the current update ``k``."""
        factor = rescheduling_factor(self.last_epoch, self.tau, self.horizon, self.start)
        return [lr * factor for lr in self._base_values]

    def step(self, epoch: None = None) -> None:
        """Advance to the next update: step the base (if any), then apply T1's factor."""
        if epoch is not None:
            raise ValueError("LRRescheduling.step() takes no epoch argument")
        self.last_epoch += 1
        groups = self.optimizer.param_groups
        if self.base is None:
            self._base_values = list(self.base_lrs)
        else:
            if self.last_epoch > 0:
                for group, lr in zip(groups, self._base_values):
                    group["lr"] = lr  # hand the base its own value, not T1's product
                self.base.step()
            self._base_values = [group["lr"] for group in groups]
        values = self.get_lr()
        for group, lr in zip(groups, values):
            group["lr"] = lr
        self._last_lr = values

    def state_dict(self) -> dict:
        """T1's counters plus the base scheduler's state."""
        base = None if self.base is None else self.base.state_dict()
        return {**super().state_dict(), "base": base}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what :meth:`state_dict` returned (the base's state too)."""
        state = dict(state_dict)
        base_state = state.pop("base")
        super().load_state_dict(state)
        if self.base is not None and base_state is not None:
            self.base.load_state_dict(base_state)


class LRReschedulingHooks(MethodHooks):
    """T1 for one stage through the ``lr_factor`` hook, around the method's own hooks.

    Every hook is the ``inner`` hooks' (none: the base class's); ``lr_factor(k)`` is
    ``rescheduling_factor(k, tau, horizon, start)``, times the inner hooks' factor when they
    give one. The factor multiplies the lr the optimizer's groups hold (the base schedule's
    ``lr(k)``) for update k only, so the base scheduler never sees it: the same numbers as
    :class:`LRRescheduling` on top of the base, bitwise. T1 keeps no state of its own (k is
    the stage's update count), so checkpoints hold the inner hooks' state only.

    Attributes other than the hooks (e.g. weight prediction's ``predicted``) are the inner
    hooks', so code that inspects a stage's hooks keeps working.
    """

    def __init__(self, inner: MethodHooks | None, tau: float, horizon: int, start: int = 0):
        rescheduling_factor(0, tau, horizon, start)  # refuses a bad tau, K or W now
        self.inner = MethodHooks() if inner is None else inner
        self.tau, self.horizon, self.start = float(tau), int(horizon), int(start)

    def __getattr__(self, name: str):
        """The inner hooks' attribute (only reached for names this class lacks)."""
        if name == "inner":  # not set yet (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def lr_factor(self, update: int):
        """T1's ``tau ** (-p_k)`` for update ``update``, times the inner hooks' factor."""
        factor = rescheduling_factor(update, self.tau, self.horizon, self.start)
        inner = self.inner.lr_factor(update)
        if inner is None:
            return factor
        if isinstance(inner, (list, tuple)):
            return [factor * f for f in inner]
        return factor * inner

    def forward_weights(self, microbatch: int, version: int):
        """The inner hooks'."""
        return self.inner.forward_weights(microbatch, version)

    def backward_weights(self, microbatch: int, forward_version: int, version: int):
        """The inner hooks'."""
        return self.inner.backward_weights(microbatch, forward_version, version)

    def backward_done(self, microbatch: int) -> None:
        """The inner hooks'."""
        self.inner.backward_done(microbatch)

    def before_update(self) -> None:
        """The inner hooks'."""
        self.inner.before_update()

    def after_update(self) -> None:
        """The inner hooks'."""
        self.inner.after_update()

    def bytes_held(self) -> dict[str, int]:
        """The inner hooks' (T1 holds nothing)."""
        return self.inner.bytes_held()

    def state_dict(self) -> dict:
        """The inner hooks' state (T1's factor depends only on the update count)."""
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """The inner hooks'."""
        self.inner.load_state_dict(state)
