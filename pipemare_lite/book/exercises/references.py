"""The engine's answers to the exercises: builders, simulator and closed forms, never a copy.

Each function asks the engine (imported lazily, so importing the exercises stays cheap and
torch-free) and reshapes its answer into the form an exercise asks for, e.g. one row of
``"2F0"``-style strings per rank without the ``U`` (update) actions. Chapters 00-06
(chapter 05's ex05_1 runs real tensors: its reference imports torch when called).
"""

from __future__ import annotations

from fractions import Fraction

from pipemare_lite.book.exercises.harness import HOOK_SEED


def schedule_rows(name: str, P: int, M: int, *, chunks: int = 1) -> list[list[str]]:
    """The engine's schedule ``name`` as one row per rank of F/B actions (updates dropped)."""
    from pipemare_lite.schedules import build_schedule

    schedule = build_schedule(name, P, M, chunks=chunks)
    return [[str(a) for a in row if a.kind != "U"] for row in schedule.ranks]


def simulated_metrics(name: str, P: int, M: int, *, chunks: int = 1):
    """``metrics(simulate(schedule))`` with the simulator's default op costs."""
    from pipemare_lite.analysis.simulate import OpCosts, metrics, simulate
    from pipemare_lite.schedules import build_schedule

    return metrics(simulate(build_schedule(name, P, M, chunks=chunks), OpCosts()))


def naive_utilization_per_rank(stage_costs: list[float]) -> list[float]:
    """Per rank, busy / makespan of the naive schedule (one microbatch) when stage r's forward
    and backward cost ``stage_costs[r]`` times the default ones."""
    from pipemare_lite.analysis.simulate import OpCosts, metrics, simulate
    from pipemare_lite.schedules import build_schedule

    costs = OpCosts(stage_multipliers=tuple(stage_costs))
    timeline = simulate(build_schedule("naive", len(stage_costs), 1), costs)
    return list(metrics(timeline).utilization_per_rank)


def start_times(name: str, P: int, M: int, forward: float, backward: float) -> list[list[float]]:
    """Per rank, the simulated start time of each F/B action, in the rank's order."""
    from pipemare_lite.analysis.simulate import OpCosts, simulate
    from pipemare_lite.schedules import build_schedule

    timeline = simulate(build_schedule(name, P, M), OpCosts(forward=forward, backward=backward))
    return [
        [entry.start for entry in timeline.for_rank(rank) if entry.action.kind != "U"]
        for rank in range(P)
    ]


def exact_idle_fraction(name: str, P: int, M: int, *, chunks: int = 1) -> Fraction:
    """The simulated idle fraction as an exact fraction: 1 - busy / (P x makespan).

    The simulator's times are sums of the default integer costs, so its busy times and
    makespan are exact; only ``1 - utilization`` in floats rounds (for P=8, M=63 it gives
    0.09999999999999998 where the exact value is 1/10). "Below 10%" needs the exact value.
    """
    measured = simulated_metrics(name, P, M, chunks=chunks)
    busy = sum(Fraction(b) for b in measured.busy_per_rank)
    return 1 - busy / (P * Fraction(measured.makespan))


def v_messages_counted(P: int, v: int) -> int:
    """Messages one microbatch sends between ranks when the v chunks of each rank are placed
    in the engine's zig-zag (``v_placement``; v = 2: the V of ZB-V and DualPipeV): the hops
    between consecutive chunks that change rank, once forward and once back. Chapter 04."""
    from pipemare_lite.schedules import v_placement

    placement = v_placement(P, v)
    return 2 * sum(placement[s] != placement[s + 1] for s in range(len(placement) - 1))


def p2p_messages_counted(P: int, v: int) -> int:
    """Messages one microbatch sends between ranks in the engine's interleaved schedule.

    Walks microbatch 0's forwards in virtual-stage order and counts the hops whose two
    virtual stages sit on different ranks (``Schedule.rank_of``); its backward makes the
    same hops in reverse, so the count doubles. Introduced in chapter 04.
    """
    from pipemare_lite.schedules import build_schedule

    schedule = build_schedule("interleaved", P, P, chunks=v)
    forward_stages = sorted(
        a.stage for row in schedule.ranks for a in row if a.kind == "F" and a.index == 0
    )
    backward_stages = sorted(
        a.stage
        for row in schedule.ranks
        for a in row
        if a.kind in ("B", "I") and a.index == 0
    )
    expected = list(range(schedule.num_virtual_stages))
    if forward_stages != expected or backward_stages != expected:
        raise RuntimeError(
            f"interleaved schedule P={P}, v={v}: microbatch 0 does not visit every virtual "
            "stage exactly once"
        )
    hops = sum(
        schedule.rank_of(s) != schedule.rank_of(s + 1) for s in range(len(expected) - 1)
    )
    return 2 * hops


# --- ex05: weight versions, delays and stashes ---------------------------------------


