"""Wrong answers that a student reading found passing (issue 45), each now failing.

Every answer below is one a reader actually tried or a shortcut the text invited: an
ex04_3 that ignores where the stages live, an ex07_1 that breaks ties upwards, an ex02_3
solved in floats, an ex01_2 that is chapter 00's 1/P, an ex06_3 that types in the bound
printed above it. Each must fail ``check``; the right answer (the plain solutions of
``test_exercises_chapters``) still passes, and the feedback says what the mistake is.
"""

from __future__ import annotations

import math
from fractions import Fraction

import nbformat
import pytest

from pipemare_lite.book.exercises import EXERCISES, run_checks
from pipemare_lite.schedules import build_schedule
from tests.test_exercises_chapters import (
    count_p2p_messages,
    first_to_blow_up,
    max_stable_step,
    naive_utilization,
    one_f_one_b_order,
    smallest_m_below,
)

# --- ex04_3: messages of any schedule, V placements included --------------------------------


def every_boundary(schedule):
    """Ignores which rank holds each stage: every stage boundary is a message."""
    last = schedule.num_virtual_stages - 1
    return sum((a.kind == "F" and a.stage > 0) or (a.kind in ("B", "I") and a.stage < last)
               for _, _, a in schedule.actions())


def round_robin(schedule):
    """Assumes virtual stage s lives on rank s % P, whatever the schedule says."""
    last, P = schedule.num_virtual_stages - 1, schedule.num_ranks
    return sum((a.kind == "F" and a.stage > 0 and (a.stage - 1) % P != r)
               or (a.kind in ("B", "I") and a.stage < last and (a.stage + 1) % P != r)
               for r, _, a in schedule.actions())


def test_ex04_3_v_placements_catch_placement_shortcuts():
    # the reader's numbers: on ZB-V and DualPipeV (P = 4, M = 8) the engine counts 96, an
    # answer ignoring placement 112, one assuming round robin 88
    for name in ("zb-v", "dualpipev"):
        schedule = build_schedule(name, 4, 8)
        assert (count_p2p_messages(schedule), every_boundary(schedule),
                round_robin(schedule)) == (96, 112, 88)
    cases = EXERCISES["ex04_3"].cases()
    assert {c["schedule"].name for c in cases} >= {"zb-v", "dualpipev"}
    for wrong in (every_boundary, round_robin):
        result = run_checks("ex04_3", wrong)
        assert result.status == "failed", wrong.__name__
    assert "round robin" in run_checks("ex04_3", round_robin).message
    assert run_checks("ex04_3", count_p2p_messages).passed


# --- ex07_1: the stated tie rule -------------------------------------------------------------


def test_ex07_1_ties_go_to_the_lower_stage():
    from pipemare_lite.analysis.theory import spectral_radius

    def tie_to_higher(lr, sharpness, delays):
        radii = [spectral_radius(lr, lam, tau) if lam > 0 else 1.0
                 for lam, tau in zip(sharpness, delays)]
        growing = [s for s, r in enumerate(radii) if r > 1.0]
        return max(growing, key=lambda s: (radii[s], s)) if growing else None

    exercise = EXERCISES["ex07_1"]
    tied = []
    for case in exercise.cases():
        radii = [spectral_radius(case["lr"], lam, tau)
                 for lam, tau in zip(case["sharpness"], case["delays"])]
        top = max(radii)
        if top > 1.0 and radii.count(top) > 1:
            tied.append(case)
            assert exercise.reference(**case) == radii.index(top)  # the lower stage
    assert len(tied) >= 2
    result = run_checks("ex07_1", tie_to_higher)
    assert result.status == "failed" and "tie" in result.message, result.message
    assert run_checks("ex07_1", first_to_blow_up).passed


# --- ex02_3: what floats get right and wrong --------------------------------------------------


def plain_float_loop(P, target):
    M = 1
    while not (P - 1) / (M + P - 1) < target:
        M += 1
    return M


def solved_in_floats(P, target):
    return max(1, math.floor((P - 1) * (1 - target) / target) + 1)


def one_minus_utilization(P, target):
    M = 1
    while not 1 - M / (M + P - 1) < target:
        M += 1
    return M


