"""The private torch calls of the engine's hot path, in one place (issue 44).

On a small stage three public calls cost more than the arithmetic they start, so the
engine takes a shortcut through torch's internals for each, here and nowhere else:

- ``torch.autograd.backward(root, grad)``: the shortcut is
  ``torch.autograd.graph._engine_run_backward``, the engine call it ends with, without its
  argument handling;
- ``optimizer.step()``: the shortcut calls the step's ``__wrapped__`` function, setting
  ``_opt_called`` and calling ``_optimizer_step_code`` as torch's wrapper does, when no
  hook and no profiler (``torch._C._autograd._profiler_enabled``) would see the wrapper's
  ``record_function`` block and hook loops (~15 us a call);
- loops of ``a - b``, ``a * s``, ``a.add_(b)`` over a stage's tensors (T2's buffer): the
  shortcut is ``torch._foreach_sub`` / ``_mul`` / ``_mul_`` / ``_add_``, one kernel per list.

One more thing of torch's own is kept here: its ``FutureWarning`` that
``isinstance(treespec, LeafSpec)`` is deprecated, which torch 2.13 raises inside itself when
``torch.export`` traces a module or a traced module is deep-copied. It is about torch's
code, not the caller's, so :func:`torch_pytree_warning_ignored` and :func:`copy_module`
hide that one warning and no other.

A shortcut is taken only when torch's version is in :data:`CHECKED_TORCH` (the versions
whose internals these calls were read against) and every private name resolves; otherwise,
or with the environment variable ``PIPEMARE_PUBLIC_TORCH=1`` at import, or after
``use_private(False)``, the public call runs. Both give the same numbers bitwise
(``tests/test_torch_compat.py`` trains both ways, and checks that each way calls what it
says). Copying the engine? Copy the public calls: they are correct everywhere.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import warnings

import torch

#: torch versions ``[low, high)`` whose internals the shortcuts follow (major, minor).
CHECKED_TORCH = ((2, 4), (3, 0))


def torch_version(text: str = torch.__version__) -> tuple[int, int]:
    """``(major, minor)`` of a version string such as ``"2.13.0+cpu"`` ((0, 0) if none)."""
    found = re.match(r"(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def version_checked(text: str = torch.__version__) -> bool:
    """Whether the shortcuts were checked against torch ``text`` (:data:`CHECKED_TORCH`)."""
    low, high = CHECKED_TORCH
    return low <= torch_version(text) < high


def _resolve() -> dict | None:
    """The private names, or None when one is missing (another torch)."""
    try:
        import torch.optim.optimizer as optim_internals
        from torch._C._autograd import _profiler_enabled
        from torch.autograd.graph import _engine_run_backward

        optim_internals._global_optimizer_pre_hooks  # noqa: B018  (they must exist)
        optim_internals._global_optimizer_post_hooks  # noqa: B018
        torch._foreach_sub, torch._foreach_mul, torch._foreach_add_  # noqa: B018
    except (ImportError, AttributeError):
        return None
    return {"engine_run_backward": _engine_run_backward, "profiling": _profiler_enabled,
            "optim": optim_internals}


_PRIVATE = _resolve() if version_checked() else None
_use = _PRIVATE is not None and os.environ.get("PIPEMARE_PUBLIC_TORCH") != "1"


def private_in_use() -> bool:
    """Whether the shortcuts are taken now."""
    return _use


def use_private(on: bool) -> bool:
    """Take the shortcuts (``True``, where this torch allows them) or only public calls
    (``False``); returns the previous setting (tests, and a reader comparing the two)."""
    global _use
    previous, _use = _use, bool(on) and _PRIVATE is not None
    return previous


# ----------------------------------------------------------------------- backward
def backward(root: torch.Tensor, grad: torch.Tensor | None) -> None:
    """``torch.autograd.backward(root, grad)``. The shortcut is the engine call it ends
    with, without the public function's handling of its arguments (tuples,
    ``__torch_function__``, shape checks of symbolic sizes); a scalar root without ``grad``
    starts from ones, as torch's does."""
    if not _use:
        torch.autograd.backward(root, grad)
        return
    if grad is None:
        grad = torch.ones_like(root, memory_format=torch.preserve_format)
    _PRIVATE["engine_run_backward"]((root,), (grad,), False, False, (),
                                    allow_unreachable=True, accumulate_grad=True)


# ----------------------------------------------------------------------- optimizer step
def optimizer_step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``. The shortcut calls the wrapped step directly when nothing would
    see torch's wrapper: no profiler on, no step hook (global or this optimizer's), and
    ``step`` torch's own wrapper (or an lr scheduler's counter around it, whose flag is set
    as it would set it); anything else gets the public call."""
    if not _use:
        optimizer.step()
        return
    step = type(optimizer).step
    raw = getattr(step, "__wrapped__", None)
    own = vars(optimizer).get("step")  # an lr scheduler's counter, or someone's wrapper
    optim = _PRIVATE["optim"]
    if (raw is None or not getattr(step, "hooked", False) or _PRIVATE["profiling"]()
            or (own is not None and not getattr(own, "_wrapped_by_lr_sched", False))
            or getattr(optimizer, "_optimizer_step_pre_hooks", True)
            or getattr(optimizer, "_optimizer_step_post_hooks", True)
            or optim._global_optimizer_pre_hooks or optim._global_optimizer_post_hooks):
        optimizer.step()
        return
    if own is not None:
        optimizer._opt_called = True  # what the scheduler's counter records
    raw(optimizer)
    optimizer._optimizer_step_code()  # the profilers' hook point, as torch's wrapper calls it


# ----------------------------------------------------------------------- list arithmetic
def foreach_sub(a: list[torch.Tensor], b: list[torch.Tensor]) -> list[torch.Tensor]:
    """``[x - y for x, y in zip(a, b)]``."""
    return torch._foreach_sub(a, b) if _use else [x - y for x, y in zip(a, b)]


def foreach_mul(a: list[torch.Tensor], factor) -> list[torch.Tensor]:
    """``[x * factor for x in a]`` (``factor`` a number or one tensor per item)."""
    if _use:
        return torch._foreach_mul(a, factor)
    if isinstance(factor, (list, tuple)):
        return [x * f for x, f in zip(a, factor)]
    return [x * factor for x in a]


def foreach_mul_(a: list[torch.Tensor], factor: float) -> None:
    """``x.mul_(factor)`` for every ``x`` in ``a``."""
    if _use:
        torch._foreach_mul_(a, factor)
        return
    for x in a:
        x.mul_(factor)


def foreach_add_(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    """``x.add_(y)`` for every pair."""
    if _use:
        torch._foreach_add_(a, b)
        return
    for x, y in zip(a, b):
        x.add_(y)


# ----------------------------------------------------------------------- torch's own warning
@contextlib.contextmanager
def torch_pytree_warning_ignored():
    """Within it, torch's own ``FutureWarning: isinstance(treespec, LeafSpec) is deprecated``
    is not shown (see the module docstring); every other warning is."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*treespec, LeafSpec", category=FutureWarning)
        yield


def copy_module(module: torch.nn.Module) -> torch.nn.Module:
    """``copy.deepcopy(module)``, without torch's pytree warning for a traced module."""
    with torch_pytree_warning_ignored():
        return copy.deepcopy(module)
