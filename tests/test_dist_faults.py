"""A failed rank stops the whole job quickly, says who and where, and leaves no process behind.

Three ways to fail (:class:`~pipemare_lite.engine.distributed.executor.Fault`) at the same place,
rank 1
before its 6th action of a P=3 1F1B run: an exception, SIGKILL, and a hang (no message
ever leaves rank 1, so its neighbours hit the per-operation timeout). Each test bounds the
time to the error and checks every child pid has ended (``os.kill(pid, 0)``, no psutil).
"""

from __future__ import annotations

import functools
import os
import signal
import time

import pytest
import torch
import torch.nn.functional as F

from pipemare_lite.engine.distributed.fault_injection import Fault
from pipemare_lite.engine.distributed.jobs import run_distributed
from pipemare_lite.engine.distributed.launch import LaunchError, launch, ping
from pipemare_lite.schedules import build_schedule
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import PartitionedModel
from tests.timeouts import hard_time_limit

pytestmark = [pytest.mark.dist]

P, M, K = 3, 4, 2
SCHEDULE = build_schedule("1f1b", P, M, num_minibatches=K)
FAULT_RANK, FAULT_POSITION = 1, 5
BOUND = 30.0  # seconds from the fault to the error, as the task allows


@pytest.fixture(autouse=True)
def hard_timeout():
    """Fail the test (instead of hanging the suite) if it runs longer than 120 s."""
    with hard_time_limit(120):
        yield


@pytest.fixture(scope="module", autouse=True)
def warm_launcher():
    """Start the fork server once, so the time bounds measure the fault, not torch's import."""
    launch(ping, P, timeout=120)


def run_with(fault: Fault, **launch_kwargs):
    stages = PartitionedModel(mlp, P, kwargs=(("in_features", 4), ("hidden", 4), ("depth", 3),
                                              ("out_features", 3), ("seed", 0)))
    g = torch.Generator().manual_seed(0)
    data = [(torch.randn(2, 4, generator=g), torch.randint(0, 3, (2,), generator=g))
            for _ in range(M * K)]
    start = time.monotonic()
    with pytest.raises(LaunchError) as info:
        run_distributed(SCHEDULE, stages, data, loss_fn=F.cross_entropy,
                        optimizer_factory=functools.partial(torch.optim.SGD, lr=0.1),
                        fault=fault, timeout=90, **launch_kwargs)
    return info.value, time.monotonic() - start


def assert_all_ended(error: LaunchError) -> None:
    assert sorted(error.pids) == list(range(P))
    for rank, pid in error.pids.items():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # signal 0: "does this pid exist?"
        assert error.exit_codes[rank] is not None


def assert_positions_listed(error: LaunchError) -> None:
    text = str(error)
    for rank in range(P):
        assert f"rank {rank}: " in text
    for rank, pos in error.positions.items():
        row = SCHEDULE.ranks[rank]
        if 0 <= pos.index < len(row):
            assert pos.action == str(row[pos.index])
            if pos.between:  # between two runs: pos.index actions done, pos.action next
                assert f"{pos.index}/{len(row)} actions done (next {pos.action})" in text
            else:
                assert f"action {pos.index}/{len(row)} ({pos.action})" in text


def test_a_rank_that_raises_stops_everyone():
    error, seconds = run_with(Fault(FAULT_RANK, FAULT_POSITION, "raise"), op_timeout=60)
    assert seconds < BOUND
    assert error.failed_ranks[0] == FAULT_RANK
    text = str(error)
    assert "injected fault on rank 1" in text
    # the cause first; a rank that failed only because it did is marked so (chapter 11)
    failed_line = next(line for line in text.splitlines() if line.startswith("failed rank(s)"))
    assert failed_line.startswith(f"failed rank(s): {FAULT_RANK} (the cause)"), failed_line
    for rank in error.failed_ranks[1:]:
        assert f"{rank} (stopped by rank {FAULT_RANK}'s failure)" in failed_line, text
    where = error.positions[FAULT_RANK]
    assert where.index == FAULT_POSITION
    assert where.action == str(SCHEDULE.ranks[FAULT_RANK][FAULT_POSITION])
    assert where.state.startswith("failed")
    assert_positions_listed(error)
    assert_all_ended(error)


