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

Nothing here hard-codes a delay: the closed forms at the bottom (:func:`expected_forward_delay`)
sit beside the measurement so tests and chapters can compare them. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from pipemare_lite.schedules.actions import (
    BACKWARD,
    FORWARD,
    INPUT_GRAD,
    UPDATE,
    WEIGHT_GRAD,
    Schedule,
)

#: Quantities a :class:`VersionTable` can turn into a stage x microbatch matrix.
QUANTITIES = (
    "version_at_forward",
    "version_at_backward",
    "version_applied",
    "forward_delay",
    "backward_delay",
    "discrepancy",
)


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
        if self.version_applied is None:
            return None
        return self.version_applied - self.version_at_forward

    @property
    def backward_delay(self) -> int | None:
        """Updates between the backward's weights and the weights the gradient is applied to."""
        if self.version_applied is None or self.version_at_backward is None:
            return None
        return self.version_applied - self.version_at_backward

    @property
    def discrepancy(self) -> int | None:
        """Updates between the forward's and the backward's weights (T2's ``d``)."""
        if self.version_at_backward is None:
            return None
        return self.version_at_backward - self.version_at_forward


@dataclass(frozen=True)
class VersionTable:
    """All :class:`VersionRow` of a schedule, stage-major (by stage, then microbatch)."""

    schedule: Schedule
    rows: tuple[VersionRow, ...]
    _index: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {(r.stage, r.microbatch): r for r in self.rows})

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
        if (stage, microbatch) not in self._index:
            raise KeyError(f"no forward of microbatch {microbatch} on stage {stage}")
        return self._index[(stage, microbatch)]

    def matrix(self, quantity: str = "forward_delay") -> list[list[int | None]]:
        """``matrix[stage][microbatch]`` of one quantity (None where undefined): a heatmap."""
        if quantity not in QUANTITIES:
            raise ValueError(f"unknown quantity {quantity!r}; allowed: {', '.join(QUANTITIES)}")
        grid: list[list[int | None]] = [
            [None] * self.num_microbatches for _ in range(self.num_stages)
        ]
        for r in self.rows:
            grid[r.stage][r.microbatch] = getattr(r, quantity)
        return grid


def weight_versions(schedule: Schedule) -> VersionTable:
    """Walk every rank's actions in order and record the versions each microbatch met.

    Raises ValueError for a schedule whose bookkeeping is impossible: a backward before its
    forward, an action repeated, an update numbered out of order, or (2bw) a microbatch that
    needs a version the stage no longer holds.
    """
    rows: list[VersionRow] = []
    for row in schedule.ranks:
        rows += _versions_on_rank(schedule, row)
    rows.sort(key=lambda r: (r.stage, r.microbatch))
    return VersionTable(schedule=schedule, rows=tuple(rows))


def _versions_on_rank(schedule: Schedule, actions) -> list[VersionRow]:
    """One rank's rows: a per-stage version counter advanced by its own ``U`` actions."""
    version: dict[int, int] = {}  # stage -> current version
    at_forward: dict[tuple[int, int], int] = {}
    at_backward: dict[tuple[int, int], int] = {}
    applied: dict[tuple[int, int], int] = {}
    pending: dict[int, list[int]] = {}  # stage -> microbatches whose gradient awaits an update
    for action in actions:
        s, key = action.stage, (action.stage, action.index)
        current = version.setdefault(s, 0)
        if action.kind == UPDATE:
            if action.index != current:
                raise ValueError(
                    f"update {action} is update number {current} of stage {s}; "
                    f"expected {s}U{current}"
                )
            for m in pending.pop(s, []):
                applied[(s, m)] = current
            version[s] = current + 1
        elif action.kind == FORWARD:
            if key in at_forward:
                raise ValueError(f"forward {action} appears twice")
            at_forward[key] = _forward_version(schedule, action.index, current, s)
        elif action.kind in (BACKWARD, INPUT_GRAD):
            if key not in at_forward:
                raise ValueError(f"{action} comes before its forward {s}F{action.index}")
            if key in at_backward:
                raise ValueError(f"backward {action} appears twice")
            at_backward[key] = _backward_version(schedule, at_forward[key], current, s, action)
            if action.kind == BACKWARD:
                pending.setdefault(s, []).append(action.index)
        elif action.kind == WEIGHT_GRAD:
            if key not in at_backward:
                raise ValueError(f"{action} comes before its input gradient {s}I{action.index}")
            pending.setdefault(s, []).append(action.index)
    return [
        VersionRow(
            stage=s,
            microbatch=m,
            minibatch=m // schedule.num_microbatches,
            version_at_forward=v,
            version_at_backward=at_backward.get((s, m)),
            version_applied=applied.get((s, m)),
        )
        for (s, m), v in at_forward.items()
    ]


