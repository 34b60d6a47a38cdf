"""Speed of the torch-free schedule pipeline against the goals (prints ratios; no pass/fail).

Goals (issue 3): build (with validation) + simulate + staleness (``weight_versions`` +
``stage_delays``) for P=16, M=64 under 20 ms, and for P=128, M=1024 under 2 s, for every
schedule. ``metrics`` and ``memory_by_kind`` are timed too and printed beside the goal total,
with their own ratio to the same goal. Run with ``python benchmarks/bench_schedules.py``
(``make bench`` runs every benchmark); ``--quick`` runs only the small size. Wall-clock times
on a shared machine vary with its load, so the CPU time of the goal total is printed too,
with its own ratio to the goal (``cpu/goal``; ``ratio`` is the wall-clock one).
"""

from __future__ import annotations

import gc
import os
import sys
import time

from pipemare_lite.analysis.memory import MemoryProfile, memory_by_kind
from pipemare_lite.analysis.simulate import metrics, simulate
from pipemare_lite.analysis.staleness import stage_delays, weight_versions
from pipemare_lite.schedules import SCHEDULE_NAMES, build_schedule

CASES = [(16, 64, 0.020, 7), (128, 1024, 2.0, 2)]  # P, M, goal in seconds, repeats (best of)

#: The steps whose summed time the goal is about, in pipeline order.
GOAL_STEPS = ("build", "simulate", "versions", "delays")


def timed(fn, *args, **kwargs):
    """``(result, wall seconds, CPU seconds)`` of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def measure(name: str, P: int, M: int, repeats: int) -> dict:
    """Best-of-``repeats`` wall times of every step, and the CPU time of the goal steps."""
    best: dict[str, float] = {}
    chunks = 2 if name == "interleaved" else 1
    for _ in range(repeats):
        gc.collect()  # start every repeat from the same heap: no garbage left from the last
        wall: dict[str, float] = {}
        cpu = 0.0
        schedule, wall["build"], c = timed(build_schedule, name, P, M, chunks=chunks)
        cpu += c
        timeline, wall["simulate"], c = timed(simulate, schedule)
        cpu += c
        table, wall["versions"], c = timed(weight_versions, schedule)
        cpu += c
        _, wall["delays"], c = timed(stage_delays, table)
        cpu += c
        _, wall["metrics"], _ = timed(metrics, timeline)
        S = schedule.num_virtual_stages
        profile = MemoryProfile([1 << 20] * S, [1 << 16] * S)
        _, wall["memory"], _ = timed(memory_by_kind, schedule, profile)
        wall["goal"] = sum(wall[step] for step in GOAL_STEPS)
        wall["cpu"] = cpu
        for key, value in wall.items():
            best[key] = min(best.get(key, float("inf")), value)
        del schedule, timeline, table  # free the large objects before the next repeat
    best["actions"] = sum(len(row) for row in build_schedule(name, P, M, chunks=chunks).ranks)
    return best


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:>8.1f}"


def main(argv: list[str] | None = None) -> None:
    """Print one line per (schedule, size): each step's time in ms and the goal ratios."""
    argv = sys.argv[1:] if argv is None else argv
    cases = CASES[:1] if "--quick" in argv else CASES
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; times in ms, best of")
    header = (
        f"{'schedule':12} {'P':>4} {'M':>5} {'actions':>8} {'build':>8} {'simulate':>8}"
        f" {'versions':>8} {'delays':>8} {'goal-sum':>8} {'(cpu)':>8} {'goal':>6} {'ratio':>6}"
        f" {'cpu/goal':>8}"
        f" {'metrics':>8} {'memory':>8} {'mem/goal':>8}"
    )
    print(header)
    for P, M, goal, repeats in cases:
        for name in SCHEDULE_NAMES:
            t = measure(name, P, M, repeats)
            print(
                f"{name:12} {P:>4} {M:>5} {t['actions']:>8}"
                + "".join(f" {_ms(t[step])}" for step in GOAL_STEPS)
                + f" {_ms(t['goal'])} {_ms(t['cpu'])} {goal * 1e3:>6.0f} {t['goal'] / goal:>6.2f}"
                f" {t['cpu'] / goal:>8.2f}"
                f" {_ms(t['metrics'])} {_ms(t['memory'])} {t['memory'] / goal:>8.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
