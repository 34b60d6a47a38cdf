"""Faults that are not deaths (issue 47, item 6): a rank stopped with SIGSTOP (a hang: the
process lives, its heartbeat stops) is named within a stated time, and a rendezvous port
already in use does not stop a launch.

The stated time: the launcher looks at its ranks' process states every
``STATE_POLL`` (0.25) s; a rank stopped by a signal (state ``T``) for half of
``--op-timeout``, at most ``STOPPED_LIMIT`` (10) s, stops the run, named with its last
position in the schedule (``pipemare_lite.engine.distributed.launch._supervise``). Its peers
stop on the abort, and the stopped rank is terminated (SIGTERM, SIGCONT, then SIGKILL).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pipemare_lite.engine.distributed import launch as launch_module
from pipemare_lite.engine.distributed.launch import launch
from tests.dist_workers import rendezvous_port

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.dist


def _ranks(launcher: psutil.Process) -> list[psutil.Process]:
    """The rank processes of a ``train --executor dist`` launcher: its fork server's children."""
    return [p for p in launcher.children(recursive=True)
            if "forkserver" in " ".join(p.cmdline())
            and "forkserver" in " ".join(p.parent().cmdline())]


def test_a_sigstopped_rank_is_named_within_the_stated_time(tmp_path):
    steps = tmp_path / "steps.jsonl"
    op_timeout = 6.0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipemare_lite", "train", "--method", "1f1b", "--stages", "2",
         "--microbatches", "2", "--batch-size", "32", "--width", "8", "--epochs", "500",
         "--executor", "dist", "--op-timeout", str(op_timeout), "--no-progress",
         "--jsonl", str(steps)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        start_new_session=True)
    launcher = psutil.Process(proc.pid)
    everyone: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and (
                not steps.exists() or len(steps.read_text().splitlines()) < 3):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        everyone = [launcher, *launcher.children(recursive=True)]
        ranks = _ranks(launcher)
        assert len(ranks) == 2
        # rank 0 writes --jsonl: the other one is rank 1
        stopped = next(p for p in ranks if all(f.path != str(steps) for f in p.open_files()))
        began = time.monotonic()
        os.kill(stopped.pid, signal.SIGSTOP)
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - began
    finally:
        for p in everyone:  # whatever is left: continued, then killed
            try:
                p.send_signal(signal.SIGCONT)
                p.kill()
            except psutil.NoSuchProcess:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    first = err.splitlines()[0]
    limit = min(op_timeout / 2, launch_module.STOPPED_LIMIT)
    assert first.startswith(
        f"pipemare-lite train: distributed run failed: rank 1 is stopped (process "
        f"{stopped.pid} in state T: SIGSTOP or SIGTSTP) for {limit:.0f}."), err
    # the launcher's last-seen position of rank 1 may predate its first reported action: the
    # ranks report progress without a per-step barrier now (seen once in a full run)
    # (or between two actions: in the losses' broadcast after a step)
    assert ("(last seen: rank 1: action " in first
            or "(last seen: rank 1: before its first action" in first
            or re.search(r"\(last seen: rank 1: \d+/\d+ actions done", first)), first
    assert "failed rank(s): 1 (the cause), 0 (stopped by rank 1's failure)" in err, err
    # named after `limit` s (+ a look every 0.25 s); the peers stop within the abort's
    # grace: a loaded 2-core machine is given 20 s more
    assert limit <= took < limit + 0.25 + launch_module.ABORT_GRACE + 20, took
    print(f"rank 1 stopped; the command ended {took:.1f} s later: {first}")
    gone = psutil.wait_procs(everyone, timeout=10)[1]
    assert gone == [], [p.pid for p in gone]  # nothing of the job is left


def test_a_rendezvous_port_in_use_is_not_used(monkeypatch):
    """The launcher's store listens on a port the OS picks (port 0): a port taken by
    another program, even one named in MASTER_PORT, is never tried."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", port)
        met = launch(rendezvous_port, 2, timeout=120)
    assert met[0] == met[1] and met[0][0] == "127.0.0.1"
    assert met[0][1] != port
