"""The sweep tool (issue 48, item 6): ``pipemare-lite sweep`` and ``pml.sweep``.

- a 2-method x 2-seed sweep on a tiny MLP, through Python and through the command line (in 2
  processes), gives every run with its history, and the same numbers both ways;
- a sweep started again after one line of its file was deleted (and a torn line added) runs
  only the missing run, which comes back bitwise;
- the printed means, 95 % intervals and Welch comparisons equal a plain computation with
  scipy's t quantiles;
- a plugin's method is swept (--plugin); bad input is named before any training;
- the partial-file lines are the format lr-map stored before the runner moved here.
"""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

import pipemare_lite as pml
from pipemare_lite import cli
from pipemare_lite.cli.commands.sweep import CommandLineModel, parse_methods, parse_settings
from pipemare_lite.experiments import sweep as sweep_module
from pipemare_lite.files import json_ready

TINY = ["--model", "mlp", "--dataset", "signals", "--stages", "2", "--microbatches", "2",
        "--width", "16", "--epochs", "1"]
FIT = {"num_stages": 2, "num_microbatches": 2, "batch_size": 32, "epochs": 1, "lr": 0.05}


def tiny(seed):
    """The command line's tiny MLP and its data, for the Python API."""
    return CommandLineModel("mlp", "signals", 2, 16, None)(seed)


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def cli_sweep(tmp_path_factory):
    """2 methods x 2 seeds through the command line, 2 processes."""
    out = tmp_path_factory.mktemp("sweep") / "runs.jsonl"
    code = cli.main(["sweep", "--methods", "1f1b", "async", "--seeds", "0", "1", *TINY,
                     "--jobs", "2", "--out", str(out)])
    assert code == 0
    return out


def test_a_sweep_through_python_stores_every_run_with_its_history(tmp_path):
    out = tmp_path / "runs.jsonl"
    result = pml.sweep(tiny, None, methods=["1f1b", "async"], seeds=[0, 1], out=out, jobs=1,
                       log=None, **FIT)
    lines = _lines(out)
    assert len(lines) == len(result.runs) == 4
    assert sorted((r["label"], r["seed"]) for r in result.runs) == [
        ("1f1b", 0), ("1f1b", 1), ("async", 0), ("async", 1)]
    for run in result.runs:
        history = pml.History.from_dict(run["history"])
        assert history.final_loss == run["final_loss"] and history.steps == run["steps"]
        assert run["quality"] == run["final_accuracy"]  # no run diverged
    assert [c["label"] for c in result.cells] == ["1f1b", "async"]
    assert [d["label"] for d in result.comparisons] == ["async"]
    assert "async - 1f1b:" in str(result)


def test_python_and_the_command_line_give_the_same_runs(cli_sweep, tmp_path):
    out = tmp_path / "runs.jsonl"
    result = pml.sweep(tiny, None, methods=["1f1b", "async"], seeds=[0, 1], out=out, jobs=1,
                       log=None, **FIT)
    by_cli = {(o["label"], o["seed"]): o for o in (x["outcome"] for x in _lines(cli_sweep))}
    for run in result.runs:  # the same seed on the same machine: bitwise, 2 processes or 1
        other = by_cli[run["label"], run["seed"]]
        assert other["history"]["loss"] == json_ready(run["history"]["loss"])
        assert other["final_accuracy"] == run["final_accuracy"]


