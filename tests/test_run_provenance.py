"""Run records a paper can cite (issue 48, item 4): every history carries the versions, the
git commit (or "not a checkout"), each plugin's source hash and a digest of the schedule's
rows; a resume refuses a changed plugin or schedule, naming what changed."""

from __future__ import annotations

import importlib
import re
import sys

import pytest

from pipemare_lite.schedules import build_schedule
from pipemare_lite.schedules.repeat import is_long_run, long_schedule
from pipemare_lite.training import provenance
from pipemare_lite.training.datasets import Dataset, digits
from pipemare_lite.training.loop import fit
from pipemare_lite.training.models import mlp

PLUGIN = '''"""A test plugin: 1F1B's rows under its own name."""
from pipemare_lite.schedules import build_schedule


def rows(num_ranks, num_microbatches, *, num_minibatches, chunks, warmup):
    return build_schedule("1f1b", num_ranks, num_microbatches,
                          num_minibatches=num_minibatches).rows()


def other_rows(num_ranks, num_microbatches, *, num_minibatches, chunks, warmup):
    return build_schedule("gpipe", num_ranks, num_microbatches,
                          num_minibatches=num_minibatches).rows()
'''


@pytest.fixture(scope="module")
def small_data() -> Dataset:
    d = digits(seed=0)
    return Dataset("digits-small", d.x_train[:64], d.y_train[:64], d.x_test[:40],
                   d.y_test[:40], 10, d.input_shape, d.provenance)


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """``(module, path)``: a plugin module written to a file and imported."""
    path = tmp_path / "prov_plugin_48.py"
    path.write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("prov_plugin_48", None)
    module = importlib.import_module("prov_plugin_48")
    yield module, path
    sys.modules.pop("prov_plugin_48", None)


def _run(data, tmp_path, **extra):
    kwargs = dict(schedule="test-prov", num_stages=2, num_microbatches=4, batch_size=16,
                  epochs=1, lr=0.1, checkpoint_path=tmp_path / "run.ckpt", checkpoint_every=2)
    return fit(mlp(64, 16, 2, 10, seed=0), data, **{**kwargs, **extra})


def test_a_history_carries_versions_commit_plugins_and_the_schedule_digest(
        small_data, tmp_path, plugin, registered):
    module, path = plugin
    registered("test-prov", module.rows, weight_mode="sync")
    history = _run(small_data, tmp_path)
    record = history.provenance
    env = record["environment"]
    import numpy
    import torch

    assert env["torch"] == torch.__version__ and env["numpy"] == numpy.__version__
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    assert re.fullmatch(r"[0-9a-f]{40}", env["git_commit"]) or \
        env["git_commit"] == provenance.NOT_A_CHECKOUT
    import hashlib

    # the run's own plugin with its source's hash; a long-lived process (this test run)
    # also lists the plugins other runs loaded into it before (said in provenance's doc)
    assert record["plugins"]["prov_plugin_48"] == \
        "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    # the digest is of the rows run: the builder's 4 minibatches, made lazily or not
    whole = build_schedule("test-prov", 2, 4, num_minibatches=4)
    assert record["schedule"] == provenance.schedule_digest(whole)
    assert history.to_dict()["provenance"] == record  # in --out files and checkpoints


def test_resume_refuses_a_changed_plugin_and_changed_rows(small_data, tmp_path, plugin,
                                                          registered):
    module, path = plugin
    registered("test-prov", module.rows, weight_mode="sync")
    _run(small_data, tmp_path, epochs=1)  # 4 steps; checkpoints at 2 and 4
    resumed = _run(small_data, tmp_path, resume=True)  # the same code: allowed
    assert resumed.steps == 4
    path.write_text(PLUGIN + "# edited\n")
    with pytest.raises(ValueError, match=r"run\.ckpt was written by other code: plugin "
                                         r"prov_plugin_48: source sha256:\w+ then, "
                                         r"sha256:\w+ now"):
        _run(small_data, tmp_path, resume=True)
    path.write_text(PLUGIN)  # the source back, the name now the plugin's other rows
    registered("test-prov", module.other_rows, weight_mode="sync", replace_existing=True)
    with pytest.raises(ValueError, match=r"other code: schedule rows: sha256:\w+ then, "
                                         r"sha256:\w+ now\. Resume with the plugins"):
        _run(small_data, tmp_path, resume=True)


def test_digest_of_a_long_schedule_is_that_of_its_rows():
    def build(k):
        return build_schedule("async", 3, 4, num_minibatches=k)

    long = long_schedule(build, 40)
    assert is_long_run(long)
    assert provenance.schedule_digest(long) == provenance.schedule_digest(build(40))
    assert provenance.schedule_digest(build(41)) != provenance.schedule_digest(build(40))


def test_outside_a_checkout_the_commit_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "_PACKAGE_ROOT", tmp_path)
    monkeypatch.setattr(provenance, "_GIT", {})
    assert provenance.environment()["git_commit"] == "not a checkout"
    assert provenance.source_hash("no_such_module_48").startswith("no source file")


def test_a_stored_results_meta_carries_the_provenance():
    from pipemare_lite.experiments.record import meta_record

    meta = meta_record(command="python -m pipemare_lite reproduce x", seeds=[0], threads=1,
                       package_version="0.1.0")
    assert meta["provenance"]["environment"] == provenance.environment()
    from pipemare_lite.plugins import loaded_plugins

    assert meta["provenance"]["plugins"] == provenance.plugin_sources(loaded_plugins())


def test_the_config_records_the_thread_count(small_data, capsys, tmp_path):
    import json

    import torch

    from pipemare_lite.cli import main

    history = fit(mlp(64, 16, 2, 10, seed=0), small_data, method="1f1b", num_stages=2,
                  num_microbatches=4, batch_size=16, epochs=1, lr=0.1)
    assert history.config["threads"] == torch.get_num_threads()
    out = tmp_path / "run.json"
    assert main(["train", "--method", "1f1b", "--stages", "2", "--epochs", "1", "--width", "8",
                 "--batch-size", "256", "--lr", "0.05", "--threads", "1",
                 "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["arguments"]["threads"] == written["config"]["threads"] == 1
    assert written["provenance"]["schedule"].startswith("sha256:")
