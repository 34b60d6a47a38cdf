"""Requests whose sizes are each in range but whose product is not are refused before
anything is allocated, with the estimate and the limit (issue #36, item 2). Each case runs
in a child process with a hard time limit and a 2 GiB address-space cap, so a regression
fails fast instead of exhausting the machine."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from pipemare_lite.schedules import build_schedule
from pipemare_lite.schedules.validation import MAX_ACTIONS, action_count

REPO = Path(__file__).resolve().parents[1]
CAP = 2 * 2**30  # bytes of address space the child may map (torch alone maps ~1 GiB)


def _cap_memory():
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-m", "pipemare_lite", *argv], env=env, text=True,
                          capture_output=True, timeout=timeout, preexec_fn=_cap_memory)


def test_schedule_product_of_sizes_is_refused_with_estimate_and_limit():
    done = _cli("schedule", "1f1b", "-P", "1024", "-M", "65536", "-K", "100000")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "13,421,875,200,000 actions" in done.stderr  # the estimate
    assert f"the limit is {MAX_ACTIONS:,} actions" in done.stderr
    assert "Traceback" not in done.stderr


def test_build_schedule_refuses_before_building():
    # in a capped child: were the check missing, the build would take all memory
    code = ("from pipemare_lite.schedules import build_schedule\n"
            "try:\n    build_schedule('zb-h1', 512, 8192, num_minibatches=10)\n"
            "except ValueError as exc:\n    print(exc)\n")
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": path},
                          text=True, capture_output=True, timeout=60, preexec_fn=_cap_memory)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "zb-h1 with P=512, N=8192, K=10, v=1 is 125,834,240 actions" in done.stdout
    assert action_count("1f1b", 4, 8, 2) == 4 * 2 * (2 * 8 + 1)
    assert build_schedule("1f1b", 4, 8, num_minibatches=2).num_ranks == 4  # small still builds


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--stages", "100000"], "--stages 100000: allowed: integers 1..1024"),
        (["--stages", "4", "--layers", "100000"], "the limit is 4,096"),
        (["--stages", "4", "--width", "1000000"], "parameters: about"),
        (["--stages", "4", "--model", "resnet", "--width", "100000"], "more than the limit of"),
    ],
)
def test_train_refuses_an_oversized_model_before_building_it(argv, said):
    done = _cli("train", "--method", "gpipe", *argv)
    assert done.returncode == 2, done.stderr[-2000:]
    assert said in done.stderr and "Traceback" not in done.stderr
