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
    U:     hooks.before_update(); factor = hooks.lr_factor(k)
           optimizer.step() with every group's lr times factor (then restored)
           hooks.after_update()
    bytes: hooks.bytes_held() -> {kind: bytes}, added to the stage's memory by kind

``version`` is the stage's update count now; ``forward_version`` the one microbatch m's
forward read. Weights are lists of tensors in the order of :attr:`StageInfo.params`. The
forward's weights are read as values (the weight gradient still reaches the live
parameters), the backward's are the ones its products use (e.g. ``grad_input = grad_out @
W`` of a Linear). A hook never edits the live parameters; the optimizer does.

Everything a hook returns is checked where the engine uses it (:func:`check_weights`,
:func:`check_lr_factor`), and the factory and the hooks' signatures when a stage is built
(:func:`check_hooks`): a mistake is refused with the method, the hook, the stage and the
parameter named, instead of training on wrong values.

PipeMare's T1 (:class:`~pipemare_lite.methods.lr_rescheduling.LRReschedulingHooks`, through
``lr_factor``), T2 (:class:`~pipemare_lite.methods.discrepancy.DiscrepancyHooks`) and chapter
12's methods are written through the same points. Torch-free: hooks work on the tensors
handed in.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipemare_lite.analysis.staleness import updates_before_backward


class HookError(ValueError):
    """A method's hooks (or their factory) returned or declared something the engine cannot
    use; the message names the method, the hook, the stage and what is allowed."""


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
        return updates_before_backward(self.schedule, self.stage)


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

    def lr_factor(self, update: int):
        """This stage's learning-rate multiplier for its update ``update`` (0 = first).

        A number >= 0 multiplies every parameter group's lr, a sequence one factor per
        group; None (the default) leaves the lr alone. Applied for that one optimizer step
        only (the groups' lr is restored after it, so an lr scheduler never sees the
        factor) and recorded as the lr of the update. Called after :meth:`before_update`.
        """
        return None

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


#: Each hook's positional arguments (after ``self``), as the stage worker calls it.
HOOK_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "forward_weights": ("microbatch", "version"),
    "backward_weights": ("microbatch", "forward_version", "version"),
    "backward_done": ("microbatch",),
    "before_update": (),
    "lr_factor": ("update",),
    "after_update": (),
    "bytes_held": (),
    "state_dict": (),
    "load_state_dict": ("state",),
}


def _where(method, hook: str, stage: int) -> str:
    return f"method {method!r}, hook {hook}, stage {stage}"


def _takes(function, count: int) -> bool:
    """True when ``function`` can be called with ``count`` positional arguments."""
    try:
        inspect.signature(function).bind(*range(count))
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): cannot tell, let the call decide
        return True
    return True


def call_factory(factory, info: StageInfo, method):
    """``factory(info)``, refused with the method and stage named when ``factory`` cannot
    take one argument (the :class:`StageInfo`)."""
    if not _takes(factory, 1):
        try:
            signature = str(inspect.signature(factory))
        except (TypeError, ValueError):
            signature = "(?)"
        raise HookError(
            f"method {method!r}, stage {info.stage}: the hooks factory "
            f"{getattr(factory, '__qualname__', factory)}{signature} must take one argument, "
            "info (a StageInfo), and return a MethodHooks or None")
    return factory(info)


def call_stage_factory(factory, first, stage: int):
    """``factory(first)``, or ``factory(first, stage=stage)`` when it has a parameter named
    ``stage``: an optimizer or lr-schedule factory may build differently per stage."""
    try:
        parameter = inspect.signature(factory).parameters.get("stage")
    except (TypeError, ValueError):  # no signature to read: the plain call
        return factory(first)
    if parameter is not None and parameter.kind in (parameter.KEYWORD_ONLY,
                                                    parameter.POSITIONAL_OR_KEYWORD):
        return factory(first, stage=stage)
    return factory(first)