def test_a_sweep_resumes_after_a_line_was_deleted(cli_sweep, tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    lines = cli_sweep.read_text().splitlines(keepends=True)
    deleted = json.loads(lines[1])
    out.write_text("".join(lines[:1] + lines[2:]) + '{"key": "torn')  # stopped mid-write
    capsys.readouterr()
    code = cli.main(["sweep", "--methods", "1f1b", "async", "--seeds", "0", "1", *TINY,
                     "--jobs", "1", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "sweep: 3 of 4 runs already done, 1 to run" in captured.err
    assert captured.err.count(" CPU-s)") == 1  # one run trained
    again = {x["key"]: x["outcome"] for x in _lines(out)}  # the torn line is gone
    assert len(again) == 4
    redone, before = again[deleted["key"]], deleted["outcome"]
    for key in ("final_loss", "final_accuracy", "quality", "steps", "diverged"):
        assert redone[key] == before[key], key
    for key in ("loss", "evals", "memory_bytes"):  # what training computed (not its timing)
        assert redone["history"][key] == before["history"][key], key


def _t_interval(values, confidence=0.95):
    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = stats.t.ppf((1 + confidence) / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _welch(x, y, confidence=0.95):
    vx, vy = (stats.tvar(v) / len(v) for v in (x, y))
    df = math.floor((vx + vy) ** 2 / (vx**2 / (len(x) - 1) + vy**2 / (len(y) - 1)))
    estimate = sum(x) / len(x) - sum(y) / len(y)
    half = stats.t.ppf((1 + confidence) / 2, df) * math.sqrt(vx + vy)
    return estimate, estimate - half, estimate + half


def test_intervals_and_comparisons_against_a_plain_computation():
    # made-up outcomes, so that every interval has spread: 2 methods x 4 seeds x 2 lrs
    accuracies = {("a", 0.1): [0.80, 0.84, 0.79, 0.90], ("b", 0.1): [0.70, 0.75, 0.69, 0.74],
                  ("a", 0.2): [0.60, 0.95, 0.20, 0.85], ("b", 0.2): [0.61, 0.62, 0.66, 0.59]}
    outcomes = [{"label": label, "seed": s, "settings": {"lr": lr, "epochs": 1},
                 "quality": acc, "final_loss": 1 - acc / 2, "diverged": False}
                for (label, lr), values in accuracies.items() for s, acc in enumerate(values)]
    result = sweep_module.summarise(outcomes, ["a", "b"], ("lr",))
    for cell in result.cells:
        values = accuracies[cell["label"], cell["at"]["lr"]]
        mean, low, high = _t_interval(values)
        assert (cell["quality"]["mean"], cell["quality"]["low"], cell["quality"]["high"]) == \
            pytest.approx((mean, low, high), rel=1e-9)
        loss = _t_interval([1 - v / 2 for v in values])
        assert cell["final_loss"]["low"] == pytest.approx(loss[1], rel=1e-9)
    words, estimates = {}, {}
    for d in result.comparisons:
        lr = d["at"]["lr"]
        estimate, low, high = _welch(accuracies["b", lr], accuracies["a", lr])
        assert (d["estimate"], d["low"], d["high"]) == pytest.approx((estimate, low, high),
                                                                     rel=1e-9)
        words[lr], estimates[lr] = d["word"], estimate
    assert words == {0.1: "lower", 0.2: "not separable from the seed noise"}
    text = str(result)
    assert f"b - a: {estimates[0.1]:+.3f}" in text
    mean, low, high = _t_interval(accuracies["a", 0.2])
    assert high > 1  # the t-interval reaches beyond the range: shown cut, and said so
    assert f"{mean:.3f} ({low:.3f}..1.000, cut to [0, 1])" in text


def test_a_plugins_method_is_swept(tmp_path, capsys):
    # the fixture re-implements PipeDream's stash as hooks: the same numbers as pipedream
    out = tmp_path / "runs.jsonl"
    code = cli.main(["sweep", "--plugin", "tests.fixtures.plugin_method", "--methods",
                     "pipedream", "fixture-stash", "--seeds", "0", "1", *TINY, "--jobs", "1",
                     "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    runs = {(o["label"], o["seed"]): o for o in (x["outcome"] for x in _lines(out))}
    for seed in (0, 1):
        assert runs["fixture-stash", seed]["history"]["loss"] == \
            runs["pipedream", seed]["history"]["loss"]
    assert "fixture-stash - pipedream: +0.000" in text


@pytest.mark.parametrize("argv, message", [
    (["--methods", "1f1b", "--set", "lrr=0.1"], "'lrr' is not a fit() keyword"),
    (["--methods", "1f1b", "--set", "seed=1,2"], "sweep's own"),
    (["--methods", "no-such-method"], "no-such-method"),
    (["--methods", "1f1b", "--set", "lr"], "KEY=VALUE"),
    (["--methods", "1f1b", "--set", "lr=-1"], "lr"),
    (["--set", "lr=0.1"], "--methods"),
    (["--methods", "1f1b", "--jobs", "0"], "--jobs must be a positive integer"),
])  # fmt: skip
def test_bad_input_is_named_before_any_training(argv, message, tmp_path, capsys):
    out = tmp_path / "runs.jsonl"
    assert cli.main(["sweep", *argv, *TINY, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_the_python_api_refuses_what_it_cannot_send_to_a_process():
    with pytest.raises(ValueError, match="picklable"):
        pml.sweep(lambda seed: tiny(seed), None, methods=["1f1b"], seeds=[0], jobs=2, **FIT)
    with pytest.raises(ValueError, match="non-empty list of values"):
        pml.sweep(tiny, None, methods=["1f1b"], settings={"lr": 0.1}, **FIT)
    with pytest.raises(ValueError, match="seeds"):
        pml.sweep(tiny, None, methods=["1f1b"], seeds=[], **FIT)


def test_settings_and_methods_read_from_the_command_line():
    assert parse_settings(["lr=0.02,0.05", "lr_schedule=cosine", "t1=true"]) == (
        {"lr": [0.02, 0.05]}, {"lr_schedule": "cosine", "t1": True})
    assert parse_methods(["async", "async:t1=true,gamma=0.5"]) == {
        "async": {"method": "async"},
        "async:t1=true,gamma=0.5": {"method": "async", "t1": True, "gamma": 0.5}}


def test_partial_lines_keep_lr_maps_stored_format():
    outcome = {"seed": 0, "quality": 0.5, "loss": float("nan"), "windows": (1.0, 2.0)}
    before = json.dumps({"key": "k|P=8", "outcome": json_ready(outcome)}, allow_nan=False) + "\n"
    assert sweep_module.partial_line("k|P=8", outcome) == before
