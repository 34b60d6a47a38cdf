"""Memory model: small hand-checked profiles, closed forms, and a brute-force reference walk."""

from __future__ import annotations

import pytest

from pipemare_lite.analysis.memory import (
    KINDS,
    MemoryProfile,
    memory_by_kind,
    peak_stash_copies,
    stash_over_pipemare_ratio,
)
from pipemare_lite.schedules import Action, Schedule
from pipemare_lite.schedules.registry import build_schedule


def _uniform(P, params=100, activations=10, optimizer="sgd"):
    return MemoryProfile([params] * P, [activations] * P, optimizer)


def _brute_force_stash_copies(schedule):
    """Per stage, the largest number of distinct non-current versions read by in-flight
    microbatches, recomputed from scratch after every action (PipeDream stash semantics)."""
    peaks = []
    for row in schedule.ranks:
        peak = 0
        for end in range(1, len(row) + 1):
            prefix = row[:end]
            current = sum(1 for a in prefix if a.kind == "U")
            versions = set()
            for i, a in enumerate(prefix):
                done = any(b.kind in "BW" and b.index == a.index for b in prefix[i:])
                if a.kind == "F" and not done:
                    versions.add(sum(1 for b in prefix[:i] if b.kind == "U"))
            peak = max(peak, len(versions - {current}))
        peaks.append(peak)
    return peaks


