"""What each stage sends: output shapes and dtypes, found without computing (chapter 11).

A receiver allocates its buffer before the data arrives, so before the first action every
rank must know the shape and dtype of every message. The owner of each stage runs a copy of
its module on meta tensors (no compute, no randomness consumed); :class:`DistributedExecutor
<pipemare_lite.engine.distributed.executor.DistributedExecutor>` broadcasts the answers.
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from pipemare_lite.torch_compat import copy_module


class _MetaProbe(TorchDispatchMode):
    """Run a forward on meta tensors: stray non-meta tensors (a constant the forward made on
    the CPU) join the meta ones, and a read of values (``.item()``, ``if tensor:``: meta
    tensors have none) raises ``NotImplementedError``, as an operator without a meta
    kernel does."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            raise NotImplementedError(f"{func} reads a tensor's values")
        flat = pytree.tree_leaves((args, kwargs))
        if any(isinstance(t, torch.Tensor) and t.is_meta for t in flat):
            args, kwargs = pytree.tree_map_only(
                torch.Tensor, lambda t: t if t.is_meta or t.dim() == 0 else t.to("meta"),
                (args, kwargs))
        return func(*args, **kwargs)


def probe_output_meta(module: nn.Module, shape: tuple, dtype: torch.dtype, *,
                      name: str = "a stage") -> tuple:
    """``(shape, dtype)`` of ``module``'s output for an input of ``shape``/``dtype``.

    Runs a copy on meta tensors (no compute, no randomness, the real module untouched). Only
    what meta tensors cannot do, told by the error's type (``NotImplementedError``: an
    operator without a meta kernel, an output whose shape depends on values, a read of
    values), falls back to a CPU copy run on zeros with the random state restored. Any
    other error is the stage's own and surfaces at once, as a RuntimeError naming ``name``
    (e.g. ``"stage 2 on rank 1"``) with the original error as its cause.
    """
    where = f"{name}: its forward failed in the shape probe on a {shape} {dtype} input"
    try:
        try:
            ghost = copy_module(module).to("meta")
            with torch.no_grad(), _MetaProbe():
                out = ghost(torch.empty(shape, dtype=dtype, device="meta"))
        except NotImplementedError:
            where += " (run on zeros, as meta tensors could not)"
            ghost = copy_module(module).cpu()
            with torch.no_grad(), torch.random.fork_rng(devices=[]):
                out = ghost(torch.zeros(shape, dtype=dtype))
    except Exception as exc:  # the stage's own error: named, with the original as the cause
        raise RuntimeError(f"{where}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} returned {type(out).__name__}; the distributed executor sends "
                        "one tensor per stage boundary")
    return tuple(out.shape), out.dtype
