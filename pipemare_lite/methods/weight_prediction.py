"""Weight prediction ("wpred"): a new method in one file, through the public API only
(the worked example of docs/write-a-method.md; introduced in chapter 12).

In an asynchronous pipeline, microbatch m's backward on a stage comes ``s`` updates after its
forward (``s``: its delay, known from the schedule). Without a fix the forward reads ``w`` and
the backward ``s`` updates later reads newer weights: the gradient belongs to no single model.
Weight prediction runs the forward at the weights the stage is expected to reach::

    w_hat = w - s * lr * d        lr * d: the optimizer's last step, w_before - w_after

and the backward at the same ``w_hat``, so forward and backward agree. It costs one buffer
(the last step) plus one predicted copy per microbatch in flight, declared as the
``prediction`` bytes. A microbatch with ``s == 0`` (a flushed warm-up minibatch) reads the
live weights and holds nothing.

Registered as ``wpred`` on import; the registry imports it when the name is first looked up,
so it is built in. A module of your own is not: every process must import it
(:mod:`pipemare_lite.plugins`).
"""

from __future__ import annotations

import torch

from pipemare_lite.methods.hooks import MethodHooks, StageInfo
from pipemare_lite.methods.registry import register_method


class WeightPrediction(MethodHooks):
    """One stage's weight prediction: the last step and the predicted copies in flight."""

    def __init__(self, info: StageInfo) -> None:
        self.params = list(info.params)
        self.delays = info.delays()  # microbatch -> s, from the schedule
        self.step = [torch.zeros_like(p) for p in self.params]  # lr * d; none before update 1
        self.predicted: dict[int, list[torch.Tensor]] = {}  # microbatch -> its w_hat
        self.before: list[torch.Tensor] | None = None

    def forward_weights(self, microbatch: int, version: int):
        """``w_hat = w - s * step``, kept for the backward (None when ``s == 0``)."""
        s = self.delays.get(microbatch, 0)
        if s == 0:
            return None
        w_hat = [p.detach() - s * step for p, step in zip(self.params, self.step)]
        self.predicted[microbatch] = w_hat
        return w_hat

    def backward_weights(self, microbatch: int, forward_version: int, version: int):
        """The forward's ``w_hat`` (None: the microbatch read the live weights)."""
        return self.predicted.get(microbatch)

    def backward_done(self, microbatch: int) -> None:
        """Drop the microbatch's predicted copy."""
        self.predicted.pop(microbatch, None)

    def before_update(self) -> None:
        """Keep ``w_before``."""
        self.before = [p.detach().clone() for p in self.params]

    def after_update(self) -> None:
        """``step = w_before - w_after`` (= lr * d of this update)."""
        self.step = [b - p.detach() for b, p in zip(self.before, self.params)]
        self.before = None

    def bytes_held(self) -> dict[str, int]:
        """The step buffer and the predicted copies, as ``prediction``."""
        copies = sum(t.nbytes for w_hat in self.predicted.values() for t in w_hat)
        return {"prediction": sum(t.nbytes for t in self.step) + copies}

    def state_dict(self) -> dict:
        """The step and the predicted copies in flight."""
        return {"step": [t.clone() for t in self.step],
                "predicted": {m: [t.clone() for t in w] for m, w in self.predicted.items()}}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.step = [t.to(p.device).clone() for t, p in zip(state["step"], self.params)]
        self.predicted = {m: [t.to(p.device).clone() for t, p in zip(w, self.params)]
                          for m, w in state["predicted"].items()}


def weight_prediction_hooks(info: StageInfo) -> WeightPrediction:
    """The method's hook factory: one :class:`WeightPrediction` per stage."""
    return WeightPrediction(info)


register_method("wpred", schedule="async", weight_mode="async", hooks=weight_prediction_hooks,
                description="async, forward and backward at predicted weights w - s * lr * d")
