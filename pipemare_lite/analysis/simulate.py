"""Simulating a schedule: when each action runs, given what each op costs (chapter 02).

The rule is the one a real pipeline follows: every rank runs its actions in its schedule's
order, and an action starts as soon as its rank is free *and* the actions it depends on are
done (plus a communication latency when the dependency ran on another rank):

    start(a) = max(end of the rank's previous action,  max over deps d of end(d) + comm(d, a))

From the resulting :class:`~pipemare_lite.analysis.timeline.Timeline`, :func:`metrics` measures the
makespan, utilization, the bubble and the activations each rank holds. The same
:func:`metrics` reads a trace measured by an executor. What a long run keeps up is not in
one timeline: :func:`steady_state_utilization` simulates one more minibatch. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from pipemare_lite.analysis.timeline import TimedAction, Timeline
from pipemare_lite.deprecation import warn_renamed
from pipemare_lite.schedules.actions import Action, Schedule
from pipemare_lite.schedules.builders.common import gc_paused, microbatches_of
from pipemare_lite.schedules.validation import ScheduleError, validated_order

#: What :attr:`OpCosts.costs_per` may be: costs of one chunk (virtual stage), or of a rank's
#: whole share of the model, split evenly over its chunks.
COSTS_PER = ("chunk", "rank")


@dataclass(frozen=True)
class OpCosts:
    """What each op costs, in arbitrary time units (introduced in chapter 02).

    Attributes:
        forward: one F of one microbatch on one (virtual) stage.
        backward: one full B (used when the schedule does not split backwards).
        input_grad, weight_grad: the I and W halves of a split backward (zero-bubble).
        update: one U (optimizer step) of one stage.
        comm: latency added when an action waits for one that ran on another rank.
        stage_multipliers: optional per-stage factors on every cost (imbalanced stages):
            one per virtual stage, or one per rank (applied to all its chunks).
        costs_per: what one cost above is the cost of (:data:`COSTS_PER`):
            ``"chunk"`` (default): one action on one virtual stage, whatever the chunks per
            rank v, so an interleaved or V schedule's chunk costs as much as a whole stage
            of a v = 1 schedule: utilization and bubble fractions compare across v, absolute
            makespans only at equal v. ``"rank"``: one action on a rank's whole share of the
            model (a stage of a v = 1 schedule); each of its v chunks costs 1/v of it (the
            chunk's share), so makespans compare across v at the same P and model (ZB-V and
            DualPipeV with 1F1B, a V-shaped async schedule with ``async``).
    """

    forward: float = 1.0
    backward: float = 2.0
    input_grad: float = 1.0
    weight_grad: float = 1.0
    update: float = 0.0
    comm: float = 0.0
    stage_multipliers: tuple[float, ...] | None = None
    costs_per: str = "chunk"

    def __post_init__(self) -> None:
        if self.costs_per not in COSTS_PER:
            raise ValueError(f"OpCosts.costs_per={self.costs_per!r}: allowed: "
                             f"{', '.join(map(repr, COSTS_PER))}")
        for name in ("forward", "backward", "input_grad", "weight_grad", "update", "comm"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"OpCosts.{name}={value!r}: allowed: a number >= 0")
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"OpCosts.{name}={value!r}: allowed: a finite number >= 0")
            # a zero-length F, B, I or W would start and end at the same instant, so "held"
            # activations and utilization lose their meaning; updates and comm may be free
            if value == 0 and name not in ("update", "comm"):
                raise ValueError(f"OpCosts.{name}=0: allowed: a finite number > 0 (compute "
                                 "ops take time; only update and comm may be 0)")
        if self.stage_multipliers is not None:
            multipliers = tuple(float(x) for x in self.stage_multipliers)
            bad = [x for x in multipliers if not (math.isfinite(x) and x > 0)]
            if bad or not multipliers:
                raise ValueError(
                    f"OpCosts.stage_multipliers={self.stage_multipliers!r}: allowed: a non-empty "
                    "sequence of finite numbers > 0"
                )
            object.__setattr__(self, "stage_multipliers", multipliers)

    def per_stage(self, schedule: Schedule) -> list[float]:
        """The multiplier of every virtual stage of ``schedule``: ``stage_multipliers``
        (all 1.0 by default), divided by the chunks per rank v when ``costs_per="rank"``."""
        S, P = schedule.num_virtual_stages, schedule.num_ranks
        share = 1.0 / schedule.chunks if self.costs_per == "rank" else 1.0
        m = self.stage_multipliers
        if m is None:
            return [share] * S
        if len(m) == S:
            return [x * share for x in m]
        if len(m) == P:
            return [m[schedule.rank_of(stage)] * share for stage in range(S)]
        allowed = f"{S} (one per virtual stage)" + (f" or {P} (one per rank)" if S != P else "")
        raise ValueError(f"OpCosts.stage_multipliers has {len(m)} entries; allowed: {allowed}")


def simulate(schedule: Schedule, costs: OpCosts | None = None) -> Timeline:
    """The timeline of ``schedule`` under ``costs`` (introduced in chapter 02).

    Validates the schedule first (once: builders already did), then visits the actions in a
    dependency-respecting order, so each start time is known when it is needed. O(actions).
    """
    costs = OpCosts() if costs is None else costs
    codes, order = validated_order(schedule)
    S, T, P = schedule.num_virtual_stages, schedule.total_microbatches, schedule.num_ranks
    n = S * T  # codes: kind * n + stage * T + microbatch for F, B, I, W; 4n + stage * K + k for U
    K = schedule.num_minibatches
    base = (costs.forward, costs.backward, costs.input_grad, costs.weight_grad, costs.update)
    duration = [[cost * x for x in costs.per_stage(schedule)] for cost in base]  # [kind][stage]
    # the message latency between stages s and s+1, 0 where both sit on one rank (the turn
    # of a V placement; every pair when P = 1)
    placement = schedule.placement
    hop = [costs.comm if placement[s] != placement[s + 1] else 0.0 for s in range(S - 1)] + [0.0]
    start, end = [0.0] * (4 * n + S * K), [0.0] * (4 * n + S * K)
    rank_free = [0.0] * P
    # dependency_codes() written out in the loop: a call per action costs 0.1-0.2 s at P=128,
    # M=1024 (bench_engine_goals); simulate_step_by_step is the same rule written plainly
    for code in order:
        if code < 4 * n:  # F, B, I or W of microbatch code % T on stage (code % n) // T
            kind, stage = code // n, (code % n) // T
            ready = rank_free[placement[stage]]
            if kind == 0:  # F: after F of the previous stage
                if stage and end[code - T] + hop[stage - 1] > ready:
                    ready = end[code - T] + hop[stage - 1]
            elif kind == 3:  # W: after its own I
                if end[code - n] > ready:
                    ready = end[code - n]
            else:  # B or I: after its own F and the next stage's B or I
                if end[code % n] > ready:
                    ready = end[code % n]
                if stage < S - 1 and end[code + T] + hop[stage] > ready:
                    ready = end[code + T] + hop[stage]
        else:  # U: its gradients ran earlier on this rank
            kind, stage = 4, (code - 4 * n) // K
            ready = rank_free[placement[stage]]
        start[code] = ready
        end[code] = rank_free[placement[stage]] = ready + duration[kind][stage]
    with gc_paused():  # a record per action, rescanned by the collector (2x slower without)
        entries = tuple(
            TimedAction(rank, action, start[c], end[c])
            for rank, (row, row_codes) in enumerate(zip(schedule.ranks, codes))
            for action, c in zip(row, row_codes)
        )
    return Timeline(schedule=schedule, entries=entries, extra={"costs": asdict(costs)})


@dataclass(frozen=True)
class ScheduleMetrics:
    """What a timeline tells about a schedule (introduced in chapter 02).

    Attributes:
        makespan: first start to last end.
        busy_per_rank: summed action durations of each rank.
        utilization_per_rank: busy / makespan, per rank.
        utilization: all busy time / (ranks * makespan).
        idle_fraction: 1 - utilization, the "bubble fraction" (P-1)/(M+P-1) of GPipe.
        bubble_ratio: idle time / busy time, the other convention, (P-1)/M for GPipe.
        peak_inflight: per rank, the most microbatches whose F is done and whose B (or W,
            when backwards are split) is not: the activations the rank must hold. With
            interleaving each (chunk, microbatch) pair counts once.
        full_pipeline_window: ``(t0, t1)``: from the moment the last rank starts its first
            backward (B or I) to the moment the first rank ends its last forward; in between
            every rank has both forwards and backwards to run. None if that window is empty
            (e.g. one flushed GPipe minibatch).
        full_pipeline_utilization: utilization inside that window (None without a window):
            the run's first fill and last drain left out, its flushes in between counted. Over
            a long run that is the steady state; over a short flushed one it is not (one 1F1B
            minibatch reads 1.0): for the utilization a long run keeps up, see
            :func:`steady_state_utilization`.
    """

    makespan: float
    busy_per_rank: tuple[float, ...]
    utilization_per_rank: tuple[float, ...]
    utilization: float
    idle_fraction: float
    bubble_ratio: float
    peak_inflight: tuple[int, ...]
    full_pipeline_window: tuple[float, float] | None
    full_pipeline_utilization: float | None

    @property
    def steady_state_utilization(self) -> float | None:
        """The old name of :attr:`full_pipeline_utilization`, kept for one release: the
        window's utilization, not a long run's (that is :func:`steady_state_utilization`)."""
        warn_renamed("steady_state_utilization", "full_pipeline_utilization",
                     "ScheduleMetrics", note="A long run's utilization is pipemare_lite."
                     "analysis.simulate.steady_state_utilization(build, costs)")
        return self.full_pipeline_utilization

    def as_dict(self) -> dict:
        """Plain JSON-ready values (lists instead of tuples)."""
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in asdict(self).items()}


def metrics(timeline: Timeline) -> ScheduleMetrics:
    """Measure ``timeline`` (simulated or recorded by an executor); see :class:`ScheduleMetrics`."""
    P = timeline.schedule.num_ranks
    release = "W" if timeline.schedule.split_backward else "B"
    busy = [0.0] * P
    forward_ends: list[list[float]] = [[] for _ in range(P)]
    release_ends: list[list[float]] = [[] for _ in range(P)]
    first_backward = [math.inf] * P
    for e in timeline.entries:  # one pass: this runs over every action of large schedules
        rank, start, end, kind = e.rank, e.start, e.end, e.action.kind
        busy[rank] += end - start
        if kind == "F":
            forward_ends[rank].append(end)
        else:
            if kind == release:
                release_ends[rank].append(end)
            if kind in ("B", "I") and start < first_backward[rank]:
                first_backward[rank] = start
    makespan = timeline.makespan
    total_busy = sum(busy)
    if makespan > 0:
        utilization_per_rank = tuple(b / makespan for b in busy)
        utilization = total_busy / (P * makespan)
    else:
        utilization_per_rank, utilization = tuple(0.0 for _ in busy), 0.0
    window = full = None
    if all(forward_ends) and all(math.isfinite(t) for t in first_backward):
        t0, t1 = max(first_backward), min(max(ends) for ends in forward_ends)
        if t1 > t0:
            window = (t0, t1)
            inside = sum(max(0.0, min(e.end, t1) - max(e.start, t0)) for e in timeline.entries)
            full = inside / (P * (t1 - t0))
    return ScheduleMetrics(
        makespan=makespan,
        busy_per_rank=tuple(busy),
        utilization_per_rank=utilization_per_rank,
        utilization=utilization,
        idle_fraction=1.0 - utilization if makespan > 0 else 0.0,
        bubble_ratio=(P * makespan - total_busy) / total_busy if total_busy > 0 else 0.0,
        peak_inflight=tuple(_peak_held(f, r) for f, r in zip(forward_ends, release_ends)),
        full_pipeline_window=window,
        full_pipeline_utilization=full,
    )


def _peak_held(forward_ends: list[float], release_ends: list[float]) -> int:
    """Most activations held at once: +1 when an F ends, -1 when its B (or W) ends.

    At equal times the release counts first (-1 sorts before +1): a rank frees memory
    before its next F ends.
    """
    held = peak = 0
    for _, change in sorted([(t, 1) for t in forward_ends] + [(t, -1) for t in release_ends]):
        held += change
        peak = max(peak, held)
    return peak


def depends_on(action: Action, schedule: Schedule) -> list[Action]:
    """The actions ``action`` must wait for (chapter 02): the rule of every pipeline.

    - ``F`` of microbatch m on stage s needs the activation from ``F`` on stage s-1;
    - ``B`` (or ``I``) needs its own forward's saved activations and the gradient from the
      backward of stage s+1 (the last stage starts the backward from its loss);
    - ``W`` needs the ``I`` that produced its output gradient;
    - ``U`` k needs every gradient of minibatch k on this stage.
    """
    s, m = action.stage, action.index
    if action.kind == "F":
        return [Action(s - 1, "F", m)] if s > 0 else []
    backward = "I" if schedule.split_backward else "B"
    if action.kind in ("B", "I"):
        later = [Action(s + 1, backward, m)] if s < schedule.num_virtual_stages - 1 else []
        return [Action(s, "F", m), *later]
    if action.kind == "W":
        return [Action(s, "I", m)]
    gradient = "W" if schedule.split_backward else "B"
    return [Action(s, gradient, j) for j in microbatches_of(m, schedule.num_microbatches)]


def p2p_messages(schedule: Schedule) -> int:
    """The point-to-point messages ``schedule`` implies (chapter 04): one per dependency
    (:func:`depends_on`) of an action on an action that runs on another rank, i.e. an
    activation sent forward or a gradient sent back. ``W`` and ``U`` only wait for their own
    rank, so they add none."""
    return sum(
        schedule.rank_of(dependency.stage) != rank
        for rank, _, action in schedule.actions()
        for dependency in depends_on(action, schedule)
    )


def simulate_step_by_step(schedule: Schedule, costs: OpCosts | None = None) -> dict:
    """The simulator's rule written plainly (chapter 02): ``{action: (start, end)}``.

    Sweep over the ranks again and again; a rank runs its next action as soon as everything
    that action :func:`depends_on` has ended. Slow (it re-checks blocked ranks), but it is
    the definition: :func:`simulate` computes exactly these times in one pass (tested).
    """
    costs = OpCosts() if costs is None else costs
    duration = {"F": costs.forward, "B": costs.backward, "I": costs.input_grad,
                "W": costs.weight_grad, "U": costs.update}  # fmt: skip
    multiplier = costs.per_stage(schedule)
    times: dict[Action, tuple[float, float]] = {}
    rank_free = [0.0] * schedule.num_ranks
    next_index = [0] * schedule.num_ranks
    progress = True
    while progress:
        progress = False
        for rank, row in enumerate(schedule.ranks):
            if next_index[rank] == len(row):
                continue  # this rank is done
            action = row[next_index[rank]]
            needs = depends_on(action, schedule)
            if any(d not in times for d in needs):
                continue  # blocked: try the other ranks first
            start = rank_free[rank]
            for d in needs:  # a dependency on another rank also pays the link's latency
                latency = costs.comm if schedule.rank_of(d.stage) != rank else 0.0
                start = max(start, times[d][1] + latency)
            end = start + duration[action.kind] * multiplier[action.stage]
            times[action] = (start, end)
            rank_free[rank], next_index[rank] = end, next_index[rank] + 1
            progress = True
    blocked = [str(row[i]) for row, i in zip(schedule.ranks, next_index) if i < len(row)]
    if blocked:
        raise ScheduleError(f"schedule {schedule.name!r} deadlocks at {', '.join(blocked)}")
    return times


def simulate_and_measure(schedule: Schedule,
                         costs: OpCosts | None = None) -> tuple[Timeline, ScheduleMetrics]:
    """``simulate`` then ``metrics``, for the common case of wanting both."""
    timeline = simulate(schedule, costs)
    return timeline, metrics(timeline)


def steady_state_utilization(build: Callable[[int], Schedule], costs: OpCosts | None = None,
                             minibatches: int = 2) -> float:
    """The utilization a long run keeps up (chapter 04): that of one more minibatch.

    ``build(K)`` is the schedule with K minibatches. Minibatch K+1, K = ``minibatches``, adds
    its work (busy time) and some time to the makespan; its utilization is
    ``added work / (P x added time)``. A run's one first fill and last drain are left out, a
    fill or drain paid every minibatch is counted: M/(M+P-1) for GPipe and 1F1B, 1 for ZB-H2,
    ZB-V and the schedules without a flush. Choose K past any warm-up minibatches, so that
    the added one is a steady one. Raises ValueError if ``build`` ignores its argument.
    """
    if isinstance(minibatches, bool) or not isinstance(minibatches, int) or minibatches < 1:
        raise ValueError(f"minibatches={minibatches!r}: allowed: an integer >= 1")
    measured = []
    for k in (minibatches, minibatches + 1):
        schedule = build(k)
        if schedule.num_minibatches != k:
            raise ValueError(f"build({k}) returned {schedule.name!r} with "
                             f"{schedule.num_minibatches} minibatches; allowed: a build that "
                             "returns the schedule with as many minibatches as it is given")
        measured.append(simulate_and_measure(schedule, costs)[1])
    shorter, longer = measured
    added_time = longer.makespan - shorter.makespan
    if not added_time > 0:  # cannot happen with compute ops > 0 (OpCosts checks)
        raise ValueError(f"one more minibatch of {schedule.name!r} added no time")
    added_work = sum(longer.busy_per_rank) - sum(shorter.busy_per_rank)
    return added_work / (schedule.num_ranks * added_time)
