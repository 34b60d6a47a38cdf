"""The GPU check (pipemare_lite/cli/gpu_check.py, scripts/gpu_check.sh): its CPU dry run.

The dry run goes through the same pipeline a GPU machine runs (reference on the CPU, the
local executor on the stage devices, the distributed executor, agreement, step times,
utilization against the simulator) with CPU devices and gloo, and writes the same report.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from pipemare_lite.cli.gpu_check import (
    METHODS,
    REPORT_FORMAT,
    agreement,
    dry_run_config,
    step_seconds,
)
from tests.timeouts import hard_time_limit

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.dist
def test_the_script_dry_run_writes_the_report(tmp_path):
    out = tmp_path / "report.json"
    env = dict(os.environ, OUT=str(out), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    with hard_time_limit(200):
        done = subprocess.run(["bash", "scripts/gpu_check.sh", "--dry-run"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"report written to {out}" in done.stdout
    report = json.loads(out.read_text())
    assert report["format"] == REPORT_FORMAT
    assert report["dry_run"] is True and report["devices"] == "cpu"
    assert {"torch", "cuda_build", "cuda_devices", "nccl"} <= set(report["environment"])
    config = dry_run_config()
    assert [p["backend"] for p in report["placement"]] == ["gloo"] * config.stages
    assert [p["device"] for p in report["placement"]] == ["cpu"] * config.stages
    assert set(report["runs"]) == set(METHODS)
    for method, entry in report["runs"].items():
        dist = entry["distributed"]
        assert dist["backend"] == "gloo" and dist["processes"] == config.stages
        # CPU, one thread per process: the engine promises bitwise equality, and gets it
        assert dist["agreement_with_cpu"]["verdict"] == "bitwise", method
        assert dist["agreement_with_local"]["bitwise"] is True
        assert len(dist["step_seconds"]) == config.steps
        assert all(s > 0 for s in dist["step_seconds"])
        u = dist["utilization"]
        assert 0 < u["measured"] <= 1 and 0 < u["simulated"] <= 1
        assert len(u["measured_per_rank"]) == config.stages
        assert u["op_costs_seconds"]["forward"] > 0
        assert entry["local"]["devices"] == ["cpu"] * config.stages
    assert report["ok"] is True and set(report["verdicts"]) == {"bitwise"}


def test_agreement_tells_bitwise_close_and_different_apart():
    state = [{"w": torch.tensor([1.0, -2.0])}]
    reference = {"losses": [0.5, 0.25], "states": state}
    assert agreement({"losses": [0.5, 0.25], "states": state}, reference)["verdict"] == "bitwise"
    close = {"losses": [0.5, 0.25], "states": [{"w": torch.tensor([1.0 + 2**-20, -2.0])}]}
    result = agreement(close, reference)
    assert result["verdict"] == "close" and not result["bitwise"]
    assert result["max_abs_diff"] == 2**-20 and result["relative_diff"] == 2**-21
    far = {"losses": [0.5, 0.3], "states": state}
    assert agreement(far, reference)["verdict"] == "different"
    broken = {"losses": [float("nan"), 0.25], "states": state}
    assert agreement(broken, reference)["verdict"] == "different"


@pytest.mark.parametrize(
    "stages, gpus, devices, backend",
    [
        (2, 2, ["cuda:0", "cuda:1"], "nccl"),
        (2, 4, ["cuda:0", "cuda:1"], "nccl"),  # more GPUs than stages: the first P
        (4, 2, ["cuda:0", "cuda:1", "cuda:0", "cuda:1"], None),  # NCCL needs a GPU per rank
        (2, 1, ["cuda:0", "cuda:0"], None),  # one GPU: several stages on it
        (2, 0, ["cpu", "cpu"], "gloo"),  # the dry run
    ],
)
def test_what_runs_where_with_a_fake_gpu_count(stages, gpus, devices, backend):
    from pipemare_lite.cli.gpu_check import plan_runs

    local, chosen, skip, ranks = plan_runs(stages, gpus)
    assert (local, chosen) == (devices, backend)
    if backend is None:
        assert "NCCL needs one GPU per rank" in skip and ranks == []
    else:
        assert skip is None and [r["backend"] for r in ranks] == [backend] * stages
        expected = [f"cuda:{r}" for r in range(stages)] if gpus else ["cpu"] * stages
        assert [r["device"] for r in ranks] == [r["messages"] for r in ranks] == expected


def test_step_seconds_waits_for_the_slowest_rank():
    from pipemare_lite.analysis.timeline import TimedAction
    from pipemare_lite.schedules.actions import Action

    class Trace:  # only the entries are read
        entries = [TimedAction(0, Action.parse("0U0"), 0.0, 1.0),
                   TimedAction(1, Action.parse("1U0"), 0.0, 1.5),
                   TimedAction(0, Action.parse("0U1"), 2.0, 2.5),
                   TimedAction(1, Action.parse("1U1"), 2.0, 4.0)]

    assert step_seconds(Trace()) == [1.5, 2.5]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_the_real_check_refuses_and_points_at_the_dry_run(capsys):
    from pipemare_lite.cli import main

    assert main(["gpu-check", "--out", os.devnull]) == 2
    assert "no CUDA device found; --dry-run runs the same checks" in capsys.readouterr().err
