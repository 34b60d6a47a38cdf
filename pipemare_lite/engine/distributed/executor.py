"""The distributed executor: the same schedule, one process per rank (introduced in chapter 11).

Each rank builds a :class:`~pipemare_lite.engine.stage.StageWorker` for each of its
(virtual) stages, exactly as the local executor does, and runs its own row of the schedule
in order. Only the transport differs: where the local executor moves a tensor through a
dict, a rank here sends it with ``torch.distributed`` (:mod:`.transport`). A stage's numbers
depend only on its own action order, so both executors agree bitwise (fp32, CPU, one thread
per process); ``tests/test_dist_executor.py`` checks it for every method.

One rank's loop; each action is run by
:class:`~pipemare_lite.engine.interpreter.Interpreter`, the very code the local executor
runs, with this module's point-to-point transport::

    for i, action in enumerate(schedule.ranks[rank]):
        board.at(i, action)                       # the watchdog publishes where we are
        F(s, m):  x = data (s = 0) or recv(activation of s-1, m)
                  y = worker.forward(m, x, target)   -> send(activation of s, m)
        B/I(s,m): g = recv(gradient of s+1, m) (not on the last stage)
                  gx = worker.backward(m, g)         -> send(gradient of s, m)  (s > 0)
        W(s, m):  worker.weight_grad(m)
        U(s, k):  worker.update()
        trace.append(rank, action, start, end)    # start = after its inputs arrived

Before the first run, a *shape probe* tells every rank the shape and dtype of every message
(a receiver allocates its buffer before the data arrives): stage by stage, the owner runs
its module on meta tensors (no compute, no randomness consumed) and broadcasts the shapes.
Then one barrier gives every rank a common time origin for the trace (the only barrier:
later runs need none, the messages order themselves).

What crosses ranks per step under ``fit(executor="dist")`` (``gather_into``)::

    each step:       the p2p messages of the schedule, then the last stage's losses as one
                     tensor of their values (whose microbatches they are, every rank reads
                     from the schedule: LossesAhead), a message to each rank with gloo
                     (its receive posted before the step), a broadcast with NCCL: every
                     rank takes the same decisions (divergence, blow-up) on the same numbers
    (loss_reads_every=K: nothing per step; one broadcast of K steps' losses per read, see
    read_losses)
    at evaluation,   gather(): one pickled all-gather (two collectives) of what each rank
    checkpoint, end  held back since the last gather (learning rates, update norms, delays,
                     byte peaks, trace) and of its stages' weights, into every rank's model

The weights stay on their ranks while training; the cost of a step does not grow with the
run (``tests/test_dist_collectives.py`` counts the collectives).

Devices: gloo on CPU; with NCCL rank r uses ``cuda:<local rank>``; every ``torch.cuda``
call is guarded so the CPU path never touches CUDA. Randomness: each rank has its own
generator, so a model with dropout gives other masks than in one process (the book's models
have no dropout).

Entry point: :class:`DistributedExecutor`, one rank's engine, inside a process group made
by ``torchrun``, :func:`~pipemare_lite.engine.distributed.launch.launch` or your own; with
``gather_into`` it is also ``fit(..., executor="dist")``'s engine
(:mod:`pipemare_lite.training.dist_fit`). Beside it: :mod:`.jobs` starts the processes from
Python or a notebook (:func:`~.jobs.run_distributed`), :mod:`.results` gathers the ranks'
results, :mod:`.shape_probe` finds the message shapes, :mod:`.fault_injection` makes a rank
raise, die or hang. Measured against simulated utilization:
:mod:`pipemare_lite.analysis.utilization`; the same step in PyTorch's runtime:
:mod:`pipemare_lite.interop.torch_pipelining` and
:mod:`pipemare_lite.interop.torch_runtime`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields, replace

import torch
import torch.distributed as dist
from torch import nn

from pipemare_lite.engine.build_worker import build_stage_workers
from pipemare_lite.engine.distributed import faults
from pipemare_lite.engine.distributed.checkpoint import (
    PeerProgress,
    RowWalk,
    local_key,
    message_key,
    same_schedule,
)
from pipemare_lite.engine.distributed.fault_injection import Fault
from pipemare_lite.engine.distributed.results import DistRunResult, RankResult, merge_rank_results
from pipemare_lite.engine.distributed.shape_probe import probe_output_meta
from pipemare_lite.engine.distributed.transport import P2PTransport, tensor_meta
from pipemare_lite.engine.interpreter import Interpreter, take_records
from pipemare_lite.engine.recorder import BytesMeter, Recorder
from pipemare_lite.engine.recording import Recording, recording
from pipemare_lite.engine.unread_losses import RunLosses, UnreadLosses
from pipemare_lite.methods.registry import MethodOptions
from pipemare_lite.schedules.actions import UPDATE, Action, Schedule
from pipemare_lite.schedules.comm_plan import RECEIVES_AHEAD, RollingPlan
from pipemare_lite.schedules.repeat import schedule_key
from pipemare_lite.schedules.validation import validate

# Messages a run stopped before its end (a divergence, stop_after_updates) leaves in flight
# would match the next executor's in the same process group: the same tags (each seq counts
# from 0), and a posted receive or send cannot be taken back. So once an executor closes
# unfinished, the next one (on every rank alike: runs stop alike) moves its messages and
# collectives to a fresh group, made by dist.new_group (about a millisecond with gloo).
_STOPPED_EARLY: set[int] = set()  # default groups (ids) whose last executor stopped early
_FRESH: dict[int, object] = {}  # default group (id) -> the group executors use now


def executor_group():
    """The process group a new :class:`DistributedExecutor` communicates in: the default
    one (None), or a fresh one once an executor of this job closed before the end of its
    schedule (then collective: every rank makes its executors in the same order)."""
    key = id(dist.group.WORLD)
    if key in _STOPPED_EARLY:
        _STOPPED_EARLY.discard(key)
        _FRESH[key] = dist.new_group()
    return _FRESH.get(key)


class LossesAhead:
    """Which microbatches' losses each run of the last stage's rank computes, read from the
    schedule alone (so every rank knows how many values the losses' message carries):
    that rank's row walked from ``start`` (where its stages have the weight ``versions``) as
    the executor walks it (a :class:`~.checkpoint.RowWalk`), up to where each of its stages
    has made ``stop_after_updates`` updates."""

    def __init__(self, schedule, rank: int, start: int = 0,
                 versions: dict[int, int] | None = None) -> None:
        self.last = schedule.num_virtual_stages - 1
        self.walk = RowWalk(schedule, rank, start, versions)

    def run(self, stop_after_updates: int | None) -> list[int]:
        """The microbatches whose loss the next run computes, in order."""
        return [a.index for a in self.walk.run(stop_after_updates)
                if a.kind == "F" and a.stage == self.last]


@dataclass(frozen=True)
class DistOptions:
    """How one rank runs: the :class:`DistributedExecutor`'s options beyond the training
    itself, grouped as ``fit()``'s are in a ``FitConfig`` (chapter 11). Give them as
    ``options=DistOptions(...)``, as keywords, or both (the keywords replace the object's).

    Attributes:
        rank: default ``dist.get_rank()``.
        device: where this rank computes (default CPU with gloo, ``cuda:<current>`` with
            NCCL).
        board: a :class:`~pipemare_lite.engine.distributed.faults.StatusBoard` (the
            launcher's); a local one (no side channel) otherwise.
        op_timeout: seconds one wait on a message may take.
        record: what to record, a level of :data:`pipemare_lite.engine.recording.RECORDINGS`
            (``"losses"``, ``"history"``, ``"full"``: the default, with the trace) or a
            :class:`~pipemare_lite.engine.recording.Recording`, as for the local executor;
            never changes the numbers. Without a trace the result's ``trace`` is None.
        record_gradients: keep a copy of the gradients each update applies.
        track_bytes: record each stage's peak bytes by kind (costs time per action), when
            ``record`` asks for peak bytes.
        record_posts: keep the order of actions and posted operations in
            :attr:`RankResult.posted` (chapter 11 compares it with
            :func:`pipemare_lite.schedules.comm_rows.comm_rows`).
        p2p_verbose: print every send and receive this rank posts and every receive it
            completes (the communication's text trace, on the process's stdout); None: on
            when the environment variable ``PIPEMARE_P2P_VERBOSE`` is ``1``.
        fault: a :class:`Fault` to inject (tests, chapter 11).
        gather_into: every rank's copy of the whole model (all stage modules), as
            ``fit(..., executor="dist")`` needs it
            (:func:`~pipemare_lite.training.executors.dist_executor`): then
            :meth:`DistributedExecutor.run` is collective and returns, on every rank, a
            :class:`DistRunResult` holding only the run's losses (sent as tensors from
            the last stage's rank, so all ranks take the same decisions); the rest of each
            rank's records waits on its rank until :meth:`DistributedExecutor.gather`, which
            also copies every stage's weights from its owner into these modules (for
            evaluation, checkpoints and the end).
        checkpoints: keep what :meth:`DistributedExecutor.state_dict` needs (every sent
            tensor until the schedule says its receiver consumed it: :mod:`.checkpoint`;
            what is in flight, however long the run); off by default.
    """

    rank: int | None = None
    device: torch.device | str | None = None
    board: faults.StatusBoard | None = None
    op_timeout: float = 120.0
    record: str | Recording = "full"
    record_gradients: bool = False
    track_bytes: bool = False
    record_posts: bool = False
    p2p_verbose: bool | None = None
    fault: Fault | None = None
    gather_into: Sequence[nn.Module] | None = None
    checkpoints: bool = False

    @classmethod
    def of(cls, options: DistOptions | None, keywords: dict) -> DistOptions:
        """``options`` with ``keywords`` replaced (or new ones); an unknown keyword is
        refused naming the known ones."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(keywords) - known)
        if unknown:
            raise TypeError(f"DistributedExecutor got unknown options {', '.join(unknown)}; "
                            f"allowed: {', '.join(sorted(known))}")
        if options is not None and not isinstance(options, cls):
            raise TypeError(f"options must be a DistOptions, got {options!r}")
        return replace(options or cls(), **keywords)


class DistributedExecutor:
    """Run this rank's row of ``schedule`` inside an initialized process group (chapter 11).

    Args:
        schedule: the whole schedule (every rank must pass the same one, a
            :class:`~pipemare_lite.schedules.actions.Schedule`, long runs included); world size
            must equal ``schedule.num_ranks``.
        stage_modules: all ``schedule.num_virtual_stages`` modules (each rank keeps its own)
            or a mapping ``{stage: module}`` with at least this rank's stages.
        loss_fn, optimizer_factory, method_options, lr_scheduler_factory: as for
            :class:`~pipemare_lite.engine.LocalExecutor`.
        options, **keywords: how this rank runs, a :class:`DistOptions` and/or its fields
            as keywords (``rank=``, ``device=``, ``record=``, ``gather_into=`` ...).

    Use it as a context manager (``with DistributedExecutor(...) as executor:``) or call
    :meth:`close`: the helper threads of its waits end with the job. It creates no process
    group of its own (the launcher's or torchrun's group outlives the job).
    """

    def __init__(self, schedule: Schedule,
                 stage_modules: Sequence[nn.Module] | Mapping[int, nn.Module], *,
                 loss_fn: Callable, optimizer_factory: Callable,
                 method_options: MethodOptions | None = None,
                 lr_scheduler_factory: Callable | None = None,
                 options: DistOptions | None = None, **keywords) -> None:
        self.options = options = DistOptions.of(options, keywords)
        rank, device, board, op_timeout = (options.rank, options.device, options.board,
                                           options.op_timeout)
        record_gradients, track_bytes = options.record_gradients, options.track_bytes
        fault, p2p_verbose, record_posts = options.fault, options.p2p_verbose, options.record_posts
        gather_into, checkpoints, record = (options.gather_into, options.checkpoints,
                                            options.record)
        if not dist.is_initialized():
            raise RuntimeError("DistributedExecutor needs an initialized process group "
                               "(use pipemare_lite.engine.distributed.launch.launch or torchrun)")
        world = dist.get_world_size()
        if world != schedule.num_ranks:
            raise ValueError(f"schedule {schedule.name!r} has {schedule.num_ranks} ranks but the "
                             f"process group has {world} processes; they must be equal")
        # (cached) raises ScheduleError for an invalid one; a long periodic one is checked by
        validate(schedule)  # its short forms, never walked whole
        self.schedule = schedule
        self.rank = dist.get_rank() if rank is None else rank
        self.backend = dist.get_backend()
        if device is None:
            device = f"cuda:{torch.cuda.current_device()}" if self.backend == "nccl" else "cpu"
        self.device = torch.device(device)
        self.stages = schedule.stages_of(self.rank)
        self.recording = recording(record)
        self.workers, _ = build_stage_workers(
            schedule, self._own_modules(stage_modules), loss_fn=loss_fn,
            optimizer_factory=optimizer_factory, options=method_options,
            device_of=lambda s: self.device, lr_scheduler_factory=lr_scheduler_factory,
            record=self.recording)
        self.board = board or faults.StatusBoard(self.rank, world)
        self.record_gradients, self.track_bytes = record_gradients, track_bytes
        self.fault = fault if fault is not None and fault.rank == self.rank else None
        self.gather_into = None if gather_into is None else list(gather_into)
        self.position = 0  # next action of this rank's row
        self._start = [0] * world, None  # every rank's position and every stage's version
        # before the first run (a checkpoint's; None: 0)
        self._row_length = len(schedule.ranks[self.rank])
        self._row: Iterator[Action] | None = None  # the row from `position` (first run on)
        self._upcoming: Action | None = None  # the action at `position`, once read
        # a rolling plan: this rank's messages as it goes (flat memory); the shape probe gives
        # the transport its messages' shapes, at the first run
        self.group = executor_group()  # the default group unless a run stopped early before
        self.transport = P2PTransport(
            RollingPlan(schedule, self.rank), self.rank, group=self.group,
            waiter=faults.Waiter(self.board, op_timeout, polling=self.backend != "gloo"),
            backend=self.backend, device=self.device,
            # receives each rank posts per peer before it needs them
            receives_ahead=int(os.environ.get("PIPEMARE_RECEIVES_AHEAD", RECEIVES_AHEAD)),
            verbose=(os.environ.get("PIPEMARE_P2P_VERBOSE") == "1" if p2p_verbose is None
                     else p2p_verbose),
            posted=[] if record_posts else None)
        self.interpreter = Interpreter(
            self.workers, schedule.num_virtual_stages - 1, self.transport,
            devices=[self.device] if self.device.type == "cuda" else [],
            timed=self.recording.trace)
        self._failed = False  # a run raised: close() does not wait for the threads
        self._progress = PeerProgress(schedule) if checkpoints else None
        if checkpoints:
            self.transport.sent_log = {}
        self._feed: Sequence = ()  # the last run's microbatches (a checkpoint's targets)
        self._collectives = 0  # collectives met so far (each rank's count is the same)
        self._origin: float | None = None  # the trace's common time origin (first run)
        self._held: RankResult | None = None  # records kept here until gather()
        self._losses_ahead: LossesAhead | None = None  # (gather_into) made at the first run
        self._shared_runs = 0  # runs whose losses were shared as they ended (gather_into)
        # runs made with read_losses=False: their losses wait on the last stage's rank
        self._unread = UnreadLosses(self.workers, schedule.num_virtual_stages - 1)

    def _own_modules(self, stage_modules) -> dict[int, nn.Module]:
        S = self.schedule.num_virtual_stages
        if not isinstance(stage_modules, Mapping):
            stage_modules = dict(enumerate(stage_modules))
            if len(stage_modules) != S:
                raise ValueError(f"schedule {self.schedule.name!r} has {S} virtual stages, got "
                                 f"{len(stage_modules)} stage modules")
        missing = [s for s in self.stages if s not in stage_modules]
        if missing:
            raise ValueError(f"rank {self.rank} holds stages {self.stages}; no module for "
                             f"{missing}")
        return {s: stage_modules[s] for s in self.stages}

    @property
    def finished(self) -> bool:
        """True once this rank has run all its actions."""
        return self.position >= self._row_length

    def _note(self, position: int, state: str = "compute", *, between: bool = False) -> None:
        """Publish ``position`` in this rank's row, and ``state`` (the watchdog's note);
        ``between``: ``position`` actions are done and the rank is outside any action."""
        name = str(self._upcoming) if position == self.position and self._upcoming else ""
        self.board.at(position, self._row_length, name, state, between=between)

    def state_dict(self) -> dict:
        """The whole run's checkpoint, in :class:`~pipemare_lite.engine.LocalExecutor`'s
        format, on every rank (collective: every rank calls it between the same two runs;
        :mod:`.checkpoint`). Needs ``checkpoints=True``."""
        if self._progress is None:
            raise NotImplementedError("this DistributedExecutor keeps no checkpoint state: "
                                      "create it with checkpoints=True")
        sent = self.transport.sent_log
        first = self.schedule.rank_of(0) == self.rank
        mine = {"position": self.position,
                "stages": {s: w.state_dict() for s, w in self.workers.items()},
                "sent": {k: t.cpu() for k, t in sent.items() if k in self._progress.unconsumed},
                "targets": {m: self._feed[m][1] for m in self._progress.targets} if first else {}}
        parts = self._all_gather_object(mine, "gathering the checkpoint's parts")
        state = {"schedule": schedule_key(self.schedule),
                 "positions": [part["position"] for part in parts],
                 "activations": {}, "gradients": {}, "targets": {},
                 "stages": [None] * self.schedule.num_virtual_stages,
                 "rng": {"cpu": torch.get_rng_state()}}
        for part in parts:
            for key, tensor in part["sent"].items():
                table, local = local_key(key)
                state[table][local] = tensor
            for s, stage_state in part["stages"].items():
                state["stages"][s] = stage_state
            state["targets"].update(part["targets"])
        return state

    def load_state_dict(self, state: dict) -> None:
        """Continue from a checkpoint of either executor (before the first run): this
        rank's position and stages; the messages in transit to it are handed over, and
        what was sent before the cut is not planned again (:mod:`.checkpoint`)."""
        if not same_schedule(state["schedule"], self.schedule):
            raise ValueError(f"state was saved for schedule {state['schedule'][0]!r} with other "
                             f"actions; this executor runs {self.schedule.name!r}")
        if self.position or self.transport.shapes is not None:
            raise RuntimeError("load_state_dict needs an executor that has not run yet")
        positions = list(state["positions"])
        versions = {s: stage["versions"]["version"] for s, stage in enumerate(state["stages"])}
        self.position, self._start = positions[self.rank], (positions, versions)
        for s, worker in self.workers.items():
            worker.load_state_dict(state["stages"][s])
        in_transit = {message_key(table, local): tensor
                      for table in ("activations", "gradients")
                      for local, tensor in state[table].items()}
        self.transport.resume(positions, in_transit)
        if self._progress is not None:
            self._progress = PeerProgress(self.schedule, (positions, versions, in_transit,
                                                          state["targets"]))

    # ------------------------------------------------------------------ lifetime
    def close(self) -> None:
        """Stop the threads this executor started (safe to call twice).

        A finished run already stopped them (its transport closed); this covers a run
        stopped early (``stop_after_updates``) or failed. It joins them for at most 5 s,
        or not at all after a failed run (a thread waiting on a dead peer's message must
        not delay the error report; see
        :meth:`pipemare_lite.engine.distributed.faults.Waiter.close`).
        """
        self.transport.waiter.close(wait=0.0 if self._failed else 5.0)
        if not self.finished and dist.is_initialized():  # its messages may still be in flight
            _STOPPED_EARLY.add(id(dist.group.WORLD))

    def __enter__(self) -> DistributedExecutor:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._failed = self._failed or exc_type is not None
        self.close()

    # ------------------------------------------------------------------ collectives
    # Between two runs the ranks meet in collectives (with NCCL the losses' broadcasts, the
    # gather before an evaluation, a checkpoint's gather). A blocking collective would
    # wait for a rank that hangs outside the schedule (evaluating, say) until gloo's own
    # timeout, and then fail on every rank alike, so the launcher would blame whichever rank
    # exited first. Posted asynchronously and waited for as a message is, a collective ends
    # within op_timeout (or at once on an abort), and the ranks that did not come are named
    # as the cause (a wait for a message names its sender the same way):
    #
    #   rank 0 ──run k── gather ── evaluate ── run k+1 (wait for rank 1's gradient) ── X
    #   rank 1 ──run k── gather ── evaluate ... (hangs; its state: "between runs")
    #                                       after op_timeout: rank 1 named as the peer
    #                                       -> OpTimeoutError(peer=1): "rank 1 did not answer"

    def _collective(self, what: str, post: Callable) -> None:
        """Post a collective (``post()`` returns its Work) and wait for it like a message:
        an abort ends the wait, and after ``op_timeout`` seconds the rank(s) that did not
        come (:func:`faults.absent_ranks`: heartbeat stopped, or published elsewhere) are
        named in the :class:`~faults.OpTimeoutError`, the first as its ``peer``."""
        self._await_collective(self._post_collective(what, post))

    def _post_collective(self, what: str, post: Callable, *, early: bool = False) -> tuple:
        """Post a collective now and wait for it later (:meth:`_await_collective`): every
        rank posts its collectives in the same order, whenever it waits for them.
        ``early``: posted before a run, so the board notes it only at the wait."""
        self._collectives += 1  # every rank runs the same collectives in the same order
        here = f"collective {self._collectives}: {what}"
        before = self.board.position.state
        if not early:
            self._note(self.position, f"in {here}", between=True)
        with faults.communication(what):
            return here, what, post(), before

    def _await_collective(self, posted: tuple) -> None:
        """Wait for a collective posted by :meth:`_post_collective` (see :meth:`_collective`)."""
        here, what, work, before = posted  # before: noted again once every rank came
        self._note(self.position, f"in {here}", between=True)
        waiter = self.transport.waiter
        try:
            waiter.wait(work, here)
        except BaseException as exc:
            self._failed = True  # close() must not wait for threads stuck on a dead peer
            if not isinstance(exc, faults.OpTimeoutError):
                raise
            store, world = self.board.store, dist.get_world_size()
            absent = ([] if store is None else
                      faults.absent_ranks(store, world, here, exclude={self.rank}))
            if not absent:
                raise
            names = ", ".join(f"rank {r}" for r in absent)
            raise faults.OpTimeoutError(
                f"waited more than {waiter.timeout:g} s in {what}: {names} did not come "
                f"({self.board.position.describe()})", peer=absent[0]) from exc
        self.board.note(before)

    def _all_gather_object(self, obj, what: str) -> list:
        """``dist.all_gather_object`` as two abortable collectives (:meth:`_collective`):
        the pickled sizes, then the padded bytes (what torch's own version does, blocking)."""
        import pickle

        world = dist.get_world_size()
        device = self.device if self.backend == "nccl" else torch.device("cpu")
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8).to(device)
        size = torch.tensor([data.numel()], dtype=torch.long, device=device)
        sizes = [torch.zeros_like(size) for _ in range(world)]
        self._collective(what, lambda: dist.all_gather(sizes, size, self.group, async_op=True))
        lengths = [int(n.item()) for n in sizes]
        padded = torch.zeros(max(lengths), dtype=torch.uint8, device=device)
        padded[:data.numel()] = data
        parts = [torch.empty_like(padded) for _ in range(world)]
        self._collective(f"{what} (data)", lambda: dist.all_gather(parts, padded, self.group,
                                                           async_op=True))
        return [pickle.loads(part[:n].cpu().numpy().tobytes()) for part, n in zip(parts, lengths)]

    # ------------------------------------------------------------------ shapes
    def probe_shapes(self, microbatches: Sequence) -> dict:
        """``{(stage, input meta): output meta}`` for every stage but the last, on every rank;
        also the transport's :attr:`~.transport.P2PTransport.shapes` (the first :meth:`run`
        calls it; they are kept across runs).

        Stage by stage, the owner probes its module (:func:`probe_output_meta`) for every
        distinct microbatch input shape and broadcasts the result (``S - 1`` broadcasts).
        A list or tuple of microbatches is scanned whole; any other sequence (lazy, e.g.
        ``fit()``'s epoch feed) is assumed to have microbatch 0's shape throughout, which
        stage 0 checks as it reads each input.
        """
        if len(microbatches) < self.schedule.total_microbatches:
            raise ValueError(f"schedule {self.schedule.name!r} needs "
                             f"{self.schedule.total_microbatches} microbatches, got "
                             f"{len(microbatches)}")
        self._note(-1, "shape probe")
        lazy = not isinstance(microbatches, (list, tuple))
        self.transport.input_meta = tensor_meta(microbatches[0][0]) if lazy else None
        indices = [0] if lazy else range(self.schedule.total_microbatches)
        inputs = sorted({tensor_meta(microbatches[m][0]) for m in indices}, key=str)
        current = {meta: meta for meta in inputs}  # first-stage input meta -> stage input meta
        table = {}
        for s in range(self.schedule.num_virtual_stages - 1):
            owner = self.schedule.rank_of(s)
            name = f"stage {s} on rank {self.rank}"
            box = [None if owner != self.rank else
                   {key: probe_output_meta(self.workers[s].module, *meta, name=name)
                    for key, meta in current.items()}]
            with faults.communication(f"the shape broadcast of stage {s} from rank {owner}"):
                dist.broadcast_object_list(
                    box, src=owner, group=self.group,
                    device=self.device if self.backend == "nccl" else None)
            current = box[0]
            table.update(((s, key), meta) for key, meta in current.items())
        self.transport.shapes = table
        return table

    # ------------------------------------------------------------------ running

    def run(self, microbatches: Sequence, *, stop_after_updates: int | None = None,
            read_losses: bool = True) -> RankResult | DistRunResult:
        """Run this rank's actions from where it stands; returns what this call did.

        ``stop_after_updates=k`` stops once each of this rank's stages has made k updates
        (other ranks stop at their own k-th update; messages already sent wait in the
        transport for the next call). Collect the ranks' results with
        :func:`merge_rank_results`, or pass ``gather_into`` to have every rank return the
        merged result. ``read_losses=False`` (with ``gather_into``): the losses do not travel and
        no host read; the losses wait on the last stage's rank until :meth:`read_losses`.
        """
        if not read_losses and self.gather_into is None:
            raise ValueError("read_losses=False needs an executor made with gather_into= "
                             "(every rank then reads the losses at read_losses())")
        try:
            if self.gather_into is None:
                return self._run(microbatches, stop_after_updates)
            if self._losses_ahead is None:
                src = self.schedule.rank_of(self.schedule.num_virtual_stages - 1)
                positions, versions = self._start
                self._losses_ahead = LossesAhead(self.schedule, src, positions[src], versions)
            # with gather_into the losses stay tensors here: shared below (one message or
            # broadcast, one host read on each rank) or left for read_losses()
            expected = self._losses_ahead.run(stop_after_updates)
            early = None
            if read_losses and expected:
                self._shared_runs += 1  # every rank counts the same runs
                self._prepare(microbatches)  # its collectives come before the broadcast's
                early = self._receive_losses_early(len(expected))
            mine = self._run(microbatches, stop_after_updates, read_losses=False)
            if self._held is None:
                self._held = mine
            else:
                self._held.extend(mine)
            if not read_losses:
                self._unread.add_run(expected)
                return DistRunResult(loss_by_microbatch={})
            return DistRunResult(loss_by_microbatch=self._share_losses(expected, early))
        except BaseException:
            self._failed = True
            raise

    def read_losses(self) -> list[RunLosses]:
        """The losses of every run made with ``read_losses=False`` since the last call, on
        every rank (collective): one broadcast of one float64 tensor from the last stage's
        rank, one host read; a :class:`~pipemare_lite.engine.unread_losses.RunLosses` per
        run, in run order."""
        unread, count = self._unread, self._unread.count()
        if not count:
            return unread.take([])
        return unread.take(self._broadcast_losses(unread.values, count))

    def stage_health(self, run: RunLosses) -> tuple[list[int], dict[int, int]]:
        """The stages holding a non-finite weight when ``run`` ended, and each stage's
        update count then, on every rank (collective: one all-reduce; for a divergence
        found late)."""
        stages = self.schedule.num_virtual_stages
        device = self.device if self.backend == "nccl" else torch.device("cpu")
        vector = UnreadLosses.health(run, stages, device)  # this rank's stages, zeros else
        self._collective("sharing the stages' health",
                         lambda: dist.all_reduce(vector, group=self.group, async_op=True))
        return UnreadLosses.read_health(vector, stages)

    def _receive_losses_early(self, count: int) -> tuple | None:
        """On a rank other than the last stage's, post the receive of this run's losses
        before the run (gloo: a message, :meth:`~.transport.P2PTransport.send_losses`;
        NCCL: the broadcast); None on the last stage's rank, which sends them once it has
        them. The values then arrive while this rank still computes: the first stage's
        rank ends a flushing step last, and a receive posted only then would hold up the
        next step."""
        src = self.schedule.rank_of(self.schedule.num_virtual_stages - 1)
        if self.rank == src:
            return None
        if self.backend == "gloo":
            return self.transport.post_losses_receive(src, count, self._shared_runs)
        return self._post_losses(count, early=True)

    def _share_losses(self, expected: list[int], early: tuple | None) -> dict[int, float]:
        """The last stage's losses of this run on every rank: one tensor from its rank
        (float64, exact; a message to each rank with gloo, a broadcast with NCCL), no
        pickle, and one host read on each rank (the last stage's loss tensors are not read
        before). Which microbatches' losses the run computed, every rank knows from the
        schedule (``expected``, :class:`LossesAhead`), so only the values travel;
        ``early``: the receive this rank posted before the run
        (:meth:`_receive_losses_early`)."""
        last = self.schedule.num_virtual_stages - 1
        src = self.schedule.rank_of(last)
        taken = self.workers[last].take_unread_losses() if self.rank == src else []
        if self.rank == src and [m for m, _ in taken] != expected:
            raise RuntimeError(f"rank {src}: this run computed the losses of microbatches "
                               f"{[m for m, _ in taken]}, the schedule says {expected}")
        if not expected:
            return {}
        if self.backend == "gloo":
            run, before = self._shared_runs, self.board.position.state
            self._note(self.position, f"in sharing the losses of run {run}", between=True)
            if self.rank == src:
                values = torch.stack([t.reshape(()) for _, t in taken]).to("cpu", torch.float64)
                self.transport.send_losses(values, run)
            else:
                values = self.transport.take_losses(early, src, run)
            self.board.note(before)
            return dict(zip(expected, values.tolist()))
        if early is None:
            early = self._post_losses(
                len(expected), lambda: torch.stack([t.reshape(()) for _, t in taken]))
        values, posted = early
        self._await_collective(posted)
        return dict(zip(expected, values.cpu().tolist()))

    def _post_losses(self, count: int, values_on_src: Callable | None = None, *,
                     early: bool = False) -> tuple:
        """Post the broadcast of ``count`` losses from the last stage's rank
        (``values_on_src()`` there, a 1-D tensor) as float64 (exact); returns the tensor
        the values arrive in and the posted collective."""
        src = self.schedule.rank_of(self.schedule.num_virtual_stages - 1)
        device = self.device if self.backend == "nccl" else torch.device("cpu")
        values = (values_on_src().to(device, torch.float64) if self.rank == src else
                  torch.empty(count, dtype=torch.float64, device=device))
        return values, self._post_collective(
            "sharing the losses",
            lambda: dist.broadcast(values, src, self.group, async_op=True),
            early=early)

    def _broadcast_losses(self, values_on_src: Callable, count: int) -> list[float]:
        """``count`` losses from the last stage's rank on every rank (:meth:`_post_losses`),
        waited for, then the one host read."""
        values, posted = self._post_losses(count, values_on_src)
        self._await_collective(posted)
        return values.cpu().tolist()

    def gather(self) -> DistRunResult:
        """Every rank's records since the last gather, merged, on every rank, and every
        stage's weights from its owner into ``gather_into`` (collective: ``fit()`` calls it
        before an evaluation, a checkpoint and at the end). The losses are left out: each
        :meth:`run` returned them already."""
        if self.gather_into is None:
            raise RuntimeError("gather() needs an executor made with gather_into=")
        mine = self._held or RankResult(rank=self.rank, traced=False)
        self._held = None
        mine.loss_by_microbatch = {}
        mine.state_dicts = {s: {k: v.detach().cpu().clone()
                                for k, v in w.module.state_dict().items()}
                            for s, w in self.workers.items()}
        gathered = self._all_gather_object(mine, "gathering the ranks' results")
        merged = merge_rank_results(self.schedule, gathered)
        for s, module in enumerate(self.gather_into):
            # a module this rank trains is current, and an in-place copy into it would break
            # the backward of a microbatch still in flight
            if s not in self.workers or self.workers[s].module is not module:
                module.load_state_dict(merged.state_dicts[s])
        return merged

    def _prepare(self, microbatches: Sequence) -> None:
        """Before the first run (collectives, so before any other of that run): the shape
        probe, then the barrier that gives every rank the trace's common time origin (later
        runs need none: the messages order themselves)."""
        if self.transport.shapes is None:
            self.probe_shapes(microbatches)
        if self._origin is None:
            self._collective("the barrier before the first run",
                             lambda: dist.barrier(self.group, async_op=True))
            self._origin = time.perf_counter()  # common: everyone just left the barrier

    def _run(self, microbatches: Sequence, stop_after_updates: int | None,
             read_losses: bool = True) -> RankResult:
        self._prepare(microbatches)
        rank, interpreter = self.rank, self.interpreter
        if self._row is None:  # from the position a checkpoint may have set
            self._row = self.schedule.row(rank, self.position)
            self._upcoming = next(self._row, None)
        posted = self.transport.posted  # every run's posts, when recorded
        self.transport.microbatches = self._feed = microbatches
        interpreter.applied_gradients = ({s: [] for s in self.stages}
                                         if self.record_gradients else None)
        recording = self.recording
        meter = (BytesMeter(self.workers, {rank: self.stages}, every_action=recording.trace)
                 if self.track_bytes and recording.peak_bytes else None)
        recorder = Recorder(interpreter, meter) if recording.trace else None
        first_post = len(posted) if posted is not None else 0

        def done() -> bool:
            return self.finished or (stop_after_updates is not None and all(
                w.versions.version >= stop_after_updates for w in self.workers.values()))

        if recorder is not None:
            recorder.origin = self._origin
        stop = done()
        while not stop:
            position, action = self.position, self._upcoming
            self._note(position)
            if self.fault is not None and self.fault.position == position:
                self.fault.trigger(action)
            start, end = interpreter.step(action)
            self.position += 1
            self._upcoming = next(self._row, None)
            if recorder is not None:
                recorder.record(rank, action, start, end)
            elif meter is not None:  # without a trace, the meter alone is told
                meter.after_action(rank, action)
            # the row ends, or an update moves the update counts (nothing else does)
            stop = self._upcoming is None or (action.kind == UPDATE and done())
        self.transport.microbatches = ()
        if self._progress is not None:  # where every rank stopped; forget what was consumed
            self._progress.advance(stop_after_updates)
            if self._progress.positions[rank] != self.position:
                raise RuntimeError(f"rank {rank}: stopped at action {self.position}, the "
                                   f"schedule says {self._progress.positions[rank]}")
            log = self.transport.sent_log
            for key in [k for k in log if k not in self._progress.unconsumed]:
                del log[key]
        self._note(self.position, "draining sends" if self.finished else "between runs",
                   between=True)
        if self.finished:
            self.transport.close()
        records = take_records(self.workers, read_losses)  # this rank's stages' StepRecords
        # the weights travel only where asked: every run without gather_into, at gather()
        states = {} if self.gather_into is not None else {
            s: {k: v.detach().cpu().clone() for k, v in w.module.state_dict().items()}
            for s, w in self.workers.items()}
        return RankResult(
            **vars(records), rank=rank, traced=recorder is not None,
            entries=[] if recorder is None else recorder.timed_actions(),
            versions={} if recorder is None else recorder.versions,
            state_dicts=states, gradients=interpreter.applied_gradients or {},
            peak_bytes=meter.peaks if meter is not None else {},
            peak_bytes_by_rank=meter.rank_peaks()[rank] if meter is not None else {},
            wait_seconds=self.transport.waiter.wait_seconds,
            posted=posted[first_post:] if posted is not None else [])
