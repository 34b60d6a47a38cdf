"""``pipemare-lite schedule``: output formats and error messages (mostly in-process)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from pipemare_lite.analysis import formulas
from pipemare_lite.cli import main
from pipemare_lite.interop.torch_notation import to_torch_csv
from pipemare_lite.schedules import build_schedule
from pipemare_lite.schedules.io import from_csv


def run_json(capsys, *args):
    assert main(["schedule", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_the_documented_keys(capsys):
    out = run_json(capsys, "1f1b", "--stages", "4", "--microbatches", "6")
    for key in ("schedule", "stages", "microbatches", "makespan", "utilization",
                "bubble_fraction", "peak_inflight", "actions"):  # fmt: skip
        assert key in out
    assert out["schedule"] == "1f1b" and out["stages"] == 4 and out["microbatches"] == 6
    assert out["bubble_fraction"] == pytest.approx(formulas.idle_fraction_1f1b(4, 6))
    assert out["peak_inflight"] == [formulas.peak_inflight_1f1b(4, 6, s) for s in range(4)]
    assert out["actions"] == build_schedule("1f1b", 4, 6).rows()
    assert out["makespan"] == formulas.makespan_gpipe(4, 6)


def test_json_delays_are_zero_for_sync_and_positive_for_async(capsys):
    sync = run_json(capsys, "gpipe", "--stages", "3", "--microbatches", "2", "--minibatches", "3")
    assert sync["forward_delay"] == [0, 0, 0] and sync["backward_delay"] == [0, 0, 0]
    out = run_json(capsys, "async", "--stages", "3", "--microbatches", "1", "--minibatches", "8")
    assert out["microbatches"] == 1 and len(out["forward_delay"]) == 3
    assert out["forward_delay"][0] > out["forward_delay"][2] > 0  # the first stage is stalest
    assert out["backward_delay"] == [0, 0, 0]


def test_steady_utilization_is_one_more_minibatch_not_the_full_window(capsys):
    # one flushed 1F1B minibatch: full between its fill and drain, but a long run of them
    # keeps up only M/(M+P-1) (issue: the CLI once printed the window's 1.0 as "steady")
    assert main(["schedule", "1f1b", "--stages", "4", "--microbatches", "8"]) == 0
    text = capsys.readouterr().out
    assert f"steady utilization  {8 / 11:.4f}   (one more minibatch" in text
    assert "full-pipeline util  1.0000" in text
    out = run_json(capsys, "1f1b", "-P", "4", "-M", "8", "-K", "3")
    assert out["steady_state_utilization"] == pytest.approx(8 / 11)
    assert out["full_pipeline_utilization"] < 1.0
    out = run_json(capsys, "async", "-P", "4", "-M", "2", "-K", "6")
    assert out["steady_state_utilization"] == pytest.approx(1.0)


def test_steady_utilization_of_a_file_is_not_known(capsys, tmp_path):
    path = tmp_path / "s.json"
    assert main(["schedule", "1f1b", "-P", "2", "-M", "4", "--save", str(path)]) == 0
    capsys.readouterr()
    assert main(["schedule", "--from", str(path)]) == 0
    assert "steady utilization  n/a (a schedule from a file" in capsys.readouterr().out
    assert run_json(capsys, "--from", str(path))["steady_state_utilization"] is None


def test_interleaved_defaults_to_two_chunks_and_costs_apply(capsys):
    out = run_json(capsys, "interleaved", "-P", "2", "-M", "4")
    assert out["chunks"] == 2
    assert out["bubble_fraction"] == pytest.approx(formulas.idle_fraction_interleaved(2, 4, 2))
    zb = run_json(capsys, "zb-h1", "-P", "3", "-M", "6", "--costs", "1,3,1")
    assert zb["costs"]["input_grad"] == 2 and zb["costs"]["weight_grad"] == 1
    assert zb["makespan"] == formulas.makespan_zb_h1(3, 6, 1, 2, 1)


def test_text_output_has_a_grid_and_metrics(capsys):
    assert main(["schedule", "gpipe", "--stages", "3", "--microbatches", "2"]) == 0
    text = capsys.readouterr().out
    grid = [line for line in text.splitlines() if line.startswith("rank ")]
    assert len(grid) == 3
    assert grid[0].split("| ")[1].split()[:2] == ["F0", "F1"]
    assert "bubble fraction     0.5000" in text  # (P-1)/(M+P-1) = 2/4


def test_csv_round_trips(capsys):
    assert main(["schedule", "pipedream", "-P", "3", "-M", "2", "-K", "3", "--csv"]) == 0
    text = capsys.readouterr().out
    back = from_csv(text, name="pipedream", num_microbatches=2, weight_mode="stash")
    assert back == build_schedule("pipedream", 3, 2, num_minibatches=3)


def test_torch_csv_is_one_minibatch_pytorch_loads(capsys):
    from torch.distributed.pipelining import schedules as torch_schedules

    args = ["schedule", "interleaved", "-P", "2", "-M", "4", "-K", "3", "--torch-csv"]
    assert main([*args, "--minibatch", "2"]) == 0
    text = capsys.readouterr().out
    assert text == to_torch_csv(build_schedule("interleaved", 2, 4, chunks=2))
    order = {r: [torch_schedules._Action.from_str(c) for c in row.split(",")]
             for r, row in enumerate(text.splitlines())}
    # PyTorch's own check (what _load_csv runs): 4 virtual stages, 4 microbatches
    mapping = torch_schedules._validate_schedule(order, 2, 4, 4)
    assert mapping == {0: 0, 1: 1, 2: 0, 3: 1}


@pytest.mark.parametrize(
    "args,message",
    [
        (["gpipes", "-P", "2", "-M", "2"], "unknown schedule name 'gpipes'; allowed: naive, gpipe"),
        (["gpipe", "-P", "two", "-M", "2"], "--stages='two': allowed: an integer >= 1"),
        (["gpipe", "-P", "2000", "-M", "2"], "allowed: integers 1..1024"),
        (["gpipe", "-M", "2"], "--stages is required"),
        (["gpipe", "-P", "2"], "--microbatches is required"),
        (["gpipe", "-P", "2", "-M", "4", "--update-every", "2"], "gpipe updates once"),
        (["async", "-P", "2", "-M", "4", "--update-every", "2"], "disagree"),
        (["gpipe", "-P", "2", "-M", "2", "--costs", "1"], "--costs='1': allowed: F,B or F,B,W"),
        (["zb-h1", "-P", "2", "-M", "2", "--costs", "1,1,2"], "W=2.0 > B=1.0"),
        (["interleaved", "-P", "4", "-M", "6"], "must be a multiple of num_ranks=4"),
        (["gpipe", "-P", "2", "-M", "2", "--warmup", "1"], "warmup=1 only applies to"),
        (["async", "-P", "2", "-M", "2", "-K", "3", "--torch-csv"], "has no flushed minibatch"),
        (["1f1b", "-P", "2", "-M", "2", "-K", "2", "--torch-csv"],
         "choose one (minibatch=, or --minibatch): integers 0..1"),
        (["1f1b", "-P", "2", "-M", "2", "-K", "2", "--torch-csv", "--minibatch", "2"],
         "minibatch=2: allowed: integers 0..1"),
        (["1f1b", "-P", "2", "-M", "2", "--torch-csv", "--minibatch", "x"],
         "--minibatch='x': allowed: an integer >= 0"),
        (["1f1b", "-P", "2", "-M", "2", "--minibatch", "0"],
         "--minibatch=0: only applies with --torch-csv"),
    ],
)  # fmt: skip
@pytest.mark.filterwarnings("ignore:.*'--update-every' is deprecated:FutureWarning")  # tested in
def test_errors_name_the_value_and_exit_2(capsys, args, message):  # test_renamed_spellings
    assert main(["schedule", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pipemare-lite schedule: error: ") and message in err


def test_subprocess_json_and_error_exit():
    ok = subprocess.run(
        [sys.executable, "-m", "pipemare_lite", "schedule", "pipemare", "--stages", "2",
         "--microbatches", "2", "--minibatches", "2", "--warmup", "1", "--json"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    out = json.loads(ok.stdout)
    assert out["schedule"] == "async" and out["warmup"] == 1
    bad = subprocess.run(
        [sys.executable, "-m", "pipemare_lite", "schedule", "nope", "-P", "2", "-M", "2"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode != 0 and "unknown schedule name 'nope'" in bad.stderr


def test_grid_cells_follow_the_costs(capsys):
    # F = 1 and B = 1.5: a cell is 0.5, so F spans 2 cells and B 3
    assert main(["schedule", "gpipe", "-P", "1", "-M", "1", "--costs", "1,1.5"]) == 0
    grid = [line for line in capsys.readouterr().out.splitlines() if line.startswith("rank 0")]
    assert grid[0].split("| ")[1].split() == ["F0", "--", "B0", "--", "--"]


def test_json_delays_match_the_lock_step_closed_forms(capsys):
    # P=4, N=2, K=8: the stalest microbatch of stage i (1-indexed) waits ceil((2(P-i)+1)/N)
    # updates; in the steady state microbatch j of a minibatch waits ceil((2(P-s)-1-j)/N)
    # (s 0-indexed; derived in pipemare_lite.analysis.staleness), so the steady mean averages over
    # j.
    P, N = 4, 2
    out = run_json(capsys, "async", "--stages", str(P), "--microbatches", str(N),
                   "--minibatches", "8")
    assert out["max_forward_delay"] == [math.ceil((2 * (P - i) + 1) / N) for i in range(1, P + 1)]
    steady = [sum(math.ceil((2 * (P - s) - 1 - j) / N) for j in range(N)) / N for s in range(P)]
    assert out["steady_forward_delay"] == steady
    assert all(w <= s for w, s in zip(out["forward_delay"], steady))  # fill lowers the mean
    assert out["backward_delay"] == [0, 0, 0, 0]


def test_json_steady_delay_is_null_without_a_steady_state(capsys):
    out = run_json(capsys, "gpipe", "--stages", "3", "--microbatches", "2")
    assert out["steady_forward_delay"] is None and out["max_forward_delay"] == [0, 0, 0]
