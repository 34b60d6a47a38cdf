"""Weight staleness: which weight version each forward and backward saw (introduced in chapter 05).

Every stage ``s`` keeps a version counter that starts at 0 and goes up by one at each of its
updates ``sUk``. Reading a schedule rank by rank (a stage's actions all live on one rank, so
its own order is all that matters) gives, for every (stage, microbatch):

- ``version_at_forward``: the version current when its ``F`` runs. Exception, weight mode
  ``"2bw"``: every microbatch of minibatch k runs on version ``max(k - 1, 0)`` (PipeDream-2BW);
  we check that this version is still one of the two the stage holds (current or previous).
  The rule holds in the flushed warm-up minibatches too (as in the executor).
- ``version_at_backward``: the version whose values the backward's products use.
  ``"sync"`` and ``"async"``: the version current at ``B``; ``"stash"`` and ``"2bw"``: the
  forward's version (the stashed copy).
- ``version_applied``: the version just before the update that applies this microbatch's
  gradient (the first update of the stage after its ``B``, or after its ``W`` when split).

and from them ``forward_delay = applied - at_forward`` (how many updates old the forward's
weights are when the gradient lands), ``backward_delay = applied - at_backward`` and
``discrepancy = at_backward - at_forward`` (the ``d`` in PipeMare's T2 correction
``w - d * delta``, chapter 09).

Split backward (``I`` then ``W``, zero-bubble schedules): ``I`` computes the input gradient
and every output gradient inside the stage with the weights current at ``I``; ``W`` only
combines those gradients with the saved forward activations and reads no weights itself.
So a split backward's ``version_at_backward`` is the version current at ``I``, and its
``version_applied`` is taken at the first update after ``W`` (which is when the gradient
joins the stage's accumulator).

:func:`weight_versions` derives all this from the schedule alone; :func:`versions_from_trace`
builds the same table from what an executor recorded while it ran the schedule with real
tensors, so the two can be compared (chapter 05 does, and so do the tests).

Nothing here hard-codes a delay: the closed forms at the bottom (:func:`expected_forward_delay`)
sit beside the measurement so tests and chapters can compare them. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import cached_property

from pipemare_lite.schedules.actions import (
    BACKWARD,
    FORWARD,
    INPUT_GRAD,
    UPDATE,
    WEIGHT_GRAD,
    Schedule,
)
from pipemare_lite.schedules.names import ALIASES
from pipemare_lite.schedules.registry import SCHEDULE_NAMES, SCHEDULE_TABLE
from pipemare_lite.schedules.validation import is_validated
from pipemare_lite.schedules.weight_modes import WeightMode

#: Quantities a :class:`VersionTable` can turn into a stage x microbatch matrix.
QUANTITIES = ("version_at_forward", "version_at_backward", "version_applied",
              "forward_delay", "backward_delay", "discrepancy")


@dataclass(frozen=True)
class VersionRow:
    """The weight versions one microbatch met on one (virtual) stage.

    ``version_at_backward`` is None if the schedule has no backward for it, and
    ``version_applied`` is None if no update after its backward applies the gradient.
    """

    stage: int
    microbatch: int
    minibatch: int
    version_at_forward: int
    version_at_backward: int | None
    version_applied: int | None

    @property
    def forward_delay(self) -> int | None:
        """Updates between the forward's weights and the weights the gradient is applied to."""
        return _minus(self.version_applied, self.version_at_forward)

    @property
    def backward_delay(self) -> int | None:
        """Updates between the backward's weights and the weights the gradient is applied to."""
        return _minus(self.version_applied, self.version_at_backward)

    @property
    def discrepancy(self) -> int | None:
        """Updates between the forward's and the backward's weights (T2's ``d``)."""
        return _minus(self.version_at_backward, self.version_at_forward)


