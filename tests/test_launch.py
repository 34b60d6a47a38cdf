"""launch(): processes, results, errors, timeouts, cleanup; and the two other ways in.

- :func:`pipemare_lite.engine.distributed.launch.launch` from this process (results per rank,
loopback, a
  port chosen at run time, a failing rank named, a timeout, no child left alive);
- from inside a Jupyter kernel (the way the chapters call it);
- ``torchrun ... -m pipemare_lite.training --executor dist`` (the shell way).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pipemare_lite.engine.distributed.launch import LaunchError, choose_backend, launch, ping
from tests.timeouts import hard_time_limit

pytestmark = [pytest.mark.dist]


@pytest.fixture(autouse=True)
def hard_timeout():
    """Fail the test (instead of hanging the suite) if it runs longer than 180 s."""
    with hard_time_limit(180):
        yield


def assert_ended(pids) -> None:
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # signal 0 only asks whether the pid exists


def test_ping_runs_one_process_per_rank_on_loopback():
    results = launch(ping, 3, args=("hello",), timeout=120)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["world_size"] == 3 and r["rank_sum"] == 0 + 1 + 2 for r in results)
    assert all(r["payload"] == "hello" and r["backend"] == "gloo" for r in results)
    assert len({r["pid"] for r in results} | {os.getpid()}) == 4  # separate processes
    masters = {r["master"] for r in results}
    assert len(masters) == 1
    address, port = masters.pop().split(":")
    assert address == "127.0.0.1" and int(port) > 0
    assert_ended(r["pid"] for r in results)


def test_a_failing_worker_is_named_and_nothing_is_left():
    with pytest.raises(LaunchError) as info:
        launch(ping, 2, kwargs={"fail_rank": 1}, timeout=120)
    error = info.value
    assert error.failed_ranks[0] == 1
    assert "fails on purpose" in str(error)
    assert error.exit_codes[1] == 1
    assert_ended(error.pids.values())


LEAK_SCRIPT = """
import pipemare_lite as pml

def bars(info):  # a progress bar in a rank, as fit() shows on rank 0
    from tqdm import tqdm
    for _ in tqdm(range(3), disable=True):
        pass
    return info.rank

if __name__ == "__main__":
    print(pml.launch(bars, 2, timeout=120))
"""


def test_a_rank_with_a_progress_bar_leaves_no_semaphore_behind(tmp_path):
    """tqdm's default lock is a multiprocessing semaphore, which a rank's os._exit never
    unregistered: Python's resource tracker warned of leaked semaphores at the launcher's
    exit. A rank's tqdm takes a thread lock instead."""
    script = tmp_path / "bars.py"
    script.write_text(LEAK_SCRIPT, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=150, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[0, 1]"
    assert "leaked semaphore" not in done.stderr, done.stderr[-3000:]


def test_the_launch_timeout_stops_every_rank():
    start = time.monotonic()
    with pytest.raises(LaunchError, match="timed out after 2 s") as info:
        launch(ping, 2, kwargs={"sleep": 60.0}, timeout=2.0, grace=1.0)
    assert time.monotonic() - start < 20.0
    assert_ended(info.value.pids.values())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"world_size": 0}, "world_size must be a positive int"),
        ({"world_size": 2, "timeout": 0}, "timeouts must be > 0"),
        ({"world_size": 2, "backend": "mpi"}, "allowed: 'gloo', 'nccl', None"),
        ({"world_size": 2, "start_method": "teleport"}, "start_method 'teleport'"),
    ],
)
def test_bad_arguments_are_refused_before_starting_anything(kwargs, message):
    with pytest.raises(ValueError, match=message):
        launch(ping, **kwargs)


def test_backend_is_gloo_without_enough_gpus():
    expected = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= 2 else "gloo"
    assert choose_backend(2) == expected
    assert choose_backend(2, "gloo") == "gloo"


