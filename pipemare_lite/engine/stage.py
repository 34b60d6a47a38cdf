"""One pipeline stage's worker: forward, backward, update, versions, bytes (chapters 03-11).

Contract for executors (the local one in :mod:`pipemare_lite.engine.local` and the
distributed one drive the *same* :class:`StageWorker`, so their numbers agree bitwise)::

    worker = StageWorker(stage, module, optimizer, weight_mode=..., is_last=...,
                         num_microbatches=N, num_minibatches=K, loss_fn=..., ...)
    F(m):  y = worker.forward(m, x, target)   # x: this stage's input (any device; moved to
                                              # worker.device); target only on the last
                                              # stage; returns the detached output, or on
                                              # the last stage the detached, unscaled loss
    B(m):  gx = worker.backward(m, grad_y)    # grad_y: gradient of y (None on the last
                                              # stage); returns gradient of x, None on stage 0
    I(m):  gx = worker.input_grad(m, grad_y)  # split backward: input gradient only ...
    W(m):  worker.weight_grad(m)              # ... then the weight gradients
    U:     worker.update()                    # optimizer step on everything accumulated
                                              # (records lr and update norm)

The worker never sends or receives anything: moving ``y`` and ``gx`` between stages is the
executor's job (a dict in one process, ``torch.distributed`` send/recv across processes).
Call the methods in the rank's schedule order; that order alone fixes the numerics.

Numerics (chapter 02): the last stage's loss for microbatch m is ``loss_fn(y, target)`` (a
mean over the microbatch's samples) and the backward starts from ``loss / N``; weight
gradients accumulate by summation into ``param.grad`` in the order the backwards run;
``update()`` steps the optimizer and zeroes the gradients (set to None). A flushed minibatch
therefore equals one-device gradient accumulation ``for mb in mbs: (loss(mb) / N).backward()``
followed by ``optimizer.step(); optimizer.zero_grad()``, bitwise in float32.

Weight versions (chapter 05, :mod:`pipemare_lite.methods.versions`): the forward runs under
saved-tensor hooks that replace every saved parameter by a :class:`ParamRef`; the backward
is handed the version the weight mode asks for (current, stashed, 2BW's held one), unless
the method's hooks (:mod:`pipemare_lite.methods.hooks`) choose other weights for the forward
or the backward (T2's ``w - d * delta``, weight prediction's extrapolated copy). With a split
backward the weights are chosen at I and reused at W.

Checkpoints: :meth:`StageWorker.state_dict` and :meth:`StageWorker.load_state_dict` are
:mod:`pipemare_lite.engine.replay`'s (saved state, and the replay of pending graphs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from pipemare_lite import torch_compat as compat
from pipemare_lite.analysis.memory import KINDS
from pipemare_lite.engine import replay
from pipemare_lite.engine.recording import Recording, StepRecords, recording
from pipemare_lite.methods.discrepancy import DiscrepancyHooks
from pipemare_lite.methods.hooks import MethodHooks, check_lr_factor, check_weights
from pipemare_lite.methods.versions import ParamRef, WeightVersions, param_ref

#: Byte kinds reported per stage: the memory model's (:data:`pipemare_lite.analysis.memory.KINDS`);
#: a method's hooks may add kinds of their own (weight prediction: ``prediction``).
BYTE_KINDS = KINDS


class _HeldVersion(torch.autograd.Function):
    """Forward with a held copy's values; the gradient flows to the live parameter.

    Used only when a forward reads other values than the live weights (2BW's held version,
    or a method's forward weights, e.g. weight prediction's).
    """

    @staticmethod
    def forward(ctx, param, value):
        """Return a copy of the held values (``param`` only links the graph to it)."""
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        """The gradient goes unchanged to the live parameter."""
        return grad, None


@dataclass
class _Pending:
    """A microbatch between its forward and the end of its backward on this stage."""

    microbatch: int
    version: int
    input: torch.Tensor
    target: object = None
    saved: list | None = field(default_factory=list)  # None: run without saved-tensor hooks
    root: torch.Tensor | None = None
    weights: list | None = None
    grad_output: torch.Tensor | None = None
    input_grad_done: bool = False
    saved_bytes: int = 0

    def count_saved_bytes(self) -> None:
        """Bytes of the distinct tensors in ``saved`` (one tensor saved twice counts once)."""
        distinct = {(t.data_ptr(), t.nbytes) for t in self.saved if isinstance(t, torch.Tensor)}
        self.saved_bytes = sum(nbytes for _, nbytes in distinct)


class StageWorker:
    """One (virtual) stage: its module, optimizer, weight versions and pending microbatches.

    Args:
        stage: virtual stage index (0 = first).
        module: the stage's layers; its parameters are this stage's weights.
        optimizer: a ``torch.optim`` optimizer over ``module``'s parameters.
        weight_mode: ``sync``, ``stash``, ``2bw`` or ``async`` (the schedule's).
        is_last: the last stage computes the loss.
        num_microbatches: N, microbatches per minibatch (the loss is scaled by 1/N).
        num_minibatches: K, minibatches in the schedule (2BW keeps a copy only if needed).
        loss_fn: ``loss_fn(output, target)``, a mean over samples (last stage only).
        device: where the module lives; inputs are moved here.
        lr_scheduler: optional scheduler stepped after every update.
        discrepancy_gamma: T2's gamma; None switches T2 off (needs weight mode ``async``).
            Shorthand for ``hooks=DiscrepancyHooks(params, gamma)``.
        hooks: the method's :class:`~pipemare_lite.methods.hooks.MethodHooks` for this
            stage (which weights F and B see, the lr factor and what happens at an update,
            bytes it holds); None: the base class's, which do nothing.
        method: the method's name, for the messages that refuse what its hooks return.
        record: what the stage records (:mod:`pipemare_lite.engine.recording`: a level's
            name or a :class:`~pipemare_lite.engine.recording.Recording`); never changes
            the numbers.
    """

    def __init__(self, stage: int, module: nn.Module, optimizer: torch.optim.Optimizer, *,
                 weight_mode: str, is_last: bool, num_microbatches: int,
                 num_minibatches: int = 1, loss_fn: Callable | None = None,
                 device: torch.device | str | None = None, lr_scheduler=None,
                 discrepancy_gamma: float | None = None,
                 hooks: MethodHooks | None = None, method: str | None = None,
                 record: str | Recording = "full") -> None:
        if is_last and loss_fn is None:
            raise ValueError("the last stage needs a loss_fn(output, target)")
        self.stage, self.module, self.optimizer = stage, module, optimizer
        self.is_last, self.loss_fn = is_last, loss_fn
        self.num_microbatches = num_microbatches
        self.device = torch.device(device) if device is not None else _module_device(module)
        self.lr_scheduler = lr_scheduler
        self.params = [p for p in module.parameters() if p.requires_grad]
        self._names = [n for n, p in module.named_parameters() if p.requires_grad]
        self._index_of = {id(p): i for i, p in enumerate(self.params)}
        self.versions = WeightVersions(self.params, weight_mode,
                                       num_microbatches=num_microbatches,
                                       num_minibatches=num_minibatches)
        if discrepancy_gamma is not None:
            if not self.versions.rule.has_discrepancy:
                raise ValueError(f"T2 corrects the async discrepancy; weight mode "
                                 f"{weight_mode!r} has none (use weight_mode 'async')")
            if hooks is not None:
                raise ValueError("give T2 either as discrepancy_gamma or inside hooks, not both")
            hooks = DiscrepancyHooks(self.params, discrepancy_gamma)
        self.hooks = MethodHooks() if hooks is None else hooks
        self.method = method
        self.recording = recording(record)
        self.pending: dict[int, _Pending] = {}
        # sync with the base hooks: nothing comes between F and B, so autograd's own saved
        # tensors are the right ones and the hooks only take note (see _build_graph)
        self._live = self.versions.rule.flushes and type(self.hooks) is MethodHooks
        # the activation bytes of a forward run without hooks: {input's shape...: bytes},
        # measured with the hooks on the first forward of each (see _build_graph)
        # (key None: bytes not recorded, nothing to measure)
        self._saved_bytes_of: dict[tuple | None, int] = {None: 0}
        # the pending microbatches' saved bytes, kept as they come and go (read after every
        # action by the byte meter: a sum over 16 pending microbatches each time cost more)
        self._activation_bytes = 0
        # forward versions of the microbatches whose backward finished since the last
        # update (each update applies their gradients: its forward delays)
        self.unapplied: list[int] = []
        # byte counts kept, not recounted at every read (the executors read them after every
        # action): the weights' once, the optimizer state's at each update
        self._weight_bytes = sum(p.nbytes for p in self.params)
        self.recount_optimizer_bytes()
        # the update norm's buffers, made at the first update that records it (see
        # _UpdateNorm)
        self._norm: _UpdateNorm | None = None
        # the losses of runs that asked not to read them (take_records(read_losses=False)),
        # kept as tensors until take_unread_losses (pipemare_lite.engine.unread_losses)
        self._unread_losses: list[tuple[int, torch.Tensor]] = []
        # What happened since the executor last took it (see take_records): for results
        # and traces, not needed to continue training.
        self._start_records()

    # ------------------------------------------------------------------ records
    def _start_records(self) -> None:
        self._records = StepRecords.for_stage(self.stage)
        vars(self).update(vars(self._records))  # self.distances, ...: the records' own dicts
        # the last stage's losses as tensors, read to the host once per take_records: no
        # device-to-host sync per microbatch (issue 44)
        self._loss_tensors: list[tuple[int, torch.Tensor]] = []

    def take_records(self, read_losses: bool = True) -> StepRecords:
        """What this stage did since the last call
        (:class:`~pipemare_lite.engine.recording.StepRecords`); then forget it.

        The executors call it at the end of every ``run()``: each run reports only its own
        actions, and reading them costs what the run did, not what the whole training did
        (the cost of a step stays flat however long the run). ``read_losses=False``: the
        last stage's losses are not read (no sync) but kept for
        :meth:`take_unread_losses`; the records' ``loss_by_microbatch`` stays empty.
        """
        taken = self._records
        if not read_losses:
            self._unread_losses.extend(self._loss_tensors)
        elif self._loss_tensors:  # one read of every loss of the run (one sync on a GPU)
            values = torch.stack([t.reshape(()) for _, t in self._loss_tensors]).tolist()
            taken.loss_by_microbatch.update(zip((m for m, _ in self._loss_tensors), values))
        self._start_records()
        return taken

    def take_unread_losses(self) -> list[tuple[int, torch.Tensor]]:
        """``[(microbatch, loss tensor)]`` kept by ``take_records(read_losses=False)`` since
        the last call, in the order computed; then forget them."""
        taken, self._unread_losses = self._unread_losses, []
        return taken

    # ------------------------------------------------------------------ forward
    def forward(self, microbatch: int, x: torch.Tensor, target=None) -> torch.Tensor:
        """F(m): run the module on ``x``; returns the detached output (last stage: loss)."""
        if microbatch in self.pending:
            raise RuntimeError(f"stage {self.stage}: F{microbatch} twice without its backward")
        if self.is_last and target is None:
            raise ValueError(f"stage {self.stage} is last: F{microbatch} needs a target")
        if self.stage > 0 and not x.is_floating_point():
            raise TypeError(f"stage {self.stage} got a {x.dtype} input; stages after the "
                            "first need floating-point inputs to send gradients back")
        version = self.versions.forward_version(microbatch)
        record = self._new_record(microbatch, version, x, target)
        self.versions.acquire(version)
        self.pending[microbatch] = record
        if self.recording.trace:
            self.forward_versions[self.stage, microbatch] = version
        out = self._build_graph(record)
        self._activation_bytes += record.saved_bytes
        if self.is_last:  # read at take_records, with the run's other losses
            self._loss_tensors.append((microbatch, out.detach()))
        return out

    def _new_record(self, microbatch: int, version: int, x: torch.Tensor, target) -> _Pending:
        """A forward's record: its input, detached and on this device (needing a gradient
        after stage 0: it is sent back), and its target (a forward's and a replay's)."""
        x = x.detach().to(self.device).requires_grad_(self.stage > 0)
        if isinstance(target, torch.Tensor):
            target = target.to(self.device)
        return _Pending(microbatch, version, x, target)

    # The saved-tensor path, F(m) to B(m) (chapter 05). Autograd offers every tensor it
    # saves to pack(); what pack returns is kept in the graph and given to unpack() when
    # the backward needs it:
    #
    #   forward, F(m)                           backward, B(m) (or I(m) then W(m))
    #   activation a --pack--> a ---------------> unpack(a) -> a
    #   weight w_i   --pack--> ParamRef(i) -----> unpack(ref) -> record.weights[i]
    #                  (+ record.saved, for      (the version the weight mode or the
    #                   bytes and checkpoints)    method's hooks chose at B/I)
    #
    # So the backward's weights are picked late, at B, not frozen at F; sync keeps w
    # itself (``live``), and then the hooks change nothing: a run that keeps no saved
    # tensors runs sync forwards without them (bytes measured once per input shape). A
    # checkpoint's replay swaps pack() for one that hands back the stored tensors
    # (:mod:`pipemare_lite.engine.replay`).
    def _build_graph(self, record: _Pending, pack: Callable | None = None) -> torch.Tensor:
        """Run the forward under the hooks; sets ``record.root``; returns the detached output.

        ``pack``: another pack hook (a checkpoint's replay, :mod:`.replay`, hands back the
        stored saved tensors; the method's hooks are then not asked for weights).
        """
        unhooked = pack is None and self._live and not self.recording.saved_tensors
        if unhooked:
            key = self._bytes_key(record)
            if key in self._saved_bytes_of:  # bytes known (or not recorded): no hooks
                record.saved, record.saved_bytes = None, self._saved_bytes_of[key]
                return self._run_module(record)
        versions, hooks, index_of = self.versions, self.hooks, self._index_of
        # a replay's saved tensors are stored: the method's hooks are not asked for weights
        copies = hooks.forward_weights(record.microbatch, record.version) if pack is None else None
        if copies is not None:  # refused with the method, hook, stage and parameter named
            copies = check_weights(copies, self.params, self._names, method=self.method,
                                   hook="forward_weights", stage=self.stage)
        if copies is None and record.version != versions.version and (
                not versions.rule.forward_reads_current or record.version in versions.held):
            # 2BW (or a replayed stash forward): read the held copy, not the live weights.
            # A replayed async forward reads the live weights: its saved tensors are stored.
            copies = versions.weights(record.version)
        weights = None
        if copies is not None:
            weights = {name: _HeldVersion.apply(p, c)
                       for name, p, c in zip(self._names, self.params, copies)}
            index_of = {id(t): i for i, t in enumerate(weights.values())}
        if pack is None:
            pack = self._packer(record, index_of, self._live)
        with torch.autograd.graph.saved_tensors_hooks(pack, self._unpacker(record)):
            out = self._run_module(record, weights)
        if self.recording.peak_bytes or self.recording.saved_tensors:
            record.count_saved_bytes()
        if unhooked:  # measured once, for the forwards of this shape to come
            self._saved_bytes_of[key] = record.saved_bytes
        return out

    def _run_module(self, record: _Pending, weights: dict | None = None) -> torch.Tensor:
        """The forward itself (with ``weights`` instead of the module's own, if given) and,
        on the last stage, the loss; sets ``record.root``; returns the detached output."""
        if weights is None:
            y = out = self.module(record.input)
        else:
            y = out = torch.func.functional_call(self.module, weights, (record.input,))
        if self.is_last:  # the output is the loss; the backward starts from loss / N
            out = self.loss_fn(y, record.target)
            y = out / self.num_microbatches
        record.root = y
        return out.detach()

    def _bytes_key(self, record: _Pending) -> tuple | None:
        """What a forward's saved bytes depend on (None when bytes are not recorded): the
        input's and target's shape and dtype, and train or eval mode."""
        if not self.recording.peak_bytes:
            return None
        x, target = record.input, record.target
        return (x.shape, x.dtype, x.device, self.module.training,
                getattr(target, "shape", None), getattr(target, "dtype", None))

    @staticmethod
    def _packer(record: _Pending, index_of: dict[int, int], live: bool = False):
        """The pack hook: a weight is saved as a :class:`ParamRef` (the backward is handed
        the version its method asks for); ``live`` keeps the weight itself for the backward
        and the reference only in ``record.saved`` (checkpoints and byte counts)."""
        saved = record.saved

        def pack(tensor: torch.Tensor):  # activations (not weights, no views) first: fast
            ref = (None if id(tensor) not in index_of and tensor._base is None
                   else param_ref(tensor, index_of))
            if ref is None:
                saved.append(tensor)
                return tensor
            saved.append(ref)
            return tensor if live else ref
        return pack

    @staticmethod
    def _unpacker(record: _Pending):
        def unpack(packed):
            if isinstance(packed, ParamRef):
                if record.weights is None:
                    raise RuntimeError(f"microbatch {record.microbatch}: backward weights unset")
                return packed.materialize(record.weights)
            return packed
        return unpack

    # ------------------------------------------------------------------ backward
    def _choose_backward_weights(self, record: _Pending) -> None:
        """The weights B(m)'s products use: the hooks' choice, else the weight mode's.

        The version recorded is the weight mode's (the hooks may hand other values).
        """
        m, current = record.microbatch, self.versions.version
        used = self.versions.rule.version_at_backward(current, record.version)
        if record.saved is not None:  # (a forward without hooks left autograd its weights)
            chosen = self.hooks.backward_weights(m, record.version, current)
            if chosen is not None:  # refused with the method, hook, stage and parameter named
                chosen = check_weights(chosen, self.params, self._names, method=self.method,
                                       hook="backward_weights", stage=self.stage)
            record.weights = self.versions.weights(used) if chosen is None else chosen
        if self.recording.trace:
            self.backward_versions[self.stage, m] = used
            self.distances[self.stage, m] = used - record.version  # the discrepancy (T2: d)

    def _take(self, microbatch: int, kind: str) -> _Pending:
        record = self.pending.get(microbatch)
        if record is None:
            raise RuntimeError(f"stage {self.stage}: {kind}{microbatch} before F{microbatch}")
        return record

    def _grad_output(self, microbatch: int, grad_y):
        if self.is_last:
            return None
        if grad_y is None:
            raise ValueError(f"stage {self.stage}: backward of {microbatch} needs grad_y")
        return grad_y.to(self.device)

    def backward(self, microbatch: int, grad_y: torch.Tensor | None = None):
        """B(m): gradients of weights (accumulated) and of the input (returned; None on stage 0)."""
        record = self._take(microbatch, "B")
        self._choose_backward_weights(record)
        compat.backward(record.root, self._grad_output(microbatch, grad_y))
        grad_x = record.input.grad if self.stage > 0 else None
        self._finish(record)
        return grad_x

    def input_grad(self, microbatch: int, grad_y: torch.Tensor | None = None):
        """I(m): only the input gradient (None on stage 0); the graph is kept for W(m)."""
        record = self._take(microbatch, "I")
        self._choose_backward_weights(record)
        record.grad_output = self._grad_output(microbatch, grad_y)
        record.input_grad_done = True
        if self.stage == 0:
            return None
        (grad_x,) = torch.autograd.grad(record.root, record.input, record.grad_output,
                                        retain_graph=True)
        return grad_x

    def weight_grad(self, microbatch: int) -> None:
        """W(m): the weight gradients, with the weights chosen at I(m)."""
        record = self._take(microbatch, "W")
        if not record.input_grad_done:
            raise RuntimeError(f"stage {self.stage}: W{microbatch} before I{microbatch}")
        torch.autograd.backward(record.root, record.grad_output, inputs=self.params)
        self._finish(record)

    def _finish(self, record: _Pending) -> None:
        del self.pending[record.microbatch]
        self._activation_bytes -= record.saved_bytes
        self.versions.release(record.version)
        self.hooks.backward_done(record.microbatch)
        self.unapplied.append(record.version)  # the next update applies its gradient

    # ------------------------------------------------------------------ update
    def update(self) -> None:
        """U: one optimizer step on the accumulated gradients, then zero them (to None)."""
        self.versions.before_update()
        self.hooks.before_update()
        groups = self.optimizer.param_groups
        factors = check_lr_factor(self.hooks.lr_factor(self.versions.version), len(groups),
                                  method=self.method, stage=self.stage,
                                  update=self.versions.version)
        if factors is not None:  # this step only: the groups keep (and a scheduler sees) base lrs
            base_lrs = [group["lr"] for group in groups]
            for group, lr, factor in zip(groups, base_lrs, factors):
                group["lr"] = lr * factor
        self.group_learning_rates[self.stage].append([group["lr"] for group in groups])
        norm = None
        if self.recording.update_norms:
            norm = self._norm = self._norm or _UpdateNorm(self.params)
            norm.before()
        compat.optimizer_step(self.optimizer)
        if factors is not None:
            for group, lr in zip(groups, base_lrs):
                group["lr"] = lr
        _zero_grads(self.optimizer)
        if norm is not None:
            self.update_norms[self.stage].append(norm.after())
        self.hooks.after_update()
        applied = self.versions.version  # the version this update read
        self.forward_delays[self.stage].extend(applied - version for version in self.unapplied)
        self.unapplied.clear()
        self.versions.after_update()
        self.recount_optimizer_bytes()  # its state appears at the first step
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()


    # ------------------------------------------------------------------ bytes
    def bytes_held(self) -> dict[str, int]:
        """Real bytes this stage holds now, by kind (see :data:`BYTE_KINDS`).

        ``activations`` counts, per pending microbatch, the distinct tensors the pack hook
        kept (by address and size; parameters excluded: they are weights or stash). The
        method's hooks add what they declare (T2: ``t2_buffer``; a new method its own kinds).
        """
        held = {
            "weights": self._weight_bytes,
            "stash": self.versions.held_bytes(),
            "t2_buffer": 0,
            "optimizer": self._optimizer_bytes,
            "activations": self._activation_bytes,  # the sum over self.pending
        }
        for kind, value in self.hooks.bytes_held().items():
            held[kind] = held.get(kind, 0) + int(value)
        return held

    def recount_optimizer_bytes(self) -> None:
        """Count the optimizer state's bytes (it changes only at an update or when a
        checkpoint is loaded)."""
        self._optimizer_bytes = sum(t.nbytes for state in self.optimizer.state.values()
                                    for t in state.values() if isinstance(t, torch.Tensor))

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Everything needed to continue bitwise (:func:`.replay.stage_state`)."""
        return replay.stage_state(self)

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s output and rebuild the pending microbatches' graphs
        (:func:`.replay.load_stage_state`)."""
        replay.load_stage_state(self, state)


def _zero_grads(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.zero_grad(set_to_none=True)``; torch's own is this loop inside a profiling
    wrapper that costs more than the loop (an optimizer with its own ``zero_grad`` runs it)."""
    if type(optimizer).zero_grad is not torch.optim.Optimizer.zero_grad:
        optimizer.zero_grad(set_to_none=True)
        return
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = None


def update_norm(before, after) -> float:
    """``||after - before||_2`` over all tensors, in float64 (chapter 07's per-stage evidence).

    Float64 so that the norm of finite float32 weights never overflows: it is non-finite
    exactly when ``after`` holds a non-finite value (``before`` being finite). Devices
    without float64 (MPS) compute in float32.
    """
    if len(before) != len(after):
        raise ValueError(f"update_norm: {len(before)} tensors before, {len(after)} after")
    if not after:
        return 0.0
    flat_before = torch.cat([t.detach().reshape(-1) for t in before])
    flat_after = torch.cat([t.detach().reshape(-1) for t in after])
    return _change_norm(flat_before, flat_after,
                        torch.empty_like(flat_after, dtype=_norm_dtype(flat_after)))


def _change_norm(before: torch.Tensor, after: torch.Tensor, diff: torch.Tensor) -> float:
    """:func:`update_norm` of two flat tensors, through ``diff`` (in the norm's dtype, which
    it overwrites): ``after`` converted to that dtype, exactly, minus ``before``, promoted
    exactly too."""
    diff.copy_(after)
    diff.sub_(before)
    return float(torch.linalg.vector_norm(diff))


class _UpdateNorm:
    """One stage's :func:`update_norm` around each update, in buffers kept across updates:
    the weights before the update and after it, each gathered into one flat tensor by one
    kernel (``torch.cat`` of views of the weights), then one difference and one norm. A
    handful of kernels per update, however many tensors the stage has: per tensor, the
    Python calls cost more than the arithmetic on a small stage."""

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        self.params = list(params)
        # views of the live weights (in-place updates show through them); a weight that is
        # not contiguous is reshaped (copied) at every update instead
        contiguous = all(p.is_contiguous() for p in self.params)
        self.views = [p.detach().view(-1) for p in self.params] if contiguous else None
        size = sum(p.numel() for p in self.params)
        like = self.params[0] if self.params else torch.empty(0)
        self.weights_before = torch.empty(size, dtype=like.dtype, device=like.device)
        self.weights_after = torch.empty_like(self.weights_before)
        self.diff = torch.empty_like(self.weights_before, dtype=_norm_dtype(like))

    def _gather(self, out: torch.Tensor) -> torch.Tensor:
        views = self.views or [p.detach().reshape(-1) for p in self.params]
        return torch.cat(views, out=out) if views else out

    def before(self) -> None:
        """Keep the weights as they are before the update."""
        self._gather(self.weights_before)

    def after(self) -> float:
        """``||w after - w before||_2`` of the update that just ran."""
        if not self.params:
            return 0.0
        return _change_norm(self.weights_before, self._gather(self.weights_after), self.diff)


def _norm_dtype(tensor: torch.Tensor) -> torch.dtype:
    return torch.float32 if tensor.device.type == "mps" else torch.float64


def _module_device(module: nn.Module) -> torch.device:
    return next((p.device for p in module.parameters()), torch.device("cpu"))
