"""The grading tests: one test and one marker per exercise. Graders never change this file.

Each test takes the student's answer from the adapter (``--student``; see conftest.py) and
checks it exactly as ``check()`` does in the notebook, on the same cases; a failure shows
the same message the student saw. Run one exercise with ``-m ex02_1``.
"""

from __future__ import annotations

import pytest


@pytest.mark.ex00_1
def test_ex00_1_gpipe_action_count(grade):
    """Exercise 0.1: gpipe_action_count(P, M) -> int."""
    grade("ex00_1")


@pytest.mark.ex01_1
def test_ex01_1_naive_order(grade):
    """Exercise 1.1: naive_order(P) -> list[list[str]]."""
    grade("ex01_1")


@pytest.mark.ex01_2
def test_ex01_2_naive_utilization(grade):
    """Exercise 1.2: naive_utilization(stage_costs) -> list[float]."""
    grade("ex01_2")


@pytest.mark.ex01_3
def test_ex01_3_naive_start_times(grade):
    """Exercise 1.3: naive_start_times(P, F, B) -> list[list[float]]."""
    grade("ex01_3")


@pytest.mark.ex02_1
def test_ex02_1_gpipe_order(grade):
    """Exercise 2.1: gpipe_order(P, M) -> list[list[str]]."""
    grade("ex02_1")


@pytest.mark.ex02_2
def test_ex02_2_idle_fraction(grade):
    """Exercise 2.2: idle_fraction(P, M) -> float."""
    grade("ex02_2")


@pytest.mark.ex02_3
def test_ex02_3_smallest_m_below(grade):
    """Exercise 2.3: smallest_m_below(P, target) -> int."""
    grade("ex02_3")


@pytest.mark.ex03_1
def test_ex03_1_one_f_one_b_order(grade):
    """Exercise 3.1: one_f_one_b_order(P, M) -> list[list[str]]."""
    grade("ex03_1")


@pytest.mark.ex03_2
def test_ex03_2_peak_activations_1f1b(grade):
    """Exercise 3.2: peak_activations_1f1b(P, M) -> list[int]."""
    grade("ex03_2")


@pytest.mark.ex04_1
def test_ex04_1_p2p_messages_per_microbatch(grade):
    """Exercise 4.1: p2p_messages_per_microbatch(P, v) -> int."""
    grade("ex04_1")


@pytest.mark.ex04_2
def test_ex04_2_interleaved_idle_fraction(grade):
    """Exercise 4.2: interleaved_idle_fraction(P, M, v) -> float."""
    grade("ex04_2")


@pytest.mark.ex04_3
def test_ex04_3_count_p2p_messages(grade):
    """Exercise 4.3: count_p2p_messages(schedule) -> int."""
    grade("ex04_3")


@pytest.mark.ex04_4
def test_ex04_4_v_messages_per_microbatch(grade):
    """Exercise 4.4: v_messages_per_microbatch(P, v) -> int."""
    grade("ex04_4")


@pytest.mark.ex05_1
def test_ex05_1_version_hooks(grade):
    """Exercise 5.1: version_hooks(params, weights) -> (pack, unpack)."""
    grade("ex05_1")


@pytest.mark.ex05_2
def test_ex05_2_async_forward_delay(grade):
    """Exercise 5.2: async_forward_delay(P, N, stage, position) -> int."""
    grade("ex05_2")


@pytest.mark.ex05_3
def test_ex05_3_pipedream_stash_copies(grade):
    """Exercise 5.3: pipedream_stash_copies(P, N) -> list[int]."""
    grade("ex05_3")


@pytest.mark.ex06_1
def test_ex06_1_delayed_gd(grade):
    """Exercise 6.1: delayed_gd(alpha, lam, tau, steps) -> list[float]."""
    grade("ex06_1")


@pytest.mark.ex06_2
def test_ex06_2_delayed_gd_coefficients(grade):
    """Exercise 6.2: delayed_gd_coefficients(alpha, lam, tau, momentum) -> list[float]."""
    grade("ex06_2")


@pytest.mark.ex06_3
def test_ex06_3_max_stable_step(grade):
    """Exercise 6.3: max_stable_step(tau, momentum) -> float."""
    grade("ex06_3")


@pytest.mark.ex07_1
def test_ex07_1_first_to_blow_up(grade):
    """Exercise 7.1: first_to_blow_up(lr, sharpness, delays) -> int | None."""
    grade("ex07_1")


@pytest.mark.ex07_2
def test_ex07_2_largest_stable_depth(grade):
    """Exercise 7.2: largest_stable_depth(step, num_microbatches) -> int."""
    grade("ex07_2")


@pytest.mark.ex08_1
def test_ex08_1_t1_factor(grade):
    """Exercise 8.1: t1_factor(update, tau, horizon) -> float."""
    grade("ex08_1")


@pytest.mark.ex08_2
def test_ex08_2_first_update_outside(grade):
    """Exercise 8.2: first_update_outside(lr, lam, tau, horizon) -> int | None."""
    grade("ex08_2")


@pytest.mark.ex10_1
def test_ex10_1_weight_memory_by_kind(grade):
    """Exercise 10.1: weight_memory_by_kind(method, param_bytes, num_microbatches, optimizer)."""
    grade("ex10_1")


@pytest.mark.ex10_2
def test_ex10_2_pick_for_budget(grade):
    """Exercise 10.2: pick_for_budget(rows, budget_bytes) -> str | None."""
    grade("ex10_2")


@pytest.mark.ex11_1
def test_ex11_1_gpipe_comm_rows(grade):
    """Exercise 11.1: gpipe_comm_rows(P, N) -> list[list[str]]."""
    grade("ex11_1")


@pytest.mark.ex11_2
def test_ex11_2_utilization_from_trace(grade):
    """Exercise 11.2: utilization_from_trace(entries, num_ranks) -> float."""
    grade("ex11_2")


@pytest.mark.ex09_1
def test_ex09_1_t2_step(grade):
    """Exercise 9.1: t2_step(delta, w_old, w_new, gamma, distance) -> (new_delta, backward)."""
    grade("ex09_1")


@pytest.mark.ex09_2
def test_ex09_2_updates_until_calibrated(grade):
    """Exercise 9.2: updates_until_calibrated(gamma, tolerance) -> int."""
    grade("ex09_2")


@pytest.mark.ex12_1
def test_ex12_1_look_ahead_factor(grade):
    """Exercise 12.1: look_ahead_factor(mu, s) -> float."""
    grade("ex12_1")


@pytest.mark.ex12_2
def test_ex12_2_smallest_accumulation(grade):
    """Exercise 12.2: smallest_accumulation(P, max_delay) -> int."""
    grade("ex12_2")
