"""fit(): sync equals one-device accumulation, bitwise resume, divergence, delays, CLI."""

import json
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from pipemare_lite.analysis.staleness import weight_versions
from pipemare_lite.methods import build_method_schedule
from pipemare_lite.training.checkpoint import (
    decode_state,
    encode_state,
    load_checkpoint,
    save_checkpoint,
)
from pipemare_lite.training.data_feed import EpochMicrobatches, epoch_order
from pipemare_lite.training.datasets import Dataset, digits
from pipemare_lite.training.history import DivergenceError
from pipemare_lite.training.loop import _progress_enabled, fit
from pipemare_lite.training.models import mlp


@pytest.fixture(scope="module")
def small_data() -> Dataset:
    d = digits(seed=0)
    return Dataset(
        "digits-small",
        d.x_train[:64],
        d.y_train[:64],
        d.x_test[:40],
        d.y_test[:40],
        10,
        d.input_shape,
        d.provenance,
    )


def _model(seed=0):
    return mlp(64, 16, 4, 10, seed=seed)


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize(
    "method, num_stages, chunks",
    [("gpipe", 4, None), ("1f1b", 4, None), ("interleaved", 2, None), ("interleaved", 2, 2)],
)
def test_sync_methods_equal_one_device_gradient_accumulation(
    method, num_stages, chunks, small_data
):
    # interleaved: 2 ranks x 2 chunks (its default) = the same 4 pieces as the others
    torch.set_num_threads(1)
    piped, reference = _model(), _model()
    history = fit(
        piped,
        small_data,
        method=method,
        num_stages=num_stages,
        chunks=chunks,
        num_microbatches=4,
        batch_size=16,
        epochs=2,
        lr=0.1,
        momentum=0.9,
        seed=3,
    )
    # reference: a plain loop on one device, same data order, loss/N per microbatch
    opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for epoch in range(2):
        order = epoch_order(64, 3, epoch)
        for k in range(4):
            idx = order[k * 16 : (k + 1) * 16]
            x, y = small_data.x_train[idx], small_data.y_train[idx]
            step_losses = []
            for j in range(4):
                loss = F.cross_entropy(reference(x[4 * j : 4 * j + 4]), y[4 * j : 4 * j + 4])
                (loss / 4).backward()
                step_losses.append(loss.item())
            opt.step()
            opt.zero_grad()
            losses.append(sum(step_losses) / 4)
    assert history.steps == 8 and not history.diverged
    assert history.loss == losses
    for p, q in zip(piped.parameters(), reference.parameters()):
        assert torch.equal(p, q)
    assert history.forward_delay == [0.0] * 4  # one entry per (virtual) stage
    assert history.config["chunks"] == (2 if method == "interleaved" else 1)
    assert [e["epoch"] for e in history.evals] == [1, 2]


@pytest.mark.parametrize("method", ["pipemare", "pipedream"])
def test_resume_after_crash_gives_the_same_trajectory_bitwise(method, small_data, tmp_path):
    torch.set_num_threads(1)
    kwargs = dict(
        method=method,
        num_stages=4,
        num_microbatches=2,
        batch_size=8,
        epochs=2,
        lr=0.05,
        momentum=0.9,
        seed=1,
    )
    straight = _model(5)
    expected = fit(straight, small_data, **kwargs)

    class Crash(Exception):
        pass

    def crash_at_7(step, history):
        if step == 7:
            raise Crash

    ck = tmp_path / "run.pt"
    with pytest.raises(Crash):
        fit(
            _model(5),
            small_data,
            checkpoint_path=ck,
            checkpoint_every=5,
            on_step=crash_at_7,
            **kwargs,
        )
    resumed_model = _model(5)
    resumed = fit(
        resumed_model, small_data, checkpoint_path=ck, checkpoint_every=5, resume=True, **kwargs
    )
    assert resumed.loss == expected.loss
    assert resumed.evals == expected.evals
    assert resumed.stage_lr == expected.stage_lr
    assert resumed.forward_delay == expected.forward_delay
    assert resumed.memory_bytes == expected.memory_bytes
    for p, q in zip(resumed_model.parameters(), straight.parameters()):
        assert torch.equal(p, q)


def test_resume_refuses_other_settings(small_data, tmp_path):
    ck = tmp_path / "run.pt"
    kwargs = dict(method="async", num_stages=2, num_microbatches=2, batch_size=16, epochs=1)
    fit(_model(), small_data, lr=0.05, checkpoint_path=ck, checkpoint_every=2, **kwargs)
    with pytest.raises(ValueError, match=r"other settings: lr=0.05 \(now 0.1\)"):
        fit(
            _model(),
            small_data,
            lr=0.1,
            checkpoint_path=ck,
            checkpoint_every=2,
            resume=True,
            **kwargs,
        )