def test_ex02_3_floats_that_round_twice_fail_and_the_text_says_which():
    # one correctly rounded division against the target's literal is right on every case (the
    # exercise no longer claims otherwise); arithmetic that rounds twice is caught
    assert run_checks("ex02_3", plain_float_loop).passed
    assert run_checks("ex02_3", smallest_m_below).passed
    for wrong in (solved_in_floats, one_minus_utilization):
        assert run_checks("ex02_3", wrong).status == "failed", wrong.__name__
    assert "rounds twice" in run_checks("ex02_3", solved_in_floats).message
    # the first case is the chapter's question, and exactly on the boundary
    first = EXERCISES["ex02_3"].cases()[0]
    assert (first["P"], first["target"]) == (8, 0.1)
    assert Fraction(7, 63 + 7) == Fraction("0.1")
    notebook = nbformat.read("chapters/02_gpipe_and_the_bubble.ipynb", as_version=4)
    statement = next(c.source for c in notebook.cells
                     if "**Exercise 3.** Write `smallest_m_below" in c.source)
    assert "how floats round 0.1" not in statement and "round twice" in statement


def solved_by_division(P, target):
    """The reader's second pass: M > (P-1)/t - (P-1), in floats (it passed 10 of 10 cases)."""
    return math.floor((P - 1) / target - (P - 1)) + 1


def test_ex02_3_the_inequality_solved_by_division_fails_where_floats_round():
    # the text says solving for M in floats fails: a case now shows it for this form too
    assert 7 / 0.07 < 100 and Fraction(7, 93 + 7) == Fraction("0.07")
    assert {"P": 8, "target": 0.07} in EXERCISES["ex02_3"].cases()
    result = run_checks("ex02_3", solved_by_division)
    assert result.status == "failed" and "99.99999999999999" in result.message, result.message
    message = run_checks("ex02_3", one_minus_utilization).message
    assert "rounds twice" in message, message  # named too, not only rejected
    assert run_checks("ex02_3", plain_float_loop).passed


# --- ex01_2, ex06_3, ex11_2: a step the text has not taken ------------------------------------


def test_ex01_2_chapter_00s_one_over_p_fails():
    def one_over_p(stage_costs):
        return [1 / len(stage_costs)] * len(stage_costs)

    result = run_checks("ex01_2", one_over_p)
    assert result.status == "failed" and "equal stages" in result.message, result.message
    assert run_checks("ex01_2", naive_utilization).passed
    # the first case is unequal, so the first failure shown is not the degenerate P = 1
    assert len(set(EXERCISES["ex01_2"].cases()[0]["stage_costs"])) > 1


@pytest.mark.parametrize("answer", [
    lambda tau, momentum: 2 * math.sin(math.pi / (2 * (2 * tau + 1))),  # the printed bound
    lambda tau, momentum: (2 * math.sin(math.pi / (2 * (2 * tau + 1)))) / (1 - momentum),
])
def test_ex06_3_the_printed_bound_no_longer_answers(answer):
    assert all(case["momentum"] > 0 for case in EXERCISES["ex06_3"].cases())
    result = run_checks("ex06_3", answer)
    assert result.status == "failed" and result.cases_passed == 0, result.message
    assert run_checks("ex06_3", max_stable_step).passed


def test_ex11_2_statement_leaves_the_trap_to_the_student():
    notebook = nbformat.read("chapters/11_real_processes.ipynb", as_version=4)
    statement = next(c.source for c in notebook.cells
                     if "Write `utilization_from_trace" in c.source)
    assert "begins" not in statement and "begin" not in statement
    # the trap is still in every case: no trace starts at 0
    for case in EXERCISES["ex11_2"].cases():
        assert min(e[2] for e in case["entries"]) > 0


# --- ex00_1, ex03_1: feedback that names the mistake made -------------------------------------


def test_ex00_1_updates_counted_are_named_as_counted():
    message = run_checks("ex00_1", lambda P, M: 2 * P * M + P).message
    assert "you counted the updates too" in message and "not counted" not in message


def test_ex03_1_backward_first_steady_state_is_named_as_such():
    def backward_first(P, M):
        rows = []
        for r in range(P):
            # the last rank has nothing to warm up, and its first backward needs a forward
            warmup = max(min(P - 1 - r, M), 1)
            row = [f"{r}F{m}" for m in range(warmup)]
            for k in range(M - warmup):  # the steady state with the pair reversed
                row += [f"{r}B{k}", f"{r}F{warmup + k}"]
            rows.append(row + [f"{r}B{m}" for m in range(M - warmup, M)])
        return rows

    message = run_checks("ex03_1", backward_first).message
    assert "steady state runs the backward before" in message, message
    assert run_checks("ex03_1", one_f_one_b_order).passed


