"""The local executor: run a schedule with real tensors in one process (chapters 02-10).

Usage (the API ``fit()`` and the chapters build on)::

    schedule = build_schedule("async", P, N, num_minibatches=K)      # one schedule, K steps
    executor = LocalExecutor(schedule, stage_modules, loss_fn=F.cross_entropy,
                             optimizer_factory=lambda params: torch.optim.SGD(params, lr=0.1),
                             method_options=MethodOptions(...))
    result = executor.run(microbatches)       # microbatches[m] = (input, target), global m

``microbatches`` is any sequence indexed by the *global* microbatch index (microbatch j of
minibatch k is ``k * N + j``) with at least ``schedule.total_microbatches`` entries; it may be
lazy (only ``__getitem__`` and ``__len__`` are used, each index read once, when its first
forward runs). An epoch of K minibatches is therefore ONE schedule with K minibatches: an
asynchronous pipeline never flushes between them.

Stopping and resuming. ``run(microbatches, stop_after_updates=k)`` returns as soon as every
stage has made k updates (the pipeline may hold in-flight microbatches: their saved tensors
are part of the state). ``state_dict()`` then captures weights, optimizer and scheduler
states, versions, stashed copies, T2 buffers, the position of every rank in the schedule,
messages in transit and the pending microbatches; a fresh executor built the same way,
after ``load_state_dict(state)``, continues with ``run(microbatches)`` and produces the same
trajectory bitwise as an uninterrupted run. The state holds Python objects (use
``torch.save``/``torch.load(weights_only=False)``).

Randomness (dropout): an executor draws from the process's random stream, and its state
records that stream. One restored from a checkpoint continues the checkpoint's stream on
its own: ``load_state_dict`` keeps it in the executor, and each ``run`` swaps it in and back
out (``torch.random.fork_rng``), so loading a checkpoint and resuming leave the caller's
stream as they found it.

Loss scaling (the same as one-device gradient accumulation, chapter 02): microbatch m's
loss is ``loss_fn(output, target)`` (a mean over its samples); the backward starts from
``loss / N``; gradients add up in microbatch order on each stage. ``RunResult.losses`` are
the unscaled losses.

Execution order. Each rank runs its own actions in schedule order; the executor visits the
ranks round-robin, one ready action each per round (an action is ready once its input has
arrived), so the measured trace looks like a pipeline. The numbers depend only on each
rank's own order, so any dependency-respecting interleaving gives the same result: the
distributed executor relies on exactly this. Each action is run by the
:class:`~pipemare_lite.engine.interpreter.Interpreter` the distributed executor runs too,
here with the in-process transport (tensors in dicts); the
:class:`~pipemare_lite.engine.recorder.Recorder` notes the wall-clock time of every
action, the weight version each F and B used, and the bytes each stage held.

What is recorded: ``LocalExecutor(..., record="full")`` (the default) records all of the
above; ``"history"`` only what a training history keeps (update norms, peak bytes) and
``"losses"`` nothing more than losses, learning rates and forward delays, each cheaper
(:mod:`pipemare_lite.engine.recording`). The numbers trained are the same at every level.

Reading the losses. A run reads its losses to the host once, at its end (one ``tolist``:
one sync on a GPU, whatever N). ``run(..., read_losses=False)`` reads none: they wait on
their device until :meth:`LocalExecutor.read_losses` reads every waiting run's at once
(:mod:`pipemare_lite.engine.unread_losses`; ``fit(loss_reads_every=K)``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from pipemare_lite.analysis.timeline import Timeline
from pipemare_lite.engine.build_worker import build_stage_workers
from pipemare_lite.engine.interpreter import InProcessTransport, Interpreter, take_records
from pipemare_lite.engine.recorder import BytesMeter, Recorder
from pipemare_lite.engine.recording import Recording, StepRecords, recording
from pipemare_lite.engine.stage import StageWorker
from pipemare_lite.engine.unread_losses import RunLosses, UnreadLosses
from pipemare_lite.methods.registry import MethodOptions
from pipemare_lite.schedules.actions import UPDATE, Schedule
from pipemare_lite.schedules.repeat import schedule_key


@dataclass
class RunResult(StepRecords):
    """What one :meth:`LocalExecutor.run` call did: its
    :class:`~pipemare_lite.engine.recording.StepRecords` (losses, versions, distances,
    learning rates, update norms, forward delays; ``losses`` in microbatch order and
    ``learning_rates``, the first parameter group's, read from them), plus the trace and the
    bytes. Fields left empty (the trace None) are those the executor's recording leaves out
    (:mod:`pipemare_lite.engine.recording`).

    Attributes:
        trace: measured :class:`~pipemare_lite.analysis.timeline.Timeline` (unit "s"); its
            ``extra["versions"]``: ``{"2F5": 1, "2B5": 3, ...}`` the weight version each
            F/B/I/W used.
        peak_bytes: ``peak_bytes[stage][kind]``, the largest value seen after any action.
        bytes_over_time: ``(seconds, stage, {kind: bytes})`` after each of that stage's actions.
        peak_bytes_by_rank: ``[rank][kind]``, the largest sum over the rank's virtual stages
            after any of its actions (what one device holds; equals ``peak_bytes`` unless a
            rank holds several stages: interleaved, ZB-V, DualPipeV). The memory model
            (:func:`pipemare_lite.analysis.memory.memory_by_kind`) predicts these numbers.
    """

    trace: Timeline | None = None
    peak_bytes: list[dict[str, int]] = field(default_factory=list)
    bytes_over_time: list[tuple[float, int, dict[str, int]]] = field(default_factory=list)
    peak_bytes_by_rank: list[dict[str, int]] = field(default_factory=list)


class LocalExecutor:
    """Run a :class:`~pipemare_lite.schedules.Schedule` on ``stage_modules`` in one process.

    Args:
        schedule: which actions each rank runs (its ``weight_mode`` picks the versions).
        stage_modules: one module per virtual stage (``schedule.num_virtual_stages``).
        loss_fn: ``loss_fn(output, target)``, mean over the microbatch's samples.
        optimizer_factory: ``optimizer_factory(params) -> torch.optim.Optimizer``, per stage.
        method_options: T1/T2 switches and the method whose hooks every stage builds
            (:class:`~pipemare_lite.methods.MethodOptions`; see
            :func:`~pipemare_lite.methods.method_options`).
        devices: one ``torch.device`` per virtual stage (default: where each module is).
        lr_scheduler_factory: ``factory(optimizer) -> scheduler`` per stage; with T1 on, T1
            multiplies on top of it.
        record: what to record, a level of :data:`pipemare_lite.engine.recording.RECORDINGS`
            (``"full"``, ``"history"``, ``"losses"``) or a
            :class:`~pipemare_lite.engine.recording.Recording`; never changes the numbers.
    """

    def __init__(self, schedule: Schedule, stage_modules: Sequence[nn.Module], *,
                 loss_fn: Callable, optimizer_factory: Callable,
                 method_options: MethodOptions | None = None,
                 devices: Sequence[torch.device | str] | None = None,
                 lr_scheduler_factory: Callable | None = None,
                 record: str | Recording = "full") -> None:
        stages = schedule.num_virtual_stages
        if len(stage_modules) != stages:
            raise ValueError(f"schedule {schedule.name!r} has {stages} virtual stages, got "
                             f"{len(stage_modules)} stage modules")
        if devices is not None and len(devices) != stages:
            raise ValueError(f"devices: need one per virtual stage ({stages}), got {len(devices)}")
        self.schedule = schedule
        self.recording = recording(record)
        workers, self.forward_delays = build_stage_workers(
            schedule, dict(enumerate(stage_modules)), loss_fn=loss_fn,
            optimizer_factory=optimizer_factory, options=method_options,
            device_of=lambda s: None if devices is None else torch.device(devices[s]),
            lr_scheduler_factory=lr_scheduler_factory, record=self.recording)
        self.workers: list[StageWorker] = list(workers.values())
        self._stages_of = {r: schedule.stages_of(r) for r in range(schedule.num_ranks)}
        self._cursors = [_Cursor(schedule, r, 0) for r in range(schedule.num_ranks)]
        # tensors in transit live in the transport; the interpreter runs the actions
        self.transport = InProcessTransport(self.workers)
        self.interpreter = Interpreter(
            self.workers, stages - 1, self.transport,
            devices=[w.device for w in self.workers if w.device.type == "cuda"],
            timed=self.recording.trace)
        # the random state of a checkpoint this executor continues ({"cpu", "cuda"}), or
        # None: draw from the process's stream (see the module docstring)
        self._rng: dict | None = None
        # runs made with read_losses=False, their losses still on the device
        self.unread = UnreadLosses(dict(enumerate(self.workers)), stages - 1)

    @property
    def positions(self) -> list[int]:
        """How many actions each rank has run."""
        return [cursor.position for cursor in self._cursors]

    @property
    def finished(self) -> bool:
        """True once every rank has run all its actions."""
        return all(cursor.action is None for cursor in self._cursors)

    # ------------------------------------------------------------------ running
    def run(self, microbatches: Sequence, *, stop_after_updates: int | None = None,
            read_losses: bool = True) -> RunResult:
        """Execute the schedule (from where it stands) and return the losses and the trace.

        ``stop_after_updates=k`` stops as soon as every stage has made ``k`` updates;
        call ``run`` again (or save ``state_dict()``) to continue. Streaming a long run
        minibatch by minibatch is ``for k in range(1, K + 1): run(mbs, stop_after_updates=k)``;
        each call returns what it ran, and the pieces add up to one uninterrupted run.
        ``read_losses=False``: the result's ``loss_by_microbatch`` is empty and the losses
        stay on their device (no host read) until :meth:`read_losses`.
        """
        if self._rng is None:
            return self._run(microbatches, stop_after_updates, read_losses)
        cuda = "cuda" in self._rng
        devices = list(range(torch.cuda.device_count())) if cuda else []
        with torch.random.fork_rng(devices=devices):  # the caller's stream stays untouched
            torch.set_rng_state(self._rng["cpu"])
            if cuda:
                torch.cuda.set_rng_state_all(self._rng["cuda"])
            try:
                return self._run(microbatches, stop_after_updates, read_losses)
            finally:
                self._rng = self._current_rng(cuda)

    @staticmethod
    def _current_rng(cuda: bool) -> dict:
        rng = {"cpu": torch.get_rng_state()}
        if cuda:
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return rng

    def _run(self, microbatches: Sequence, stop_after_updates: int | None,
             read_losses: bool) -> RunResult:
        if len(microbatches) < self.schedule.total_microbatches:
            raise ValueError(f"schedule {self.schedule.name!r} runs "
                             f"{self.schedule.total_microbatches} microbatches "
                             f"({self.schedule.num_minibatches} x {self.schedule.num_microbatches}"
                             f"), got {len(microbatches)}")
        workers, cursors = self.workers, self._cursors
        interpreter, transport = self.interpreter, self.transport
        transport.microbatches = microbatches
        recording = self.recording
        meter = (BytesMeter(dict(enumerate(workers)), self._stages_of,
                            every_action=recording.trace) if recording.peak_bytes else None)
        recorder = Recorder(interpreter, meter) if recording.trace else None

        def reached() -> bool:  # versions move only at updates: checked first and after U
            return stop_after_updates is not None and all(
                w.versions.version >= stop_after_updates for w in workers)

        if recorder is not None:
            recorder.start()
        ready, stopped = transport.ready, reached()
        while not stopped:
            progressed = False
            for rank, cursor in enumerate(cursors):  # one action per rank per round
                action = cursor.action
                if action is None or not ready(action):
                    continue
                start, end = interpreter.step(action)
                if recorder is not None:
                    recorder.record(rank, action, start, end)
                elif meter is not None:  # without a trace, the meter alone is told
                    meter.after_action(rank, action)
                cursor.advance()
                progressed = True
                if action.kind == UPDATE and reached():
                    stopped = True
                    break
            if not progressed:  # a round without an action: the end, or a stuck schedule
                if self.finished:
                    break
                stuck = [str(c.action) for c in cursors if c.action is not None]
                raise RuntimeError(f"schedule {self.schedule.name!r} is stuck: no rank can run "
                                   f"its next action ({', '.join(stuck)}); a dependency is "
                                   "missing or ordered after its consumer")
        transport.microbatches = ()  # the feed is the caller's: not kept between runs
        return self._result(recorder, meter, read_losses)

    def read_losses(self) -> list[RunLosses]:
        """The losses of every run made with ``read_losses=False`` since the last call, one
        :class:`~pipemare_lite.engine.unread_losses.RunLosses` per run in run order, read
        to the host with one ``tolist`` (none when no loss waits)."""
        values = self.unread.values()
        return self.unread.take([] if values is None else values.tolist())

    def stage_health(self, run: RunLosses) -> tuple[list[int], dict[int, int]]:
        """The stages holding a non-finite weight when ``run`` ended, and each stage's
        update count then (one host read; for a divergence found late)."""
        stages = len(self.workers)
        return UnreadLosses.read_health(
            UnreadLosses.health(run, stages, torch.device("cpu")), stages)

    def _result(self, recorder: Recorder | None, meter: BytesMeter | None,
                read_losses: bool = True) -> RunResult:
        # every stage's, in stage order
        taken = take_records(dict(enumerate(self.workers)), read_losses)
        if not read_losses:
            self.unread.add_run()
        trace = None if recorder is None else Timeline(
            self.schedule, tuple(recorder.timed_actions()), unit="s", source="measured",
            extra={"versions": recorder.versions, "distances": dict(taken.distances)})
        bytes_measured = {} if meter is None else dict(
            peak_bytes=list(meter.peaks.values()), bytes_over_time=meter.over_time,
            peak_bytes_by_rank=list(meter.rank_peaks().values()))
        return RunResult(**vars(taken), trace=trace, **bytes_measured)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Everything needed to continue bitwise (see the module docstring)."""
        if len(self.unread):
            raise RuntimeError(f"{len(self.unread)} run(s) made with read_losses=False wait "
                               "to be read: call read_losses() before state_dict()")
        if self._rng is not None:  # continuing a checkpoint's stream
            rng = copy.deepcopy(self._rng)
        else:  # no CUDA call on CPU runs
            rng = self._current_rng(any(w.device.type == "cuda" for w in self.workers))
        return {
            "schedule": schedule_key(self.schedule),
            "positions": self.positions,
            "activations": dict(self.transport.activations),  # messages in transit
            "gradients": dict(self.transport.gradients),
            "targets": dict(self.transport.targets),
            "stages": [w.state_dict() for w in self.workers],
            "rng": rng,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a fresh executor (same schedule, modules, factories) to ``state``."""
        if state["schedule"] != schedule_key(self.schedule):
            raise ValueError(f"state was saved for schedule {state['schedule'][0]!r} with other "
                             f"actions; this executor runs {self.schedule.name!r}")
        if any(self.positions):
            raise RuntimeError("load_state_dict needs an executor that has not run yet")
        self._cursors = [_Cursor(self.schedule, r, p) for r, p in enumerate(state["positions"])]
        self.transport.activations = dict(state["activations"])
        self.transport.gradients = dict(state["gradients"])
        self.transport.targets = dict(state["targets"])
        for worker, stage_state in zip(self.workers, state["stages"]):
            worker.load_state_dict(stage_state)
        # kept for run(), not set on the process: the caller's random stream is its own
        self._rng = copy.deepcopy(state["rng"])


class _Cursor:
    """Where one rank stands in its row: the next ``action`` (None at the end) and its
    ``position``. The row is read one action at a time, so a long run's periodic rows
    (:mod:`pipemare_lite.schedules.rows`) are never materialized."""

    def __init__(self, schedule, rank: int, position: int) -> None:
        self.actions = schedule.row(rank, position)
        self.position = position
        self.action = next(self.actions, None)

    def advance(self) -> None:
        """Step to the next action."""
        self.position += 1
        self.action = next(self.actions, None)