def _forward_version(schedule: Schedule, microbatch: int, current: int, stage: int) -> int:
    """The version F reads: the current one, or 2bw's ``max(k - 1, 0)`` for minibatch k."""
    if schedule.weight_mode != "2bw":
        return current
    wanted = max(schedule.minibatch_of(microbatch) - 1, 0)
    _check_held(wanted, current, stage, microbatch, "forward")
    return wanted


def _backward_version(schedule: Schedule, forward: int, current: int, stage: int, action) -> int:
    """The version B (or I) reads: current for sync/async, the forward's copy for stash/2bw."""
    if schedule.weight_mode in ("sync", "async"):
        return current
    if schedule.weight_mode == "2bw":
        _check_held(forward, current, stage, action.index, "backward")
    return forward


def _check_held(wanted: int, current: int, stage: int, microbatch: int, when: str) -> None:
    """2bw keeps two versions (current and previous); anything else is a schedule error."""
    if not current - 1 <= wanted <= current:
        raise ValueError(
            f"2bw: microbatch {microbatch} needs version {wanted} of stage {stage} at its {when}, "
            f"but the stage holds only versions {max(current - 1, 0)} and {current}"
        )


def microbatch_path(
    table_or_schedule: VersionTable | Schedule, microbatch: int
) -> list[VersionRow]:
    """The versions one microbatch met at every stage, in model order (the explorer's path)."""
    table = _as_table(table_or_schedule)
    path = [r for r in table.rows if r.microbatch == microbatch]
    if not path:
        raise ValueError(
            f"microbatch {microbatch} is not in the schedule "
            f"(it has 0..{table.num_microbatches - 1})"
        )
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


def stage_delays(
    table_or_schedule: VersionTable | Schedule, *, minibatches: Iterable[int] | None = None
) -> list[StageDelay]:
    """Delay statistics per (virtual) stage, over microbatches whose gradient was applied.

    ``minibatches`` restricts the statistics (e.g. to the steady state, see
    :func:`steady_state_minibatches`); by default every applied microbatch counts.
    A stage with nothing to count gets zeros and ``count=0``.
    """
    table = _as_table(table_or_schedule)
    chosen = None if minibatches is None else set(minibatches)
    by_stage: list[list[VersionRow]] = [[] for _ in range(table.num_stages)]
    for r in table.rows:
        if r.forward_delay is not None and (chosen is None or r.minibatch in chosen):
            by_stage[r.stage].append(r)
    return [_summarize(stage, rows) for stage, rows in enumerate(by_stage)]


def _summarize(stage: int, rows: list[VersionRow]) -> StageDelay:
    """min/mean/max of the three delays over ``rows``."""
    values = {}
    for name in ("forward_delay", "backward_delay", "discrepancy"):
        xs = [getattr(r, name) for r in rows] or [0]
        values[f"min_{name}"] = min(xs)
        values[f"mean_{name}"] = sum(xs) / len(xs)
        values[f"max_{name}"] = max(xs)
    return StageDelay(stage=stage, count=len(rows), **values)


def steady_state_minibatches(schedule: Schedule) -> range:
    """Minibatches away from the pipeline's fill and drain (may be empty for short runs).

    After the W flushed warm-up minibatches, the first asynchronous minibatches cannot be
    as stale as the steady state (there are no older versions yet), so we skip
    ``ceil((2P - 1) / N)`` of them, the largest lock-step delay of any stage (an upper bound
    for pipedream and 2bw too), and we drop the last minibatch, where the pipeline drains.
    """
    fill = math.ceil((2 * schedule.num_virtual_stages - 1) / schedule.num_microbatches)
    first = schedule.warmup_minibatches + fill
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

