"""Speed of chapter 08's T1 explorer (prints ratios; no pass/fail).

Goal: one handler call under 100 ms (as for the other explorers, ``bench_widgets.py``) for
P up to 16 and a run of 420 updates (the stored experiment's length): moving K, N, the base
schedule or the curvature recomputes every stage's learning rate and restyles the lines;
changing P rebuilds them. Run with ``python benchmarks/bench_t1_explorer.py``.
"""

from __future__ import annotations

from bench_widgets import REPEATS, best_of, row

from pipemare_lite.figures.widgets import t1_explorer, t1_explorer_static

UPDATES = 420


def main() -> None:
    """One line per kind of move: time, goal, ratio (below 1 meets the goal)."""
    explorer = t1_explorer(lr=0.05, total_updates=UPDATES, P=16, N=2)
    horizons = iter([100, 300] * REPEATS)
    row("t1_explorer move K (P=16)", best_of(REPEATS, lambda: explorer.set(K=next(horizons))))
    bases = iter(["cosine", "constant"] * REPEATS)
    row("t1_explorer switch base (P=16)",
        best_of(REPEATS, lambda: explorer.set(schedule=next(bases))))
    curvatures = iter([2.0, 8.0] * REPEATS)
    row("t1_explorer move lam (P=16)", best_of(REPEATS, lambda: explorer.set(lam=next(curvatures))))
    sizes = iter([8, 16] * REPEATS)
    row("t1_explorer switch P (8 <-> 16)", best_of(REPEATS, lambda: explorer.set(P=next(sizes))))
    row("t1_explorer_static() 6 horizons, P=16",
        best_of(2, lambda: t1_explorer_static(lr=0.05, total_updates=UPDATES, P=16,
                                              horizons=[0, 26, 105, 210, 315, 420])), None)


if __name__ == "__main__":
    main()
