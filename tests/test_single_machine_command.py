"""The README's single-machine command (issue #36, item 3): ``python -m pipemare_lite.training
--executor dist --stages P ...`` starts its ranks itself (``launch()``), and nothing it
starts listens beyond 127.0.0.1 (torchrun's store listens on every interface, whatever
rendezvous address it is given). Read out of the README; every socket of the command and
its descendants is checked while it trains; the history is bitwise the local executor's.
Loopback only, ports picked by the OS, bounded time, every process ended."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.test_launch import _alive, _children_of, _listening_addresses

pytestmark = [pytest.mark.dist, pytest.mark.slow,
              pytest.mark.skipif(not os.path.isdir("/proc/net"), reason="reads /proc")]

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = ["--method", "1f1b", "--microbatches", "2", "--batch-size", "64", "--epochs", "2",
           "--width", "16", "--json", "--no-progress"]
LOOPBACK = ("0100007F:", "00000000000000000000000001000000:")  # 127.0.0.1 / ::1


def readme_command() -> list[str]:
    """The README's single-machine command, with P and the options filled in."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^\.venv/bin/python -m pipemare_lite\.training --executor dist .*$",
                      text, re.M)
    assert match, "README.md has no `.venv/bin/python -m pipemare_lite.training ...` command"
    words = shlex.split(match.group(0))
    assert words[-1] == "...", words
    return [sys.executable] + [("2" if w == "P" else w) for w in words[1:-1]] + OPTIONS


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        children = _children_of(todo.pop())
        found += children
        todo += children
    return found


def test_the_documented_single_machine_command_listens_on_loopback_only(tmp_path, capsys):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = open(tmp_path / "stdout.txt", "wb")  # noqa: SIM115
    command = subprocess.Popen(readme_command(), env=env, stdout=out,
                               stderr=open(tmp_path / "stderr.txt", "wb"))  # noqa: SIM115
    seen: set[str] = set()
    processes: set[int] = set()
    try:
        deadline = time.monotonic() + 170
        while command.poll() is None and time.monotonic() < deadline:
            for pid in [command.pid, *_descendants(command.pid)]:
                processes.add(pid)
                try:
                    seen.update(_listening_addresses(pid))
                except OSError:  # it ended meanwhile
                    pass
            time.sleep(0.05)
        assert command.poll() is not None, "the command ran past its time"
    finally:
        if command.poll() is None:
            command.kill()
        command.wait(timeout=10)
        out.close()
    stderr = (tmp_path / "stderr.txt").read_text()
    assert command.returncode == 0, stderr[-3000:]
    assert seen, "no listening socket was seen (the launcher's store listens while it runs)"
    assert all(address.startswith(LOOPBACK) for address in seen), seen
    end = time.monotonic() + 10
    while time.monotonic() < end and any(_alive(p) for p in processes):
        time.sleep(0.1)
    assert not any(_alive(p) for p in processes), "a rank outlived the command"

    distributed = json.loads((tmp_path / "stdout.txt").read_text().strip().splitlines()[-1])
    from pipemare_lite.cli.commands.train import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["--executor", "local", "--stages", "2", *OPTIONS]) == 0
    finally:
        torch.set_num_threads(threads)
    local = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("final_train_loss", "evals", "steps", "forward_delay", "memory_bytes_by_stage"):
        assert distributed[key] == local[key], key  # bitwise: the same numbers