SYNC_NAMES = ("naive", "gpipe", "1f1b", "interleaved", "zb-h1")


def expected_forward_delay(
    name: str, num_stages: int, num_microbatches: int, stage: int, position: int | None = None
) -> int:
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
    _check_sizes(num_stages, num_microbatches, stage)
    if position is not None:
        return exact_forward_delay(name, num_stages, num_microbatches, stage, position)
    if name in SYNC_NAMES:
        return 0
    if name == "2bw":
        return 1
    if name in ("async", "pipemare"):
        return math.ceil((2 * (num_stages - (stage + 1)) + 1) / num_microbatches)
    if name == "pipedream":
        return math.ceil((num_stages - 1 - stage) / num_microbatches)
    raise ValueError(f"no closed form for schedule {name!r}; known: {_known_names()}")


def exact_forward_delay(
    name: str, num_stages: int, num_microbatches: int, stage: int, position: int
) -> int:
    """Exact steady-state forward delay of the microbatch at ``position`` in its minibatch.

    Derivation (N microbatches per update, 0-indexed stage s, microbatch m = kN + j):
    the gradient of minibatch k is applied by update ``sUk``, i.e. to version k. The forward
    saw version v = the number of updates before F(m) on the stage, so the delay is k - v.

    - Lock-step ``async``: F(m) runs at tick m + s and B(m) at tick m + D + s with
      D = 2(P - s) - 1 (= 2(P - i) + 1 for 1-indexed i). Update j follows B((j+1)N - 1) in its
      tick. Inside a tick our builder (``schedules/async_pipeline.py``) runs F, then B, then
      U (``_ASYNC_BACKWARD_FIRST = False`` below), so update j precedes F(m) iff
      (j+1)N - 1 + D < m, giving v = floor((m - D) / N) and delay
      ``ceil((D - j) / N)``: the recalled ``ceil(D / N)`` at j = 0, and one less for the
      later positions once j passes D mod N (never more than one less since j < N).
      (If the backward ran first in a tick the delay would be ``ceil((D - 1 - j) / N)``.)
    - ``pipedream`` (1F1B, warm-up of w = P - 1 - s forwards, then F and B alternating):
      F(m) comes right after B(m - w - 1), so v = floor((m - w) / N) and the delay is
      ``ceil((w - j) / N)``; for N = 1 that is P - 1 - s for every microbatch.
    - ``2bw``: 1 by construction; synchronous schedules: 0.
    """
    _check_sizes(num_stages, num_microbatches, stage)
    if not 0 <= position < num_microbatches:
        raise ValueError(f"position {position} out of range 0..{num_microbatches - 1}")
    if name in SYNC_NAMES:
        return 0
    if name == "2bw":
        return 1
    if name in ("async", "pipemare"):
        gap = 2 * (num_stages - stage) - 1 - (1 if _ASYNC_BACKWARD_FIRST else 0)
        return math.ceil((gap - position) / num_microbatches)
    if name == "pipedream":
        return math.ceil((num_stages - 1 - stage - position) / num_microbatches)
    raise ValueError(f"no closed form for schedule {name!r}; known: {_known_names()}")


#: Whether the async builder runs a tick's backward before its forward (see exact_forward_delay).
_ASYNC_BACKWARD_FIRST = False


def _known_names() -> str:
    return ", ".join((*SYNC_NAMES, "2bw", "async", "pipemare", "pipedream"))


def _check_sizes(num_stages: int, num_microbatches: int, stage: int) -> None:
    if num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {num_stages}")
    if num_microbatches < 1:
        raise ValueError(f"num_microbatches must be >= 1, got {num_microbatches}")
    if not 0 <= stage < num_stages:
        raise ValueError(f"stage {stage} out of range 0..{num_stages - 1}")
