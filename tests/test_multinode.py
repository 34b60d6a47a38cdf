"""Two torchrun "machines" on one host: the README's multi-machine command, as written.

Two torchrun agents (``--nnodes 2``, node rank 0 and 1, c10d rendezvous on 127.0.0.1 and
a free port) run the command the README gives for several machines, read out of the
README (only host, port, job id, processes per node and the training options filled in):

- for 1F1B (one process per node) and PipeMare (two per node) the history rank 0 writes
  is bitwise equal to the local executor's (one thread per process);
- killing one node in the middle of a run (SIGKILL to its agent): that node's workers exit
  with their agent, and the other node exits within 30 s with a line naming the lost rank.

Every process carries a marker in its environment; the test ends them all and checks,
by scanning /proc, that none is left.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import torch

from tests.timeouts import hard_time_limit

pytestmark = [pytest.mark.dist, pytest.mark.slow,
              pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")]

ROOT = Path(__file__).resolve().parents[1]
MARK = "PIPEMARE_TEST_NODE"
#: History fields that must not be compared: timings, and how the run was asked for.
#: provenance differs by process history: the local run happens inside pytest, whose process
#: has loaded other tests' plugins (tests/test_run_provenance.py checks the record itself)
NOT_COMPARED = {"wall_seconds", "arguments", "config", "provenance"}
#: Seconds the surviving node may take to exit after the other node died.
SURVIVOR_LIMIT = 30.0


@pytest.fixture(autouse=True)
def hard_timeout():
    """Fail (instead of hanging the suite) after 240 s."""
    with hard_time_limit(240):
        yield


def readme_command() -> str:
    """The README's multi-machine torchrun command, continuation lines joined."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^\.venv/bin/torchrun --nnodes 2 .*?(?<!\\)$", text, re.M | re.S)
    assert match, "README.md has no `.venv/bin/torchrun --nnodes 2 ...` command"
    return match.group(0).replace("\\\n", " ")


