"""The engine's answers to the exercises: builders, simulator and closed forms, never a copy.

Each function asks the engine (imported lazily, so importing the exercises stays cheap and
torch-free) and reshapes its answer into the form an exercise asks for, e.g. one row of
``"2F0"``-style strings per rank without the ``U`` (update) actions. Chapters 00-04 and 06.
"""

from __future__ import annotations

from fractions import Fraction


def schedule_rows(name: str, P: int, M: int, *, chunks: int = 1) -> list[list[str]]:
    """The engine's schedule ``name`` as one row per rank of F/B actions (updates dropped)."""
    from pipemare_lite.schedules import build_schedule

    schedule = build_schedule(name, P, M, chunks=chunks)
    return [[str(a) for a in row if a.kind != "U"] for row in schedule.ranks]


def simulated_metrics(name: str, P: int, M: int, *, chunks: int = 1):
    """``metrics(simulate(schedule))`` with the simulator's default op costs."""
    from pipemare_lite.schedules import build_schedule
    from pipemare_lite.simulate import OpCosts, metrics, simulate

    return metrics(simulate(build_schedule(name, P, M, chunks=chunks), OpCosts()))


def start_times(name: str, P: int, M: int, forward: float, backward: float) -> list[list[float]]:
    """Per rank, the simulated start time of each F/B action, in the rank's order."""
    from pipemare_lite.schedules import build_schedule
    from pipemare_lite.simulate import OpCosts, simulate

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


# --- chapter 06: delayed gradient descent on a quadratic ----------------------------------


def delayed_gd_iterates(alpha: float, lam: float, tau: int, steps: int) -> list[float]:
    """The engine's ``w[0..steps]`` of delayed GD from ``w = 1`` (constant past)."""
    from pipemare_lite.theory import simulate_delayed_gd

    return simulate_delayed_gd(alpha, lam, tau, steps).tolist()


def delayed_gd_polynomial(alpha: float, lam: float, tau: int, momentum: float) -> list[float]:
    """The engine's characteristic polynomial of (heavy-ball) delayed GD, highest power first."""
    from pipemare_lite.theory import characteristic_polynomial

    return characteristic_polynomial(alpha, lam, tau, momentum).tolist()


def largest_stable_alpha_lam(tau: int, momentum: float) -> float:
    """The largest ``alpha * lam`` with every smaller step stable (roots, then bisection)."""
    from pipemare_lite.theory import largest_stable_step, spectral_radius

    return largest_stable_step(
        lambda x: spectral_radius(x, 1.0, tau, momentum), high=5.0, grid=500
    )


# --- chapter 07: the stages of a pipeline on chapter 06's map ------------------------------


def fastest_growing_stage(lr: float, sharpness: list[float], delays: list[int]) -> int | None:
    """The engine's stage whose quadratic grows fastest (largest spectral radius > 1)."""
    from pipemare_lite.stage_stability import fastest_growing_stage as engine

    return engine(lr, sharpness, delays)


def largest_stable_pipeline(step: float, num_microbatches: int) -> int:
    """The engine's largest P whose stage 0 stays inside the stable region at ``step``."""
    from pipemare_lite.stage_stability import largest_stable_pipeline as engine

    return engine(step, num_microbatches)
