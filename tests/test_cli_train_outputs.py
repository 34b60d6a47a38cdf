"""``pipemare-lite train``: --out and --jsonl, defaults in --help, divergence exit code."""

from __future__ import annotations

import json

import pytest

from pipemare_lite import fit
from pipemare_lite.cli import main
from pipemare_lite.cli.commands.train import DIVERGED_EXIT_CODE, build_model_and_data
from pipemare_lite.training.history import History

SMALL = ["--stages", "2", "--microbatches", "2", "--batch-size", "256", "--width", "8"]


pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


def _strict(text: str):
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))


def test_out_and_jsonl_hold_the_run_fit_gives(tmp_path, capsys):
    out, stream = tmp_path / "history.json", tmp_path / "steps.jsonl"
    code = main(["train", "--method", "pipemare", *SMALL, "--epochs", "2", "--optimizer",
                 "adamw", "--lr", "0.01", "--lr-schedule", "cosine", "--lr-warmup", "2",
                 "--clip-grad-norm", "1.0", "--out", str(out), "--jsonl", str(stream)])
    assert code == 0, capsys.readouterr().err
    document = _strict(out.read_text())
    for key in ("format", "version", "arguments", "steps", "final_loss", "final_accuracy",
                "config", "loss", "stage_lr", "stage_lr_by_group", "evals", "diverged",
                "divergence", "forward_delay", "forward_delay_max", "memory_bytes",
                "memory_bytes_by_stage", "wall_seconds"):
        assert key in document, key
    assert document["arguments"]["lr_schedule"] == "cosine"
    # the same run through fit() directly
    model, data = build_model_and_data("mlp", None, 2, 8, None, 0)
    history = fit(model, data, method="pipemare", num_stages=2, num_microbatches=2,
                  batch_size=256, epochs=2, lr=0.01, optimizer="adamw", lr_schedule="cosine",
                  lr_warmup=2, clip_grad_norm=1.0)
    assert document["loss"] == history.loss
    assert document["stage_lr_by_group"] == history.stage_lr_by_group
    assert document["evals"] == history.evals
    assert document["forward_delay_max"] == history.forward_delay_max
    assert document["memory_bytes"] == history.memory_bytes
    assert document["steps"] == history.steps == 2 * (1347 // 256)
    back = History.read_json(out)  # the file reads back as a History
    assert back.loss == history.loss and back.final_accuracy == history.final_accuracy
    # one flushed line per step, the same numbers
    lines = [_strict(line) for line in stream.read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(1, history.steps + 1))
    assert [line["loss"] for line in lines] == history.loss
    for k, line in enumerate(lines):
        assert line["lr"] == [[rates[k] for rates in groups]
                              for groups in history.stage_lr_by_group]
    evaluated = [line for line in lines if "eval" in line]
    assert [line["step"] for line in evaluated] == [e["step"] for e in history.evals]
    assert [line["eval"]["accuracy"] for line in evaluated] == [
        e["accuracy"] for e in history.evals]
    assert not any(line["diverged"] for line in lines)


def test_divergence_under_raise_is_a_message_and_exit_code_3(tmp_path, capsys):
    out = tmp_path / "history.json"
    argv = ["--method", "async", "--stages", "4", "--microbatches", "2", "--batch-size", "64",
            "--width", "8", "--lr", "1e3", "--on-divergence", "raise", "--out", str(out)]
    assert main(["train", *argv]) == DIVERGED_EXIT_CODE == 3
    err = capsys.readouterr().err
    assert err.startswith("pipemare-lite train: diverged at step ")
    assert "Traceback" not in err and "DivergenceError" not in err
    document = _strict(out.read_text())  # the history up to the divergence is kept
    assert document["diverged"] is True and document["divergence"] in err
    from pipemare_lite.cli.commands.train import main as module_main  # python -m ...train

    assert module_main(argv) == DIVERGED_EXIT_CODE
    assert capsys.readouterr().err.startswith("pipemare_lite.training: diverged at step ")


def test_contradictory_and_bad_options_exit_2_naming_them(tmp_path, capsys):
    assert main(["train", "--method", "1f1b", "--optimizer", "adam", "--momentum", "0.9"]) == 2
    assert "momentum=0.9 has no effect with optimizer 'adam'" in capsys.readouterr().err
    assert main(["train", "--method", "1f1b", "--lr-gamma", "0.5"]) == 2
    assert "lr_gamma=0.5 only applies to lr_schedule 'step'" in capsys.readouterr().err
    assert main(["train", "--method", "1f1b", "--out", str(tmp_path)]) == 2
    assert f"--out {str(tmp_path)!r} is a folder" in capsys.readouterr().err


def test_help_shows_defaults_and_every_method(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for shown in ("--lr LR base learning rate (default: 0.05)",
                  "(default: constant)", "(default: sgd)", "--stages STAGES pipeline stages P "
                  "(default: 4)", "exit status: 0 trained", "3 diverged under --on-divergence"):
        assert shown in text, shown
    listed = text.split("one of: ", 1)[1]
    # every built-in method; a plugin's appears once its module is loaded, which in a test
    # session depends on which tests ran in this worker before (tests/test_method_plugins.py)
    from pipemare_lite.methods.registry import BUILT_IN_MODULES, METHOD_TABLE

    for name in [row[0] for row in METHOD_TABLE] + list(BUILT_IN_MODULES):
        assert name in listed, name
    assert "..." not in text
