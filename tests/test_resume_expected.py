"""Resume as users expect (issue 47, item 5, first part): ``--resume`` reads a checkpoint
without ``--checkpoint-every``; a resume that finds no checkpoint says so; a refused
checkpoint under the distributed executor is one line, exit status 2, from rank 0 only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from pipemare_lite.cli import main
from pipemare_lite.training.checkpoint import state_digest
from pipemare_lite.training.datasets import Dataset, digits
from pipemare_lite.training.loop import NoCheckpointWarning, fit
from pipemare_lite.training.models import mlp

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py
REPO = Path(__file__).resolve().parents[1]
KWARGS = dict(method="pipemare", num_stages=4, num_microbatches=2, batch_size=8, epochs=2,
              lr=0.05, momentum=0.9, seed=1)


@pytest.fixture(scope="module")
def small_data() -> Dataset:
    d = digits(seed=0)
    return Dataset("digits-small", d.x_train[:64], d.y_train[:64], d.x_test[:40],
                   d.y_test[:40], 10, d.input_shape, d.provenance)


def test_resume_reads_a_checkpoint_without_saving_new_ones(small_data, tmp_path):
    straight = fit(mlp(64, 16, 4, 10, seed=5), small_data, **KWARGS)
    ck = tmp_path / "run.pt"

    class Crash(Exception):
        pass

    def crash_at_7(step, history):
        if step == 7:
            raise Crash

    with pytest.raises(Crash):
        fit(mlp(64, 16, 4, 10, seed=5), small_data, checkpoint_path=ck, checkpoint_every=5,
            on_step=crash_at_7, **KWARGS)
    from pipemare_lite.training.checkpoint import load_checkpoint

    before = state_digest(load_checkpoint(ck))
    resumed = fit(mlp(64, 16, 4, 10, seed=5), small_data, checkpoint_path=ck, resume=True,
                  **KWARGS)  # no checkpoint_every: read, never written
    assert resumed.loss == straight.loss and resumed.evals == straight.evals
    assert state_digest(load_checkpoint(ck)) == before


def test_a_resume_that_finds_no_checkpoint_says_so(small_data, tmp_path):
    missing = tmp_path / "nothing-here.pt"
    with pytest.warns(NoCheckpointWarning, match=f"resume=True: no checkpoint at {missing}; "
                                                 "training from step 0"):
        history = fit(mlp(64, 16, 4, 10, seed=5), small_data, checkpoint_path=missing,
                      checkpoint_every=4, resume=True, **KWARGS)
    assert history.loss == fit(mlp(64, 16, 4, 10, seed=5), small_data, **KWARGS).loss
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a resume that finds one is silent
        fit(mlp(64, 16, 4, 10, seed=5), small_data, checkpoint_path=missing, resume=True,
            **KWARGS)


def test_checkpoint_settings_that_do_nothing_are_refused(small_data, tmp_path):
    with pytest.raises(ValueError, match="checkpoint_path without checkpoint_every saves "
                                         "nothing: give checkpoint_every"):
        fit(mlp(64, 16, 4, 10), small_data, checkpoint_path=tmp_path / "x.pt", **KWARGS)


def test_cli_resume_without_every_and_with_nothing_to_resume(tmp_path, capsys):
    ck = tmp_path / "run.pt"
    argv = ["train", "--method", "1f1b", "--stages", "2", "--microbatches", "2",
            "--batch-size", "256", "--width", "8", "--epochs", "1", "--json"]
    assert main([*argv, "--checkpoint", str(ck), "--resume"]) == 0
    err = capsys.readouterr().err
    assert err == (f"pipemare-lite train: --resume: no checkpoint at {ck}; training from "
                   "step 0\n")  # one line, no Python warning
    assert main([*argv, "--checkpoint", str(ck), "--checkpoint-every", "2"]) == 0
    first = capsys.readouterr().out
    assert main([*argv, "--checkpoint", str(ck), "--resume"]) == 0  # was refused before
    captured = capsys.readouterr()
    assert captured.err == ""
    done, resumed = json.loads(first), json.loads(captured.out)  # the finished run, read
    assert (resumed["steps"], resumed["final_loss"], resumed["evals"]) == (
        done["steps"], done["final_loss"], done["evals"])


@pytest.mark.dist
def test_a_refused_resume_under_dist_is_one_line_and_rc_2(tmp_path):
    """It was rc 1 with both ranks' tracebacks (23 lines)."""
    ck = tmp_path / "run.pt"
    argv = ["--method", "1f1b", "--stages", "2", "--microbatches", "2", "--batch-size", "256",
            "--width", "8", "--epochs", "1", "--checkpoint", str(ck)]
    assert main(["train", *argv, "--checkpoint-every", "2", "--json"]) == 0  # local's
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO),
                                                        os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pipemare_lite", "train", *argv, "--executor",
                           "dist", "--resume"], capture_output=True, text=True, env=env,
                          timeout=180, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"pipemare-lite train: error: {ck} was written by a run with other "
                           "settings: executor='local' (now 'dist')\n")
