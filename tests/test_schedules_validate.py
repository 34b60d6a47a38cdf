"""validate(): malformed and impossible schedules give errors that say what is wrong."""

from __future__ import annotations

import pytest

from pipemare_lite.schedules import Action, Schedule, ScheduleError, gpipe, validate


def custom(rows, N, K=1, **kwargs):
    ranks = tuple(tuple(Action.parse(a) for a in row.split()) for row in rows)
    return Schedule(name=kwargs.pop("name", "custom"), num_ranks=len(rows),
                    num_microbatches=N, ranks=ranks, num_minibatches=K, **kwargs)  # fmt: skip


def test_a_built_schedule_is_returned_unchanged():
    schedule = gpipe(3, 4)
    assert validate(schedule) is schedule


def test_hand_written_one_f_one_b_is_accepted():
    validate(custom(["0F0 0F1 0B0 0B1 0U0", "1F0 1B0 1F1 1B1 1U0"], N=2))


@pytest.mark.parametrize(
    "rows,M,pattern",
    [
        (["0F0 0B0 0U0", "1F0 1B0"], 1, r"missing 1U0"),
        (["0F0 0B0 0U0", "1F0 1U0"], 1, r"missing 1B0 on rank 1"),
        (["0F0 0F0 0B0 0U0", "1F0 1B0 1U0"], 1, r"rank 0 position 1: 0F0 appears twice"),
        (["0F0 0B0 0U0 1F0", "1B0 1U0"], 1, r"1F0 belongs on rank 1"),
        (["0F0 0B0 0U0", "1F0 1B0 1U0 1F1"], 1, r"names microbatch 1; allowed: 0\.\.0"),
        (["0F0 0B0 0U0 0U1", "1F0 1B0 1U0"], 1, r"is update 1; allowed: 0\.\.0"),
        (["0F0 0I0 0W0 0U0", "1F0 1B0 1U0"], 1, r"all B or all I\+W"),
        (["0F0 0I0 0U0", "1F0 1I0 1W0 1U0"], 1, r"missing 0W0 on rank 0 \(the schedule splits"),
    ],
)
def test_incomplete_or_misplaced_actions(rows, M, pattern):
    with pytest.raises(ScheduleError, match=pattern):
        validate(custom(rows, M))


def test_update_before_its_gradients():
    with pytest.raises(ScheduleError, match=r"0U0 comes after 1 of the 2 gradients of minibatch 0"):
        validate(custom(["0F0 0F1 0B0 0U0 0B1", "1F0 1F1 1B0 1B1 1U0"], N=2))


def test_gradient_of_next_minibatch_before_update():
    rows = ["0F0 0F1 0B0 0B1 0U0 0U1", "1F0 1B0 1F1 1B1 1U0 1U1"]
    with pytest.raises(ScheduleError, match=r"0B1 is a gradient of minibatch 1 but stage 0 has"):
        validate(custom(rows, N=1, K=2, weight_mode="async"))


def test_sync_schedule_must_flush():
    # the F of minibatch 1 on rank 0 runs before rank 0's update 0
    rows = ["0F0 0F1 0B0 0U0 0B1 0U1", "1F0 1B0 1U0 1F1 1B1 1U1"]
    with pytest.raises(
        ScheduleError, match=r"0F1 starts minibatch 1 before rank 0 applied update 0"
    ):
        validate(custom(rows, N=1, K=2, weight_mode="sync"))
    validate(custom(rows, N=1, K=2, weight_mode="async"))  # allowed without a flush


def test_two_bw_needs_the_version_two_updates_back():
    # stage 0 starts minibatch 2 before its update 0: version 1 does not exist yet
    rows = ["0F0 0F1 0F2 0B0 0U0 0B1 0U1 0B2 0U2", "1F0 1B0 1U0 1F1 1B1 1U1 1F2 1B2 1U2"]
    with pytest.raises(ScheduleError, match=r"2BW runs minibatch 2 on version 1"):
        validate(custom(rows, N=1, K=3, weight_mode="2bw"))
    validate(custom(rows, N=1, K=3, weight_mode="stash"))


def test_backward_before_its_forward_on_the_same_rank_is_a_deadlock():
    with pytest.raises(ScheduleError) as info:
        validate(custom(["0F0 0B0 0U0", "1B0 1F0 1U0"], N=1))
    message = str(info.value)
    assert "deadlocks" in message
    assert "rank 1 at 1B0 (position 0) waits for 1F0 which comes later on the same rank" in message
    assert "rank 0 at 0B0 (position 1) waits for 1B0 on rank 1" in message


def test_cross_rank_deadlock_names_each_blocked_rank():
    # rank 0 wants 1B0 before it sends F1; rank 1 wants F1 before it does B0
    rows = ["0F0 0B0 0F1 0B1 0U0", "1F1 1B1 1F0 1B0 1U0"]
    with pytest.raises(ScheduleError) as info:
        validate(custom(rows, N=2))
    lines = str(info.value).splitlines()
    assert lines[0] == "schedule 'custom' deadlocks: these ranks wait forever"
    assert lines[1] == (
        "  rank 0 at 0B0 (position 1) waits for 1B0 on rank 1 (position 3), "
        "which is itself stuck at 1F1"
    )
    assert lines[2] == (
        "  rank 1 at 1F1 (position 0) waits for 0F1 on rank 0 (position 2), "
        "which is itself stuck at 0B0"
    )


def test_forward_dependency_order_across_stages():
    # rank 1's order is fine alone, but forwards must flow 0 -> 1: 1F1 waits for 0F1,
    # which rank 0 runs only after 0B0, which waits for 1B0, which rank 1 runs after 1F1
    rows = ["0F0 0B0 0F1 0B1 0U0", "1F0 1F1 1B0 1B1 1U0"]
    with pytest.raises(ScheduleError, match="deadlocks"):
        validate(custom(rows, N=2))


def test_name_and_weight_mode_are_checked():
    rows = ["0F0 0B0 0U0"]
    with pytest.raises(ScheduleError, match=r"unknown schedule name 'mine'; allowed: .*custom"):
        validate(custom(rows, N=1, name="mine"))
    with pytest.raises(ScheduleError, match=r"weight_mode='async' does not match.*'sync'"):
        validate(custom(rows, N=1, name="gpipe", weight_mode="async"))


def test_pipemare_is_a_known_name_with_the_async_weight_mode():
    rows = ["0F0 0B0 0U0"]
    validate(custom(rows, N=1, name="pipemare", weight_mode="async"))
    with pytest.raises(ScheduleError, match=r"allowed: 'async'"):
        validate(custom(rows, N=1, name="pipemare", weight_mode="sync"))
