"""Speed of chapter 07's granularity explorer (prints ratios; no pass/fail).

Goal: one handler call under 100 ms (as for the other explorers, ``bench_widgets.py``) with
histories of realistic size: P up to 16 stages, 420 steps. Moving the learning rate only
restyles the stage markers and rewrites the table; switching P also redraws the loss
curves. Run with ``python benchmarks/bench_granularity_explorer.py``.
"""

from __future__ import annotations

import math

from bench_widgets import REPEATS, best_of, row

from pipemare_lite.figures.widgets import granularity_explorer, granularity_explorer_static
from pipemare_lite.training.history import History

STEPS = 420


def _history(P, delays):
    return History(loss=[2.0 / (1 + 0.01 * k) for k in range(STEPS)],
                   stage_update_norm=[[0.1] * STEPS for _ in range(P)], forward_delay_max=delays)


def _runs():
    runs = {}
    for P in (2, 4, 8, 16):
        runs[P] = {
            "histories": {
                "1f1b": _history(P, [0] * P),
                "async": _history(P, [math.ceil((2 * (P - s) - 1) / 2) for s in range(P)]),
                "pipedream": _history(P, [math.ceil((P - 1 - s) / 2) for s in range(P)]),
            },
            "sharpness": [5.0 + s % 3 for s in range(P)],
        }
    return runs


def main() -> None:
    """One line per kind of move: time, goal, ratio (below 1 meets the goal)."""
    runs = _runs()
    explorer = granularity_explorer(runs, trained_lr=0.05)
    lrs = iter([0.01, 0.02] * REPEATS)
    row("granularity_explorer move lr (P=16)", best_of(REPEATS, lambda: explorer.set(lr=next(lrs))))
    methods = iter(["pipedream", "async"] * REPEATS)
    row("granularity_explorer switch delays (P=16)",
        best_of(REPEATS, lambda: explorer.set(method=next(methods))))
    sizes = iter([8, 16] * REPEATS)
    row("granularity_explorer switch P (8 <-> 16)",
        best_of(REPEATS, lambda: explorer.set(P=next(sizes))))
    lr_steps = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2]
    row("granularity_explorer_static() 6 lrs, P=2..16",
        best_of(2, lambda: granularity_explorer_static(runs, lrs=lr_steps)), None)


if __name__ == "__main__":
    main()