def node_command(node: int, port: int, job: str, per_node: int, options: list[str]) -> list:
    """The README's command for ``node``: only the placeholders are substituted."""
    words = shlex.split(readme_command())
    assert words[-1] == "...", words  # the training options go where the README says ...
    filled = {"HOST:PORT": f"127.0.0.1:{port}", "JOB": job, "P": str(per_node)}
    words = [filled.get(w, w) for w in words[:-1]] + options
    at = words.index("--node-rank")
    words[at + 1] = str(node)
    return words


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def marked(mark: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries ``MARK=mark``."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if needle not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry))
    return found


def rank_of(pid: int) -> int | None:
    """The ``RANK`` a torchrun worker runs as (None for an agent or a finished process)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for item in environ.split(b"\0"):
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


class Nodes:
    """Two torchrun agents on loopback, each in its own session; :meth:`close` ends all."""

    def __init__(self, tmp: Path, per_node: int, options: list[str]) -> None:
        self.tmp, self.mark = tmp, uuid.uuid4().hex
        port, job = free_port(), f"job-{self.mark[:8]}"
        self.agents, self.logs = [], []
        for node in (0, 1):
            env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT),
                       PIPEMARE_PROGRESS="0", **{MARK: f"{self.mark}-{node}"})
            log = tmp / f"node{node}.log"
            self.logs.append(log)
            with open(log, "wb") as out:
                self.agents.append(subprocess.Popen(
                    node_command(node, port, job, per_node, options), cwd=ROOT, env=env,
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True))

    def processes(self, node: int | None = None) -> list[int]:
        nodes = (0, 1) if node is None else (node,)
        return [pid for n in nodes for pid in marked(f"{self.mark}-{n}")]

    def log(self, node: int) -> str:
        return self.logs[node].read_text(errors="replace")

    def wait(self, timeout: float) -> list[int]:
        deadline = time.monotonic() + timeout
        return [agent.wait(timeout=max(1.0, deadline - time.monotonic()))
                for agent in self.agents]

    def close(self) -> None:
        for agent in self.agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
        for pid in self.processes():  # workers run in sessions of their own
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for agent in self.agents:
            agent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not self.processes(), f"orphaned processes: {self.processes()}"


def local_history(options: list[str], out: Path) -> dict:
    from pipemare_lite.cli.commands.train import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as every torchrun worker: bitwise-reproducible sums
    try:
        assert main(["--executor", "local", *options, "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    return json.loads(out.read_text())


def compared(document: dict) -> dict:
    """Everything but timings and the options that differ (executor, output path)."""
    kept = {k: v for k, v in document.items() if k not in NOT_COMPARED}
    kept["config"] = {k: v for k, v in document["config"].items() if k != "executor"}
    return kept


RUNS = {  # method -> (processes per node, options)
    "1f1b": (1, ["--method", "1f1b", "--stages", "2", "--microbatches", "2"]),
    "pipemare": (2, ["--method", "pipemare", "--stages", "4", "--microbatches", "4"]),
}
COMMON = ["--batch-size", "128", "--epochs", "1", "--width", "16", "--json", "--no-progress"]


def test_readme_command_on_two_nodes_equals_the_local_executor(tmp_path):
    jobs = {}
    try:
        for method, (per_node, options) in RUNS.items():  # both jobs at once: half the wait
            folder = tmp_path / method
            folder.mkdir()
            words = [*options, *COMMON, "--out", str(folder / "dist.json")]
            jobs[method] = Nodes(folder, per_node, words)
        for method, nodes in jobs.items():
            codes = nodes.wait(timeout=170)
            assert codes == [0, 0], f"{method}: {codes}\n{nodes.log(0)[-3000:]}\n{nodes.log(1)}"
    finally:
        for nodes in jobs.values():
            nodes.close()
    for method, (_, options) in RUNS.items():
        distributed = json.loads((tmp_path / method / "dist.json").read_text())
        assert distributed["arguments"]["executor"] == "dist"
        local = local_history([*options, *COMMON], tmp_path / method / "local.json")
        assert distributed["steps"] == len(distributed["loss"]) > 0
        if method == "pipemare":  # asynchronous: the stages really ran with stale weights
            assert max(distributed["forward_delay"]) > 0
        assert compared(distributed) == compared(local), method  # bitwise: equal floats


def test_killing_one_node_ends_the_other_naming_the_lost_rank(tmp_path):
    steps = tmp_path / "steps.jsonl"
    options = ["--method", "1f1b", "--stages", "2", "--microbatches",
               "2", "--batch-size", "16", "--epochs", "100", "--width", "16", "--no-progress",
               "--jsonl", str(steps)]
    nodes = Nodes(tmp_path, 1, options)
    try:
        deadline = time.monotonic() + 150
        while not (steps.exists() and steps.read_text().count("\n") >= 3):
            assert time.monotonic() < deadline, "training did not start\n" + nodes.log(0)
            assert all(a.poll() is None for a in nodes.agents), nodes.log(0) + nodes.log(1)
            time.sleep(0.2)
        # the node to kill: the one that does not host the store (node of rank 1), so the
        # survivor's own agent stays up and the worker must find out by itself
        workers = {rank_of(pid): (node, pid) for node in (0, 1) for pid in nodes.processes(node)
                   if rank_of(pid) is not None}
        assert sorted(workers) == [0, 1], workers
        victim, _ = workers[1]
        survivor = 1 - victim
        victim_workers = [pid for pid in nodes.processes(victim) if rank_of(pid) is not None]
        killed_at = time.monotonic()
        os.killpg(nodes.agents[victim].pid, signal.SIGKILL)  # the agent; its workers follow
        nodes.agents[victim].wait(timeout=10)
        while any(pid in marked(f"{nodes.mark}-{victim}") for pid in victim_workers):
            assert time.monotonic() - killed_at < 10, "the killed node's workers live on"
            time.sleep(0.1)
        code = nodes.agents[survivor].wait(timeout=SURVIVOR_LIMIT)
        took = time.monotonic() - killed_at
        log = nodes.log(survivor)
        assert code != 0, log[-3000:]
        assert took < SURVIVOR_LIMIT
        lines = [line for line in log.splitlines() if line.startswith("pipemare_lite: rank")]
        assert lines, log[-3000:]
        assert "lost rank 1 (node" in lines[0], lines
    finally:
        nodes.close()


def test_the_readme_command_is_parsed_as_written():
    words = node_command(1, 29500, "job", 2, ["--method", "1f1b"])
    assert words[:2] == [".venv/bin/torchrun", "--nnodes"]
    assert "--rdzv-backend" in words and words[words.index("--rdzv-backend") + 1] == "c10d"
    assert words[words.index("--rdzv-endpoint") + 1] == "127.0.0.1:29500"
    assert words[words.index("--node-rank") + 1] == "1"
    assert words[words.index("--nproc-per-node") + 1] == "2"
    assert words[-6:] == ["-m", "pipemare_lite.training", "--executor", "dist", "--method",
    "1f1b"]
