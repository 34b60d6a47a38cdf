"""Speed of building + simulating schedules against the goals (prints ratios; no pass/fail).

Goals: P=16, M=64 build + simulate well under 20 ms; P=128, M=1024 under 2 s. Run with
``python benchmarks/bench_schedules.py`` (``make bench`` runs every benchmark). Wall-clock
times on a shared machine vary with its load, so the CPU time of the process is printed too.
"""

from __future__ import annotations

import os
import time

from pipemare_lite.schedules import SCHEDULE_NAMES, build_schedule
from pipemare_lite.simulate import metrics, simulate

CASES = [(16, 64, 0.020, 7), (128, 1024, 2.0, 1)]  # P, M, goal in seconds, repeats (best of)


def timed(fn, *args, **kwargs):
    """``(result, wall seconds, CPU seconds)`` of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def measure(name: str, P: int, M: int, repeats: int) -> dict:
    """Best-of-``repeats`` wall and CPU times of build, simulate and metrics."""
    best: dict[str, float] = {}
    chunks = 2 if name == "interleaved" else 1
    for _ in range(repeats):
        schedule, wall_b, cpu_b = timed(build_schedule, name, P, M, chunks=chunks)
        timeline, wall_s, cpu_s = timed(simulate, schedule)
        _, wall_m, cpu_m = timed(metrics, timeline)
        for key, value in (("build", wall_b), ("simulate", wall_s), ("metrics", wall_m),
                           ("cpu", cpu_b + cpu_s)):  # fmt: skip
            best[key] = min(best.get(key, float("inf")), value)
    best["actions"] = sum(len(row) for row in schedule.ranks)
    return best


def main() -> None:
    """Print one line per (schedule, size): build, simulate, metrics, and the goal ratio."""
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'schedule':12} {'P':>4} {'M':>5} {'actions':>8} {'build':>9} {'simulate':>9}"
          f" {'metrics':>9} {'build+sim':>10} {'(cpu)':>9} {'goal':>7} {'ratio':>6}")  # fmt: skip
    for P, M, goal, repeats in CASES:
        for name in SCHEDULE_NAMES:
            t = measure(name, P, M, repeats)
            total = t["build"] + t["simulate"]
            print(f"{name:12} {P:>4} {M:>5} {t['actions']:>8} {t['build'] * 1e3:>7.1f}ms"
                  f" {t['simulate'] * 1e3:>7.1f}ms {t['metrics'] * 1e3:>7.1f}ms"
                  f" {total * 1e3:>8.1f}ms {t['cpu'] * 1e3:>7.1f}ms {goal * 1e3:>5.0f}ms"
                  f" {total / goal:>6.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
