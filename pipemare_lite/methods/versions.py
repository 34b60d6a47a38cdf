"""Weight versions: which copy of a stage's weights a forward or a backward sees (chapter 05).

Every stage counts its optimizer updates: version ``v`` is the weights after ``v`` updates.
An asynchronous pipeline updates a stage's weights *between* a microbatch's forward and its
backward, so a method must say which version the backward's products use:

==========  ==========================  =====================================================
mode        forward of microbatch m     backward of microbatch m
==========  ==========================  =====================================================
sync        current (nothing between)   current (the same version)
stash       current at F                the copy stashed at F (PipeDream)
2bw         version max(k-1, 0)         the same version (k = m's minibatch; PipeDream-2BW)
async       current at F                current at B (PipeMare's T2 corrects this one)
==========  ==========================  =====================================================

How the backward is handed a version. PyTorch's autograd keeps, for each operation, the
tensors its backward needs ("saved tensors"). ``torch.autograd.graph.saved_tensors_hooks``
lets us intercept them: the *pack* hook runs in the forward for every saved tensor and the
*unpack* hook runs in the backward when the tensor is needed. Linear saves a transposed
view whose ``_base`` is the weight; Conv2d and LayerNorm save the parameter itself. So::

    forward:  pack(t)   t is a parameter (or a view of one)?  -> store ParamRef(index, view)
                        otherwise (an activation)              -> store t itself
    backward: unpack(r) ParamRef -> the version the method chose, re-viewed like the original
                        tensor  -> t

Because the backward never touches the live parameter tensor, updating the parameters in
place between F and B is harmless (without the hooks it fails with "modified by an inplace
operation"), and the version is chosen explicitly, never through ``.data`` tricks. Weight
*gradients* still flow into ``param.grad`` through the graph: they are computed from saved
activations (for Linear, ``grad_W = grad_out^T @ x``), not from the weights.

What the hooks cannot reach: a tensor the forward *computes* from a parameter (say
``w * 2`` inside a custom layer) is an ordinary activation, so its backward keeps the
forward's version. The book's layers (Linear, Conv2d, GroupNorm, LayerNorm, Embedding,
attention built from Linear) save parameters or views of them, so every weight a backward
product uses is chosen explicitly.

Held copies (the memory cost of stashing): a copy of version ``u`` exists only while ``u``
is not the current version and some microbatch still needs it; :class:`WeightVersions`
counts references per version and frees a copy when its last backward is done. The memory
model (:mod:`pipemare_lite.analysis.memory`) predicts exactly this.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pipemare_lite.schedules.weight_modes import get_weight_mode


@dataclass(frozen=True)
class ParamRef:
    """What the pack hook stores instead of a saved parameter.

    Attributes:
        index: the parameter's position in the stage's parameter list.
        view: ``(size, stride, storage_offset)`` when autograd saved a view of the parameter
            (Linear saves ``weight.t()``), None when it saved the parameter itself. The
            offset is counted from the parameter's own first element (a parameter's storage
            offset is 0, so it equals the view's), so that the view can be rebuilt over any
            tensor of the parameter's shape, a slice of a larger buffer included.
    """

    index: int
    view: tuple | None = None

    def materialize(self, weights: Sequence[torch.Tensor]) -> torch.Tensor:
        """The saved tensor rebuilt from ``weights[index]`` (a chosen version: a tensor of the
        parameter's shape, which :func:`pipemare_lite.methods.hooks.check_weights` checked).

        The view's strides are the contiguous parameter's, so a non-contiguous version is
        made contiguous first, and its own storage offset is added to the view's.
        """
        tensor = weights[self.index]
        if self.view is None:
            return tensor
        size, stride, offset = self.view
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        return tensor.as_strided(size, stride, tensor.storage_offset() + offset)


def param_ref(tensor: torch.Tensor, index_of: dict[int, int]) -> ParamRef | None:
    """A :class:`ParamRef` when ``tensor`` is (a view of) a tracked weight, else None.

    ``index_of`` maps ``id(weight tensor)`` to its parameter index. A view's ``_base`` is
    the weight it was taken from; the view must be reproducible with ``as_strided`` from a
    contiguous copy, which holds for the ``t()`` views autograd saves.
    """
    index = index_of.get(id(tensor))
    if index is not None:
        return ParamRef(index)
    base = tensor._base
    if base is not None:
        index = index_of.get(id(base))
        if index is not None:
            return ParamRef(index, (tuple(tensor.size()), tuple(tensor.stride()),
                                    tensor.storage_offset() - base.storage_offset()))
    return None


class WeightVersions:
    """One stage's version counter and the old weight copies its method keeps alive.

    ``mode`` is one of :data:`pipemare_lite.schedules.WEIGHT_MODES` (``self.rule`` is its
    :class:`~pipemare_lite.schedules.weight_modes.WeightMode`, asked which version F and B
    read). Reference counts say
    how many microbatches whose backward is not finished read each version (stash: those
    whose forward ran; 2bw: all of minibatch ``u + 1``, registered up front). A copy of
    version ``u`` is taken at the update that would overwrite it, only if something still
    reads it, and freed after its last reader's backward.
    """

    def __init__(self, params: Sequence[torch.Tensor], mode: str, *,
                 num_microbatches: int, num_minibatches: int) -> None:
        self.rule = get_weight_mode(mode)  # ValueError naming the allowed modes
        self.params = list(params)
        self.num_microbatches = num_microbatches
        self.version = 0
        self.held: dict[int, list[torch.Tensor]] = {}
        self.refcount: dict[int, int] = {}
        self._copy_bytes = sum(p.nbytes for p in self.params)  # one held copy
        if self.rule.readers_known_up_front:
            # every reader is known up front: minibatch k reads version max(k-1, 0), and a
            # copy cannot come back once dropped, so forwards not yet run count as readers
            for minibatch in range(num_minibatches):
                version = self.rule.version_at_forward(0, minibatch)  # not the current one
                self.refcount[version] = self.refcount.get(version, 0) + num_microbatches

    # -- which version -------------------------------------------------------------------
    def forward_version(self, microbatch: int) -> int:
        """The version a forward of ``microbatch`` must read (2bw: max(k-1, 0))."""
        return self.rule.version_at_forward(self.version, microbatch // self.num_microbatches)

    def weights(self, version: int) -> list[torch.Tensor]:
        """Detached tensors holding ``version`` (the live parameters when it is current)."""
        if version == self.version:
            return [p.detach() for p in self.params]
        if version not in self.held:
            raise RuntimeError(
                f"weight version {version} is not held (current {self.version}, held "
                f"{sorted(self.held)}): the schedule needs a copy that mode "
                f"{self.rule.name!r} drops"
            )
        return self.held[version]

    # -- reference counting --------------------------------------------------------------
    def acquire(self, version: int) -> None:
        """A microbatch's forward read ``version``; keep it until :meth:`release`.

        (2bw registered all its readers at construction, so nothing changes here.)
        """
        if not self.rule.readers_known_up_front:
            self.refcount[version] = self.refcount.get(version, 0) + 1

    def release(self, version: int) -> None:
        """That microbatch's backward is finished; free the copy if nobody else needs it."""
        self.refcount[version] -= 1
        if not self.refcount[version]:
            del self.refcount[version]
            self.held.pop(version, None)

    # -- around an optimizer step ----------------------------------------------------------
    def before_update(self) -> None:
        """Keep a copy of the current version if it will still be read after the update."""
        v = self.version
        if self.rule.flushes and self.refcount:
            raise RuntimeError(
                f"weight_mode 'sync' but an update (version {v} -> {v + 1}) comes while "
                f"{sum(self.refcount.values())} microbatch(es) are between forward and "
                "backward; use an asynchronous weight mode (stash, 2bw, async) for unflushed "
                "schedules"
            )
        if self.rule.backward_reads_forwards and self.refcount.get(v):
            self.held[v] = [p.detach().clone() for p in self.params]

    def after_update(self) -> None:
        """The optimizer stepped: the live parameters are version ``v + 1``."""
        self.version += 1

    def held_bytes(self) -> int:
        """Bytes of the old copies currently kept."""
        return len(self.held) * self._copy_bytes

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Version counter, held copies and reference counts."""
        return {"version": self.version,
                "held": {u: [t.clone() for t in ts] for u, ts in self.held.items()},
                "refcount": dict(self.refcount)}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.version = state["version"]
        self.held = {u: [t.to(p.device).clone() for t, p in zip(ts, self.params)]
                     for u, ts in state["held"].items()}
        self.refcount = dict(state["refcount"])
