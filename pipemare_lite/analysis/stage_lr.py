"""Each stage's learning rate at each update: base schedule times T1's factor (chapter 08).

PipeMare's T1 gives stage i at update k (0-indexed) the learning rate::

    lr_i(k) = lr(k) * tau_i ** (-p_k)
    p_k = 0                          for k <  W   (flushed warm-up: no delay to compensate)
    p_k = 1 - min((k - W) / K, 1)    for k >= W

with ``lr(k)`` the base schedule, ``tau_i >= 1`` the stage's forward delay in updates, K the
anneal's horizon and W the first asynchronous update (0 without PipeMare-W's warm-up). The
engine's scheduler (:class:`~pipemare_lite.methods.lr_rescheduling.LRRescheduling`) takes
its factor from :func:`rescheduling_factor`; the formula lives here, torch-free, so figures
and widgets draw a whole run's learning rates (:func:`stage_lrs`) in a millisecond.
:func:`base_lr` gives the named base schedules of :mod:`pipemare_lite.training.lr_schedules` in
closed form (torch computes them recursively; ``tests/test_stage_lr.py`` checks they agree
to rounding).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

#: The base schedules :func:`base_lr` knows (those of :mod:`pipemare_lite.training.lr_schedules`).
BASE_SCHEDULES = ("constant", "cosine", "step")


def rescheduling_exponent(update: int, horizon: int, start: int = 0) -> float:
    """``p_k = 1 - min((k - W) / K, 1)`` for ``k >= W = start``, 0 before (warm-up).

    ``K == 0`` switches the rescheduling off (p = 0).
    """
    if horizon < 0 or update < 0 or start < 0:
        raise ValueError(f"update ({update}), horizon K ({horizon}) and start W ({start}) "
                         "must be >= 0")
    if horizon == 0 or update < start:
        return 0.0
    return 1.0 - min((update - start) / horizon, 1.0)


def rescheduling_factor(update: int, tau: float, horizon: int, start: int = 0) -> float:
    """``tau ** (-p_k)``: the factor T1 multiplies the base learning rate by."""
    if tau < 1:
        raise ValueError(f"T1 needs a delay tau >= 1, got {tau!r}")
    return float(tau) ** (-rescheduling_exponent(update, horizon, start))


def effective_delay(tau: int, momentum: float) -> float:
    """``b(0, m) / b(tau, m)``: how many times smaller delayed heavy-ball GD's largest stable
    step is with delay ``tau`` than without (>= 1; chapter 06's bound,
    :func:`~pipemare_lite.analysis.theory.momentum_stability_bound`): the delay the
    momentum-aware T1 (``pipemare-m``) divides by in place of ``tau`` (38 at m = 0.9, tau = 1).
    """
    return _effective_delay(int(tau), float(momentum))


@functools.lru_cache(maxsize=512)
def _effective_delay(tau: int, momentum: float) -> float:
    from pipemare_lite.analysis.theory import momentum_stability_bound  # numpy, on use

    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
    bound = momentum_stability_bound(tau, momentum)
    return max(1.0, momentum_stability_bound(0, momentum) / bound)


def base_lr(update: int, lr: float, schedule: str = "constant", *, total_updates: int,
            warmup: int = 0, step_size: int | None = None, gamma: float = 0.1) -> float:
    """The base schedule's ``lr(k)`` in closed form (see
    :mod:`pipemare_lite.training.lr_schedules`).

    ``warmup`` is the linear lr warm-up of ``fit(lr_warmup=...)``, ``lr * (k + 1) / (W + 1)``
    for ``k < W``; ``cosine`` anneals to 0 over the ``total_updates - warmup`` updates after
    it; ``step`` multiplies by ``gamma`` every ``step_size`` updates (required for it).
    """
    if schedule not in BASE_SCHEDULES:
        raise ValueError(f"unknown base schedule {schedule!r}; allowed: "
                         f"{', '.join(BASE_SCHEDULES)}")
    if not 0 <= warmup < total_updates:
        raise ValueError(f"warmup={warmup} must be in 0..{total_updates - 1} "
                         f"(total_updates={total_updates})")
    if schedule == "step" and (step_size is None or step_size < 1):
        raise ValueError(f"schedule 'step' needs step_size >= 1 (updates), got {step_size!r}")
    if update < warmup:
        return lr * (update + 1) / (warmup + 1)
    after = update - warmup
    if schedule == "cosine":
        return lr * (1 + math.cos(math.pi * after / (total_updates - warmup))) / 2
    if schedule == "step":
        return lr * gamma ** (after // step_size)
    return lr


def stage_lrs(lr: float, delays: Sequence[float], total_updates: int, *, horizon: int,
              start: int = 0, schedule: str = "constant", warmup: int = 0,
              step_size: int | None = None, gamma: float = 0.1) -> list[list[float]]:
    """``result[s][k]``: stage s's learning rate at update k, ``lr(k) * tau_s ** (-p_k)``.

    Args:
        lr: the base learning rate; ``schedule``, ``warmup``, ``step_size``, ``gamma``: the
            base schedule (:func:`base_lr`) over ``total_updates`` updates.
        delays: each stage's T1 delay tau_s (>= 1), as the engine measures it
            (:func:`~pipemare_lite.methods.lr_rescheduling.stage_forward_delays`).
        horizon, start: K and W of T1 (:func:`rescheduling_exponent`).

    Equal to the ``stage_lr`` that ``fit(..., t1=True)`` records, to rounding.
    """
    if total_updates < 1:
        raise ValueError(f"total_updates must be >= 1, got {total_updates!r}")
    bad = [tau for tau in delays if not tau >= 1]
    if bad or not delays:
        raise ValueError(f"delays must be one tau >= 1 per stage, got {list(delays)!r}")
    base = [base_lr(k, lr, schedule, total_updates=total_updates, warmup=warmup,
                    step_size=step_size, gamma=gamma) for k in range(total_updates)]
    return [[b * rescheduling_factor(k, tau, horizon, start) for k, b in enumerate(base)]
            for tau in delays]


def first_unstable_update(stage_lr: Sequence[float], lam: float, tau: int) -> int | None:
    """The first update k with ``stage_lr[k] * lam >= stability_bound(tau)``; None if none.

    Treats the stage as chapter 06's quadratic with curvature ``lam`` and delay ``tau``,
    frozen at each update's step (the step changes slowly, so each update is judged by the
    bound of a constant step): the update at which T1's anneal has carried the stage out of
    the stable region. A quadratic model: it says where the danger is, not when a network
    blows up (chapter 07).
    """
    from pipemare_lite.analysis.theory import stability_bound

    if not lam > 0:
        raise ValueError(f"the curvature lam must be positive, got {lam!r}")
    bound = stability_bound(tau)
    return next((k for k, value in enumerate(stage_lr) if value * lam >= bound), None)
