"""Delay compensation ("dc"): a correction of the delayed gradient, in one file through the
public API (introduced in chapter 12).

PipeDream-2BW computes minibatch k's gradient at the weights ``w_{k-1}`` and applies it to
``w_k``: a one-step delay. DC-ASGD (Zheng et al., "Asynchronous Stochastic Gradient Descent
with Delay Compensation", ICML 2017, arXiv:1609.08326) corrects a stale gradient with the
first-order Taylor term, the Hessian replaced by the cheap diagonal of the gradient's outer
product::

    g(w_now) ~ g(w_fwd) + lam * g (.) g (.) (w_now - w_fwd)          (.): elementwise

with the adaptive scale of its variant DC-ASGD-a, per element::

    ms  <- m * ms + (1 - m) * g (.) g          lam = lam0 / (sqrt(ms) + eps)

What this file implements, precisely. Per stage, just before each optimizer step, the
accumulated minibatch gradient ``G`` (the sum over the update's microbatches, as the
optimizer sees it) is replaced by ``G + lam * G (.) G (.) D`` with ``D`` the mean, over those
microbatches, of ``w_now - w_fwd(m)``, ``w_fwd(m)`` being the version m's forward read (the
engine hands it to :meth:`forward_weights`). ``D`` is rebuilt from the steps of the last
updates (``w_{u-1} - w_u``), which the hook keeps while a microbatch may need them. Defaults
``lam0 = DC_LAMBDA``, ``m = DC_DECAY``, ``eps = DC_EPS`` are this book's (the paper's values
were tuned for its own tasks). A gradient of ``w_fwd`` is corrected towards ``w_now``; the
forward and backward are left as the weight mode makes them (2BW: both at ``w_fwd``).

Not the error-feedback correction of the 2026 one-step-delay study the book cites in
chapter 12 (that method is not reproduced here): DC-ASGD is the older, plainly defined
correction of the same delayed gradient.

Costs: the mean-square buffer and the kept steps (one for 2BW), declared as ``dc_buffer``,
and a few elementwise operations per update. Registered as ``dc`` (the ``2bw`` schedule and
weight mode) on import (:mod:`~pipemare_lite.methods.beyond`). The hooks read only the
versions the engine hands them, so nothing ties them to 2BW, but only 2BW is tested
(tests/test_beyond_methods.py); a forward reading a version whose steps were dropped is
refused.
"""

from __future__ import annotations

import torch

from pipemare_lite.methods.hooks import MethodHooks, StageInfo
from pipemare_lite.methods.registry import register_method

#: lam0 of DC-ASGD-a: the correction's scale relative to the gradient's running RMS
DC_LAMBDA = 2.0
#: m: decay of the running mean square of the gradient
DC_DECAY = 0.95
#: eps: keeps lam finite where the gradient has always been zero
DC_EPS = 1e-8


class DelayCompensation(MethodHooks):
    """One stage's delay compensation: forward versions, recent steps, gradient mean square."""

    def __init__(self, info: StageInfo, lam0: float = DC_LAMBDA, decay: float = DC_DECAY,
                 eps: float = DC_EPS) -> None:
        self.params = list(info.params)
        self.lam0, self.decay, self.eps = lam0, decay, eps
        self.updates = 0  # this stage's version now
        self.version_of: dict[int, int] = {}  # microbatch -> version its forward read
        self.done: list[int] = []  # backward finished, gradient waiting for the next update
        self.steps: dict[int, list[torch.Tensor]] = {}  # u -> w_{u-1} - w_u
        self.mean_square = [torch.zeros_like(p) for p in self.params]
        self.before: list[torch.Tensor] | None = None

    def forward_weights(self, microbatch: int, version: int):
        """Note the version the forward reads; the weights stay the weight mode's (None)."""
        if version < self.updates and any(u not in self.steps
                                          for u in range(version + 1, self.updates + 1)):
            raise RuntimeError(f"dc: microbatch {microbatch} reads version {version}, whose "
                               "steps are no longer kept (a weight mode older than 2BW's)")
        self.version_of[microbatch] = version
        return None

    def backward_done(self, microbatch: int) -> None:
        """Its gradient is in ``.grad`` now: it belongs to the next update."""
        self.done.append(microbatch)

    def offset(self, version: int) -> list[torch.Tensor]:
        """``w_now - w_version``, from the kept steps (zeros when ``version`` is now)."""
        total = [torch.zeros_like(p) for p in self.params]
        for u in range(version + 1, self.updates + 1):
            total = [t - step for t, step in zip(total, self.steps[u])]
        return total

    def before_update(self) -> None:
        """Correct the accumulated gradient: ``G + lam * G * G * D``."""
        versions = [self.version_of.pop(m) for m in self.done]
        self.done = []
        if versions:
            offsets = [self.offset(v) for v in versions]
            for i, p in enumerate(self.params):
                if p.grad is None:
                    continue
                g = p.grad
                d = sum(o[i] for o in offsets) / len(offsets)
                self.mean_square[i] = self.decay * self.mean_square[i] + (1 - self.decay) * g * g
                lam = self.lam0 / (self.mean_square[i].sqrt() + self.eps)
                p.grad = g + lam * g * g * d
        self.before = [p.detach().clone() for p in self.params]

    def after_update(self) -> None:
        """Keep this update's step; drop steps no microbatch in flight can need."""
        self.updates += 1
        self.steps[self.updates] = [b - p.detach() for b, p in zip(self.before, self.params)]
        self.before = None
        # a forward still to come reads at worst the previous version (2BW's rule)
        oldest = min([*self.version_of.values(), self.updates - 1])
        self.steps = {u: s for u, s in self.steps.items() if u > oldest}

    def bytes_held(self) -> dict[str, int]:
        """The mean-square buffer and the kept steps, as ``dc_buffer``."""
        kept = sum(t.nbytes for step in self.steps.values() for t in step)
        return {"dc_buffer": sum(t.nbytes for t in self.mean_square) + kept}

    def state_dict(self) -> dict:
        """Everything above, to continue bitwise."""
        return {"updates": self.updates, "version_of": dict(self.version_of),
                "done": list(self.done),
                "steps": {u: [t.clone() for t in s] for u, s in self.steps.items()},
                "mean_square": [t.clone() for t in self.mean_square]}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""
        def on(ts):
            return [t.to(p.device).clone() for t, p in zip(ts, self.params)]
        self.updates, self.done = state["updates"], list(state["done"])
        self.version_of = dict(state["version_of"])
        self.steps = {u: on(s) for u, s in state["steps"].items()}
        self.mean_square = on(state["mean_square"])


def delay_compensation_hooks(info: StageInfo) -> DelayCompensation:
    """The method's hook factory: one :class:`DelayCompensation` per stage."""
    return DelayCompensation(info)


register_method("dc", schedule="2bw", weight_mode="2bw", hooks=delay_compensation_hooks,
                description="2BW + DC-ASGD-a delay compensation of the one-step-stale gradient")
