"""A user's model through ``--plugin`` (issue 44, item 2): ``pipemare-lite train`` and
``python -m pipemare_lite.training`` (what torchrun runs) build it by name and split it with
torch's splitter; under torchrun (2 ranks, gloo) the run is bitwise the local one."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from pipemare_lite.cli.commands.train import main
from pipemare_lite.training.models import MODELS, register_model

PLUGIN = "tests.fixtures.plugin_model"
CLI = ["--plugin", PLUGIN, "--model", "resmlp", "--method", "1f1b", "--stages", "2",
       "--microbatches", "4", "--batch-size", "200", "--epochs", "1", "--no-progress"]


def _local(tmp_path, *extra) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main([*CLI, *extra, "--out", str(tmp_path / "local.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    return json.loads((tmp_path / "local.json").read_text())


def test_a_plugin_model_trains_from_the_command_line(tmp_path):
    history = _local(tmp_path)
    assert "resmlp" in MODELS
    assert history["config"]["balance"] == ["blocks.1"]
    assert history["config"]["dataset"] == "signals" and len(history["loss"]) == 20
    assert history["loss"][-1] < history["loss"][0]


def test_register_model_refuses_the_books_names_and_non_functions():
    with pytest.raises(ValueError, match="one of the book's"):
        register_model("mlp", lambda **kw: None)
    with pytest.raises(ValueError, match="build must be a function"):
        register_model("mine", 3)


def test_an_unknown_model_names_the_allowed_ones_and_the_plugin_way(capsys):
    """A plugin's model named without its ``--plugin`` (or mistyped) was argparse's bare
    "invalid choice"; now one line says what is allowed and how a user's model comes in."""
    from pipemare_lite.cli import main as cli

    for command in ("train", "sweep"):
        extra = ["--methods", "1f1b"] if command == "sweep" else ["--method", "1f1b",
                                                                   "--no-progress"]
        assert cli([command, *extra, "--model", "resnt"]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line == (f"pipemare-lite {command}: error: unknown model 'resnt'; allowed: "
                        f"{', '.join(sorted(MODELS))}, or a model that a --plugin module "
                        "registers with pml.register_model. Did you mean 'resnet'?")


@pytest.mark.slow
def test_torchrun_trains_a_plugin_model_bitwise_as_the_local_run(tmp_path):
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "--max-restarts", "0", "--log-dir", str(tmp_path), "--redirects", "3",
        "-m", "pipemare_lite.training", "--executor", "dist", *CLI,
        "--out", str(tmp_path / "dist.json"),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(command, capture_output=True, text=True, timeout=170, env=env)
    logs = "\n".join(p.read_text() for p in tmp_path.rglob("std*.log"))
    assert done.returncode == 0, done.stderr[-3000:] + logs[-2000:]
    torchrun = json.loads((tmp_path / "dist.json").read_text())
    local = _local(tmp_path)
    for key in ("loss", "evals", "stage_lr"):
        assert torchrun[key] == local[key], key
