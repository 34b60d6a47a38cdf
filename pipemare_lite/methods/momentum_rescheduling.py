"""T1 with the momentum in its bound ("pipemare-m"): divide a stale stage's step by what its
delay costs a heavy-ball optimizer, not by the delay (issue 43; chapters 08 and 10).

Why. T1 (:mod:`~pipemare_lite.methods.lr_rescheduling`) multiplies stage s's lr by
``tau_s ** (-p_k)``: the delay's cost in chapter 06's bound *without* momentum, where the
largest stable step shrinks like ``1 / tau``. With momentum the cost is far larger.
Chapter 06's delayed heavy-ball recurrence (``v <- m v + g``, ``w <- w - alpha v``; torch's
SGD with momentum m) has, at m = 0.9, a largest stable ``alpha * lam`` of ``b(0) = 3.8``
without delay and ``b(1) = 0.10`` with a delay of one update: 38 times smaller, where T1
divides by 1 (:func:`~pipemare_lite.analysis.theory.momentum_stability_bound`). So T1
cannot keep a momentum optimizer's stale stages where the undelayed run was stable.

What this method does. Stage s's factor is T1's form with an *effective delay*::

    tau_eff(s) = b(0, m) / b(tau_s, m)            factor(k) = tau_eff(s) ** (-p_k)

``b(tau, m)`` is the largest stable step of delayed heavy-ball GD on a quadratic, ``tau_s``
the stage's forward delay measured from the schedule (as T1's), ``m`` the optimizer's
momentum for the stage (SGD's and Muon's ``momentum``, Adam's and AdamW's ``betas[0]``;
0 when none, where ``tau_eff`` is the plain bound's ratio, close to T1's ``tau``). ``p_k``
anneals from 1 to 0 exactly as T1's, from the first asynchronous update W over the same
horizon K. The factor keeps every stage at the same fraction of its stability limit as
the undelayed optimizer at the base lr, whatever the curvature.

Adam, by the same model (an assumption, stated): Adam's first moment is an EMA,
``m_t = beta1 m + (1 - beta1) g``, i.e. heavy-ball with momentum ``beta1`` and step
``alpha (1 - beta1)`` on the problem preconditioned by ``1 / (sqrt(v) + eps)``; the ratio
``b(0) / b(tau)`` does not depend on the step's scale or on the curvature, so the same
``tau_eff`` applies with ``m = beta1``.

The method also carries T2 (each stage's discrepancy correction, gamma from the run's
options) and, as PipeMare-W, runs the schedule's synchronous warm-up when the run asks for
one (``warmup=``): it is PipeMare with this factor in place of T1's. Run it with ``t1`` and
``t2`` off (the method brings both). The pre-registered test of its hypothesis is in
:mod:`pipemare_lite.experiments.lr_map`.
"""

from __future__ import annotations

from pipemare_lite.analysis.stage_lr import effective_delay
from pipemare_lite.methods.hooks import StageInfo
from pipemare_lite.methods.lr_rescheduling import LRReschedulingHooks, stage_forward_delays
from pipemare_lite.methods.registry import register_method

NAME = "pipemare-m"


def stage_momentum(optimizer) -> float:
    """The stage optimizer's momentum ``m`` (the largest over its groups; 0 when none)."""
    from pipemare_lite.methods.nesterov import optimizer_momentum

    return max((optimizer_momentum(optimizer, group["params"][0])
                for group in optimizer.param_groups if group["params"]), default=0.0)


def momentum_rescheduling_hooks(info: StageInfo) -> LRReschedulingHooks:
    """The stage's hooks: T2 (gamma from the options) inside T1's anneal with
    :func:`effective_delay` as the delay."""
    from pipemare_lite.methods.discrepancy import DiscrepancyHooks
    from pipemare_lite.schedules.repeat import short_schedule

    schedule = info.schedule
    tau = stage_forward_delays(short_schedule(schedule))[info.stage]
    warmup = schedule.warmup
    horizon = info.options.t1_anneal_updates
    horizon = schedule.num_minibatches - warmup if horizon is None else horizon
    inner = DiscrepancyHooks(info.params, info.options.gamma_for(info.stage))
    return LRReschedulingHooks(inner, effective_delay(tau, stage_momentum(info.optimizer)),
                               horizon, start=warmup)


register_method(NAME, schedule="async", hooks=momentum_rescheduling_hooks,
                description="PipeMare with T1's delay replaced by the momentum-aware "
                "b(0, m) / b(tau, m) (T2 and warm-up as PipeMare-W)")