def test_resume_refuses_a_checkpoint_of_another_format(small_data, tmp_path):
    ck = tmp_path / "run.pt"
    kwargs = dict(method="async", num_stages=2, num_microbatches=2, batch_size=16, epochs=1)
    kwargs["lr"] = 0.05
    fit(_model(), small_data, checkpoint_path=ck, checkpoint_every=2, **kwargs)
    state = load_checkpoint(ck)
    state["format"] = 0
    save_checkpoint(ck, state)
    with pytest.raises(ValueError, match="checkpoint format 0, this version reads 1"):
        fit(_model(), small_data, checkpoint_path=ck, checkpoint_every=2, resume=True, **kwargs)


def test_divergence_stops_with_a_readable_report_or_raises(small_data):
    kwargs = dict(method="async", num_stages=4, num_microbatches=2, batch_size=8, epochs=2, lr=1e6)
    history = fit(_model(), small_data, **kwargs)
    assert history.diverged and history.steps < 16
    assert "diverged at step" in history.divergence and "stage" in history.divergence
    assert not math.isfinite(history.loss[-1]) or "non-finite weights" in history.divergence
    with pytest.raises(DivergenceError, match="diverged at step"):
        fit(_model(), small_data, on_divergence="raise", **kwargs)


def test_measured_delays_match_the_schedule_analysis_and_bytes_add_up(small_data):
    history = fit(
        _model(),
        small_data,
        method="async",
        num_stages=4,
        num_microbatches=2,
        batch_size=16,
        epochs=2,
        lr=0.01,
    )
    schedule = build_method_schedule("async", 4, 2, num_minibatches=8)
    rows = [r for r in weight_versions(schedule).rows if r.forward_delay is not None]
    for s in range(4):
        delays = [r.forward_delay for r in rows if r.stage == s]
        assert history.forward_delay[s] == pytest.approx(sum(delays) / len(delays))
        assert history.forward_delay_max[s] == max(delays)
    # the first stage is the stalest; a lock-step async pipeline: ceil((2(P-i)+1)/N) +- 1
    assert history.forward_delay_max[0] in (math.ceil(7 / 2), math.ceil(7 / 2) + 1)
    weight_bytes = sum(p.numel() * 4 for p in _model().parameters())
    assert history.memory_bytes["weights"] == weight_bytes
    for kind, total in history.memory_bytes.items():
        assert total == sum(stage[kind] for stage in history.memory_bytes_by_stage)
    assert len(history.stage_lr) == 4 and all(len(r) == 8 for r in history.stage_lr)
    assert all(lr == 0.01 for r in history.stage_lr for lr in r)


def test_t1_lowers_early_learning_rates_of_stale_stages(small_data):
    history = fit(
        _model(),
        small_data,
        method="async",
        t1=True,
        num_stages=4,
        num_microbatches=2,
        batch_size=16,
        epochs=1,
        lr=0.1,
    )
    first = [rates[0] for rates in history.stage_lr]
    assert first[0] < first[-1] <= 0.1  # stage 0 is the stalest, so it starts slowest


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(batch_size=10), "batch size 10 does not split evenly into 4 microbatches"),
        (dict(optimizer="rmsprop"), "unknown optimizer 'rmsprop'"),
        (dict(method="nope"), "unknown method 'nope'"),
        (dict(num_stages=9), "cannot split 4 layers into 9 stages"),
        (dict(lr=-1.0), "lr must be a positive number"),
        (dict(on_divergence="ignore"), "on_divergence must be one of"),
        (dict(executor="mpi"), "unknown executor 'mpi'"),
        (dict(checkpoint_every=2), "checkpoint_every needs a checkpoint_path to save to"),
        (dict(batch_size=128), "larger than the training set"),
        (dict(chunks=2), "chunks=2 needs method 'interleaved'"),
        (dict(eval_every=0), "eval_every must be a positive integer"),
        (dict(method="interleaved", chunks=0), "chunks must be a positive integer"),
        (dict(epochs=10**6), r"epochs=1000000 x \d+ steps per epoch = \d+ steps, more than a "
                             r"schedule runs .*; allowed here: epochs <= \d+"),
    ],
)
def test_bad_arguments_fail_early_with_clear_messages(kwargs, message, small_data):
    args = dict(method="1f1b", num_stages=2, num_microbatches=4, batch_size=16, epochs=1, lr=0.1)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        fit(_model(), small_data, **args)


def test_checkpoint_codec_round_trip():
    from pipemare_lite.methods.versions import ParamRef

    state = {
        (0, 3): [ParamRef(1, ((2, 3), (1, 2), 0)), torch.ones(2)],
        "a": (1, None, 2.5),
        "__x": {"y": [1]},
        4: "four",
    }
    back = decode_state(encode_state(state))
    assert back.keys() == state.keys()
    assert back[(0, 3)][0] == ParamRef(1, ((2, 3), (1, 2), 0))
    assert torch.equal(back[(0, 3)][1], torch.ones(2))
    assert back["a"] == (1, None, 2.5) and back["__x"] == {"y": [1]} and back[4] == "four"
    with pytest.raises(TypeError, match="cannot store a object"):
        encode_state({"bad": object()})