def measured_forward_delay(name: str, P: int, N: int, stage: int, position: int) -> int:
    """The steady-state forward delay of ``stage`` at ``position``, read off the schedule.

    Builds ``name`` with enough minibatches for a steady state, takes every microbatch at
    ``position`` in the steady minibatches (``staleness.steady_state_minibatches``) and
    checks that they all met the same delay (they must: the pipeline repeats).
    """
    import math

    from pipemare_lite.analysis.staleness import steady_state_minibatches, weight_versions
    from pipemare_lite.schedules import build_schedule

    schedule = build_schedule(name, P, N, num_minibatches=math.ceil((2 * P - 1) / N) + 3)
    steady = set(steady_state_minibatches(schedule))
    delays = {r.forward_delay for r in weight_versions(schedule).rows
              if r.stage == stage and r.minibatch in steady and r.microbatch % N == position}
    if len(delays) != 1:
        raise RuntimeError(f"{name} P={P} N={N}: stage {stage}, position {position} met delays "
                           f"{sorted(delays)} in the steady state; expected one value")
    return delays.pop()


def peak_stash_copies_measured(P: int, N: int, K: int) -> list[int]:
    """Per stage, the most stashed copies PipeDream holds over K minibatches (memory model)."""
    from pipemare_lite.analysis.memory import peak_stash_copies
    from pipemare_lite.schedules import build_schedule

    return peak_stash_copies(build_schedule("pipedream", P, N, num_minibatches=K))


def stage_worker_gradients(model: str, backward_reads: str, seed: int = HOOK_SEED) -> tuple:
    """The engine's answer to ex05_1: ``(grad of input, [grad of each parameter])`` as lists.

    A :class:`~pipemare_lite.engine.stage.StageWorker` (weight mode ``stash`` when the
    backward must read the copy from F, ``async`` when it reads the live weights) runs F,
    then an update that adds ``delta`` to every parameter (SGD with lr 1 on the gradient
    -delta), then B, on the stage :func:`~pipemare_lite.book.exercises.harness.hook_stage` builds
    from ``seed``.
    """
    import torch

    from pipemare_lite.book.exercises.harness import hook_stage, plain_gradients
    from pipemare_lite.engine.stage import StageWorker

    mode = {"stash": "stash", "live": "async"}[backward_reads]
    module, x, grad_y, delta = hook_stage(model, seed)
    params = list(module.parameters())
    worker = StageWorker(1, module, torch.optim.SGD(params, lr=1.0), weight_mode=mode,
                         is_last=False, num_microbatches=1, num_minibatches=2)
    worker.forward(0, x)
    for p, d in zip(params, delta):
        p.grad = -d
    worker.update()
    grad_x = worker.backward(0, grad_y)
    return plain_gradients(grad_x, [p.grad for p in params])


# --- ex06: delayed gradient descent on a quadratic ----------------------------------


def delayed_gd_iterates(alpha: float, lam: float, tau: int, steps: int) -> list[float]:
    """The engine's ``w[0..steps]`` of delayed GD from ``w = 1`` (constant past)."""
    from pipemare_lite.analysis.theory import simulate_delayed_gd

    return simulate_delayed_gd(alpha, lam, tau, steps).tolist()


def delayed_gd_polynomial(alpha: float, lam: float, tau: int, momentum: float) -> list[float]:
    """The engine's characteristic polynomial of (heavy-ball) delayed GD, highest power first."""
    from pipemare_lite.analysis.theory import characteristic_polynomial

    return characteristic_polynomial(alpha, lam, tau, momentum).tolist()


def largest_stable_alpha_lam(tau: int, momentum: float) -> float:
    """The largest ``alpha * lam`` with every smaller step stable (roots, then bisection)."""
    from pipemare_lite.analysis.theory import largest_stable_step, spectral_radius

    return largest_stable_step(
        lambda x: spectral_radius(x, 1.0, tau, momentum), high=5.0, grid=500
    )


# --- ex07: the stages of a pipeline on the stability map ------------------------------


def fastest_growing_stage(lr: float, sharpness: list[float], delays: list[int]) -> int | None:
    """The engine's stage whose quadratic grows fastest (largest spectral radius > 1)."""
    from pipemare_lite.analysis.stage_stability import fastest_growing_stage as engine

    return engine(lr, sharpness, delays)


def largest_stable_pipeline(step: float, num_microbatches: int) -> int:
    """The engine's largest P whose stage 0 stays inside the stable region at ``step``."""
    from pipemare_lite.analysis.stage_stability import largest_stable_pipeline as engine

    return engine(step, num_microbatches)


# --- ex08: T1, learning-rate rescheduling ---------------------------------------------


def t1_factor(update: int, tau: float, horizon: int) -> float:
    """The engine's T1 factor ``tau ** (-p_k)`` at update k (no warm-up: W = 0)."""
    from pipemare_lite.analysis.stage_lr import rescheduling_factor

    return rescheduling_factor(update, tau, horizon)


