"""The smaller failure paths of issue #36 (item 11): numbers out of range refused by their
option or argument name before any work; datasets fit() cannot use refused before training;
a cache file with other arrays rebuilt; a killed launcher's results folder removed by the
next launch. (A chapter's kernel connection file: tests/test_book_failures.py.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from pipemare_lite import cli, fit
from pipemare_lite.training.datasets import Dataset, digits
from pipemare_lite.training.models import mlp
from tests.timeouts import hard_time_limit

REPO = Path(__file__).resolve().parents[1]
TRAIN = ["train", "--method", "gpipe", "--stages", "2", "--epochs", "1", "--width", "8"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--lr", "inf"], "--lr inf: allowed: a positive finite number"),
        (["--lr", "nan"], "--lr nan: allowed: a positive finite number"),
        (["--momentum", "5"], "--momentum 5.0: allowed: a number in [0, 1)"),
        (["--seed", "-1"], "--seed -1: allowed: an integer in 0..2**32-1"),
        (["--method", "pipemare", "--t1-anneal-updates", "-5"], "--t1-anneal-updates -5:"),
        (["--gamma", "5"], "--gamma 5.0: allowed: a number in [0, 1)"),
        (["--gamma", "1"], "--gamma 1.0: allowed: a number in [0, 1)"),  # T2 refuses 1
        (["--weight-decay", "inf"], "--weight-decay inf:"),
    ],
)
def test_a_cli_number_out_of_range_is_named_by_its_option(capsys, extra, said):
    start = time.monotonic()
    assert cli.main([*TRAIN, *extra]) == 2
    assert said in capsys.readouterr().err
    assert time.monotonic() - start < 10  # refused before a model or dataset is built


@pytest.fixture(scope="module")
def data() -> Dataset:
    d = digits(seed=0)
    return Dataset("digits-small", d.x_train[:32], d.y_train[:32], d.x_test[:16],
                   d.y_test[:16], 10, d.input_shape, d.provenance)


FIT = dict(method="gpipe", num_stages=2, num_microbatches=2, batch_size=16, epochs=1)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (dict(lr=float("inf")), "lr must be a positive number (finite), got inf"),
        (dict(lr=0.1, momentum=5.0), "momentum must be a number in [0, 1), got 5.0"),
        (dict(lr=0.1, seed=-1), "seed must be an integer in 0..2**32-1, got -1"),
        (dict(lr=0.1, t1_anneal_updates=-5), "t1_anneal_updates must be an integer >= 0"),
        # T2's gamma, whether or not the method turns T2 on (gpipe does not)
        (dict(lr=0.1, gamma=5.0), "gamma must be a number in [0, 1) (T2's EMA decay), got 5.0"),
        (dict(lr=0.1, gamma=1.0), "gamma must be a number in [0, 1) (T2's EMA decay), got 1.0"),
        (dict(lr=0.1, gamma=float("nan")), "gamma must be a number in [0, 1)"),
        (dict(lr=0.1, gamma=[0.5, -0.1]), "gamma[1] must be a number in [0, 1) (T2's EMA "
                                           "decay), got -0.1"),
        (dict(lr=0.1, gamma="0.9"), "gamma must be a number in [0, 1) (T2's EMA decay), "
                                    "got '0.9'"),
    ],
)
def test_fit_refuses_numbers_out_of_range(data, options, said):
    with pytest.raises(ValueError) as caught:
        fit(mlp(64, 8, 2, 10), data, **FIT, **options)
    assert said in str(caught.value)


def _changed(data: Dataset, **fields) -> Dataset:
    return Dataset(**{**data.__dict__, **fields})


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda d: _changed(d, x_test=d.x_test[:0], y_test=d.y_test[:0]),
         "the test set is empty"),
        (lambda d: _changed(d, y_train=d.y_train[:-1]),
         "x_train has 32 samples but y_train has 31"),
        (lambda d: _changed(d, y_test=d.y_test[:-3]), "x_test has 16 samples but y_test has 13"),
        (lambda d: _changed(d, y_train=d.y_train + 10), "y_train holds label 1"),
        (lambda d: _changed(d, y_test=d.y_test - 20), "y_test holds label -"),
    ],
)
def test_fit_refuses_a_dataset_it_cannot_use_before_training(data, monkeypatch, change, said):
    steps = []
    with pytest.raises(ValueError) as caught:
        fit(mlp(64, 8, 2, 10), change(data), **FIT, lr=0.1, on_step=lambda s, h: steps.append(s))
    assert said in str(caught.value) and "digits-small" in str(caught.value)
    assert steps == []  # before the first step, not after the run


def test_a_cache_file_with_other_arrays_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPEMARE_CACHE", str(tmp_path))
    digits(seed=0)
    (path,) = tmp_path.glob("digits-sklearn-*.npz")
    np.savez(path, something_else=np.arange(3))  # same name, other arrays
    again = digits(seed=0)  # was: KeyError 'images' on every run
    assert again.x_train.shape[1:] == (1, 8, 8)
    with np.load(path, allow_pickle=False) as stored:
        assert sorted(stored.files) == ["images", "target"]  # rebuilt in place


@pytest.mark.dist
def test_the_next_launch_removes_a_killed_launchers_results_folder(tmp_path):
    from pipemare_lite.engine.distributed.launch import launch, ping

    env = {**os.environ, "TMPDIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    code = ("from pipemare_lite.engine.distributed.launch import launch, ping\n"
            "launch(ping, 1, kwargs={'sleep': 120.0}, timeout=300)\n")
    with hard_time_limit(150):
        launcher = subprocess.Popen([sys.executable, "-c", code], env=env)
        try:
            deadline = time.monotonic() + 90
            while not list(tmp_path.glob("pipemare-launch-*")):
                assert time.monotonic() < deadline, "the launcher never made its folder"
                assert launcher.poll() is None, "the launcher ended early"
                time.sleep(0.2)
            launcher.send_signal(signal.SIGKILL)  # no finally, no atexit
            launcher.wait(timeout=10)
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.wait()
        (left,) = tmp_path.glob("pipemare-launch-*")
        old = tempfile.tempdir
        tempfile.tempdir = str(tmp_path)
        try:
            assert [r["rank_sum"] for r in launch(ping, 1, timeout=120)] == [0]
        finally:
            tempfile.tempdir = old
    assert not left.exists(), "the killed launcher's folder is still there"
    assert list(tmp_path.glob("pipemare-launch-*")) == []  # and the new one removed too
