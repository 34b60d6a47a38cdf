"""issue #33, item 8: ``gpu-check --method/--plugin`` and ``train --devices`` (CPU only here:
no GPU exists on the project's machine; the CUDA paths are exercised by gpu-check on a GPU).

- ``gpu-check --dry-run --plugin M --method NAME`` checks a plugin's method: local and gloo
  ranks (which import the plugin too) bitwise equal to the CPU reference;
- an unknown ``--method`` is refused before anything runs, naming how to load a plugin;
- ``train --devices`` gives one device per stage (one for all, a list, ``auto``); bad names,
  wrong counts, a CUDA device the machine lacks and the dist executor are refused by name.
"""

from __future__ import annotations

import json

import pytest
import torch

from pipemare_lite.cli import main
from pipemare_lite.cli.commands.train import stage_devices
from tests.timeouts import hard_time_limit


@pytest.mark.dist
def test_gpu_check_dry_run_checks_a_plugin_method(tmp_path, capsys):
    out = tmp_path / "report.json"
    with hard_time_limit(240):
        code = main(["gpu-check", "--dry-run", "--plugin", "docs.examples.delay_adaptive_lr",
                     "--method", "delay-adaptive", "--method", "1f1b", "--out", str(out)])
    assert code == 0, capsys.readouterr()
    report = json.loads(out.read_text())
    assert list(report["runs"]) == ["delay-adaptive", "1f1b"]
    run = report["runs"]["delay-adaptive"]
    assert run["local"]["agreement_with_cpu"]["verdict"] == "bitwise"
    assert run["distributed"]["agreement_with_cpu"]["verdict"] == "bitwise"
    assert "delay-adaptive:" in capsys.readouterr().out


def test_gpu_check_refuses_an_unknown_method(capsys, monkeypatch):
    monkeypatch.delenv("PIPEMARE_PLUGINS", raising=False)
    assert main(["gpu-check", "--dry-run", "--method", "no-such-method"]) == 2
    err = capsys.readouterr().err
    assert "unknown method 'no-such-method'" in err and "--plugin MODULE" in err


def test_stage_devices_one_for_all_a_list_and_auto():
    assert stage_devices(None, 3) is None
    assert stage_devices("cpu", 3) == ["cpu", "cpu", "cpu"]
    assert stage_devices("cpu, cpu", 2) == ["cpu", "cpu"]
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    expected = [f"cuda:{s % gpus}" for s in range(3)] if gpus else ["cpu"] * 3
    assert stage_devices("auto", 3) == expected


@pytest.mark.parametrize("text, executor, message", [
    ("cpu,cpu", "local", r"--devices=cpu,cpu: 2 devices for 3 stages; allowed: one device, 3"),
    ("gpu0", "local", r"--devices=gpu0: 'gpu0' is not a device; allowed: cpu, cuda, cuda:N"),
    ("cpu", "dist", r"--devices=cpu: only for the local executor"),
])
def test_stage_devices_refuses_by_name(text, executor, message):
    with pytest.raises(ValueError, match=message):
        stage_devices(text, 3, executor)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_a_cuda_device_this_machine_lacks_is_refused():
    with pytest.raises(ValueError, match=r"--devices=cuda:0: 'cuda:0' is not on this machine"):
        stage_devices("cuda:0", 2)


@pytest.mark.usefixtures("one_thread")
def test_train_with_devices_equals_train_without(capsys):
    options = ["train", "--method", "pipemare", "--stages", "2", "--microbatches", "2",
               "--batch-size", "64", "--epochs", "1", "--width", "16", "--json",
               "--no-progress"]
    assert main(options) == 0
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main([*options, "--devices", "cpu,cpu"]) == 0
    placed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for summary in (plain, placed):
        summary.pop("wall_seconds")
    assert placed == plain and plain["steps"] > 0
    assert main([*options, "--devices", "cpu,cpu,cpu"]) == 2
    assert "3 devices for 2 stages" in capsys.readouterr().err
