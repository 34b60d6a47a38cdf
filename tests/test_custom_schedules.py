"""Hand-written and registered schedules through fit() and the CLI (docs/write-a-schedule.md).

References: a one-minibatch 1F1B pattern repeated K times is the built-in 1F1B schedule of K
minibatches action for action, and trains bitwise like ``method="1f1b"``; a registered
builder that returns the async pipeline's rows trains bitwise like ``method="async"``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipemare_lite import fit
from pipemare_lite.cli import main
from pipemare_lite.schedules import ScheduleError, build_schedule
from pipemare_lite.schedules.io import from_rows, load_schedule, to_csv
from pipemare_lite.schedules.registry import register_schedule, schedule_names
from pipemare_lite.schedules.repeat import repeat_schedule
from pipemare_lite.training.datasets import Dataset
from pipemare_lite.training.models import mlp

EXAMPLE = Path(__file__).parent.parent / "docs" / "examples" / "two_stage_1f1b.csv"


pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 12, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    return Dataset("toy", x[:64], y[:64], x[64:], y[64:], 4, (12,), "random, for tests")


def model():
    return mlp(12, 16, 4, 4, seed=3)


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "interleaved"])
def test_a_repeated_one_minibatch_pattern_is_the_builder_with_k_minibatches(name):
    assert repeat_schedule(build_schedule(name, 3, 4), 5).ranks == \
        build_schedule(name, 3, 4, num_minibatches=5).ranks


def test_the_example_csv_trains_bitwise_like_1f1b_with_evaluation_and_checkpoints(
        data, tmp_path):
    schedule = load_schedule(EXAMPLE)
    assert (schedule.num_ranks, schedule.num_microbatches, schedule.weight_mode) == (2, 4, "sync")
    path = tmp_path / "run.ckpt"
    custom = fit(model(), data, schedule=EXAMPLE, batch_size=16, epochs=2, lr=0.1,
                 checkpoint_path=path, checkpoint_every=3, eval_every=2)
    reference = fit(model(), data, method="1f1b", num_stages=2, num_microbatches=4,
                    batch_size=16, epochs=2, lr=0.1, eval_every=2)
    assert custom.loss == reference.loss and len(custom.loss) == 8
    assert custom.evals == reference.evals and len(custom.evals) == 4
    assert custom.config["schedule"].startswith("custom#") and custom.config["method"] is None
    assert path.exists()
    # resuming from the checkpoint (written at step 6) continues the same trajectory
    resumed = fit(model(), data, schedule=EXAMPLE, batch_size=16, epochs=2, lr=0.1,
                  checkpoint_path=path, checkpoint_every=3, eval_every=2, resume=True)
    assert resumed.loss == custom.loss
    other = tmp_path / "other.csv"
    other.write_text(to_csv(build_schedule("gpipe", 2, 4)))  # other rows, same sizes
    with pytest.raises(ValueError, match="other settings: schedule="):
        fit(model(), data, schedule=other, batch_size=16, epochs=2, lr=0.1,
            checkpoint_path=path, checkpoint_every=3, resume=True)


def test_divergence_is_caught_on_a_custom_schedule(data):
    history = fit(model(), data, schedule=EXAMPLE, batch_size=16, epochs=2, lr=1e6)
    assert history.diverged and "diverged at step" in history.divergence


def test_a_registered_async_builder_trains_like_the_method(data, registered):
    def rows(num_ranks, num_microbatches, *, num_minibatches, chunks, warmup):
        built = build_schedule("async", num_ranks, num_microbatches,
                               num_minibatches=num_minibatches)
        return built.rows()

    registered("my-async", rows, weight_mode="async")
    assert "my-async" in schedule_names()
    custom = fit(model(), data, schedule="my-async", num_stages=4, num_microbatches=2,
                 batch_size=16, epochs=2, lr=0.05)
    reference = fit(model(), data, method="async", num_stages=4, num_microbatches=2,
                    batch_size=16, epochs=2, lr=0.05)
    assert custom.loss == reference.loss and custom.forward_delay == reference.forward_delay
    pipemare = fit(model(), data, schedule="my-async", method="pipemare", num_stages=4,
                   num_microbatches=2, batch_size=16, epochs=2, lr=0.05)
    assert pipemare.config["t1"] and pipemare.config["t2"]
    with pytest.raises(ValueError, match="method '1f1b' reads weights in mode 'sync' but "
                                         "schedule 'my-async' has weight mode 'async'"):
        fit(model(), data, schedule="my-async", method="1f1b", num_stages=4,
            num_microbatches=2, batch_size=16, epochs=1, lr=0.05)


def test_register_schedule_refuses_taken_names_and_bad_modes(registered):
    with pytest.raises(ScheduleError, match="cannot register schedule '1f1b'"):
        register_schedule("1f1b", lambda *a, **k: None)
    with pytest.raises(ScheduleError, match="weight_mode='fast'; allowed: sync"):
        register_schedule("mine", lambda *a, **k: None, weight_mode="fast")
    registered("wrong-size", lambda P, M, **k: build_schedule("1f1b", P, M).rows())
    with pytest.raises(ScheduleError, match=r"'wrong-size' \(asked for P=2, N=2, K=3, v=1, "
                                            r"W=0\): missing 0F2"):
        build_schedule("wrong-size", 2, 2, num_minibatches=3)


def test_custom_schedules_are_checked_before_training(data, tmp_path):
    with pytest.raises(ValueError, match="num_stages=3 disagrees with schedule 'custom', "
                                         "which has 2"):
        fit(model(), data, schedule=EXAMPLE, num_stages=3, batch_size=16, epochs=1, lr=0.1)
    with pytest.raises(ValueError, match="batch size 10 does not split evenly into 4"):
        fit(model(), data, schedule=EXAMPLE, batch_size=10, epochs=1, lr=0.1)
    two = from_rows([["0F0", "0B0", "0U0", "0F1", "0B1", "0U1"]], name="custom",
                    num_microbatches=1)
    with pytest.raises(ValueError, match="runs 2 minibatches but the run has 4 steps"):
        fit(model(), data, schedule=two, batch_size=16, epochs=1, lr=0.1)
    with pytest.raises(ValueError, match="give a method .* or a schedule"):
        fit(model(), data, batch_size=16, epochs=1, lr=0.1)
    with pytest.raises(ValueError, match=r"schedule='nope': allowed: a Schedule, a registered"):
        fit(model(), data, schedule="nope", batch_size=16, epochs=1, lr=0.1)
    with pytest.raises(ValueError, match="warmup=1 cannot apply to a given schedule"):
        fit(model(), data, schedule=EXAMPLE, warmup=1, batch_size=16, epochs=1, lr=0.1)


def test_a_schedule_that_does_not_flush_needs_a_declared_weight_mode(data, tmp_path):
    rows = build_schedule("async", 2, 1, num_minibatches=4).rows()
    path = tmp_path / "async.csv"
    path.write_text(to_csv(from_rows(rows, name="custom", num_microbatches=1,
                                     weight_mode="async")))
    with pytest.raises(ScheduleError, match="does not flush .* ambiguous: declare weight_mode"):
        load_schedule(path)
    assert load_schedule(path, weight_mode="async").weight_mode == "async"
    # a method beside a CSV file declares its mode for it
    history = fit(model(), data, schedule=path, method="async", batch_size=16, epochs=1,
                  lr=0.05)
    assert len(history.loss) == 4


def test_cli_trains_and_simulates_a_csv_schedule(tmp_path, capsys):
    out, ckpt = tmp_path / "h.json", tmp_path / "c.ckpt"
    argv = ["train", "--schedule", str(EXAMPLE), "--batch-size", "64", "--width", "8",
            "--layers", "2", "--epochs", "1", "--json", "--out", str(out),
            "--checkpoint", str(ckpt), "--checkpoint-every", "5"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["evals"] and ckpt.exists()
    assert json.loads(out.read_text())["config"]["num_stages"] == 2
    assert main(["train", "--schedule", str(EXAMPLE), "--stages", "3"]) == 2
    assert "--stages=3 disagrees with --schedule" in capsys.readouterr().err
    assert main(["train"]) == 2
    assert "give --method (a pipeline method) or --schedule" in capsys.readouterr().err
    assert main(["schedule", "--from", str(EXAMPLE)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(
        "custom: P=2 stages, M=4 microbatches, K=1 minibatches, weight mode sync")
    assert "rank 1  | .  F0 B0 -- F1 B1" in text
    bad = tmp_path / "bad.txt"
    bad.write_text("0F0")
    assert main(["schedule", "--from", str(bad)]) == 2
    assert "unknown suffix '.txt'; allowed: .csv, .json" in capsys.readouterr().err


def test_a_json_schedule_is_read_by_fit_and_the_cli(data, tmp_path, capsys):
    from pipemare_lite.schedules.io import to_json

    path = tmp_path / "pipedream.json"
    path.write_text(to_json(build_schedule("pipedream", 2, 2, num_minibatches=4)))
    history = fit(model(), data, schedule=path, batch_size=16, epochs=1, lr=0.05)
    reference = fit(model(), data, method="pipedream", num_stages=2, num_microbatches=2,
                    batch_size=16, epochs=1, lr=0.05)
    assert history.loss == reference.loss  # the file's weight mode (stash) is the method's
    assert main(["schedule", "--from", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["schedule"], summary["weight_mode"], summary["minibatches"]) == (
        "pipedream", "stash", 4)
    assert main(["schedule", "--from", str(path), "--microbatches", "2"]) == 2
    assert "a JSON schedule says these itself" in capsys.readouterr().err