def t1_first_unstable_update(lr: float, lam: float, tau: int, horizon: int) -> int | None:
    """The engine's first update at which a stage with a constant base lr and T1 leaves
    chapter 06's bound (the factor is 1 from update K on, so K + 1 updates decide it)."""
    from pipemare_lite.analysis.stage_lr import first_unstable_update, stage_lrs

    return first_unstable_update(stage_lrs(lr, [tau], horizon + 1, horizon=horizon)[0], lam, tau)


# --- ex10: the trade-off table --------------------------------------------------------


def weight_memory_by_kind(method: str, param_bytes: list[int], num_microbatches: int,
                          optimizer: str) -> dict[str, int]:
    """The memory model's weights, stash, T2 buffer and optimizer bytes over a long run."""
    from pipemare_lite.analysis.memory import MemoryProfile
    from pipemare_lite.experiments.paper_arithmetic import weight_memory

    profile = MemoryProfile(list(param_bytes), [0] * len(param_bytes), optimizer)
    return weight_memory(method, profile, num_microbatches)


def method_for_budget(rows: list[dict], budget_bytes: float) -> str | None:
    """The engine's pick (:func:`pipemare_lite.methods.tradeoff.pick_method`) on plain dict
    rows."""
    from pipemare_lite.methods.tradeoff import TradeoffRow, pick_method

    table = [TradeoffRow(r["method"], r["method"], {}, r["device_peak"], r["utilization"],
                         None if r["utilization"] is not None else "not possible")
             for r in rows]
    return pick_method(table, budget_bytes)


# --- ex11: real processes -----------------------------------------------------------


def gpipe_just_in_time_rows(P: int, N: int) -> list[list[str]]:
    """The engine's comm rows of GPipe with receives posted only when needed."""
    from pipemare_lite.schedules import build_schedule
    from pipemare_lite.schedules.comm_rows import comm_row_strings

    return comm_row_strings(build_schedule("gpipe", P, N), receives_ahead=0)


def trace_utilization(entries: list, num_ranks: int) -> float:
    """``metrics(trace).utilization`` of a trace given as ``[rank, action, start, end]`` rows."""
    from pipemare_lite.analysis.simulate import metrics
    from pipemare_lite.analysis.timeline import TimedAction, Timeline
    from pipemare_lite.schedules import build_schedule
    from pipemare_lite.schedules.actions import Action

    # metrics reads the number of ranks (and whether backwards are split) off the schedule
    carrier = build_schedule("naive", num_ranks, 1)
    timed = tuple(TimedAction(rank, Action.parse(action), start, end)
                  for rank, action, start, end in entries)
    return metrics(Timeline(carrier, timed, unit="s", source="measured")).utilization


# --- ex09: T2, discrepancy correction ------------------------------------------------


def t2_engine_steps(model: str, gamma: float, distances: list[int]) -> list:
    """The engine's answer to ex09_1: per update, ``[delta, backward weights]`` as lists.

    A :class:`~pipemare_lite.methods.discrepancy.DiscrepancyCorrection` on the stage's real
    parameters (from :func:`~pipemare_lite.book.exercises.harness.t2_sequence`): before each update
    its snapshot, then the update in place, then ``after_update`` and
    ``backward_weights(distances[k])``, as :class:`~pipemare_lite.engine.stage.StageWorker`
    calls them.
    """
    import torch

    from pipemare_lite.book.exercises.harness import t2_sequence
    from pipemare_lite.methods.discrepancy import DiscrepancyCorrection

    weights, changes = t2_sequence(model, len(distances))
    params = [torch.nn.Parameter(w) for w in weights]
    t2 = DiscrepancyCorrection(params, gamma)
    steps = []
    for change, distance in zip(changes, distances):
        old = t2.snapshot()
        with torch.no_grad():
            for p, c in zip(params, change):
                p.add_(c)
        t2.after_update(old)
        steps.append([[d.tolist() for d in t2.delta],
                      [b.tolist() for b in t2.backward_weights(distance)]])
    return steps


def t2_calibration_updates(gamma: float, tolerance: float, limit: int = 100_000) -> int:
    """Updates until the engine's T2 buffer, started at zero, is within ``tolerance`` of a
    constant weight change (relative): a one-weight stage moved by 1.0 per update."""
    import torch

    from pipemare_lite.methods.discrepancy import DiscrepancyCorrection

    weight = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    t2 = DiscrepancyCorrection([weight], gamma)
    for k in range(1, limit + 1):
        old = t2.snapshot()
        with torch.no_grad():
            weight.add_(1.0)
        t2.after_update(old)
        if abs(float(t2.delta[0]) - 1.0) <= tolerance:
            return k
    raise ValueError(f"T2 with gamma {gamma} is not within {tolerance} after {limit} updates")
