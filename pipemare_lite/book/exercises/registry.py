"""Every exercise of the book, by id (introduced in chapter 00).

The chapter notebooks use exactly these ids and names; each chapter's cases and hints live
in ``pipemare_lite/book/exercises/chNN.py``. Expected signatures:

=========  ====================================================  =============================
id         the student defines                                    compared with (engine)
=========  ====================================================  =============================
ex00_1     ``gpipe_action_count(P, M) -> int``                    F+B actions of ``"gpipe"``
ex01_1     ``naive_order(P) -> list[list[str]]``                  ``"naive"`` rows minus U
ex01_2     ``naive_utilization(stage_costs) -> list[float]``       per-rank utilization, naive
ex01_3     ``naive_start_times(P, F, B) -> list[list[float]]``    simulated start times, naive
ex02_1     ``gpipe_order(P, M) -> list[list[str]]``               ``"gpipe"`` rows minus U
ex02_2     ``idle_fraction(P, M) -> float``                       simulated idle fraction, gpipe
ex02_3     ``smallest_m_below(P, target) -> int``                 search over the simulator
ex03_1     ``one_f_one_b_order(P, M) -> list[list[str]]``         ``"1f1b"`` rows minus U
ex03_2     ``peak_activations_1f1b(P, M) -> list[int]``           simulated peak_inflight, 1f1b
ex04_1     ``p2p_messages_per_microbatch(P, v) -> int``           hops counted in interleaved
ex04_2     ``interleaved_idle_fraction(P, M, v) -> float``        simulated idle, interleaved
ex04_3     ``count_p2p_messages(schedule) -> int``                ``simulate.p2p_messages``
ex04_4     ``v_messages_per_microbatch(P, v) -> int``             hops on the V (``v_placement``)
ex05_1     ``version_hooks(params, weights) -> (pack, unpack)``   StageWorker stash/async grads
ex05_2     ``async_forward_delay(P, N, stage, position) -> int``  weight versions of ``"async"``
ex05_3     ``pipedream_stash_copies(P, N) -> list[int]``          memory model, long pipedream
ex06_1     ``delayed_gd(alpha, lam, tau, steps) -> list``         ``theory.simulate_delayed_gd``
ex06_2     ``delayed_gd_coefficients(alpha, lam, tau, m)``        ``characteristic_polynomial``
ex06_3     ``max_stable_step(tau, momentum) -> float``            roots + bisection (theory)
ex07_1     ``first_to_blow_up(lr, sharpness, delays)``            largest spectral radius > 1
ex07_2     ``largest_stable_depth(step, N) -> int``               solved: bound inverted, then P
ex08_1     ``t1_factor(update, tau, horizon) -> float``           the engine's T1 factor
ex08_2     ``first_update_outside(lr, lam, tau, K)``              first T1 step over the bound
ex10_1     ``weight_memory_by_kind(method, param_bytes, N, opt)``  memory model, long run
ex10_2     ``pick_for_budget(rows, budget_bytes) -> str | None``  ``tradeoff.pick_method``
ex11_1     ``gpipe_comm_rows(P, N) -> list[list[str]]``           ``comm_rows``, no receive ahead
ex11_2     ``utilization_from_trace(entries, num_ranks)``         ``metrics(trace).utilization``
ex09_1     ``t2_step(delta, w_old, w_new, gamma, d)``             ``DiscrepancyCorrection``
ex09_2     ``updates_until_calibrated(gamma, tol) -> int``        T2's buffer, update by update
ex12_1     ``look_ahead_factor(mu, s) -> float``                  mu + mu**2 + ... + mu**s
ex12_2     ``smallest_accumulation(P, max_delay) -> int``         solved: ceil((2P-1)/N) <= budget
=========  ====================================================  =============================

Rows are one list per rank of action strings ``{stage}{F|B}{microbatch}`` (``"2F0"``,
``"1B3"``) in execution order, updates (``U``) left out. Torch-free: the chapter modules
import the engine only when a check runs (ex05_1 and ex09_1, on real tensors, and ex09_2's
reference then import torch).
"""

from __future__ import annotations

from pipemare_lite.book.exercises import (
    ch00,
    ch01,
    ch02,
    ch03,
    ch04,
    ch05,
    ch06,
    ch07,
    ch08,
    ch09,
    ch10,
    ch11,
    ch12,
)
from pipemare_lite.book.exercises.exercise import Exercise

#: exercise id -> :class:`Exercise`, in book order (each chapter module lists its exercises
#: in the order a reader meets them: tests/test_exercises_numbering.py).
EXERCISES: dict[str, Exercise] = {
    exercise.id: exercise
    for module in (ch00, ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11, ch12)
    for exercise in module.EXERCISES
}


class UnknownExerciseError(LookupError):
    """An exercise id that is not in :data:`EXERCISES`; the message lists the known ids."""


def get_exercise(exercise_id: str) -> Exercise:
    """The exercise called ``exercise_id``.

    Raises:
        UnknownExerciseError: naming the bad id and listing every known id.
    """
    try:
        return EXERCISES[exercise_id]
    except (KeyError, TypeError):
        known = ", ".join(EXERCISES)
        raise UnknownExerciseError(
            f"unknown exercise id {exercise_id!r}; known ids: {known}"
        ) from None


def list_exercises(chapter: int | None = None) -> list[Exercise]:
    """All exercises in book order, or those of one chapter (an int, e.g. 2).

    Raises:
        ValueError: ``chapter`` is not an int in 0..99.
    """
    if chapter is None:
        return list(EXERCISES.values())
    if isinstance(chapter, bool) or not isinstance(chapter, int) or not 0 <= chapter <= 99:
        raise ValueError(f"chapter must be an int in 0..99 or None, got {chapter!r}")
    return [exercise for exercise in EXERCISES.values() if exercise.chapter == chapter]


def find_by_name(function_name: str) -> Exercise | None:
    """The exercise whose answer is called ``function_name``, or None."""
    for exercise in EXERCISES.values():
        if exercise.function_name == function_name:
            return exercise
    return None