def _minus(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


@dataclass(frozen=True)
class VersionTable:
    """The versions of a schedule as three grids indexed ``[stage][microbatch]`` (None: that
    microbatch has no such action on that stage); :attr:`rows` lists them as
    :class:`VersionRow`, stage-major (by stage, then microbatch), where a forward ran."""

    schedule: Schedule
    version_at_forward: list[list[int | None]]
    version_at_backward: list[list[int | None]]
    version_applied: list[list[int | None]]

    @cached_property
    def rows(self) -> tuple[VersionRow, ...]:
        """A :class:`VersionRow` per (stage, microbatch) with a forward (built on first read)."""
        return tuple(self.row(s, m) for s, forwards in enumerate(self.version_at_forward)
                     for m, f in enumerate(forwards) if f is not None)

    @property
    def num_stages(self) -> int:
        """Number of (virtual) stages, i.e. matrix rows."""
        return self.schedule.num_virtual_stages

    @property
    def num_microbatches(self) -> int:
        """Microbatches over the whole run, i.e. matrix columns."""
        return self.schedule.total_microbatches

    def row(self, stage: int, microbatch: int) -> VersionRow:
        """The row for (stage, microbatch); KeyError naming both if the schedule has none."""
        grid = self.version_at_forward
        if not (0 <= stage < len(grid) and 0 <= microbatch < len(grid[stage])
                and grid[stage][microbatch] is not None):
            raise KeyError(f"no forward of microbatch {microbatch} on stage {stage}")
        return VersionRow(stage, microbatch, self.schedule.minibatch_of(microbatch),
                          grid[stage][microbatch], self.version_at_backward[stage][microbatch],
                          self.version_applied[stage][microbatch])

    def matrix(self, quantity: str = "forward_delay") -> list[list[int | None]]:
        """``matrix[stage][microbatch]`` of one quantity (None where undefined): a heatmap."""
        if quantity not in QUANTITIES:
            raise ValueError(f"unknown quantity {quantity!r}; allowed: {', '.join(QUANTITIES)}")
        grid = [[None] * self.num_microbatches for _ in range(self.num_stages)]
        for r in self.rows:
            grid[r.stage][r.microbatch] = getattr(r, quantity)
        return grid


def weight_versions(schedule: Schedule) -> VersionTable:
    """Walk every rank's actions in order and record the versions each microbatch met.

    Each stage has a version counter, advanced by its own ``U`` actions (a stage's actions
    all live on one rank, so its rank's order is all that matters). Raises ValueError for a
    schedule whose bookkeeping is impossible: a backward before its forward, an action
    repeated, an update numbered out of order, or (2bw) a microbatch that needs a version
    the stage no longer holds.
    """
    stages, width = schedule.num_virtual_stages, schedule.total_microbatches
    if not is_validated(schedule):  # unchecked: make room for any stage and index it names
        stages = max([stages, *(a.stage + 1 for row in schedule.ranks for a in row)])
        width = max([width, *(a.index + 1 for row in schedule.ranks for a in row)])
    at_forward, at_backward, applied = _grids(3, stages, width)
    mode, N = schedule.mode, schedule.num_microbatches
    forward_as_is = mode.forward_reads_current  # else 2bw's rule picks the version
    backward_as_is = not mode.backward_reads_forwards  # else the forward's copy
    for row in schedule.ranks:  # a stage's actions all live on its rank: count per rank
        version = [0] * stages  # per stage: the current version
        pending: list[list[int]] = [[] for _ in range(stages)]  # gradients awaiting a U
        for action in row:
            kind, s, m = action.kind, action.stage, action.index
            current = version[s]
            if kind == FORWARD:
                if at_forward[s][m] is not None:
                    raise ValueError(f"forward {action} appears twice")
                at_forward[s][m] = current if forward_as_is else _held(
                    mode, mode.version_at_forward(current, m // N), current, s, m, "forward")
            elif kind == BACKWARD or kind == INPUT_GRAD:
                forward = at_forward[s][m]
                if forward is None:
                    raise ValueError(f"{action} comes before its forward {s}F{m}")
                if at_backward[s][m] is not None:
                    raise ValueError(f"backward {action} appears twice")
                at_backward[s][m] = current if backward_as_is else _held(
                    mode, mode.version_at_backward(current, forward), current, s, m, "backward")
                if kind == BACKWARD:
                    pending[s].append(m)
            elif kind == WEIGHT_GRAD:
                if at_backward[s][m] is None:
                    raise ValueError(f"{action} comes before its input gradient {s}I{m}")
                pending[s].append(m)
            else:  # UPDATE: applies every gradient the stage gathered since its last one
                if m != current:
                    raise ValueError(f"update {action} is update number {current} of stage {s}; "
                                     f"expected {s}U{current}")
                done = applied[s]
                for waiting in pending[s]:
                    done[waiting] = current
                pending[s] = []
                version[s] = current + 1
    return VersionTable(schedule, at_forward, at_backward, applied)


def _grids(count: int, stages: int, width: int) -> list[list[list[None]]]:
    """``count`` empty ``[stage][microbatch]`` grids (None: not seen yet)."""
    return [[[None] * width for _ in range(stages)] for _ in range(count)]


def _held(mode: WeightMode, wanted: int, current: int, stage: int, microbatch: int,
          when: str) -> int:
    """``wanted``, if the stage still holds it: a mode keeps ``mode.versions_kept`` versions
    (2bw: current and previous; None: stash keeps what its forwards need)."""
    oldest = None if mode.versions_kept is None else current - mode.versions_kept + 1
    if oldest is not None and not oldest <= wanted <= current:
        raise ValueError(
            f"{mode.name}: microbatch {microbatch} needs version {wanted} of stage {stage} at its "
            f"{when}, but the stage holds only versions {max(oldest, 0)}..{current}"
        )
    return wanted


def versions_from_trace(trace) -> VersionTable:
    """The versions an executor RECORDED while it ran a schedule, as a :class:`VersionTable`.

    ``trace`` is a measured :class:`~pipemare_lite.analysis.timeline.Timeline` (``RunResult.trace``
    of
    the local or the distributed executor): ``trace.extra["versions"]`` holds, per action
    string, the weight version the stage's worker handed that action (``"2F5": 1``; for a
    ``U``, the version it updated). Each rank's entries are read in the order they ran; the
    version a gradient is applied to is that of the stage's first ``U`` after its ``B`` (or
    ``W``). Nothing is derived from the schedule's rules: comparing this table with
    :func:`weight_versions` (the analysis) checks the executor against the analysis.
    """
    versions = getattr(trace, "extra", {}).get("versions")
    if not versions:
        raise ValueError(
            "the trace records no weight versions (trace.extra['versions'] is empty); pass the "
            "trace of an executor run (RunResult.trace), not a simulated timeline"
        )
    schedule = trace.schedule
    # an executed action belongs to the schedule: its stage and index are in range
    at_forward, at_backward, applied = _grids(3, schedule.num_virtual_stages,
                                              schedule.total_microbatches)
    pending: list[list[int]] = [[] for _ in range(schedule.num_virtual_stages)]
    for rank in range(schedule.num_ranks):
        for entry in trace.for_rank(rank):
            action = entry.action
            version = versions[str(action)]
            s, m = action.stage, action.index
            if action.kind == UPDATE:
                for waiting in pending[s]:
                    applied[s][waiting] = version
                pending[s] = []
                continue
            if action.kind == FORWARD:
                at_forward[s][m] = version
            elif action.kind in (BACKWARD, INPUT_GRAD):
                at_backward[s][m] = version
            if action.kind in (BACKWARD, WEIGHT_GRAD):  # the gradient is complete
                pending[s].append(m)
    return VersionTable(schedule, at_forward, at_backward, applied)


def microbatch_path(table_or_schedule: VersionTable | Schedule,
                    microbatch: int) -> list[VersionRow]:
    """The versions one microbatch met at every stage, in model order (the explorer's path)."""
    table = _as_table(table_or_schedule)
    path = [r for r in table.rows if r.microbatch == microbatch]  # rows are in stage order
    if not path:
        raise ValueError(f"microbatch {microbatch} is not in the schedule "
                         f"(it has 0..{table.num_microbatches - 1})")
    return path


@dataclass(frozen=True)
class StageDelay:
    """Min / mean / max of the delays of one stage over the microbatches selected."""

    stage: int
    count: int
    min_forward_delay: int
    mean_forward_delay: float
    max_forward_delay: int
    min_backward_delay: int
    mean_backward_delay: float
    max_backward_delay: int
    min_discrepancy: int
    mean_discrepancy: float
    max_discrepancy: int

    def as_dict(self) -> dict:
        """Plain dict (for JSON)."""
        return asdict(self)


def stage_delays(table_or_schedule: VersionTable | Schedule, *,
                 minibatches: Iterable[int] | None = None) -> list[StageDelay]:
    """Delay statistics per (virtual) stage, over microbatches whose gradient was applied.

    ``minibatches`` restricts the statistics (e.g. to the steady state, see
    :func:`steady_state_minibatches`); by default every applied microbatch counts.
    A stage with nothing to count gets zeros and ``count=0``.
    """
    table = _as_table(table_or_schedule)
    N, width = table.schedule.num_microbatches, table.num_microbatches
    chosen = None if minibatches is None else set(minibatches)
    counted = [chosen is None or m // N in chosen for m in range(width)]
    out = []
    for stage in range(table.num_stages):
        columns = (table.version_at_forward[stage], table.version_at_backward[stage],
                   table.version_applied[stage], counted)
        # the microbatches counted, as (forward's, backward's, applied) versions
        kept = [(f, b, a) for f, b, a, keep in zip(*columns)
                if keep and a is not None and f is not None]
        values = {}  # min/mean/max of the three delays (zeros when there are none)
        for name, xs in (("forward_delay", [a - f for f, _, a in kept]),
                         ("backward_delay", [a - b for _, b, a in kept]),
                         ("discrepancy", [b - f for f, b, _ in kept])):
            xs = xs or (0,)
            values[f"min_{name}"] = min(xs)
            values[f"mean_{name}"] = sum(xs) / len(xs)
            values[f"max_{name}"] = max(xs)
        out.append(StageDelay(stage=stage, count=len(kept), **values))
    return out


def updates_before_backward(schedule: Schedule, stage: int) -> dict[int, int]:
    """``microbatch -> updates of ``stage`` between its forward and its backward``.

    Read from the stage's own row of the schedule (the backward is ``B``, or ``I`` when
    split), whatever the weight mode: the distance an asynchronous backward sees, known
    before the forward runs (T2's hooks, :mod:`pipemare_lite.methods.discrepancy`, read it).
    """
    updates, forward_at, delays = 0, {}, {}
    for action in schedule.ranks[schedule.rank_of(stage)]:
        if action.stage != stage:
            continue
        if action.kind == "U":
            updates += 1
        elif action.kind == "F":
            forward_at[action.index] = updates
        elif action.kind in ("B", "I"):
            delays[action.index] = updates - forward_at[action.index]
    return delays


def steady_state_minibatches(schedule: Schedule) -> range:
    """Minibatches away from the pipeline's fill and drain (may be empty for short runs).

    After the W flushed warm-up minibatches, the first asynchronous minibatches cannot be
    as stale as the steady state (there are no older versions yet), so we skip
    ``ceil((2P - 1) / N)`` of them, the largest lock-step delay of any stage (an upper bound
    for pipedream and 2bw too), and we drop the last minibatch, where the pipeline drains.
    """
    fill = math.ceil((2 * schedule.num_virtual_stages - 1) / schedule.num_microbatches)
    first = schedule.warmup + fill
    return range(first, max(first, schedule.num_minibatches - 1))


def _as_table(table_or_schedule: VersionTable | Schedule) -> VersionTable:
    if isinstance(table_or_schedule, VersionTable):
        return table_or_schedule
    if isinstance(table_or_schedule, Schedule):
        return weight_versions(table_or_schedule)
    kind = type(table_or_schedule).__name__
    raise TypeError(f"expected a VersionTable or a Schedule, got {kind}")


# ---------------------------------------------------------------------------------------------
# Closed forms (steady state), beside the measurement.
# ---------------------------------------------------------------------------------------------

#: The flushed schedules (forward delay 0), read from the one table.
SYNC_NAMES = tuple(name for name, _, mode in SCHEDULE_TABLE if mode.flushes)


def expected_forward_delay(name: str, num_stages: int, num_microbatches: int, stage: int,
                           position: int | None = None) -> int:
    """Steady-state forward delay (in updates) of 0-indexed ``stage``, from a closed form.

    - synchronous schedules (``naive``, ``gpipe``, ``1f1b``, ``interleaved``, ``zb-h1``): 0.
    - ``2bw``: 1 (minibatch 0 and warm-up minibatches have 0; not covered here).
    - ``async``/``pipemare``, lock-step (recalled form): with 1-indexed ``i = stage + 1`` the F
      to B gap is ``D = 2(P - i) + 1`` ticks, so ``ceil(D / N)`` updates, give or take one by
      the microbatch's position in its minibatch.
    - ``pipedream`` (1F1B without flush): ``ceil((P - 1 - stage) / N)``, which is the recalled
      ``P - 1 - stage`` for per-microbatch updates (N = 1).

    With ``position`` (0..N-1, the microbatch's place in its minibatch) the exact value for OUR
    builders is returned instead; see :func:`exact_forward_delay` for the derivation.
    """
    # the recalled forms are the exact ones at position 0
    return exact_forward_delay(name, num_stages, num_microbatches, stage, position or 0)


def exact_forward_delay(name: str, num_stages: int, num_microbatches: int, stage: int,
                        position: int, *, backward_first: bool = False) -> int:
    """Exact steady-state forward delay of the microbatch at ``position`` in its minibatch.

    Derivation (N microbatches per update, 0-indexed stage s, microbatch m = kN + j):
    the gradient of minibatch k is applied by update ``sUk``, i.e. to version k. The forward
    saw version v = the number of updates before F(m) on the stage, so the delay is k - v.

    - Lock-step ``async``: F(m) runs at tick m + s and B(m) at tick m + D + s with
      D = 2(P - s) - 1 (= 2(P - i) + 1 for 1-indexed i). Update j follows B((j+1)N - 1) in its
      tick. Inside a tick our builder (``schedules/builders/async_pipeline.py``) runs F,
      then B, then U, so update j precedes F(m) iff (j+1)N - 1 + D < m, giving v = floor((m - D) /
      N)
      and delay ``ceil((D - j) / N)``: the recalled ``ceil(D / N)`` at j = 0, and one less
      for the later positions once j passes D mod N (never more than one less since j < N).
      With ``backward_first=True`` (the builder's option: B and U before F in a tick) update
      j precedes F(m) already when (j+1)N - 1 + D = m: the gap is D - 1 slots and the delay
      ``ceil((D - 1 - j) / N)``, one less exactly when N divides D - 1 - j (for N = 1: always).
    - ``pipedream`` (1F1B, warm-up of w = P - 1 - s forwards, then F and B alternating):
      F(m) comes right after B(m - w - 1), so v = floor((m - w) / N) and the delay is
      ``ceil((w - j) / N)``; for N = 1 that is P - 1 - s for every microbatch.
    - ``2bw``: 1 by construction; synchronous schedules: 0.
    """
    _check_sizes(num_stages, num_microbatches, stage, position)
    if backward_first and name not in ("async", "pipemare"):
        raise ValueError(f"backward_first applies to the lock-step 'async' schedule, not {name!r}")
    if name in SYNC_NAMES:
        return 0
    if name == "2bw":
        return 1
    if name in ("async", "pipemare"):
        gap = 2 * (num_stages - stage) - 1 - (1 if backward_first else 0)
        return math.ceil((gap - position) / num_microbatches)
    if name == "pipedream":
        return math.ceil((num_stages - 1 - stage - position) / num_microbatches)
    known = ", ".join((*SCHEDULE_NAMES, *ALIASES))
    raise ValueError(f"no closed form for schedule {name!r}; known: {known}")


def _check_sizes(num_stages: int, num_microbatches: int, stage: int, position: int) -> None:
    for label, value in (("num_stages", num_stages), ("num_microbatches", num_microbatches)):
        if value < 1:
            raise ValueError(f"{label} must be >= 1, got {value}")
    for label, value, count in (("stage", stage, num_stages),
                                ("position", position, num_microbatches)):
        if not 0 <= value < count:
            raise ValueError(f"{label} {value} out of range 0..{count - 1}")
