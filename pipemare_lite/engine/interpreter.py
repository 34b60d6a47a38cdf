"""One action interpreter for both executors; only the transport differs (chapters 02-11).

An action ``F``, ``B``, ``I``, ``W`` or ``U`` of stage s means the same thing in one process
and across processes: take the stage's inputs, call its
:class:`~pipemare_lite.engine.stage.StageWorker`, hand its output on. The
:class:`Interpreter` says it once, as a table from the action's kind to a handler (in the
spirit of DeepSpeed's pipeline instruction map); the executors differ only in the
*transport* that moves tensors between stages::

                 Interpreter.step(action)
                           |
      handler = table[action.kind]   F: _forward   B/I: _backward   W: _weight_grad   U: _update
                           |
         inputs  <-- transport.activation / gradient / first_input / target
         start = clock()
         outputs = worker.forward / backward / input_grad / weight_grad / update
         end   = clock()            (after a GPU sync: timings mean nothing without one)
         transport.deliver(action, message)   --> next / previous stage
                           |
      InProcessTransport (LocalExecutor)       the rank's p2p transport (DistributedExecutor)
      dicts keyed by (stage, microbatch)       isend / irecv with torch.distributed

So "local == distributed" is structural: both run this code, each stage sees the same calls
in its rank's order, and the numbers depend only on that order (chapter 11).

A transport provides ``first_input(m)`` (stage 0's input), ``target(m)`` (the last stage's
target), ``activation(s, m)`` (the input of F(s, m), sent by stage s - 1), ``gradient(s, m)``
(the gradient of stage s's output, sent by stage s + 1) and ``deliver(action, message)``
with ``message = (kind, stage, microbatch, tensor)`` or None, called once the action's time
is taken.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import torch

from pipemare_lite.engine.recording import StepRecords
from pipemare_lite.engine.stage import StageWorker
from pipemare_lite.schedules.actions import (
    BACKWARD,
    FORWARD,
    INPUT_GRAD,
    UPDATE,
    WEIGHT_GRAD,
    Action,
)
from pipemare_lite.schedules.comm_plan import ACTIVATION, GRADIENT


class Interpreter:
    """Run single actions on a set of stage workers, moving tensors through ``transport``.

    Args:
        workers: ``{stage: StageWorker}`` (or a list indexed by stage) of the stages this
            interpreter runs (all of them in one process, a rank's own across processes).
        last: the index of the last virtual stage (the one that computes the loss).
        transport: see the module docstring.
        devices: CUDA devices to synchronize after each action (empty on CPU).
        timed: whether the times :meth:`step` returns are used (a trace is recorded); if
            not, no CUDA synchronization is made for them.

    ``applied_gradients``: ``{stage: []}`` to keep a CPU copy of the gradients each update
    applies (the distributed executor's ``record_gradients``), or None.
    """

    def __init__(self, workers: Mapping[int, StageWorker] | Sequence[StageWorker], last: int,
                 transport, devices: Sequence[torch.device] = (), timed: bool = True) -> None:
        self.workers = workers
        self.last = last
        self.transport = transport
        self.cuda = list(devices) if timed else []
        self.applied_gradients: dict[int, list] | None = None
        self.table = {FORWARD: self._forward, BACKWARD: self._backward,
                      INPUT_GRAD: self._backward, WEIGHT_GRAD: self._weight_grad,
                      UPDATE: self._update}

    def step(self, action: Action) -> tuple[float, float]:
        """Run ``action``; returns its ``(start, end)`` on ``time.perf_counter``'s clock.

        ``start`` is taken once the inputs are there (a wait for a message is not the
        action's time), ``end`` before its output is handed on.
        """
        start, message = self.table[action.kind](action, self.workers[action.stage])
        for device in self.cuda:
            torch.cuda.synchronize(device)
        end = time.perf_counter()
        self.transport.deliver(action, message)
        return start, end

    # ------------------------------------------------------------------ the table
    def _forward(self, action: Action, worker: StageWorker):
        s, m = action.stage, action.index
        x = self.transport.first_input(m) if s == 0 else self.transport.activation(s, m)
        target = self.transport.target(m) if s == self.last else None
        start = time.perf_counter()
        out = worker.forward(m, x, target)
        return start, (None if s == self.last else (ACTIVATION, s, m, out))

    def _backward(self, action: Action, worker: StageWorker):  # B, or I of a split backward
        s, m = action.stage, action.index
        grad_y = None if s == self.last else self.transport.gradient(s, m)
        start = time.perf_counter()
        run = worker.backward if action.kind == BACKWARD else worker.input_grad
        grad_x = run(m, grad_y)
        return start, (None if s == 0 else (GRADIENT, s, m, grad_x))

    def _weight_grad(self, action: Action, worker: StageWorker):
        start = time.perf_counter()
        worker.weight_grad(action.index)
        return start, None

    def _update(self, action: Action, worker: StageWorker):
        start = time.perf_counter()
        if self.applied_gradients is not None:
            self.applied_gradients[action.stage].append(
                [None if p.grad is None else p.grad.detach().cpu().clone()
                 for p in worker.params])
        worker.update()
        return start, None

    # ------------------------------------------------------------------ what it used
    def version_of(self, action: Action) -> int:
        """The weight version ``action`` used (call right after it ran): its forward's or
        backward's version, for U the version the update read."""
        worker = self.workers[action.stage]
        if action.kind == FORWARD:
            return worker.forward_versions[action.stage, action.index]
        if action.kind == UPDATE:
            return worker.versions.version - 1
        return worker.backward_versions[action.stage, action.index]


class InProcessTransport:
    """The local executor's transport: tensors handed over in dicts, in one process.

    ``activations[(s, m)]`` is the input of F(s, m), ``gradients[(s, m)]`` the gradient of
    stage s's output for B/I(s, m), ``targets[m]`` microbatch m's target, read with its
    input at stage 0's F and used at the last stage's. A tensor is moved to the receiving
    stage's device as it is handed over. ``microbatches`` is the current run's feed.
    """

    def __init__(self, workers: Sequence[StageWorker]) -> None:
        self.workers = workers
        self.activations: dict[tuple[int, int], torch.Tensor] = {}
        self.gradients: dict[tuple[int, int], torch.Tensor] = {}
        self.targets: dict[int, object] = {}
        self.microbatches: Sequence = ()

    def first_input(self, m: int):
        """Stage 0's input of microbatch m, read from the feed (its target kept for later;
        the executor checked that the feed is long enough)."""
        x, self.targets[m] = self.microbatches[m]
        return x

    def target(self, m: int):
        """The target read at stage 0's F of microbatch m."""
        return self.targets.pop(m)

    def activation(self, s: int, m: int):
        """The input of F(s, m)."""
        return self.activations.pop((s, m))

    def gradient(self, s: int, m: int):
        """The gradient of stage s's output for microbatch m."""
        return self.gradients.pop((s, m))

    def deliver(self, action: Action, message) -> None:
        """Hand an activation to stage s + 1 or a gradient to stage s - 1."""
        if message is None:
            return
        kind, s, m, tensor = message
        if kind == ACTIVATION:
            self.activations[(s + 1, m)] = tensor.to(self.workers[s + 1].device)
        else:
            self.gradients[(s - 1, m)] = tensor.to(self.workers[s - 1].device)

    def ready(self, action: Action) -> bool:
        """Whether ``action``'s inputs have arrived (the local executor runs it only then)."""
        s, m, kind = action.stage, action.index, action.kind
        if kind == FORWARD:
            return s == 0 or (s, m) in self.activations
        worker = self.workers[s]
        if kind == BACKWARD or kind == INPUT_GRAD:
            return m in worker.pending and (worker.is_last or (s, m) in self.gradients)
        if kind == WEIGHT_GRAD:
            record = worker.pending.get(m)
            return record is not None and record.input_grad_done
        return True


def take_records(workers: Mapping[int, StageWorker], read_losses: bool = True) -> StepRecords:
    """Take (and forget) what each worker did since the last call, merged into one
    :class:`~pipemare_lite.engine.recording.StepRecords` in stage order (both executors, at
    the end of every run: a flat cost per step, see :meth:`StageWorker.take_records`;
    ``read_losses=False`` leaves the losses unread, on their device)."""
    return StepRecords.merged(worker.take_records(read_losses) for worker in workers.values())
