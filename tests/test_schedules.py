"""Builders: exact small orders derived by hand, the documented semantics, and bad input."""

from __future__ import annotations

import pytest

from pipemare_lite.analysis.simulate import simulate
from pipemare_lite.schedules import (
    SCHEDULE_NAMES,
    Action,
    ScheduleError,
    async_pipeline,
    build_schedule,
    gpipe,
    interleaved,
    naive,
    one_f_one_b,
    pipedream,
    two_bw,
    zb_h1,
)


def rows(schedule):
    return [" ".join(row) for row in schedule.rows()]


def test_gpipe_two_stages_by_hand():
    assert rows(gpipe(2, 3)) == [
        "0F0 0F1 0F2 0B0 0B1 0B2 0U0",
        "1F0 1F1 1F2 1B0 1B1 1B2 1U0",
    ]


def test_gpipe_second_minibatch_uses_global_indices():
    assert rows(gpipe(1, 2, num_minibatches=2)) == ["0F0 0F1 0B0 0B1 0U0 0F2 0F3 0B2 0B3 0U1"]


def test_one_f_one_b_three_stages_by_hand():
    # stage s: P-1-s warm-up forwards, then F/B pairs, then the backwards still owed
    assert rows(one_f_one_b(3, 4)) == [
        "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3 0U0",
        "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3 1U0",
        "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3 2U0",
    ]


def test_one_f_one_b_clamps_warmup_and_says_so():
    schedule = one_f_one_b(4, 2)
    assert rows(schedule)[0] == "0F0 0F1 0B0 0B1 0U0"
    assert any("clamped" in note for note in schedule.notes)
    assert one_f_one_b(4, 8).notes == ()


def test_naive_keeps_one_microbatch_in_flight():
    timeline = simulate(naive(3, 4))
    entries = sorted((e for e in timeline.entries if e.end > e.start), key=lambda e: e.start)
    for before, after in zip(entries, entries[1:]):
        assert after.start >= before.end  # never two ranks busy at once
    assert rows(naive(2, 2))[0] == "0F0 0B0 0F1 0B1 0U0"


def test_zb_h1_defers_stage_many_weight_gradients():
    schedule = zb_h1(4, 6)
    for stage, row in enumerate(schedule.ranks):
        kinds = [a.kind for a in row if a.kind != "U"]
        # after its last I the stage runs the W that I allows plus the `stage` it deferred
        last_i = max(i for i, k in enumerate(kinds) if k == "I")
        assert kinds[last_i + 1 :] == ["W"] * (stage + 1)
        assert [a.kind for a in row].count("B") == 0


def test_interleaved_places_virtual_stages_megatron_style():
    schedule = interleaved(2, 4, chunks=2)
    for rank, row in enumerate(schedule.ranks):
        assert {a.stage for a in row} == {rank, rank + 2}
    # chunk order for rank 0: P microbatches through chunk 0, then the same through chunk 1
    forwards = [str(a) for a in schedule.ranks[0] if a.kind == "F"]
    assert forwards == ["0F0", "0F1", "2F0", "2F1", "0F2", "0F3", "2F2", "2F3"]


def test_interleaved_with_one_chunk_is_one_f_one_b():
    assert interleaved(3, 6, chunks=1).ranks == one_f_one_b(3, 6).ranks


def test_interleaved_requires_multiple_of_stages():
    with pytest.raises(
        ScheduleError, match=r"num_microbatches=6 must be a multiple of num_ranks=4"
    ):
        interleaved(4, 6, chunks=2)


def lock_step_ticks(P, N, K):
    """Independent reference: the tick of every async action, from the PipeMare definition."""
    ticks = {}
    for m in range(N * K):
        for i in range(P):
            ticks[Action(i, "F", m)] = m + i
            ticks[Action(i, "B", m)] = m + 2 * P - 1 - i
    return ticks


@pytest.mark.parametrize("P,N,K", [(1, 1, 3), (3, 2, 3), (4, 3, 2), (5, 1, 6)])
def test_async_follows_lock_step_ticks(P, N, K):
    ticks = lock_step_ticks(P, N, K)
    schedule = async_pipeline(P, N, K)
    for row in schedule.ranks:
        work = [a for a in row if a.kind != "U"]
        # rank order = tick order, and inside a tick F before B
        keys = [(ticks[a], 0 if a.kind == "F" else 1) for a in work]
        assert keys == sorted(keys)
        assert len(work) == 2 * N * K
    for m in range(N * K):  # the last stage's B comes one tick after its F
        assert ticks[Action(P - 1, "B", m)] - ticks[Action(P - 1, "F", m)] == 1


def test_async_updates_follow_the_backward_that_completes_a_group():
    schedule = async_pipeline(3, 2, 3)
    for row in schedule.ranks:
        for position, a in enumerate(row):
            if a.kind == "U":
                previous = row[position - 1]
                assert previous.kind == "B" and previous.index == 2 * a.index + 1