def test_progress_bar_is_quiet_under_pytest():
    assert _progress_enabled(None) is False
    assert _progress_enabled(True) is True


def test_progress_bar_shows_on_rank_0_only(small_data, capsys, monkeypatch):
    kwargs = dict(method="async", num_stages=2, num_microbatches=2, batch_size=16, epochs=1)
    fit(_model(), small_data, lr=0.05, progress=True, **kwargs)
    assert "async P=2" in capsys.readouterr().err
    monkeypatch.setenv("RANK", "1")  # under torchrun only rank 0 draws the bar
    fit(_model(), small_data, lr=0.05, progress=True, **kwargs)
    assert capsys.readouterr().err == ""


def test_cli_json_and_bad_input(capsys):
    from pipemare_lite.cli import main

    code = main(
        [
            "train",
            "--method",
            "1f1b",
            "--stages",
            "2",
            "--microbatches",
            "2",
            "--batch-size",
            "256",
            "--width",
            "8",
            "--epochs",
            "1",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    for key in (
        "final_loss",
        "final_accuracy",
        "diverged",
        "steps",
        "forward_delay",
        "memory_bytes",
        "wall_seconds",
    ):
        assert key in out
    assert out["steps"] == 1347 // 256 and len(out["forward_delay"]) == 2
    assert main(["train", "--method", "1f1b", "--stages", "3", "--batch-size", "10"]) == 2
    assert "does not split evenly" in capsys.readouterr().err
    assert main(["train", "--method", "1f1b", "--stages", "0"]) == 2
    assert "--stages must be a positive integer, got 0" in capsys.readouterr().err


@pytest.mark.slow
def test_module_entry_point_runs():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipemare_lite.training",
            "--method",
            "async",
            "--stages",
            "2",
            "--microbatches",
            "2",
            "--batch-size",
            "512",
            "--width",
            "8",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["steps"] == 2


def test_cli_json_of_a_diverged_run_is_strict_json(capsys):
    from pipemare_lite.cli import main

    code = main(
        [
            "train",
            "--method",
            "async",
            "--stages",
            "2",
            "--microbatches",
            "2",
            "--batch-size",
            "64",
            "--width",
            "8",
            "--lr",
            "1e6",
            "--json",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0
    out = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    assert out["diverged"] is True and "diverged at step" in out["divergence"]


def test_epoch_data_order_is_seeded_and_each_sample_used_at_most_once(small_data):
    feed = EpochMicrobatches(small_data, batch_size=16, num_microbatches=4, seed=2, epochs=2)
    assert len(feed) == 2 * 4 * 4
    rows = {tuple(x.flatten().tolist()): i for i, x in enumerate(small_data.x_train)}
    for epoch in range(2):
        seen = []
        for m in range(epoch * 16, (epoch + 1) * 16):
            x, y = feed[m]
            assert x.shape[0] == 4
            for xi, yi in zip(x, y):
                i = rows[tuple(xi.flatten().tolist())]
                assert small_data.y_train[i] == yi  # inputs and labels stay paired
                seen.append(i)
        assert sorted(seen) == sorted(set(seen)) and len(seen) == 64
    again = EpochMicrobatches(small_data, batch_size=16, num_microbatches=4, seed=2, epochs=2)
    assert torch.equal(again[20][0], feed[20][0])
    with pytest.raises(IndexError):
        feed[32]


@pytest.mark.slow
def test_transformer_trains_per_position_through_the_pipeline():
    from pipemare_lite.training.datasets import sequence_task
    from pipemare_lite.training.models import tiny_transformer

    data = sequence_task("reverse", vocab=8, seq_len=6, num_train=256, num_test=64, seed=0)
    model = tiny_transformer(vocab=8, d_model=16, heads=2, layers=2, seq_len=6, seed=0)
    history = fit(
        model,
        data,
        method="1f1b",
        num_stages=4,
        num_microbatches=2,
        batch_size=32,
        epochs=3,
        lr=3e-3,
        optimizer="adam",
    )
    assert history.steps == 24 and not history.diverged
    assert history.loss[-1] < history.loss[0]  # it learns
    assert 0.0 <= history.final_accuracy <= 1.0 and math.isfinite(history.final_loss)


def test_eval_every_adds_evaluations_without_changing_training(small_data):
    torch.set_num_threads(1)
    kwargs = dict(method="async", num_stages=2, num_microbatches=2, batch_size=16, epochs=2,
                  lr=0.05, momentum=0.9)
    plain_model, watched_model = _model(), _model()
    plain = fit(plain_model, small_data, **kwargs)
    watched = fit(watched_model, small_data, eval_every=1, **kwargs)
    assert [e["step"] for e in plain.evals] == [4, 8]
    assert [e["step"] for e in watched.evals] == list(range(1, 9))
    assert watched.loss == plain.loss
    for p, q in zip(plain_model.parameters(), watched_model.parameters()):
        assert torch.equal(p, q)
    at_epoch_end = [e for e in watched.evals if e["step"] in (4, 8)]
    assert at_epoch_end == plain.evals
