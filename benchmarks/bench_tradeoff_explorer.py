"""Speed of chapter 10's trade-off explorer (prints ratios; no pass/fail).

Goal: one handler call under 100 ms (as for the other explorers, ``bench_widgets.py``) with
the chapter's tables: a ResNet-50-like profile at P in 4, 8, 16 and N in 4, 8, 16. Moving
the budget or the accepted methods only restyles the bars; switching P or N redraws the
figure. The tables themselves are computed once by the chapter (timed here too, without a
goal). Run with ``python benchmarks/bench_tradeoff_explorer.py``.
"""

from __future__ import annotations

from bench_widgets import REPEATS, best_of, row

from pipemare_lite.experiments.paper_arithmetic import layer_profile, resnet50_layers
from pipemare_lite.figures.widgets import tradeoff_explorer, tradeoff_explorer_static
from pipemare_lite.methods.tradeoff import tradeoff_table


def _tables():
    layers = resnet50_layers()
    return {(p, n): tradeoff_table(layer_profile(layers, p, microbatch_size=8), n)
            for p in (4, 8, 16) for n in (4, 8, 16)}


def main() -> None:
    """One line per kind of move: time, goal, ratio (below 1 meets the goal)."""
    row("tradeoff_table() x 9 (P 4..16, N 4..16)", best_of(1, _tables), None)
    tables = _tables()
    explorer = tradeoff_explorer(tables, P=16, N=16)
    budgets = iter([2.0**30, 2.0**31] * REPEATS)
    row("tradeoff_explorer move budget (P=16)",
        best_of(REPEATS, lambda: explorer.set(budget=next(budgets))))
    accepted = iter([("gpipe", "1f1b", "zb-h1"), ("pipedream", "async")] * REPEATS)
    row("tradeoff_explorer accepted methods",
        best_of(REPEATS, lambda: explorer.set(candidates=next(accepted))))
    sizes = iter([4, 16] * REPEATS)
    row("tradeoff_explorer switch N (4 <-> 16)",
        best_of(REPEATS, lambda: explorer.set(N=next(sizes))))
    row("tradeoff_explorer_static() 6 budgets",
        best_of(2, lambda: tradeoff_explorer_static(
            tables[16, 16], budgets=[g * 2**30 for g in (0.5, 1, 1.5, 2, 3, 4)])), None)


if __name__ == "__main__":
    main()
