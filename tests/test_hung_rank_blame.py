"""A rank that hangs is the one blamed (issue #36, item 4): its peer times out waiting for
its message, and the run's cause names the rank that did not answer, not the one that
waited; ``train --op-timeout`` shortens the wait under torchrun."""

from __future__ import annotations

import time

import pytest

from pipemare_lite.engine.distributed.launch import LaunchError, launch
from tests.dist_workers import hung_sender
from tests.timeouts import hard_time_limit

pytestmark = [pytest.mark.dist]


def test_the_rank_that_did_not_send_is_named_as_the_cause():
    start = time.monotonic()
    with hard_time_limit(120), pytest.raises(LaunchError) as caught:
        launch(hung_sender, 2, op_timeout=2.0, timeout=90, grace=2.0)
    error = caught.value
    assert error.failed_ranks[0] == 1, str(error)
    assert str(error).startswith("distributed run failed: rank 1 did not answer within the "
                                 "per-operation timeout"), str(error)
    assert "rank 0 OpTimeoutError: waited more than 2 s for a tensor from rank 1" in str(error)
    assert time.monotonic() - start < 60


def test_train_refuses_a_bad_op_timeout(capsys):
    from pipemare_lite import cli

    assert cli.main(["train", "--method", "gpipe", "--op-timeout", "0"]) == 2
    assert "--op-timeout 0.0: allowed: a positive number of seconds" in capsys.readouterr().err


def test_a_rank_hanging_between_runs_is_named_within_the_op_timeout():
    # rank 1 hangs in fit()'s evaluation, outside the schedule: rank 0 waits in the barrier
    # before the next run (a collective, not a message). Before: rank 0 failed after
    # op_timeout + 30 s (gloo's own timeout) and was named as the cause.
    from tests.dist_workers import fit_with_a_rank_hanging_in_evaluation

    start = time.monotonic()
    with hard_time_limit(120), pytest.raises(LaunchError) as caught:
        launch(fit_with_a_rank_hanging_in_evaluation, 2, op_timeout=2.0, timeout=100,
               grace=2.0)
    took = time.monotonic() - start
    error = caught.value
    assert error.failed_ranks[0] == 1, str(error)
    assert str(error).startswith("distributed run failed: rank 1 did not answer within the "
                                 "per-operation timeout"), str(error)
    assert "the barrier before the run: rank 1 did not come" in str(error), str(error)
    assert all(code is not None for code in error.exit_codes.values())  # every rank ended
    # op_timeout (2 s) + reading the heartbeats (0.3 s) + the launcher's grace (2 s), on
    # top of start-up and the first epoch; not op_timeout + 30 s
    assert took < 28, took
