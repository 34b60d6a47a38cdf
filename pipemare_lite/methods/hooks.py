"""Method hooks: how a training method changes the weights a stage's forward and backward see
(the extension point for new methods, introduced in chapter 12; see docs/write-a-method.md).

A method is a schedule, a weight mode (:mod:`pipemare_lite.methods.versions`), options, and
optionally *hooks*: one :class:`MethodHooks` object per stage, made by the method's factory
``hooks(info: StageInfo) -> MethodHooks | None``. The stage worker
(:class:`pipemare_lite.engine.stage.StageWorker`) calls it at fixed points::

    F(m):  weights = hooks.forward_weights(m, version)           None: the weight mode's
    B(m):  weights = hooks.backward_weights(m, forward_version, version)   (same)
           ... the backward runs with them ...
           hooks.backward_done(m)
    U:     hooks.before_update(); optimizer.step(); hooks.after_update()
    bytes: hooks.bytes_held() -> {kind: bytes}, added to the stage's memory by kind

``version`` is the stage's update count now; ``forward_version`` the one microbatch m's
forward read. Weights are lists of tensors in the order of :attr:`StageInfo.params`. The
forward's weights are read as values (the weight gradient still reaches the live
parameters), the backward's are the ones its products use (e.g. ``grad_input = grad_out @
W`` of a Linear). A hook never edits the live parameters; the optimizer does.

PipeMare's T2 (:class:`~pipemare_lite.methods.discrepancy.DiscrepancyHooks`) and chapter 12's
methods are written through the same points. Torch-free: hooks work on the tensors handed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StageInfo:
    """What a method's hook factory knows about the stage it serves.

    Attributes:
        stage: virtual stage index (0 = first).
        num_stages: virtual stages in the pipeline.
        params: the stage's trainable parameters (the live tensors, in a fixed order).
        names: their names in the stage module (``"0.weight"`` ...).
        optimizer: the stage's ``torch.optim`` optimizer.
        schedule: the :class:`~pipemare_lite.schedules.Schedule` being run.
        options: the run's :class:`~pipemare_lite.methods.MethodOptions`.
    """

    stage: int
    num_stages: int
    params: Sequence[Any]
    names: Sequence[str]
    optimizer: Any
    schedule: Any
    options: Any

    def delays(self) -> dict[int, int]:
        """``microbatch -> updates of this stage between its forward and its backward``.

        Read from this stage's actions in the schedule (the backward is ``B``, or ``I`` when
        split): the distance an asynchronous backward sees, known before the forward runs.
        """
        rank = self.schedule.rank_of(self.stage)
        updates, forward_at, delays = 0, {}, {}
        for action in self.schedule.ranks[rank]:
            if action.stage != self.stage:
                continue
            if action.kind == "U":
                updates += 1
            elif action.kind == "F":
                forward_at[action.index] = updates
            elif action.kind in ("B", "I"):
                delays[action.index] = updates - forward_at[action.index]
        return delays


class MethodHooks:
    """Base class of a method's per-stage hooks: every hook does nothing by default.

    Override what the method changes. A hook that returns None leaves the choice to the
    weight mode (current weights at F; at B the current, stashed or 2BW copy).
    """

    def forward_weights(self, microbatch: int, version: int):
        """The weights F(microbatch) reads (a list like ``params``), or None for the mode's."""

    def backward_weights(self, microbatch: int, forward_version: int, version: int):
        """The weights B(microbatch)'s products use, or None for the mode's."""

    def backward_done(self, microbatch: int) -> None:
        """B (or W) of ``microbatch`` is finished: drop what was kept for it."""

    def before_update(self) -> None:
        """Just before the optimizer step (the live weights are still the old ones)."""

    def after_update(self) -> None:
        """Just after the optimizer step (the live weights are the new ones)."""

    def bytes_held(self) -> dict[str, int]:
        """Bytes this hook holds now, by kind (e.g. ``{"prediction": 1024}``)."""
        return {}

    def state_dict(self) -> dict:
        """Everything needed to continue bitwise after a checkpoint."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
