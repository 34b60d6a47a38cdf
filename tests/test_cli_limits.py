"""Honest limits (issue 47 item 2): the schedule command's memory limit comes from a measured
bytes-per-action and holds under ``ulimit -v``; a MemoryError is one line and exit status 2;
costs whose sum overflows a float are named."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pipemare_lite.cli import main
from pipemare_lite.cli.commands import schedule as schedule_command

ROOT = Path(__file__).resolve().parents[1]
resource = pytest.importorskip("resource")


def test_costs_whose_sum_overflows_are_named(capsys):
    """F8: ``--costs 1e308,1e308`` said "one more minibatch added no time"."""
    assert main(["schedule", "1f1b", "-P", "2", "-M", "2", "--costs", "1e308,1e308"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "--costs='1e308,1e308' --comm='0': the simulated times overflow: 20 actions" in err
    assert "largest float" in err
    # the bound counts the K+1 minibatches of the steady state and the latency too
    assert main(["schedule", "1f1b", "-P", "2", "-M", "2", "--costs", "1e306,1e306",
                 "--comm", "1e307"]) == 2
    assert "overflow" in capsys.readouterr().err
    assert main(["schedule", "1f1b", "-P", "2", "-M", "2", "--costs", "1e300,2e300",
                 "--json"]) == 0  # large but summable: simulated, the same shape as 1,2
    large = json.loads(capsys.readouterr().out)
    assert main(["schedule", "1f1b", "-P", "2", "-M", "2", "--costs", "1,2", "--json"]) == 0
    small = json.loads(capsys.readouterr().out)
    assert math.isclose(large["makespan"], 1e300 * small["makespan"], rel_tol=1e-12)
    assert math.isclose(large["steady_state_utilization"], small["steady_state_utilization"])


def test_a_schedule_beyond_the_memory_budget_is_refused_with_the_numbers(monkeypatch, capsys):
    monkeypatch.setattr(schedule_command, "memory_budget", lambda: (2**30, "a test's budget"))
    per = schedule_command.REPORT_BYTES_PER_ACTION
    assert main(["schedule", "1f1b", "-P", "1024", "-M", "4800", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    total = 1024 * (2 * 4800 + 1)  # an F and a B per microbatch and one U, per rank
    assert (f"1f1b with P=1024, M=4800, K=1, v=1 is {total:,} actions: about "
            f"{total * per / 2**30:,.2f} GiB for this command ({per:,} bytes an action, "
            f"measured), more than the 1.00 GiB it may use (a test's budget): at most "
            f"{2**30 // per:,} actions") in err
    rows = schedule_command.ROWS_BYTES_PER_ACTION
    assert main(["schedule", "1f1b", "-P", "1024", "-M", "4800", "--csv"]) == 2
    assert f"({rows:,} bytes an action, measured)" in capsys.readouterr().err


_THE_REPORTED_COMMAND = textwrap.dedent("""
    import resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))
    from pipemare_lite.cli import main
    began = time.monotonic()
    code = main(["schedule", "1f1b", "-P", "1024", "-M", "4800", "--json"])
    print(f"took {time.monotonic() - began:.3f}", flush=True)
    sys.exit(code)
""")


def test_the_reported_command_under_a_4_gib_ulimit_is_refused_before_building():
    """F3 as reported: ``schedule 1f1b -P 1024 -M 4800 --json`` (9.83 M actions, inside the
    old 10 M limit) ran 108 s to a raw MemoryError at a 3.97 GB peak, rc 1. Under a 4 GiB
    address-space limit it is now refused before any action is built: one line, rc 2."""
    done = subprocess.run([sys.executable, "-c", _THE_REPORTED_COMMAND], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(
        "pipemare-lite schedule: error: 1f1b with P=1024, M=4800, K=1, v=1 is 9,831,424 "
        "actions: about "), done.stderr
    assert "what ulimit -v (4.00 GiB) leaves" in done.stderr
    took = float(done.stdout.split("took ")[1])
    assert took < 10, took  # refused from the count alone (0.5 s measured), not after 108 s


_AT_THE_LIMIT = textwrap.dedent("""
    import contextlib, os, resource, sys
    from pipemare_lite.cli import main
    from pipemare_lite.cli.commands import schedule as sc
    from pipemare_lite.schedules.validation import action_count
    import json, pipemare_lite.analysis.staleness, pipemare_lite.interop.torch_notation
    mode = sys.argv[1]
    size = sc._mapped_bytes() + 160 * 2**20  # this process's size now, plus 160 MiB
    resource.setrlimit(resource.RLIMIT_AS, (size, size))
    budget, source = sc.memory_budget()
    assert "ulimit -v" in source, source
    per = sc.ROWS_BYTES_PER_ACTION if mode == "--csv" else sc.REPORT_BYTES_PER_ACTION
    most = budget // per
    M = (most // 64 - 1) // 2  # 1f1b with P=64: 64 * (2M + 1) actions, just under the limit
    assert 0.97 * most < action_count("1f1b", 64, M) <= most
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
        under = main(["schedule", "1f1b", "-P", "64", "-M", str(M), mode])
    over = main(["schedule", "1f1b", "-P", "64", "-M", str(M + 1), mode])
    print("codes", under, over, action_count("1f1b", 64, M), flush=True)
    if mode == "--json":  # without the check the same process runs out: one line, rc 2
        sc.check_memory = lambda *a: None
        print("unchecked", main(["schedule", "1f1b", "-P", "64", "-M", str(4 * M), mode]))
""")


@pytest.mark.parametrize("mode", ["--json", "--csv"])
def test_just_under_the_limit_runs_under_a_matching_ulimit(mode):
    """F3 at a small scale: the measured bytes-per-action are not low, even where ``ulimit
    -v`` leaves only 160 MiB: the largest schedule the check allows runs there, one size
    larger is refused, and a MemoryError (the check switched off) is one line, rc 2."""
    done = subprocess.run([sys.executable, "-c", _AT_THE_LIMIT, mode], capture_output=True,
                          text=True, cwd=ROOT, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    codes = done.stdout.split("codes ")[1].split()
    assert codes[:2] == ["0", "2"], done.stdout + done.stderr[-3000:]
    assert "more than the" in done.stderr and "what ulimit -v" in done.stderr
    if mode == "--json":
        assert done.stdout.rstrip().endswith("unchecked 2"), done.stdout
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("pipemare-lite schedule: error: out of memory (this process "
                               "may use "), done.stderr[-3000:]
        assert "Traceback" not in done.stderr


def test_a_memory_error_in_training_is_one_line_and_rc_2(monkeypatch, capsys):
    """Both entry points: ``pipemare-lite train`` and ``python -m pipemare_lite.training``."""
    from pipemare_lite.cli.commands import train

    def exhausted(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(train, "run_from_args", exhausted)
    assert train.main(["--method", "1f1b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pipemare_lite.training: error: out of memory") and err.count("\n") == 1
    assert main(["train", "--method", "1f1b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pipemare-lite train: error: out of memory") and err.count("\n") == 1
