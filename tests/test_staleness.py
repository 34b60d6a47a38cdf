"""Staleness analysis: hand-built schedules checked by hand, builders checked against closed forms.

Closed forms are compared in the steady state: the warm-up minibatches, the first
asynchronous minibatches (the pipeline fills and there are no older versions yet) and the
last minibatch (it drains) are left out there; a separate test covers the whole run with the
clamped form ``min(exact, k - W)``.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipemare_lite.analysis.staleness import (
    exact_forward_delay,
    expected_forward_delay,
    microbatch_path,
    stage_delays,
    steady_state_minibatches,
    weight_versions,
)
from pipemare_lite.schedules import Action, Schedule, async_pipeline
from pipemare_lite.schedules.registry import build_schedule


def _schedule(rows, name, num_microbatches, num_minibatches, weight_mode):
    ranks = tuple(tuple(Action.parse(a) for a in row.split()) for row in rows)
    return Schedule(
        name,
        len(rows),
        num_microbatches,
        ranks=ranks,
        num_minibatches=num_minibatches,
        weight_mode=weight_mode,
    )


# PipeDream, P=2, one microbatch per update, three minibatches (1F1B with no flush).
PIPEDREAM_ROWS = ["0F0 0F1 0B0 0U0 0F2 0B1 0U1 0B2 0U2", "1F0 1B0 1U0 1F1 1B1 1U1 1F2 1B2 1U2"]


def test_hand_built_pipedream_versions():
    table = weight_versions(_schedule(PIPEDREAM_ROWS, "pipedream", 1, 3, "stash"))
    # stage 0: F1 runs before U0 -> version 0, its gradient is applied by U1 (to version 1)
    row = table.row(0, 1)
    assert (row.version_at_forward, row.version_at_backward, row.version_applied) == (0, 0, 1)
    assert (row.forward_delay, row.backward_delay, row.discrepancy) == (1, 1, 0)
    assert table.matrix("forward_delay") == [[0, 1, 1], [0, 0, 0]]


def test_same_order_without_stash_has_a_discrepancy():
    table = weight_versions(_schedule(PIPEDREAM_ROWS, "async", 1, 3, "async"))
    row = table.row(0, 1)  # F1 at version 0, B1 after U0 -> reads version 1
    assert (row.version_at_forward, row.version_at_backward) == (0, 1)
    assert (row.forward_delay, row.backward_delay, row.discrepancy) == (1, 0, 1)
    assert table.matrix("discrepancy") == [[0, 1, 1], [0, 0, 0]]


def test_split_backward_reads_the_version_current_at_input_grad():
    # the update of minibatch 0 lands between I and W of microbatch 1 on purpose
    rows = ["0F0 0F1 0I0 0W0 0U0 0I1 0W1 0U1"]
    table = weight_versions(_schedule(rows, "custom", 1, 2, "async"))
    row = table.row(0, 1)
    assert row.version_at_backward == 1  # current at I, not at W
    assert row.version_applied == 1  # the first update after W


def test_missing_update_leaves_applied_undefined():
    table = weight_versions(_schedule(["0F0 0B0"], "custom", 1, 1, "sync"))
    row = table.row(0, 0)
    assert row.version_applied is None and row.forward_delay is None
    assert stage_delays(table)[0].count == 0


@pytest.mark.parametrize(
    "rows, message",
    [
        (["0B0 0F0 0U0"], "before its forward"),
        (["0F0 0F0 0B0 0U0"], "appears twice"),
        (["0F0 0B0 0U1"], "expected 0U0"),
        (["0F0 0W0 0U0"], "before its input gradient"),
    ],
)
def test_impossible_bookkeeping_is_reported(rows, message):
    with pytest.raises(ValueError, match=message):
        weight_versions(_schedule(rows, "custom", 1, 1, "sync"))


def test_2bw_version_not_held_is_reported():
    # minibatch 3 needs version 2, but the stage has updated 4 times (holds 3 and 4)
    rows = ["0F0 0B0 0U0 0F1 0B1 0U1 0F2 0B2 0U2 0U3 0F3 0B3"]
    with pytest.raises(ValueError, match="needs version 2"):
        weight_versions(_schedule(rows, "2bw", 1, 4, "2bw"))


def test_matrix_rejects_unknown_quantity_and_path_unknown_microbatch():
    table = weight_versions(_schedule(PIPEDREAM_ROWS, "pipedream", 1, 3, "stash"))
    with pytest.raises(ValueError, match="unknown quantity 'delay'"):
        table.matrix("delay")
    with pytest.raises(ValueError, match="microbatch 7"):
        microbatch_path(table, 7)


def test_microbatch_path_lists_every_stage_in_order():
    schedule = build_schedule("async", 3, 2, num_minibatches=4)
    path = microbatch_path(schedule, 4)
    assert [r.stage for r in path] == [0, 1, 2]
    table = weight_versions(schedule)
    assert path == [table.row(s, 4) for s in range(3)]


@pytest.mark.parametrize("name", ["naive", "gpipe", "1f1b", "zb-h1"])
@pytest.mark.parametrize("P, M", [(1, 1), (2, 3), (4, 4), (4, 8), (5, 2)])
def test_sync_schedules_have_no_staleness(name, P, M):
    table = weight_versions(build_schedule(name, P, M, num_minibatches=3))
    for row in table.rows:
        assert (row.forward_delay, row.backward_delay, row.discrepancy) == (0, 0, 0)
        assert row.version_applied == row.minibatch
    assert expected_forward_delay(name, P, M, 0) == 0


@pytest.mark.parametrize("P, M, v", [(2, 4, 2), (4, 8, 2), (3, 6, 3)])
def test_interleaved_has_no_staleness_on_any_virtual_stage(P, M, v):
    table = weight_versions(build_schedule("interleaved", P, M, chunks=v, num_minibatches=2))
    assert len(table.matrix()) == P * v
    assert all(r.forward_delay == 0 and r.discrepancy == 0 for r in table.rows)


def _steady_rows(schedule):
    chosen = set(steady_state_minibatches(schedule))
    return [r for r in weight_versions(schedule).rows if r.minibatch in chosen]


GRID = [(P, N) for P in (1, 2, 3, 4, 6) for N in (1, 2, 3, 4, 7)]


def _minibatches_for(P, N):
    return math.ceil((2 * P - 1) / N) + 3  # fill + at least two steady minibatches + drain


@pytest.mark.parametrize("P, N", GRID)
@pytest.mark.parametrize("warmup", [0, 2])
def test_async_matches_lock_step_formula(P, N, warmup):
    schedule = build_schedule(
        "async", P, N, num_minibatches=_minibatches_for(P, N) + warmup, warmup=warmup
    )
    rows = _steady_rows(schedule)
    assert rows, "the grid must leave a steady state to compare"
    for r in rows:
        recalled = math.ceil((2 * (P - (r.stage + 1)) + 1) / N)  # pipemare-notes.md, 1-indexed
        assert recalled - 1 <= r.forward_delay <= recalled  # the recalled +-1 band
        j = r.microbatch % N
        assert r.forward_delay == exact_forward_delay("async", P, N, r.stage, j)
        assert r.forward_delay == expected_forward_delay("pipemare", P, N, r.stage, position=j)
        assert r.forward_delay == math.ceil((2 * (P - r.stage) - 1 - j) / N)  # derivation
        assert r.backward_delay == 0  # no stash: the backward reads the current weights
        assert r.discrepancy == r.forward_delay
        assert expected_forward_delay("async", P, N, r.stage) == recalled


@pytest.mark.parametrize("P, N", GRID)
@pytest.mark.parametrize("warmup", [0, 1])
def test_async_whole_run_is_the_clamped_formula(P, N, warmup):
    """Outside the steady state the delay is capped by the updates made since the warm-up."""
    K = _minibatches_for(P, N) + warmup
    schedule = build_schedule("async", P, N, num_minibatches=K, warmup=warmup)
    for r in weight_versions(schedule).rows:
        if r.minibatch < warmup:
            assert r.forward_delay == 0 and r.discrepancy == 0
        else:
            exact = exact_forward_delay("async", P, N, r.stage, r.microbatch % N)
            assert r.forward_delay == min(exact, r.minibatch - warmup)


@pytest.mark.parametrize("P", [1, 2, 3, 4, 6, 8])
def test_pipedream_per_microbatch_updates_delay_is_p_minus_1_minus_s(P):
    schedule = build_schedule("pipedream", P, 1, num_minibatches=2 * P + 2)
    rows = _steady_rows(schedule)
    assert rows
    for r in rows:
        assert r.forward_delay == P - 1 - r.stage
        assert r.backward_delay == r.forward_delay  # stash: B reads the forward's copy
        assert r.discrepancy == 0
        assert expected_forward_delay("pipedream", P, 1, r.stage) == P - 1 - r.stage


@pytest.mark.parametrize("P, N", GRID)
def test_pipedream_with_larger_minibatches_matches_exact_formula(P, N):
    schedule = build_schedule("pipedream", P, N, num_minibatches=_minibatches_for(P, N))
    for r in _steady_rows(schedule):
        recalled = expected_forward_delay("pipedream", P, N, r.stage)
        assert recalled - 1 <= r.forward_delay <= recalled
        assert r.forward_delay == exact_forward_delay("pipedream", P, N, r.stage, r.microbatch % N)


@pytest.mark.parametrize("P, N", [(2, 2), (3, 2), (3, 4), (4, 4), (4, 3), (5, 8)])
@pytest.mark.parametrize("warmup", [0, 1])
def test_2bw_delay_is_one_after_the_first_minibatch(P, N, warmup):
    K = 5 + warmup
    table = weight_versions(
        build_schedule("2bw", P, N, num_minibatches=K, warmup=warmup)
    )
    for r in table.rows:
        assert r.version_at_forward == max(r.minibatch - 1, 0)
        assert r.forward_delay == (0 if r.minibatch == 0 else 1)
        assert r.discrepancy == 0
    assert expected_forward_delay("2bw", P, N, 0) == 1


def test_stage_delays_summarize_the_table():
    schedule = build_schedule("async", 4, 2, num_minibatches=10)
    steady = steady_state_minibatches(schedule)
    delays = stage_delays(schedule, minibatches=steady)
    table = weight_versions(schedule)
    for d in delays:
        xs = [table.row(d.stage, m).forward_delay for m in range(20) if m // 2 in steady]
        assert d.count == len(xs)
        assert d.mean_forward_delay == pytest.approx(sum(xs) / len(xs))
        assert (d.min_forward_delay, d.max_forward_delay) == (min(xs), max(xs))
        assert d.mean_backward_delay == 0
        assert d.as_dict()["mean_discrepancy"] == d.mean_discrepancy
    # the first stage is the stalest
    means = [d.mean_forward_delay for d in delays]
    assert means == sorted(means, reverse=True) and means[0] > means[-1]


def test_closed_forms_reject_bad_input():
    with pytest.raises(ValueError, match="stage 4 out of range"):
        expected_forward_delay("async", 4, 2, 4)
    with pytest.raises(ValueError, match="no closed form for schedule 'foo'"):
        expected_forward_delay("foo", 4, 2, 0)
    with pytest.raises(ValueError, match="position 2 out of range"):
        exact_forward_delay("async", 4, 2, 0, 2)
    with pytest.raises(TypeError, match="got int"):
        stage_delays(3)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["naive", "gpipe", "1f1b", "zb-h1", "pipedream", "2bw", "async"]),
    P=st.integers(1, 5),
    M=st.integers(1, 6),
    K=st.integers(1, 5),
    W=st.integers(0, 2),
)
def test_any_builder_gives_sane_versions(name, P, M, K, W):
    """Every gradient is applied, to a version no older than the ones it read."""
    if name == "2bw" and M < P - 1:
        M = P - 1 or 1  # the builder requires it (two versions only)
    warmup = min(W, K) if name in ("pipedream", "2bw", "async") else 0
    schedule = build_schedule(name, P, M, num_minibatches=K, warmup=warmup)
    table = weight_versions(schedule)
    assert len(table.rows) == P * M * K
    for r in table.rows:
        assert r.version_applied == r.minibatch  # one update per minibatch, in order
        assert r.forward_delay >= 0 and r.backward_delay >= 0 and r.discrepancy >= 0
        if schedule.weight_mode != "async":
            assert r.discrepancy == 0
        if r.minibatch < warmup and name != "2bw":
            assert r.forward_delay == 0


def _tick_reference_delay(P, N, K, stage, m, backward_first):
    """Forward delay from tick numbers alone (independent of the builder): F(m) at tick
    m + s, B(m) at tick m + 2P-1-s, update j in the tick of B((j+1)N - 1); an update of the
    same tick precedes F only when backward comes first."""
    forward_tick = m + stage
    update_ticks = [(j + 1) * N - 1 + 2 * P - 1 - stage for j in range(K)]
    seen = sum(t < forward_tick or (backward_first and t == forward_tick) for t in update_ticks)
    return m // N - seen  # the gradient of minibatch k = m // N is applied to version k


@pytest.mark.parametrize("P, N", GRID)
def test_backward_first_tick_order_shortens_the_gap_by_one_slot(P, N):
    K = _minibatches_for(P, N)
    first = async_pipeline(P, N, K, backward_first=True)
    usual = async_pipeline(P, N, K)
    assert first.notes and "before F" in first.notes[-1] and not usual.notes
    # the same actions on every rank, only each tick's F moved after its B (and U)
    assert [sorted(map(str, r)) for r in first.ranks] == [sorted(map(str, r)) for r in usual.ranks]
    steady = set(steady_state_minibatches(first))
    by_key = {(r.stage, r.microbatch): r for r in weight_versions(usual).rows}
    for r in weight_versions(first).rows:
        if r.minibatch not in steady:
            continue
        j = r.microbatch % N
        assert r.forward_delay == _tick_reference_delay(P, N, K, r.stage, r.microbatch, True)
        assert r.forward_delay == exact_forward_delay("async", P, N, r.stage, j,
                                                      backward_first=True)
        before = by_key[(r.stage, r.microbatch)].forward_delay
        assert before == _tick_reference_delay(P, N, K, r.stage, r.microbatch, False)
        # one slot shorter: one update fewer exactly when N divides the shorter gap - j
        shorter_gap = 2 * (P - r.stage) - 2
        assert before - r.forward_delay == (1 if (shorter_gap - j) % N == 0 else 0)
    if N == 1:
        assert all(r.forward_delay == 2 * (P - r.stage) - 2
                   for r in weight_versions(first).rows if r.minibatch in steady)


def test_backward_first_is_refused_outside_the_lock_step_schedule():
    with pytest.raises(ValueError, match="backward_first applies to the lock-step 'async'"):
        exact_forward_delay("pipedream", 4, 2, 0, 0, backward_first=True)
    with pytest.raises(ValueError, match="backward_first='yes': allowed: True or False"):
        async_pipeline(2, 2, 2, backward_first="yes")