def test_pipedream_has_no_flush_and_updates_after_completing_backward():
    schedule = pipedream(3, 2, num_minibatches=3)
    row0 = [str(a) for a in schedule.ranks[0]]
    # stage 0 starts minibatch 1 (microbatch 2) before its first update: no flush
    assert row0.index("0F2") < row0.index("0U0")
    for row in schedule.ranks:
        for position, a in enumerate(row):
            if a.kind == "U":
                assert row[position - 1] == Action(a.stage, "B", 2 * a.index + 1)
    assert schedule.weight_mode == "stash"


def test_pipedream_with_one_microbatch_updates_after_every_backward():
    schedule = pipedream(4, 1, num_minibatches=6)
    for stage, row in enumerate(schedule.ranks):
        kinds = "".join(a.kind for a in row)
        assert kinds.count("U") == 6
        assert kinds.startswith("F" * (4 - stage))  # warm-up P-1-s forwards, then one more


def test_two_bw_order_equals_pipedream_and_requires_enough_microbatches():
    assert two_bw(4, 3, 3).ranks == pipedream(4, 3, 3).ranks
    assert two_bw(4, 3, 3).weight_mode == "2bw"
    with pytest.raises(ScheduleError, match=r"num_microbatches >= P-1 = 4"):
        two_bw(5, 3, 3)


@pytest.mark.parametrize("name", ["pipedream", "2bw", "async"])
def test_warmup_minibatches_are_flushed_one_f_one_b(name):
    P, M, K, W = 3, 4, 4, 2
    schedule = build_schedule(name, P, M, num_minibatches=K, warmup=W)
    flushed = one_f_one_b(P, M, num_minibatches=W)
    for row, reference in zip(schedule.ranks, flushed.ranks):
        assert row[: len(reference)] == reference
    assert schedule.warmup == W


@pytest.mark.parametrize("name", SCHEDULE_NAMES)
def test_every_name_builds_with_its_weight_mode(name):
    expected = {"pipedream": "stash", "2bw": "2bw", "async": "async"}.get(name, "sync")
    schedule = build_schedule(name, 4, 8, num_minibatches=2)
    assert schedule.name == name and schedule.weight_mode == expected
    for rank, row in enumerate(schedule.ranks):
        updates = [a for a in row if a.kind == "U"]
        assert updates == [Action(s, "U", k) for k in range(2) for s in schedule.stages_of(rank)]


def test_pipemare_is_an_alias_of_async():
    assert build_schedule("pipemare", 3, 2, num_minibatches=2) == build_schedule(
        "async", 3, 2, num_minibatches=2
    )


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"name": "gpipes"}, r"unknown schedule name 'gpipes'; allowed: naive, gpipe"),
        ({"num_ranks": 0}, r"num_ranks=0 is out of range; allowed: integers 1\.\.1024"),
        ({"num_microbatches": -1}, r"num_microbatches=-1 is out of range; allowed: integers 1\."),
        ({"num_microbatches": 2.5}, r"num_microbatches=2\.5 is a float; give an integer in 1\."),
        ({"num_minibatches": 0}, r"num_minibatches=0 is out of range"),
        ({"chunks": 2}, r"chunks=2 only applies to 'interleaved'"),
        ({"warmup": 1}, r"warmup=1 only applies to pipedream, 2bw, async"),
        (
            {"name": "async", "warmup": 3},
            r"warmup=3 is out of range; allowed: integers 0\.\.2",
        ),
        (
            {"name": "interleaved", "chunks": 0},
            r"chunks=0 is out of range; allowed: integers 1\.\.64",
        ),
    ],
)
def test_bad_requests_name_the_value_and_the_allowed_range(kwargs, pattern):
    args = {"name": "gpipe", "num_ranks": 4, "num_microbatches": 8, "num_minibatches": 2}
    args.update(kwargs)
    name, P, M = args.pop("name"), args.pop("num_ranks"), args.pop("num_microbatches")
    with pytest.raises(ScheduleError, match=pattern):
        build_schedule(name, P, M, **args)


def test_schedule_error_is_a_value_error():
    assert issubclass(ScheduleError, ValueError)


@pytest.mark.parametrize(
    "name,P,M,K,W,clamped",
    [
        ("pipedream", 5, 1, 2, 0, True),  # 2 async microbatches < P-1 = 4
        ("pipedream", 3, 1, 4, 0, False),
        ("async", 5, 2, 2, 1, True),  # the flushed warm-up minibatch has M = 2 < 4
        ("async", 5, 2, 2, 0, False),  # lock-step has no 1F1B warm-up to clamp
        ("zb-h1", 5, 2, 1, 0, True),
        ("gpipe", 5, 2, 1, 0, False),
    ],
)
def test_clamped_warmups_are_never_silent(name, P, M, K, W, clamped):
    schedule = build_schedule(name, P, M, num_minibatches=K, warmup=W)
    assert any("clamped" in note for note in schedule.notes) == clamped
