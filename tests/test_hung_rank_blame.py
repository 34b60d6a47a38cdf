"""A rank that hangs is the one blamed (issue #36, item 4): its peer times out waiting for
its message, and the run's cause names the rank that did not answer, not the one that
waited; ``train --op-timeout`` shortens the wait under torchrun."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipemare_lite.engine.distributed.launch import LaunchError, launch
from tests.dist_workers import hung_sender
from tests.test_launch import _alive, _children_of
from tests.timeouts import hard_time_limit

pytestmark = [pytest.mark.dist]

REPO = Path(__file__).resolve().parents[1]


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


def test_a_rank_hanging_between_runs_is_named_within_the_op_timeout(tmp_path):
    # rank 1 hangs in fit()'s evaluation, outside the schedule: rank 0 waits in the gather
    # before its own evaluation (a collective, not a message). Before: rank 0 failed after
    # op_timeout + 30 s (gloo's own timeout) and was named as the cause.
    from tests.dist_workers import fit_with_a_rank_hanging_in_evaluation

    note = tmp_path / "hang-started"
    with hard_time_limit(150), pytest.raises(LaunchError) as caught:
        launch(fit_with_a_rank_hanging_in_evaluation, 2, kwargs={"note": str(note)},
               op_timeout=2.0, timeout=140, grace=2.0)
    took = time.time() - float(note.read_text())  # from the hang to the launcher's error
    error = caught.value
    assert error.failed_ranks[0] == 1, str(error)
    assert str(error).startswith("distributed run failed: rank 1 did not answer within the "
                                 "per-operation timeout"), str(error)
    assert "gathering the ranks' results: rank 1 did not come" in str(error), str(error)
    assert all(code is not None for code in error.exit_codes.values())  # every rank ended
    # op_timeout (2 s) + reading the heartbeats (0.3 s) + the launcher's grace (2 s) and
    # its stopping the ranks, with room for a loaded machine; not op_timeout + 30 s
    assert took < 20, took


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to find the ranks")
def test_under_torchrun_a_rank_hanging_between_runs_is_named_within_the_op_timeout(tmp_path):
    # chapter 11's single-machine command (loopback c10d rendezvous, a port picked by the
    # OS), --op-timeout 2; rank 1 hangs in its first evaluation. Before: rank 0 waited
    # op_timeout + 30 s in gloo's barrier and reported a PeerConnectionError.
    stream, err = tmp_path / "steps.jsonl", tmp_path / "stderr.txt"
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0",
               "--nproc-per-node", "2", "--max-restarts", "0",
               "-m", "pipemare_lite.training", "--executor", "dist", "--method", "1f1b",
               "--stages", "2", "--microbatches", "2", "--batch-size", "64", "--epochs", "3",
               "--width", "8", "--no-progress", "--op-timeout", "2", "--jsonl", str(stream)]
    note = tmp_path / "hang-started"
    env = dict(os.environ, OMP_NUM_THREADS="1", PIPEMARE_TEST_HANG_RANK="1",
               PIPEMARE_TEST_HANG_FILE=str(note),
               PIPEMARE_PLUGINS="tests.plugin_hang_in_evaluation",
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    with hard_time_limit(170), open(err, "wb") as errors:
        agent = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (stream.exists() and stream.read_text()):
                assert agent.poll() is None, err.read_text()[-3000:]
                time.sleep(0.1)
            assert stream.read_text(), "training did not start"
            ranks = _children_of(agent.pid)
            agent.wait(timeout=120)
            took = time.time() - float(note.read_text())  # from the hang to the agent's end
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait(timeout=10)
    text = err.read_text()
    assert agent.returncode != 0, text[-3000:]
    assert "gathering the ranks' results: rank 1 did not come" in text, text[-3000:]
    # op_timeout 2 s, the heartbeat read (0.3 s), the agent stopping rank 1, with room for
    # a loaded machine; not op_timeout + 30 s
    assert took < 20, (took, text[-3000:])
    end = time.monotonic() + 10
    while time.monotonic() < end and any(_alive(p) for p in ranks):
        time.sleep(0.1)
    assert not any(_alive(p) for p in ranks), "a rank outlived torchrun's agent"
