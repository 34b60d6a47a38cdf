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
import torch

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


# ------------------------------------------------------------------ another length (item 5)
LENGTH = dict(num_stages=4, num_microbatches=2, batch_size=8, lr=0.05, momentum=0.9, seed=1)


class _Crash(Exception):
    pass


def _checkpointed(small_data, ck, epochs, stop, **options):
    """A run of ``epochs`` saving every 5 steps, crashed after step ``stop`` (None: it
    finishes, its last checkpoint at its end)."""
    def crash(step, history):
        if step == stop:
            raise _Crash

    try:
        fit(mlp(64, 16, 4, 10, seed=5), small_data, epochs=epochs, checkpoint_path=ck,
            checkpoint_every=5, on_step=crash if stop else None, **options)
    except _Crash:
        pass


@pytest.mark.parametrize("method, options, stop", [
    ("1f1b", {}, None),  # a finished run extended
    ("gpipe", {"lr_schedule": "step", "lr_warmup": 3, "lr_step_size": 5}, None),
    ("pipedream", {}, 7),  # no flush: from a checkpoint before the drain (step 5)
    ("async", {}, 12),
    ("pipemare", {"t1_anneal_updates": 10}, 7),  # T1 with a fixed horizon
])
def test_a_run_resumed_longer_equals_the_longer_run_from_the_start(small_data, tmp_path,
                                                                   method, options, stop):
    settings = dict(LENGTH, method=method, **options)
    straight_model = mlp(64, 16, 4, 10, seed=5)
    straight = fit(straight_model, small_data, epochs=4, **settings)
    ck = tmp_path / "run.pt"
    _checkpointed(small_data, ck, 2, stop, **settings)
    resumed_model = mlp(64, 16, 4, 10, seed=5)
    resumed = fit(resumed_model, small_data, epochs=4, checkpoint_path=ck, resume=True,
                  **settings)
    assert len(resumed.loss) == 32 and resumed.config["epochs"] == 4
    assert resumed.loss == straight.loss and resumed.evals == straight.evals
    for (name, a), b in zip(straight_model.state_dict().items(),
                            resumed_model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_run_resumed_shorter_equals_the_shorter_run(small_data, tmp_path):
    settings = dict(LENGTH, method="1f1b")
    ck = tmp_path / "run.pt"
    _checkpointed(small_data, ck, 4, 7, **settings)  # its checkpoint: step 5
    short = fit(mlp(64, 16, 4, 10, seed=5), small_data, epochs=1, checkpoint_path=ck,
                resume=True, **settings)
    assert short.loss == fit(mlp(64, 16, 4, 10, seed=5), small_data, epochs=1,
                             **settings).loss


@pytest.mark.parametrize("method, options, stop, epochs, refusal", [
    ("1f1b", {"lr_schedule": "cosine"}, None, 4,
     "--lr-schedule cosine anneals over the run's length (16 updates there, 32 now)"),
    ("pipemare", {}, 7, 4, "T1 anneals over the whole run (16 updates there, 32 now) when "
                           "--t1-anneal-updates is not given"),
    ("pipemare-m", {}, 7, 4, "T1 anneals over the whole run"),
    ("pipedream", {}, None, 4, "its schedule does not continue there (rank 0's action 75 was "
                               "0B29, a 32-step run's is 0F32): a schedule that does not "
                               "flush drains its pipeline at the run's end"),
    ("1f1b", {}, 12, 1, "it is past that run's end; ask for at least 2 epochs"),
])
def test_a_length_that_cannot_continue_is_refused_saying_why(small_data, tmp_path, method,
                                                             options, stop, epochs, refusal):
    from pipemare_lite.training.checkpoint import CheckpointError

    settings = dict(LENGTH, method=method, **options)
    ck = tmp_path / "run.pt"
    _checkpointed(small_data, ck, 2, stop, **settings)
    step = stop // 5 * 5 if stop else 16  # the last save before the crash
    with pytest.raises(CheckpointError) as refused:
        fit(mlp(64, 16, 4, 10, seed=5), small_data, epochs=epochs, checkpoint_path=ck,
            resume=True, **settings)
    assert str(refused.value).startswith(
        f"checkpoint {ck} (step {step} of a 16-step run, epochs=2) cannot continue as a run "
        f"of {epochs * 8} steps (epochs={epochs}): ")
    assert refusal in str(refused.value)


@pytest.mark.dist
def test_cli_extends_a_finished_run_under_dist_and_refuses_in_one_line(tmp_path, capsys):
    """A finished distributed run continued to twice its length equals a run asked for that
    length (the local executor's, bitwise equal by design); a length the checkpoint cannot
    reach: one line from rank 0, rc 2."""
    ck = tmp_path / "run.pt"
    argv = ["--method", "1f1b", "--stages", "2", "--microbatches", "2", "--batch-size", "256",
            "--width", "8", "--json"]
    assert main(["train", *argv, "--epochs", "2"]) == 0
    straight = json.loads(capsys.readouterr().out)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO),
                                                        os.environ.get("PYTHONPATH", "")])}

    def dist(*extra):
        return subprocess.run([sys.executable, "-m", "pipemare_lite", "train", *argv,
                               "--executor", "dist", "--checkpoint", str(ck), *extra],
                              capture_output=True, text=True, env=env, timeout=300,
                              cwd=tmp_path)

    first = dist("--epochs", "1", "--checkpoint-every", "2")  # finished: saved at step 5
    assert first.returncode == 0, first.stderr
    done = dist("--epochs", "2", "--resume", "--checkpoint-every", "1000")  # saves at 10
    assert done.returncode == 0, done.stderr
    resumed = json.loads(done.stdout)
    assert (resumed["steps"], resumed["final_loss"], resumed["evals"]) == (
        straight["steps"], straight["final_loss"], straight["evals"])
    refused = dist("--epochs", "1", "--resume")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr == (
        f"pipemare-lite train: error: checkpoint {ck} (step 10 of a 10-step run, epochs=2) "
        "cannot continue as a run of 5 steps (epochs=1): it is past that run's end; ask "
        "for at least 2 epochs\n")
    assert refused.stdout == ""


def test_an_extended_run_extends_again(small_data, tmp_path):
    """Its checkpoint records the longer run (settings and schedule digest): 2 -> 3 -> 4
    epochs equals 4 from the start (the digest was the shorter run's before)."""
    settings = dict(LENGTH, method="1f1b")
    ck = tmp_path / "run.pt"
    _checkpointed(small_data, ck, 2, None, **settings)
    fit(mlp(64, 16, 4, 10, seed=5), small_data, epochs=3, checkpoint_path=ck,
        checkpoint_every=5, resume=True, **settings)
    again = fit(mlp(64, 16, 4, 10, seed=5), small_data, epochs=4, checkpoint_path=ck,
                resume=True, **settings)
    assert again.loss == fit(mlp(64, 16, 4, 10, seed=5), small_data, epochs=4,
                             **settings).loss