def check_hooks(hooks, method, stage: int) -> None:
    """Refuse hooks that are not a :class:`MethodHooks` or whose hook methods cannot be called
    the way the stage worker calls them (:data:`HOOK_ARGUMENTS`)."""
    if not isinstance(hooks, MethodHooks):
        raise HookError(f"method {method!r}, stage {stage}: its hooks factory returned "
                        f"{hooks!r}; allowed: a MethodHooks (subclass) instance or None")
    for name, arguments in HOOK_ARGUMENTS.items():
        hook = getattr(hooks, name, None)
        if not callable(hook):
            raise HookError(f"{_where(method, name, stage)}: {hook!r} is not callable; "
                            f"allowed: a method {name}(self{''.join(', ' + a for a in arguments)})")
        if not _takes(hook, len(arguments)):
            raise HookError(
                f"{_where(method, name, stage)}: {type(hooks).__name__}.{name}"
                f"{inspect.signature(hook)} cannot be called as {name}("
                f"{', '.join(arguments)}); allowed: def {name}(self"
                f"{''.join(', ' + a for a in arguments)})")


def check_weights(weights, params: Sequence, names: Sequence[str], *, method, hook: str,
                  stage: int) -> list:
    """``weights`` as a list, after checking that it holds one tensor per parameter with the
    parameter's shape, dtype and device; :class:`HookError` names the first one that does not.

    (A wrong shape is not caught by torch: the backward rebuilds a saved weight view over
    the returned tensor's storage, so a smaller or transposed tensor would train silently
    on wrong values.)
    """
    import torch  # here: the hooks run only where torch is (this module imports without it)

    where = _where(method, hook, stage)
    if not isinstance(weights, (list, tuple)):
        raise HookError(f"{where}: returned {type(weights).__name__}; allowed: None or a list "
                        f"of {len(params)} tensors, one per parameter in StageInfo.params order")
    if len(weights) != len(params):
        raise HookError(f"{where}: returned {len(weights)} tensor(s) for {len(params)} "
                        f"parameter(s) ({', '.join(names)}); allowed: one per parameter, in "
                        "StageInfo.params order, or None")
    for i, (w, p, name) in enumerate(zip(weights, params, names)):
        what = f"{where}, parameter {i} ({name!r})"
        if not torch.is_tensor(w):  # a numpy array has a shape, dtype and device too
            kind = f"{type(w).__module__}.{type(w).__name__}".removeprefix("builtins.")
            raise HookError(f"{what}: got {kind}, not a tensor; allowed: a torch tensor of "
                            f"shape {tuple(p.shape)}, {p.dtype}, on {p.device} (from numpy: "
                            "torch.from_numpy(a).to(p.dtype))")
        for attribute in ("shape", "dtype", "device"):
            got, want = getattr(w, attribute), getattr(p, attribute)
            if got != want:
                show = (lambda v: tuple(v)) if attribute == "shape" else (lambda v: v)
                raise HookError(f"{what}: {attribute} {show(got)}, the parameter's is "
                                f"{show(want)}; allowed: a tensor of shape {tuple(p.shape)}, "
                                f"{p.dtype}, on {p.device}")
    return list(weights)


def check_lr_factor(factor, num_groups: int, *, method, stage: int, update: int):
    """``lr_factor``'s value as one float per parameter group, or None; :class:`HookError`
    for anything but a finite number >= 0 (or a sequence of ``num_groups`` of them)."""
    if factor is None:
        return None
    where = f"{_where(method, 'lr_factor', stage)}, update {update}"
    allowed = (f"allowed: None, a finite number >= 0, or a sequence of {num_groups} of them "
               "(one per parameter group)")
    values = list(factor) if isinstance(factor, (list, tuple)) else [factor] * num_groups
    if len(values) != num_groups:
        raise HookError(f"{where}: returned {len(values)} factor(s) for {num_groups} "
                        f"parameter group(s); {allowed}")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value >= 0):
            raise HookError(f"{where}: returned {value!r}; {allowed}")
    return [float(v) for v in values]