@pytest.mark.slow
def test_a_killed_rank_stops_everyone():
    error, seconds = run_with(Fault(FAULT_RANK, FAULT_POSITION, "kill"), op_timeout=60)
    assert seconds < BOUND
    assert error.failed_ranks[0] == FAULT_RANK
    assert error.exit_codes[FAULT_RANK] == -signal.SIGKILL
    assert "rank 1 was killed by signal 9" in str(error)
    # a killed rank cannot report: its position is the last one its watchdog published
    # (at most a tenth of a second old), so it is at or before the fault
    assert error.positions.get(FAULT_RANK) is None or (
        error.positions[FAULT_RANK].index <= FAULT_POSITION)
    assert_positions_listed(error)
    assert_all_ended(error)


@pytest.mark.slow
def test_a_rank_that_never_sends_makes_its_neighbours_time_out():
    op_timeout = 3.0
    error, seconds = run_with(Fault(FAULT_RANK, FAULT_POSITION, "hang"),
                              op_timeout=op_timeout, grace=2.0)
    assert seconds < BOUND
    text = str(error)
    assert "OpTimeoutError" in text and f"waited more than {op_timeout:g} s" in text
    assert "rank 1 -> rank" in text  # the message it waited for comes from the hung rank
    # the hung rank is the cause, not the neighbour that gave up first (issue #36, item 4)
    assert error.failed_ranks[0] == FAULT_RANK, text
    assert text.startswith(f"distributed run failed: rank {FAULT_RANK} did not answer"), text
    assert error.positions[FAULT_RANK].index == FAULT_POSITION  # the hung rank's place
    assert_positions_listed(error)
    assert_all_ended(error)


@pytest.mark.slow
@pytest.mark.parametrize("inside, at_call, steps_done, where, peer_waited_for", [
    ("losses", 3, 3, "sharing the losses of run 3", "the losses of run 3 from rank 1"),
    ("all_gather", 1, 4, "collective 2: gathering the ranks' results",
     "collective 2: gathering the ranks' results"),
])
def test_a_rank_killed_between_two_actions_is_placed_there(inside, at_call, steps_done, where,
                                                           peer_waited_for):
    """Issue 47, "also seen": a rank killed while the ranks shared a step's losses was last
    seen at "action 3547/15120 ... in collective 1181", an action and a collective at once
    (the action named was the next one, not begun). Now: how many actions it had done, the
    next one, and what it was in. Rank 1 of a P=2 fit() kills itself half a second into
    sending the losses of its third step, or into the first collective of the gather before
    the first evaluation (collective 2: the barrier before the first run is 1)."""
    from tests.dist_workers import fit_with_a_rank_killed_between_actions

    with pytest.raises(LaunchError) as info:
        launch(fit_with_a_rank_killed_between_actions, 2, args=(inside, at_call), timeout=90,
               op_timeout=30)
    error, text = info.value, str(info.value)
    assert text.startswith("distributed run failed: rank 1 was killed by signal 9"), text
    row = build_schedule("1f1b", 2, 2, num_minibatches=12).ranks[1]  # fit's 3 epochs x 4 steps
    done = steps_done * len(row) // 12  # these steps' actions (1F1B: alike per step)
    assert error.positions[1].between and error.positions[1].index == done
    assert f"rank 1: {done}/{len(row)} actions done (next {row[done]}), in {where}" in text, text
    assert "in collective" not in error.positions[1].where()
    assert not any(f"action {done}/{len(row)}" in line for line in text.splitlines()), text
    assert f"waiting for {peer_waited_for}" in text, text  # rank 0, its peer


def test_the_failed_ranks_line_tells_the_cause_from_its_echoes():
    from pipemare_lite.engine.distributed.launch import _failed_ranks_line

    exits = {0: 1, 1: 1, 2: 1}
    real, echo = "RuntimeError: injected fault", "PeerFailedError: rank 1 failed"
    assert _failed_ranks_line([1], exits, {1: real}, None) == "failed rank(s): 1"
    assert _failed_ranks_line([1, 0, 2], exits, {1: real, 0: echo, 2: echo}, None) == (
        "failed rank(s): 1 (the cause), 0 (stopped by rank 1's failure), "
        "2 (stopped by rank 1's failure)")
    # two real errors: the first is only the likeliest cause, the other is not an echo
    assert _failed_ranks_line([1, 2], exits, {1: real, 2: real}, None) == (
        "failed rank(s): 1 (the likeliest cause), 2")