@pytest.mark.slow
def test_launch_works_inside_a_jupyter_kernel():
    jupyter_client = pytest.importorskip("jupyter_client")
    manager, client = jupyter_client.manager.start_new_kernel(kernel_name="python3")
    try:
        code = (
            "from pipemare_lite.engine.distributed.launch import launch, ping\n"
            "results = launch(ping, 2, timeout=120)\n"
            "print('RANK_SUMS', [r['rank_sum'] for r in results])\n"
        )
        output = []

        def collect(message):
            if message["msg_type"] == "stream":
                output.append(message["content"]["text"])
            elif message["msg_type"] == "error":
                output.append("\n".join(message["content"]["traceback"]))

        reply = client.execute_interactive(code, timeout=150, output_hook=collect)
        text = "".join(output)
        assert reply["content"]["status"] == "ok", text
        assert "RANK_SUMS [1, 1]" in text
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def chapter_torchrun_command() -> list[str]:
    """Chapter 11's ``torchrun_command``, read from the notebook (what the reader is shown)."""
    import ast

    chapter = Path(__file__).resolve().parents[1] / "chapters" / "11_real_processes.ipynb"
    for cell in json.loads(chapter.read_text())["cells"]:
        if cell["cell_type"] != "code" or "torchrun_command = [" not in "".join(cell["source"]):
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == (
                    "torchrun_command"):
                return ast.literal_eval(node.value)
    raise AssertionError("chapter 11 no longer shows a torchrun_command")


@pytest.mark.slow
def test_torchrun_trains_with_the_distributed_executor(tmp_path, capsys):
    # chapter 11's command as the chapter shows it (issue 30: a copy here had drifted from
    # the chapter's -m pipemare_lite.training.fit, which trained nothing), logs redirected
    shown = chapter_torchrun_command()
    assert shown[0] == "torchrun"
    module = shown.index("-m")
    assert shown[module + 1:module + 4] == ["pipemare_lite.training", "--executor", "dist"]
    options = [*shown[module + 4:], "--json"]
    command = [sys.executable, "-m", "torch.distributed.run", *shown[1:module],
               "--log-dir", str(tmp_path), "--redirects", "3", *shown[module:], "--json"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(command, capture_output=True, text=True, timeout=170, env=env)
    logs = {p.parent.name: p.read_text() for p in tmp_path.rglob("stdout.log")}
    assert done.returncode == 0, done.stderr[-3000:] + "\n".join(logs.values())[-2000:]
    assert logs["1"].strip() == ""  # under torchrun only rank 0 reports
    distributed = json.loads(logs["0"].strip().splitlines()[-1])

    from pipemare_lite.cli.commands.train import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["--executor", "local", *options]) == 0
    finally:
        torch.set_num_threads(threads)
    local = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("final_train_loss", "evals", "steps", "forward_delay", "memory_bytes_by_stage"):
        assert distributed[key] == local[key], key  # bitwise: the same numbers


def _children_of(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (read from /proc, no psutil)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc to find the children")
def test_children_exit_when_the_launcher_is_killed():
    # a launcher (think: a notebook kernel) starts 2 ranks that sleep, then dies by SIGKILL
    # without any chance to clean up; the ranks notice and exit by themselves
    code = ("from pipemare_lite.engine.distributed.launch import launch, ping\n"
            "launch(ping, 2, kwargs={'sleep': 120.0}, timeout=300, start_method='spawn')\n")
    launcher = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 120
        ranks: list[int] = []
        while time.monotonic() < deadline and len(ranks) < 2:
            time.sleep(0.5)
            ranks = [p for p in _children_of(launcher.pid)
                     if b"spawn_main" in open(f"/proc/{p}/cmdline", "rb").read()]
        assert len(ranks) == 2, "the ranks did not start"
        launcher.kill()  # while they may still be starting: the hardest moment
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in ranks):
            time.sleep(0.2)
        assert not any(_alive(p) for p in ranks), "orphaned ranks are still running"
    finally:
        if launcher.poll() is None:
            launcher.kill()


