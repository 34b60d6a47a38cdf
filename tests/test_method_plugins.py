"""New methods as plugins: register_method, hooks written outside the engine, and plugins
imported in every process (``--plugin``, ``launch(imports=...)``, ``PIPEMARE_PLUGINS``).

- a method written as hooks in a test plugin (tests/fixtures/plugin_method.py: PipeDream's
  stashing on the no-stash mode) == the built-in pipedream, bitwise;
- an unknown method says where it was looked up and how to load a plugin, also on a rank;
- weight prediction (a plugin in one file) under fit() locally == under launch() with 2
  ranks == under torchrun with PIPEMARE_PLUGINS, bitwise, with its bytes counted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.methods import METHODS, get_method, method_options, register_method
from pipemare_lite.methods.registry import build_method_schedule
from pipemare_lite.plugins import ENV_VAR, PluginError, load_plugins
from pipemare_lite.training.datasets import load
from pipemare_lite.training.models import mlp

PLUGIN = "tests.fixtures.plugin_method"
WPRED = "pipemare_lite.methods.weight_prediction"




def blocks(count: int) -> list[nn.Sequential]:
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(8, 8), *([nn.ReLU()] if i < count - 1 else []))
            for i in range(count)]


def test_a_method_written_as_hooks_in_a_plugin_equals_the_built_in_one(one_thread):
    load_plugins([PLUGIN])
    assert get_method("fixture-stash").module == PLUGIN
    P, N, K = 3, 2, 4
    g = torch.Generator().manual_seed(1)
    mbs = [(torch.randn(4, 8, generator=g), torch.randint(0, 8, (4,), generator=g))
           for _ in range(N * K)]
    runs = {}
    for name in ("fixture-stash", "pipedream"):
        stages = blocks(P)
        schedule = build_method_schedule(name, P, N, num_minibatches=K)
        result = LocalExecutor(
            schedule, stages, loss_fn=nn.functional.cross_entropy,
            optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
            method_options=method_options(name)).run(mbs)
        runs[name] = (result, [p.detach() for s in stages for p in s.parameters()])
    (hooked, w_hooked), (built_in, w_built_in) = runs["fixture-stash"], runs["pipedream"]
    assert hooked.losses == built_in.losses
    assert all(torch.equal(a, b) for a, b in zip(w_hooked, w_built_in))
    assert hooked.backward_versions != hooked.forward_versions  # the engine's own record
    assert max(p["fixture_copies"] for p in hooked.peak_bytes) > 0  # declared bytes counted
    assert all(p["stash"] == 0 for p in hooked.peak_bytes)


def test_register_method_refuses_bad_input():
    with pytest.raises(ValueError, match="already registered"):
        register_method("async", schedule="async", weight_mode="async")
    with pytest.raises(ValueError, match="unknown weight mode 'sideways'"):
        register_method("fixture-bad", schedule="async", weight_mode="sideways")
    with pytest.raises(ValueError, match="hooks must be a function"):
        register_method("fixture-bad", schedule="async", weight_mode="async", hooks=3)
    assert "fixture-bad" not in METHODS


def test_unknown_method_says_where_it_looked_and_how_to_load_a_plugin():
    from pipemare_lite import fit

    with pytest.raises(ValueError) as error:
        fit(mlp(64, 16, 2, 10), load("digits"), method="nope", num_stages=2,
            num_microbatches=2, batch_size=64, epochs=1, lr=0.05)
    message = str(error.value)
    for part in ("unknown method 'nope'", "pipemare_lite.methods.METHODS", f"process {os.getpid()}",
                 "--plugin MODULE", "launch(..., imports=['MODULE'])", ENV_VAR, "allowed: gpipe"):
        assert part in message, part


def test_the_environment_variable_names_plugins_looked_up_on_a_miss(monkeypatch):
    monkeypatch.setenv(ENV_VAR, f" {PLUGIN} ,")
    assert get_method("fixture-stash").name == "fixture-stash"
    assert PLUGIN in load_plugins()
    monkeypatch.setenv(ENV_VAR, "no_such_plugin_module")
    with pytest.raises(PluginError, match="plugin 'no_such_plugin_module' could not be imported"):
        get_method("still-unknown")


def test_the_command_line_loads_plugins_and_refuses_a_missing_one(capsys):
    from pipemare_lite.cli import main as cli_main
    from pipemare_lite.cli.commands.train import main

    assert main(["--plugin", "no_such_plugin_module", "--method", "wpred"]) == 2  # torchrun's
    assert "could not be imported" in capsys.readouterr().err
    options = ["--plugin", PLUGIN, "--method", "fixture-stash", "--stages", "2",
               "--microbatches", "2", "--batch-size", "64", "--epochs", "1", "--width", "16",
               "--json", "--no-progress"]
    assert cli_main(["train", *options]) == 0  # pipemare-lite train
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["steps"] > 0 and summary["memory_bytes"]["fixture_copies"] > 0


# ---------------------------------------------------------------- every rank
FIT = dict(method="wpred", num_stages=2, num_microbatches=2, batch_size=64, epochs=1,
           lr=0.05, progress=False)
MODEL = dict(in_features=64, hidden=16, depth=2, out_features=10, seed=0)
CLI = ["--method", "wpred", "--stages", "2", "--microbatches", "2", "--batch-size", "64",
       "--epochs", "1", "--width", "16", "--json", "--no-progress"]
SAME = ("loss", "evals", "stage_lr", "forward_delay", "memory_bytes_by_stage", "memory_bytes")


def local_wpred() -> dict:
    from pipemare_lite import fit

    load_plugins([WPRED])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fit(mlp(**MODEL), load("digits"), **FIT).to_dict()
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_a_plugin_method_is_unknown_on_the_ranks_until_imported_there():
    from pipemare_lite.engine.distributed.launch import LaunchError, launch
    from pipemare_lite.training.dist_fit import fit_worker

    load_plugins([PLUGIN])  # known here, in the parent ...
    args = (dict(FIT, method="fixture-stash", model=(mlp, MODEL), data=(load, {"name": "digits"})),)
    env = os.environ.pop(ENV_VAR, None)
    try:
        with pytest.raises(LaunchError) as error:  # ... but not in the children
            launch(fit_worker, 2, timeout=120, args=args)
    finally:
        if env is not None:
            os.environ[ENV_VAR] = env
    text = "\n".join(error.value.errors.values())
    assert "unknown method 'fixture-stash'" in text and ", rank " in text and "--plugin" in text


@pytest.mark.slow
def test_weight_prediction_is_bitwise_equal_locally_under_launch_and_under_torchrun(tmp_path):
    from pipemare_lite.engine.distributed.launch import launch
    from pipemare_lite.training.dist_fit import fit_worker

    local = local_wpred()
    assert local["memory_bytes"]["prediction"] > 0  # its bytes are counted
    launched = launch(fit_worker, 2, timeout=240, imports=[WPRED], args=(
        dict(FIT, model=(mlp, MODEL), data=(load, {"name": "digits"})),))
    for history in launched:  # every rank gathered the same history
        for key in SAME:
            assert history[key] == local[key], key

    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "--max-restarts", "0", "--log-dir", str(tmp_path), "--redirects", "3",
        "-m", "pipemare_lite.training", "--executor", "dist", *CLI,
        "--out", str(tmp_path / "h.json"),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", **{ENV_VAR: WPRED})
    done = subprocess.run(command, capture_output=True, text=True, timeout=170, env=env)
    logs = "\n".join(p.read_text() for p in tmp_path.rglob("std*.log"))
    assert done.returncode == 0, done.stderr[-3000:] + logs[-2000:]
    torchrun = json.loads((tmp_path / "h.json").read_text())

    from pipemare_lite.cli.commands.train import (
        main,  # the same command in this process, one thread
    )

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["--plugin", WPRED, *CLI, "--out", str(tmp_path / "local.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    by_cli = json.loads((tmp_path / "local.json").read_text())
    assert by_cli["memory_bytes"]["prediction"] > 0
    for key in SAME:
        assert torchrun[key] == by_cli[key], key


def test_a_checkpoint_from_before_hooks_stores_t2_under_t2_and_still_resumes(one_thread):
    P, N, K, stop = 3, 2, 4, 2
    schedule = build_method_schedule("pipemare", P, N, num_minibatches=K)
    g = torch.Generator().manual_seed(2)
    mbs = [(torch.randn(4, 8, generator=g), torch.randint(0, 8, (4,), generator=g))
           for _ in range(N * K)]

    def executor(stages):
        return LocalExecutor(schedule, stages, loss_fn=nn.functional.cross_entropy,
                             optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=0.1),
                             method_options=method_options("pipemare", gamma=0.5))

    straight_stages = blocks(P)
    straight = executor(straight_stages).run(mbs)
    first = executor(blocks(P))
    part1 = first.run(mbs, stop_after_updates=stop)
    state = first.state_dict()
    for stage in state["stages"]:  # the layout written before T2 became hooks
        stage["t2"] = stage.pop("hooks")
    assert any(stage["t2"]["delta"][0].abs().sum() > 0 for stage in state["stages"])
    resumed_stages = blocks(P)
    second = executor(resumed_stages)
    second.load_state_dict(state)
    part2 = second.run(mbs)
    assert part1.losses + part2.losses == straight.losses
    for got, want in zip(resumed_stages, straight_stages):
        assert all(torch.equal(a, b) for a, b in zip(got.parameters(), want.parameters()))


@pytest.mark.slow
def test_a_method_running_a_builders_order_in_another_weight_mode_runs_distributed():
    """``fixture-stash`` runs pipedream's order in the ``async`` weight mode. The
    distributed executor validates every schedule it is given, and validation refused a
    ``pipedream`` schedule in any mode but ``stash``; a registered method's pairing is
    allowed now. Its dist run, short (2 steps) and long (a periodic schedule, 21 steps), is
    bitwise the local run."""
    from pipemare_lite import fit
    from pipemare_lite.engine.distributed.launch import launch
    from pipemare_lite.training.dist_fit import fit_worker

    load_plugins([PLUGIN])
    data = load("digits")
    for batch_size in (512, 64):  # 2 and 21 steps of the 1348-sample training split
        settings = dict(FIT, method="fixture-stash", batch_size=batch_size)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            local = fit(mlp(**MODEL), data, **settings).to_dict()
        finally:
            torch.set_num_threads(threads)
        launched = launch(fit_worker, 2, timeout=120, imports=[PLUGIN], args=(
            dict(settings, model=(mlp, MODEL), data=(load, {"name": "digits"})),))
        assert len(local["loss"]) == len(data.x_train) // batch_size
        for history in launched:
            for key in SAME:
                assert history[key] == local[key], (batch_size, key)
