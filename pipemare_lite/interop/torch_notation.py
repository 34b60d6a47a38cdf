"""Schedules in PyTorch's notation: to and from ``torch.distributed.pipelining`` (chapter 11).

PyTorch's runtime (``_PipelineScheduleRuntime``, the base of its ``Schedule*`` classes) reads
a *compute-only* table: one CSV row per rank of ``{stage}{F|B|I|W}{microbatch}`` cells,
our spelling but not our schedule:

=====================  ==============================  ===================================
                       the engine (``Schedule``)        PyTorch's runtime
=====================  ==============================  ===================================
what one table is      K minibatches (a whole run)      one ``step()``: one minibatch
microbatch numbers     global: ``k * M + j``            within the step: ``j`` in 0..M-1
optimizer update       an action, ``{stage}U{k}``       none: ``optimizer.step()`` after
=====================  ==============================  ===================================

Stage numbers need no translation, nor does placement: the engine's default (stage ``s``
on rank ``s % P``) is PyTorch's "loop" layout, and a schedule carrying another placement
(ZB-V's and DualPipeV's "v") has each stage's actions in its rank's row, from which
PyTorch's ``_load_csv`` reads the placement as the engine's importer does. Communication
needs no cells: the runtime's ``_load_csv`` adds SEND/RECV itself (load the table into
``_PipelineScheduleRuntime``; the plain ``PipelineScheduleMulti`` pairs cells by position
and would need idle cells, which this export writes none of).

:func:`to_torch_rows` / :func:`to_torch_csv` write one flushed minibatch (U dropped,
microbatches renumbered from 0); a minibatch that does not flush (PipeDream, 2BW, async
after its warm-up) is refused. :func:`from_torch_order` reads a ``pipeline_order`` (rank ->
list of ``_Action`` or None, or rows of strings) into a :class:`Schedule` with one update
per stage after its last gradient, where PyTorch's REDUCE_GRAD sits.

Loss scaling is not part of the notation: PyTorch (``scale_grads=True``) sums the
microbatches' plain-loss gradients and divides by M, the engine back-propagates ``loss /
M``; bitwise equal when M is a power of two, for any M with ``loss_fn = loss / M`` and
``scale_grads=False`` (:mod:`pipemare_lite.interop.torch_pipelining`). Torch-free: ``_Action``
objects are read by their fields, never imported.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping

from pipemare_lite.schedules.actions import Action, Schedule
from pipemare_lite.schedules.io import from_rows
from pipemare_lite.schedules.validation import ScheduleError, validate

#: PyTorch's compute actions, which become engine actions one for one.
COMPUTE_KINDS = ("F", "B", "I", "W")
#: PyTorch actions that carry no computation the engine needs: communication (the engine's
#: transport plans its own), FSDP's sharding and the end-of-step gradient reduction.
IGNORED_KINDS = ("SEND_F", "RECV_F", "SEND_B", "RECV_B", "UNSHARD", "RESHARD", "REDUCE_GRAD")
#: PyTorch's container for a forward and a backward run back to back (DualPipeV).
OVERLAP = "OVERLAP_F_B"

_TORCH_ACTION_RE = re.compile(rf"^(\d+)({'|'.join(COMPUTE_KINDS + IGNORED_KINDS)})(\d*)$")
_OVERLAP_RE = re.compile(r"^\((.*)\)" + OVERLAP + "$")


def flushed_minibatches(schedule: Schedule) -> range:
    """The minibatches that run flushed (no update of another minibatch inside them): all of
    a ``sync`` schedule, the first ``warmup`` of an asynchronous one."""
    if schedule.mode.flushes:
        return range(schedule.num_minibatches)
    return range(schedule.warmup)


def to_torch_rows(schedule: Schedule, minibatch: int | None = None) -> list[list[str]]:
    """Minibatch ``minibatch`` of ``schedule`` as PyTorch's compute-only rows, one per rank.

    ``minibatch`` may be omitted when the schedule has one. Each rank's F/B/I/W of that
    minibatch are kept in order, microbatch ``k * M + j`` written ``j``; U is dropped (run
    ``optimizer.step()`` after PyTorch's ``step()``). Raises :class:`ScheduleError` when the
    minibatch is not a flushed one (see :func:`flushed_minibatches`): PyTorch's runtime runs
    one synchronous step, and an asynchronous minibatch is not one.
    """
    s = validate(schedule)
    first = _chosen_minibatch(s, minibatch) * s.num_microbatches
    return [[f"{a.stage}{a.kind}{a.index - first}" for a in row
             if a.kind != "U" and first <= a.index < first + s.num_microbatches]
            for row in s.ranks]


def to_torch_csv(schedule: Schedule, minibatch: int | None = None) -> str:
    """:func:`to_torch_rows` as CSV, the file ``_PipelineScheduleRuntime._load_csv`` reads."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(to_torch_rows(schedule, minibatch))
    return buffer.getvalue()


def _chosen_minibatch(s: Schedule, minibatch: int | None) -> int:
    flushed = flushed_minibatches(s)
    if not flushed:
        raise ScheduleError(
            f"schedule {s.name!r} (weight_mode={s.weight_mode!r}, warmup="
            f"{s.warmup}) has no flushed minibatch: its minibatches overlap and "
            "its updates fall between a microbatch's forward and backward, which PyTorch's "
            "runtime (one synchronous step, no update action) cannot express; allowed: a "
            "weight_mode='sync' schedule (naive, gpipe, 1f1b, interleaved, zb-h1) or a "
            "warm-up minibatch of an asynchronous one (warmup >= 1)"
        )
    if minibatch is None:
        if s.num_minibatches == 1:
            return 0
        raise ScheduleError(
            f"schedule {s.name!r} has {s.num_minibatches} minibatches and PyTorch's table "
            f"holds one step: choose one (minibatch=, or --minibatch): {_span(flushed)}"
        )
    if isinstance(minibatch, bool) or not isinstance(minibatch, int) or minibatch not in flushed:
        why = "" if s.mode.flushes else " (the flushed warm-up minibatches)"
        raise ScheduleError(
            f"minibatch={minibatch!r}: allowed: {_span(flushed)}{why} for schedule {s.name!r}"
        )
    return minibatch


def _span(r: range) -> str:
    return str(r.start) if len(r) == 1 else f"integers {r.start}..{r.stop - 1}"


def from_torch_order(pipeline_order, *, name: str = "custom",
                     num_microbatches: int | None = None) -> Schedule:
    """An engine :class:`Schedule` (one minibatch) from PyTorch's ``pipeline_order``.

    ``pipeline_order``: a PyTorch schedule's ``pipeline_order`` (dict ``rank -> [_Action |
    None, ...]``) or rows of its action strings (``_dump_csv``'s, :func:`from_torch_csv`).
    Bubbles are skipped, communication, FSDP and REDUCE_GRAD actions dropped (the engine
    moves tensors itself), OVERLAP_F_B's sub-actions run in order, as in PyTorch's runtime;
    each stage gets U0 after its last gradient. ``num_microbatches`` defaults to stage 0's
    forwards. The placement is read from the rows (each stage on the rank whose row runs
    it): PyTorch's "loop" layout gives the engine's default, ``ScheduleZBVZeroBubble`` and
    ``ScheduleDualPipeV`` the V. An order that mixes full backwards with split ones
    (DualPipeV) has each full ``B(s, m)`` written as ``I(s, m), W(s, m)``, the engine's
    spelling of a full backward in a split schedule
    (:mod:`~pipemare_lite.schedules.builders.dualpipe`).

    Not every ``pipeline_order`` is what its class runs: PyTorch 2.13's ``Schedule1F1B``
    draws the last rank's forwards as microbatches 1..M (it executes its own loop, not the
    drawing), which is refused as a microbatch out of range.
    """
    actions = [[a for p, cell in enumerate(row) for a in _engine_action(cell, rank, p)]
               for rank, row in enumerate(_rows_of(pipeline_order))]
    P = len(actions)
    if P == 0:
        raise ScheduleError("empty pipeline_order: allowed: one list of actions per rank")
    stages = sorted({a.stage for row in actions for a in row})
    if any(a.kind == "I" for row in actions for a in row):  # split: a full B is I then W
        actions = [[b for a in row for b in ((Action(a.stage, "I", a.index),
                                              Action(a.stage, "W", a.index))
                                             if a.kind == "B" else (a,))] for row in actions]
    if not stages or len(stages) % P or stages != list(range(len(stages))):
        raise ScheduleError(
            f"pipeline_order names stages {stages}; allowed: 0..P*v-1 for P={P} ranks and "
            "v >= 1 stages on each"
        )
    if num_microbatches is None:
        num_microbatches = sum(1 for a in actions[0] if a.kind == "F" and a.stage == 0)
    for rank, row in enumerate(actions):
        for a in row:
            if a.index >= num_microbatches:
                raise ScheduleError(
                    f"rank {rank}: {a} names microbatch {a.index}; allowed: 0.."
                    f"{num_microbatches - 1} (PyTorch numbers a step's microbatches from 0; "
                    f"num_microbatches={num_microbatches})"
                )
    return from_rows(actions, name=name, num_microbatches=num_microbatches,
                     chunks=len(stages) // P, num_minibatches=1, placement="rows")


def from_torch_csv(text: str, **kwargs) -> Schedule:
    """:func:`from_torch_order` of a CSV in PyTorch's notation (``_dump_csv``'s output)."""
    return from_torch_order(list(csv.reader(io.StringIO(text))), **kwargs)


def _rows_of(pipeline_order) -> list[list]:
    if isinstance(pipeline_order, Mapping):
        ranks = sorted(pipeline_order)
        if ranks != list(range(len(ranks))):
            raise ScheduleError(f"pipeline_order has ranks {ranks}; allowed: 0..P-1, each once")
        return [list(pipeline_order[r]) for r in ranks]
    if isinstance(pipeline_order, str):
        raise ScheduleError("pipeline_order is a string; allowed: a dict rank -> actions, a "
                            "list of rows, or from_torch_csv(text) for CSV text")
    return [list(row) for row in pipeline_order]


def _engine_action(cell, rank: int, position: int) -> list[Action]:
    """The engine actions one PyTorch cell stands for (none for bubbles and comms)."""
    where = f"rank {rank} position {position}"
    if cell is None or (isinstance(cell, str) and not cell.strip()):
        return []
    if isinstance(cell, str):
        return _parse_torch_string(cell.strip(), where)
    kind = getattr(cell, "computation_type", None)
    if kind is None:
        raise ScheduleError(f"{where}: {cell!r} is not a PyTorch _Action or action string")
    kind = str(getattr(kind, "value", kind))
    if kind == OVERLAP:
        return [a for sub in (cell.sub_actions or ()) for a in _engine_action(sub, rank, position)]
    return _compute_action(cell.stage_index, kind, cell.microbatch_index, where)


def _parse_torch_string(text: str, where: str) -> list[Action]:
    overlap = _OVERLAP_RE.match(text)
    if overlap:
        parts = [p.strip() for p in overlap.group(1).split(";") if p.strip()]
        return [a for p in parts for a in _parse_torch_string(p, where)]
    match = _TORCH_ACTION_RE.match(text)
    if not match:
        raise ScheduleError(
            f"{where}: cannot parse PyTorch action {text!r}; expected "
            "{stage}{F|B|I|W}{microbatch} (e.g. '2F0'), a communication action "
            "(e.g. '1SEND_F0') or '(...;...)OVERLAP_F_B'"
        )
    stage, kind, index = match.groups()
    return _compute_action(int(stage), kind, int(index) if index else None, where)


def _compute_action(stage: int, kind: str, microbatch, where: str) -> list[Action]:
    if kind in IGNORED_KINDS:
        return []
    if kind not in COMPUTE_KINDS:
        allowed = ", ".join(COMPUTE_KINDS + IGNORED_KINDS + (OVERLAP,))
        raise ScheduleError(f"{where}: unknown PyTorch action kind {kind!r}; allowed: {allowed}")
    if microbatch is None:
        raise ScheduleError(f"{where}: {stage}{kind} has no microbatch index")
    return [Action(int(stage), kind, int(microbatch))]