def _brute_force_2bw_copies(schedule):
    """Per stage, the largest number of distinct versions other than the current one that a
    microbatch not yet through its B still reads (minibatch k reads max(k-1, 0))."""
    N = schedule.num_microbatches
    peaks = []
    for row in schedule.ranks:
        microbatches = {a.index for a in row if a.kind == "F"}
        peak = 0
        for end in range(1, len(row) + 1):
            prefix = row[:end]
            current = sum(1 for a in prefix if a.kind == "U")
            done = {a.index for a in prefix if a.kind == "B"}
            reads = {max(m // N - 1, 0) for m in microbatches - done}
            peak = max(peak, len({v for v in reads if v < current}))
        peaks.append(peak)
    return peaks


@pytest.mark.parametrize("P, N, K, W", [(2, 2, 4, 0), (3, 2, 5, 1), (4, 3, 4, 0), (4, 5, 3, 2)])
def test_2bw_matches_brute_force_walk(P, N, K, W):
    schedule = build_schedule("2bw", P, N, num_minibatches=K, warmup=W)
    assert peak_stash_copies(schedule) == _brute_force_2bw_copies(schedule)


@pytest.mark.parametrize("P, N, K", [(2, 1, 4), (3, 1, 6), (4, 1, 8), (4, 2, 5), (3, 3, 4)])
def test_stash_matches_brute_force_walk(P, N, K):
    schedule = build_schedule("pipedream", P, N, num_minibatches=K)
    assert peak_stash_copies(schedule) == _brute_force_stash_copies(schedule)


@pytest.mark.parametrize("P", [1, 2, 3, 4, 6])
def test_pipedream_per_microbatch_stashes_p_minus_1_minus_s_copies(P):
    # In 1F1B stage s has P-s microbatches in flight, each on its own version (one update
    # per microbatch), one of which is current.
    schedule = build_schedule("pipedream", P, 1, num_minibatches=2 * P + 1)
    assert peak_stash_copies(schedule) == [P - 1 - s for s in range(P)]


@pytest.mark.parametrize("P, N", [(2, 2), (3, 4), (4, 4), (4, 3)])
def test_2bw_holds_one_extra_copy_async_and_sync_none(P, N):
    assert peak_stash_copies(build_schedule("2bw", P, N, num_minibatches=4)) == [1] * P
    assert peak_stash_copies(build_schedule("async", P, N, num_minibatches=4)) == [0] * P
    assert peak_stash_copies(build_schedule("1f1b", P, N, num_minibatches=3)) == [0] * P


@pytest.mark.parametrize("P, M", [(2, 4), (4, 4), (4, 8), (4, 2), (3, 5)])
def test_activation_peaks_match_closed_forms(P, M):
    profile = _uniform(P, activations=7)
    gpipe = memory_by_kind(build_schedule("gpipe", P, M), profile)
    assert [d["activations"] for d in gpipe] == [7 * M] * P  # all M in flight
    one_f_one_b = memory_by_kind(build_schedule("1f1b", P, M), profile)
    assert [d["activations"] for d in one_f_one_b] == [7 * min(P - s, M) for s in range(P)]


def test_activations_agree_with_simulator_peak_inflight():
    from pipemare_lite.analysis import simulate

    cases = [(n, {}) for n in ("naive", "gpipe", "1f1b", "zb-h1", "pipedream", "2bw", "async")]
    cases += [("interleaved", {"chunks": 2}), ("async", {"warmup": 1})]
    for name, options in cases:
        schedule = build_schedule(name, 4, 8, num_minibatches=3, **options)
        inflight = simulate.metrics(simulate.simulate(schedule)).peak_inflight
        ones = MemoryProfile([0] * schedule.num_virtual_stages, [1] * schedule.num_virtual_stages)
        ours = [d["activations"] for d in memory_by_kind(schedule, ones)]
        assert ours == list(inflight), (name, options)


def test_hand_checked_two_stage_profile():
    # P=2, PipeDream with per-microbatch updates: stage 0 stashes one copy of its 100 bytes.
    profile = MemoryProfile([100, 300], [8, 2], "adam")
    pipedream = memory_by_kind(build_schedule("pipedream", 2, 1, num_minibatches=4), profile)
    assert pipedream[0] == {
        "weights": 100,
        "stash": 100,
        "t2_buffer": 0,
        "optimizer": 200,
        "activations": 16,  # two microbatches in flight on stage 0
        "total": 416,
        "peak_total": 416,
    }
    assert pipedream[1]["stash"] == 0 and pipedream[1]["activations"] == 2
    pipemare = memory_by_kind(build_schedule("async", 2, 1, num_minibatches=4), profile, t2=True)
    assert [d["t2_buffer"] for d in pipemare] == [100, 300]
    assert [d["stash"] for d in pipemare] == [0, 0]
    # (100+100+200 + 300+0+600) / (100+200+100 + 300+600+300) = 1300 / 1600
    assert stash_over_pipemare_ratio(
        profile,
        build_schedule("pipedream", 2, 1, num_minibatches=4),
        build_schedule("async", 2, 1, num_minibatches=4),
    ) == pytest.approx(1300 / 1600)


@pytest.mark.parametrize("P", [2, 4, 8])
@pytest.mark.parametrize(
    "optimizer, closed_form",
    [
        # uniform stages: sum_s (1 + states + P-1-s) / sum_s (1 + states + 1)
        ("sgd", lambda P: (P + 1) / 4),
        ("momentum", lambda P: (P + 3) / 6),
        ("adam", lambda P: (P + 5) / 8),
    ],
)
def test_stash_over_pipemare_ratio_closed_form(P, optimizer, closed_form):
    profile = _uniform(P, optimizer=optimizer)
    pipedream = build_schedule("pipedream", P, 1, num_minibatches=2 * P + 1)
    pipemare = build_schedule("async", P, 1, num_minibatches=2 * P + 1)
    assert stash_over_pipemare_ratio(profile, pipedream, pipemare) == pytest.approx(closed_form(P))


def test_optimizer_state_in_its_own_dtype():
    # bf16 parameters (2 bytes) with fp32 Adam state: 2 states x 50 elements x 4 bytes
    profile = MemoryProfile([100], [0], "adam", param_dtype_bytes=2, state_dtype_bytes=4)
    assert profile.optimizer_bytes(0) == 400
    counted = MemoryProfile.from_counts([25], [3], "momentum", dtype_bytes=4)
    assert counted.param_bytes == [100] and counted.optimizer_bytes(0) == 100


def test_totals_and_interleaved_ranks_add_their_virtual_stages():
    schedule = build_schedule("interleaved", 2, 4, chunks=2, num_minibatches=2)
    profile = MemoryProfile([1, 2, 3, 4], [10, 20, 30, 40], "sgd")
    result = memory_by_kind(schedule, profile)
    assert [d["weights"] for d in result] == [1 + 3, 2 + 4]  # rank r holds stages r and r+2
    for d in result:
        assert d["total"] == sum(d[k] for k in KINDS)
        assert d["peak_total"] <= d["total"]


def test_a_rank_peak_can_be_below_the_sum_of_peaks():
    # activations peak before the update, the stash only after it
    rows = (tuple(Action.parse(a) for a in "0F0 0F1 0B0 0U0 0B1 0U1".split()),)
    schedule = Schedule("custom", 1, 1, ranks=rows, num_minibatches=2, weight_mode="stash")
    d = memory_by_kind(schedule, MemoryProfile([100], [10]))[0]
    assert (d["stash"], d["activations"]) == (100, 20)
    assert d["peak_total"] == 100 + 100 + 10 and d["total"] == 100 + 100 + 20


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(param_bytes=[1], activation_bytes=[1], optimizer="lion"), "unknown optimizer 'lion'"),
        (dict(param_bytes=[1, 2], activation_bytes=[1]), "param_bytes has 2 stages"),
        (dict(param_bytes=[-1], activation_bytes=[1]), "non-negative integers, got -1"),
        (dict(param_bytes=[1], activation_bytes=[1], state_dtype_bytes=3), "got 3"),
    ],
)
def test_bad_profiles_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MemoryProfile(**kwargs)


def test_bad_calls_are_rejected():
    with pytest.raises(ValueError, match="profile has 3 stages"):
        memory_by_kind(build_schedule("1f1b", 2, 2), _uniform(3))
    with pytest.raises(ValueError, match="t2=True needs an 'async' schedule"):
        memory_by_kind(build_schedule("pipedream", 2, 2), _uniform(2), t2=True)
    with pytest.raises(ValueError, match="must stash weights"):
        stash_over_pipemare_ratio(
            _uniform(2), build_schedule("1f1b", 2, 2), build_schedule("async", 2, 2)
        )


def test_a_microbatch_without_backward_keeps_its_stash():
    rows = (tuple(Action.parse(a) for a in "0F0 0U0 0F1 0B1 0U1".split()),)
    schedule = Schedule("custom", 1, 1, ranks=rows, num_minibatches=2, weight_mode="stash")
    d = memory_by_kind(schedule, MemoryProfile([100], [10]))[0]
    assert (d["stash"], d["activations"]) == (100, 20)  # version 0 for microbatch 0, forever
