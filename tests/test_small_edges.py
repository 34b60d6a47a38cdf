"""Small edges a new user found (issue 32's trial on a fresh clone): a pipe closed early and
an unpicklable argument to launch() end with a clear word, not a traceback."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest


def test_a_reader_that_stops_early_gets_no_traceback():
    # `pipemare-lite schedule ... | head -1`: the reader leaves after one line
    child = subprocess.Popen(
        [sys.executable, "-m", "pipemare_lite", "schedule", "1f1b", "-P", "8", "-M", "64",
         "-K", "60", "--csv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # 400 kB
    child.stdout.readline()
    child.stdout.close()  # as head does once it has its line
    _, err = child.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipeError" not in err, err.decode()[-2000:]
    assert child.returncode in (0, 141)


def test_launch_refuses_an_unpicklable_argument_before_starting_any_process():
    from pipemare_lite.engine.distributed.launch import launch, ping

    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"args\[0\] cannot be sent to the ranks.*lambda"):
        launch(ping, 2, args=(lambda: 1,), timeout=60)
    assert time.perf_counter() - started < 10  # no rank was started and waited for
