"""Under torchrun, a ValueError raised on one rank after it joined the job is that rank's
failure, not "bad input" (issue #36, item 5): the rank exits 1 with its rank named, its
last status stays "failed", and its peer stops with that error as the cause (not "no peer
found lost"). Loopback only, a port picked at run time, bounded time, every process ended."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.timeouts import hard_time_limit

REPO = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.dist]


def test_a_value_error_on_one_rank_is_a_failure_named_by_its_peer(tmp_path):
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
               "127.0.0.1:0", "--max-restarts", "0", "-m", "pipemare_lite.training",
               "--plugin", "tests.fixtures.plugin_value_error", "--executor", "dist",
               "--method", "1f1b", "--stages", "2", "--microbatches", "2", "--batch-size", "8",
               "--epochs", "2", "--width", "8", "--no-progress"]
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=path)
    with hard_time_limit(150):
        agent = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True)
        try:
            output, _ = agent.communicate(timeout=120)
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.communicate()
    assert agent.returncode != 0
    assert "rank 1 failed: ValueError: planted bad value on rank 1" in output, output[-3000:]
    assert "error: planted" not in output  # not reported as the command's bad input
    assert "no peer found lost" not in output, output[-3000:]
    # rank 0's one line on why it stops names rank 1's error (the abort rank 1 claimed)
    stops = [line for line in output.splitlines()
             if line.startswith("pipemare_lite: rank 0 (node 0) stops")]
    assert stops and "ValueError: planted bad value on rank 1" in stops[0], output[-3000:]
