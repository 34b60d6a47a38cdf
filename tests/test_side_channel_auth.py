"""The side channel is signed with a secret of the job (issue #36, item 3): torch's store
listens on every interface without authentication, so a stranger can reach it; what they
write into ``pml/abort`` (or a failure report) must not stop the ranks or become the
reported cause. Loopback only, ports picked at run time, every process ended."""

from __future__ import annotations

import datetime
import threading
import time

import pytest
import torch.distributed as dist

from pipemare_lite.engine.distributed import faults
from tests.dist_workers import watch_abort
from tests.timeouts import hard_time_limit

INJECTED = "INJECTED by a stranger"


def _server():
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=10))


def test_a_forged_abort_reads_as_absent_and_a_real_claim_replaces_it():
    server = _server()
    stranger = dist.TCPStore("127.0.0.1", server.port, is_master=False,
                             timeout=datetime.timedelta(seconds=10))
    job = faults.signed(server, faults.new_secret())
    board = faults.StatusBoard(0, 2, job)
    stranger.set("pml/abort", INJECTED)
    stranger.set("pml/failed/1", f"RuntimeError: {INJECTED}")
    assert faults.read_abort(job) is None
    assert faults.read_failures(job, 2) == {}
    assert faults.claim_abort(job, "rank 0 failed: a real cause") == "rank 0 failed: a real cause"
    assert faults.read_abort(job) == "rank 0 failed: a real cause"
    board.fail(ValueError("boom"))
    assert faults.read_failures(job, 2)[0].startswith("ValueError: boom")
    # another job's secret does not verify either
    assert faults.read_abort(faults.signed(server, faults.new_secret())) is None


def test_ranks_on_one_machine_share_one_torchrun_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # the key's private folder's parent
    tmp_path.chmod(0o700)
    tmp_path = tmp_path / "pipemare-lite"
    monkeypatch.delenv(faults.TOKEN_ENV, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run-1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    first, second = faults.torchrun_secret(), faults.torchrun_secret()
    assert first == second and len(first) == 64
    (key,) = tmp_path.glob("pipemare-job-*.key")
    assert key.stat().st_mode & 0o077 == 0  # owner-only
    faults.forget_torchrun_secret()
    assert not key.exists()
    monkeypatch.setenv(faults.TOKEN_ENV, "shared-by-the-user")
    assert faults.torchrun_secret() == b"shared-by-the-user"
    monkeypatch.delenv(faults.TOKEN_ENV)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # several machines, no token: unsigned
    assert faults.torchrun_secret() is None


@pytest.mark.dist
def test_a_strangers_abort_does_not_stop_a_launched_job(monkeypatch):
    from pipemare_lite.engine.distributed import launch as launcher

    ports: list[int] = []
    listen = launcher._listen

    def spy(address):
        sock = listen(address)
        ports.append(sock.getsockname()[1])
        return sock

    monkeypatch.setattr(launcher, "_listen", spy)
    injected = threading.Event()

    def inject():  # a client of the store, knowing only the key names in our source
        deadline = time.monotonic() + 90
        while not ports and time.monotonic() < deadline:
            time.sleep(0.05)
        store = dist.TCPStore("127.0.0.1", ports[0], is_master=False,
                              timeout=datetime.timedelta(seconds=10))
        while not store.check(["pml/status/1"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        store.set("pml/abort", INJECTED)
        injected.set()

    thread = threading.Thread(target=inject, daemon=True)
    thread.start()
    with hard_time_limit(150):
        results = launcher.launch(watch_abort, 2, args=(4.0,), timeout=120)
    thread.join(timeout=10)
    assert injected.is_set(), "the stranger never wrote (the ranks ended first?)"
    assert results == ["finished", "finished"]  # not stopped, no injected cause