# --- ex11_1: the update's spelling (second pass) ----------------------------------------------


def test_ex11_1_statement_spells_the_update_and_a_bare_u0_is_named():
    from tests.test_exercises_chapters import gpipe_comm_rows

    notebook = nbformat.read("chapters/11_real_processes.ipynb", as_version=4)
    statement = next(c.source for c in notebook.cells
                     if "Write `gpipe_comm_rows" in c.source)
    assert "`0U0` on rank 0" in statement and "then `U0`" not in statement

    def bare_update(P, N):  # the statement's old "then `U0`", taken literally
        return [row[:-1] + ["U0"] for row in gpipe_comm_rows(P, N)]

    result = run_checks("ex11_1", bare_update)
    assert result.status == "failed" and "stage first" in result.message, result.message
    assert run_checks("ex11_1", gpipe_comm_rows).passed


# --- ex08_2: reaching the bound counts (second pass) ------------------------------------------


def test_ex08_2_strictly_past_the_bound_is_named():
    from pipemare_lite.analysis.stage_lr import rescheduling_factor
    from pipemare_lite.analysis.theory import stability_bound
    from tests.test_exercises_chapters import first_update_outside

    def strictly_past(lr, lam, tau, horizon):  # ">" where the statement says reaching counts
        return next((k for k in range(horizon + 1)
                     if lr * rescheduling_factor(k, tau, horizon) * lam > stability_bound(tau)),
                    None)

    result = run_checks("ex08_2", strictly_past)
    assert result.status == "failed" and "reaching it counts" in result.message, result.message
    assert run_checks("ex08_2", first_update_outside).passed


# --- ex10_1, ex04_2: feedback that points at the mistake (second pass) ------------------------


def test_ex10_1_2bw_without_the_last_stages_copy_is_named():
    from tests.test_exercises_chapters import weight_memory_by_kind

    def two_bw_not_last(method, param_bytes, num_microbatches, optimizer):
        answer = weight_memory_by_kind(method, param_bytes, num_microbatches, optimizer)
        if method == "2bw":  # the reader's reasoning: the last stage's backward follows at once
            answer["stash"] -= param_bytes[-1]
        return answer

    result = run_checks("ex10_1", two_bw_not_last)
    assert result.status == "failed" and "last included" in result.message, result.message
    assert run_checks("ex10_1", weight_memory_by_kind).passed


def test_ex04_2_an_answer_without_v_is_told_so():
    message = run_checks("ex04_2", lambda P, M, v: (P - 1) / (M + P - 1)).message
    assert "does not depend on v" in message and "v changes nothing" not in message


def test_ex03_1_newest_backward_first_is_named():
    # written out here, not imported from ch03's `_newest_first_rows`: the checker refuses an
    # answer that calls the engine, so the wrong answer must be the student's own code
    def newest_first(P, M):  # a second-pass reader's wrong steady state: last in, first out
        rows = []
        for r in range(P):
            warmup = min(P - 1 - r, M)
            row, in_flight = [f"{r}F{m}" for m in range(warmup)], list(range(warmup))
            for m in range(warmup, M):
                in_flight.append(m)
                row += [f"{r}F{m}", f"{r}B{in_flight.pop()}"]
            rows.append(row + [f"{r}B{m}" for m in in_flight])
        return rows

    result = run_checks("ex03_1", newest_first)
    assert result.status == "failed" and "newest microbatch" in result.message, result.message


# --- ex05_1: feedback that says which saved tensor was missed (second pass) -------------------


def test_ex05_1_hooks_that_miss_views_are_told_so():
    def parameters_only(params, weights):  # a second-pass reader's wrong answer
        index = {id(p): i for i, p in enumerate(params)}
        return ((lambda t: ("p", index[id(t)]) if id(t) in index else t),
                (lambda x: weights[x[1]] if isinstance(x, tuple) else x))

    result = run_checks("ex05_1", parameters_only)
    assert result.status == "failed" and "not a view of one" in result.message, result.message
    result = run_checks("ex05_1", lambda params, weights: ((lambda t: t), (lambda t: t)))
    assert result.status == "failed" and "nothing reads" in result.message, result.message
