"""Speed of the explorers: a control moves -> the figure is redrawn (prints ratios; no pass/fail).

Goal: one handler call (build + simulate + metrics + figure update) well under 100 ms for
P <= 16, M <= 64 (and, for chapter 06's stability explorer and chapter 09's T2 explorer,
delays up to 16 with the stability maps redone), so dragging a slider feels immediate. Also
times the pure figure functions and the static slider twins. Run with
``python benchmarks/bench_widgets.py`` (``make bench`` runs every benchmark). Times are the
best of a few runs (least disturbed by other processes); the first call of a session
(imports, first FigureWidget) is excluded.
"""

from __future__ import annotations

import time

from pipemare_lite.analysis.simulate import simulate
from pipemare_lite.analysis.staleness import weight_versions
from pipemare_lite.figures.viz import gantt
from pipemare_lite.figures.widgets import (
    schedule_explorer,
    schedule_explorer_static,
    stability_explorer,
    stability_explorer_static,
    staleness_explorer,
    staleness_explorer_static,
    t2_explorer,
    t2_explorer_static,
)
from pipemare_lite.schedules import build_schedule

GOAL = 0.100  # seconds per handler call
REPEATS = 5
SCHEDULE_CASES = [("1f1b", 4, 8), ("gpipe", 16, 64), ("1f1b", 16, 64), ("interleaved", 16, 64),
                  ("zb-h1", 16, 64), ("async", 16, 64)]


def best_of(repeats: int, fn) -> tuple[float, float]:
    """The fastest of ``repeats`` runs of ``fn()``: (wall seconds, CPU seconds of this process).

    On a shared, loaded machine the CPU time is the fairer number: wall time also counts the
    time other processes held the core.
    """
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def row(what: str, seconds: tuple[float, float], goal: float | None = GOAL) -> None:
    """One printed line: wall and CPU time, the goal, and CPU time / goal."""
    wall, cpu = seconds
    ratio = f"{cpu / goal:6.2f}" if goal else "     -"
    goal_text = f"{goal * 1e3:5.0f}ms" if goal else "      -"
    print(f"{what:44} {wall * 1e3:8.1f}ms {cpu * 1e3:8.1f}ms {goal_text} {ratio}")


def main() -> None:
    """Print one line per case: time, goal, ratio (time / goal; below 1 meets the goal)."""
    print(f"{'case':44} {'wall':>10} {'cpu':>10} {'goal':>7} {'ratio':>6}  (ratio = cpu / goal)")
    wall, cpu = time.perf_counter(), time.process_time()
    explorer = schedule_explorer("1f1b", 4, 8)
    row("first schedule_explorer() (imports, widgets)",
        (time.perf_counter() - wall, time.process_time() - cpu), None)
    for name, P, M in SCHEDULE_CASES:
        explorer.set(schedule=name, stages=P, microbatches=M)
        assert explorer.error is None, explorer.error
        # alternate M so that each timed call recomputes (interleaving needs M % P == 0)
        other = M - P if name == "interleaved" else M - 1
        sizes = iter([other, M] * REPEATS)

        def handler(sizes=sizes):
            explorer.set(microbatches=next(sizes))  # one handler call

        row(f"schedule_explorer {name} P={P} M~{M}", best_of(REPEATS, handler))
    staleness = staleness_explorer("async", 12, 8, minibatches=16)
    pick = iter([5, 6] * 3 * REPEATS)
    row("staleness_explorer async P=12 N=8 K=16",
        best_of(REPEATS, lambda: staleness.set(microbatch=next(pick))))
    staleness.set(tick_order="backward_first")
    row("staleness_explorer async P=12 N=8 K=16 BF",
        best_of(REPEATS, lambda: staleness.set(microbatch=next(pick))))
    # with an executed run's table beside the analysis (chapter 05); the analysis' own table
    # stands in for it here: the same type and size, and no torch needed
    ran = weight_versions(build_schedule("pipedream", 12, 8, num_minibatches=16))
    with_run = staleness_explorer("pipedream", 12, 8, minibatches=16, measured=ran)
    assert with_run.showing_measured
    row("staleness_explorer pipedream 12,8,16 +run",
        best_of(REPEATS, lambda: with_run.set(microbatch=next(pick))))
    stability = stability_explorer(alpha=0.3, tau=8, momentum=0.5, discrepancy=-1.0)
    # alpha and tau only move the marked point; momentum, s, lambda and T2 redo the map
    # (every timed call changes the value: the first value differs from the current one)
    for control, values in [("alpha", [0.2, 0.3]), ("tau", [16, 15]), ("momentum", [0.6, 0.5]),
                            ("discrepancy", [-0.9, -1.0]), ("t2", [True, False])]:
        moves = iter(values * REPEATS)
        row(f"stability_explorer move {control} (tau<=16)",
            best_of(REPEATS, lambda c=control, v=moves: stability.set(**{c: next(v)})))
    # chapter 09's T2 explorer caches its maps and gamma sweeps: every timed call moves to a
    # value not seen before, so it recomputes what that control needs (gamma: the map with
    # T2; tau: the sweep; s: both maps and the sweep; alpha: nothing but markers)
    t2 = t2_explorer(alpha=0.3, tau=8, discrepancy=-1.0, gamma=0.3)
    for control, values in [("alpha", [0.2, 0.3]), ("gamma", [0.5, 0.55, 0.6, 0.65, 0.7]),
                            ("tau", [16, 15, 14, 13, 12]),
                            ("discrepancy", [-0.9, -0.8, -0.7, -0.6, -0.5])]:
        moves = iter(values * REPEATS)
        row(f"t2_explorer move {control} (tau<=16)",
            best_of(REPEATS, lambda c=control, v=moves: t2.set(**{c: next(v)})))
    timeline = simulate(build_schedule("1f1b", 16, 64))
    row("viz.gantt_chart() 1f1b P=16 M=64 (pure figure)", best_of(REPEATS, lambda: gantt(timeline)))
    row("schedule_explorer_static() P=4 M=1..16", best_of(2, schedule_explorer_static), None)
    row("staleness_explorer_static() P=2..8", best_of(2, staleness_explorer_static), None)
    row("stability_explorer_static() tau=0..10", best_of(2, stability_explorer_static), None)
    row("t2_explorer_static() gamma=0..0.9", best_of(2, t2_explorer_static), None)


if __name__ == "__main__":
    main()