def _listening_addresses(pid: int) -> list[str]:
    """Local addresses ("HEXIP:HEXPORT") of the TCP sockets ``pid`` listens on (from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    found.append(fields[1])
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/net"), reason="reads /proc/net/tcp")
def test_the_launcher_listens_on_loopback_only():
    import threading

    seen: list[str] = []
    thread = threading.Thread(
        target=lambda: (time.sleep(1.5), seen.extend(_listening_addresses(os.getpid()))))
    thread.start()
    launch(ping, 2, kwargs={"sleep": 3.0}, timeout=120)
    thread.join()
    assert seen, "the launcher's store was not found listening"
    loopback = ("0100007F:", "00000000000000000000000001000000:")  # 127.0.0.1 / ::1
    assert all(address.startswith(loopback) for address in seen), seen


INIT_FROM_ENV = """
import socket, torch
from pipemare_lite.engine.distributed.launch import finish, init_from_env
torch.set_num_threads(2)
info = init_from_env(op_timeout=20.0)
print(info.rank, info.world_size, info.backend, torch.get_num_threads())
finish(info)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:  # a free loopback port, picked now
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _by_hand(rank: int, world_size: int, port: int) -> dict:
    """The environment torch's env:// convention gives a rank started by hand (no torchrun)."""
    return dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")


def test_init_from_env_joins_a_one_rank_job_with_one_thread():
    """Without torchrun, rank 0 hosts the store: it took 40-80 s (two 30 s client connects
    to a store nobody had started) and printed torch's connection errors."""
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", INIT_FROM_ENV], env=_by_hand(0, 1, _free_port()),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "1", "gloo", "1"]
    assert "timed out" not in done.stderr, done.stderr[-2000:]
    assert time.monotonic() - began < 25  # seconds: an interpreter start and a join


BY_HAND = """
import torch, torch.distributed as dist
from pipemare_lite.engine.distributed.launch import finish, init_from_env
info = init_from_env(op_timeout=20.0)
x = torch.tensor([float(info.rank + 1)])
dist.all_reduce(x)
print(info.rank, info.world_size, x.item())
finish(info)
"""


def test_ranks_started_by_hand_form_a_group_on_rank_0s_store():
    port = _free_port()
    ranks = [subprocess.Popen([sys.executable, "-c", BY_HAND], env=_by_hand(r, 2, port),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (1, 0)]  # rank 1 first: it waits for rank 0's store
    try:
        outputs = [p.communicate(timeout=120) for p in ranks]
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in ranks] == [0, 0], [err[-2000:] for _, err in outputs]
    assert sorted(out.split() for out, _ in outputs) == [["0", "2", "3.0"], ["1", "2", "3.0"]]


def test_rank_0_by_hand_on_a_taken_port_says_so():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        done = subprocess.run([sys.executable, "-c", INIT_FROM_ENV],
                              env=_by_hand(0, 1, taken.getsockname()[1]),
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "rank 0 hosts the job's store there (no torchrun), but cannot listen" in done.stderr


def test_settings_every_rank_refuses_at_set_up_are_one_line_and_exit_2(capsys):
    """``train --executor dist --epochs 100000`` (past a schedule's limit once multiplied by
    the steps per epoch) was refused by both launched ranks with both tracebacks, about 44
    lines; now the launch says it once, as the local executor does, and exits 2."""
    from pipemare_lite.cli import main

    options = ["train", "--method", "1f1b", "--stages", "2", "--epochs", "100000",
               "--no-progress"]
    with hard_time_limit(120):
        assert main([*options, "--executor", "dist"]) == 2
    dist_err = capsys.readouterr().err.strip().splitlines()
    assert main(options) == 2
    local_err = capsys.readouterr().err.strip().splitlines()
    assert dist_err == local_err and len(local_err) == 1, (dist_err, local_err)
    assert "epochs=100000 x 42 steps per epoch" in local_err[0]
