"""Naming the lost rank (pipemare_lite/engine/distributed/lost.py), against a fake store.

The real thing runs in tests/test_multinode.py (a node killed mid-run); here each kind of
evidence is checked by itself: a broken link, a stopped heartbeat, an unreachable store.
"""

from __future__ import annotations

import pytest

from pipemare_lite.engine.distributed import faults
from pipemare_lite.engine.distributed.lost import Topology, diagnose, report


class FakeStore:
    """The few store calls the diagnosis makes; ``live`` ranks' heartbeats advance on
    every read, the others' stand still; ``dead=True`` fails every call."""

    def __init__(self, beats: dict[int, int], live=(), dead: bool = False) -> None:
        self.data = {f"pml/status/{r}": faults.Position(r, beat=b).to_json().encode()
                     for r, b in beats.items()}
        self.live, self.dead = set(live), dead

    def check(self, keys):
        if self.dead:
            raise RuntimeError("Connection reset by peer")
        return all(k in self.data for k in keys)

    def get(self, key):
        value = self.data[key]
        rank = int(key.rsplit("/", 1)[1]) if key.startswith("pml/status/") else None
        if rank in self.live:  # its watchdog published again since the last read
            position = faults.Position.from_json(value)
            position.beat += 1
            self.data[key] = position.to_json().encode()
        return value

    def set(self, key, value):
        self.data[key] = value.encode() if isinstance(value, str) else value

    def add(self, key, amount):
        count = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(count).encode()
        return count


def torchrun_env(rank, world, local, **extra):
    return {"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(local),
            "GROUP_RANK": str(rank // local), "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
            "TORCHELASTIC_USE_AGENT_STORE": "True", **extra}


def test_topology_follows_torchruns_rank_blocks():
    topo = Topology.from_env(torchrun_env(3, 4, 2))
    assert (topo.rank, topo.node, topo.store_node) == (3, 1, 0)
    assert [topo.node_of(r) for r in range(4)] == [0, 0, 1, 1]
    assert topo.ranks_of(0) == [0, 1]
    assert topo.label(2) == "rank 2 (node 1)"
    assert topo.store_address == "10.0.0.1:29400"
    uneven = Topology.from_env(torchrun_env(0, 3, 2))
    assert uneven.node_of(2) is None and uneven.label(2) == "rank 2"


class BrokenWork:
    """A Work whose link broke: complete, and its wait raises the library's error."""

    def is_completed(self):
        return True

    def wait(self, timeout=None):
        raise RuntimeError("Connection closed by peer [127.0.0.1]:1")


def test_a_broken_link_names_the_peer_without_waiting():
    board = faults.StatusBoard(0, 2)
    with pytest.raises(faults.PeerConnectionError):
        faults.Waiter(board, 5.0, polling=True).wait(
            BrokenWork(), "gradient of stage 1 microbatch 0", peer=1)
    topo = Topology.from_env(torchrun_env(0, 2, 1))
    lost = diagnose(board, topo, FakeStore({0: 5, 1: 5}), window=30.0)  # no wait: evidence
    assert list(lost) == [1]
    assert "link to it broke" in lost[1] and "Connection closed by peer" in lost[1]


def test_a_stopped_heartbeat_names_the_rank():
    board = faults.StatusBoard(0, 4)
    topo = Topology.from_env(torchrun_env(0, 4, 2))
    store = FakeStore({0: 1, 1: 1, 2: 7, 3: 7}, live=(1, 3))
    assert diagnose(board, topo, store, window=0.01) == {
        2: "its heartbeat stopped for 0.01 s"}
    line = report(board, topo, store, "SIGTERM", window=0.01)
    assert line.startswith("pipemare_lite: rank 0 (node 0) stops (SIGTERM) at its start: ")
    assert line.endswith("lost rank 2 (node 1): its heartbeat stopped for 0.01 s")


def test_a_rank_that_reported_failure_is_not_called_lost():
    board = faults.StatusBoard(0, 2)
    topo = Topology.from_env(torchrun_env(0, 2, 1))
    store = FakeStore({0: 1, 1: 1})
    store.set("pml/status/1", faults.Position(1, 3, 9, "1B0", "failed: ValueError: x").to_json())
    assert diagnose(board, topo, store, window=0.01) == {}
    assert report(board, topo, store, "PeerFailedError", window=0.01).endswith(
        "no peer found lost")


def test_an_unreachable_store_names_the_ranks_of_its_node():
    topo = Topology.from_env(torchrun_env(2, 4, 2))
    lost = diagnose(faults.StatusBoard(2, 4), topo, FakeStore({}, dead=True), window=0.01)
    assert sorted(lost) == [0, 1]
    assert "10.0.0.1:29400" in lost[0] and "node 0" in lost[0]
    # on the store's own node, an unreachable store means our agent is gone, not a peer
    home = Topology.from_env(torchrun_env(1, 4, 2))
    assert diagnose(faults.StatusBoard(1, 4), home, FakeStore({}, dead=True), 0.01) == {}


HOOKED = """
import os, signal, sys, time
sys.path.insert(0, {root!r})
from tests.test_lost_rank import FakeStore, torchrun_env
os.environ.update(torchrun_env(0, 2, 1, TORCHELASTIC_RUN_ID="t"))
from pipemare_lite.engine.distributed import faults, torchrun

board = faults.StatusBoard(0, 2, FakeStore({{0: 1, 1: 1}}, live=(0,)))
board.at(4, 10, "0B1", "wait gradient of stage 1 microbatch 1")
torchrun._store = lambda: board.store  # the SIGTERM's positions report reads the fake store
torchrun.install(board)
if {how!r} == "sigterm":
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)  # the handler exits before this ends
raise faults.PeerConnectionError("gathering the ranks' results: RuntimeError: reset")
"""


@pytest.mark.parametrize("how, code, cause", [
    ("sigterm", 143, "SIGTERM from torchrun's agent"),
    ("exception", 1, "PeerConnectionError"),
])
def test_a_stopping_worker_prints_one_line_naming_the_lost_rank(how, code, cause):
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", HOOKED.format(root=root, how=how)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == code, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.startswith("pipemare_lite: rank")]
    assert lines == [f"pipemare_lite: rank 0 (node 0) stops ({cause}) at action 4/10 (0B1): "
                     "lost rank 1 (node 1): its heartbeat stopped for 1.5 s"], done.stderr
    if how == "exception":  # the traceback still comes first
        assert "Traceback" in done.stderr.split(lines[0])[0]
    else:  # every rank's position first (torchrun.install hooks both reports)
        before = done.stderr.split(lines[0])[0]
        assert "rank 0: stopped by torchrun (SIGTERM) (rank 0: action 4/10" in before
        assert "where each rank was:\n  rank 0: action 4/10" in before, done.stderr


def test_a_rank_between_two_actions_is_not_placed_inside_the_next():
    """Issue 47: "action 3547/15120 (1F5) in collective 1181" named an action the rank had
    not begun; between two actions a position says how many are done and which is next."""
    inside = faults.Position(1, 3547, 15120, "1F5", "compute")
    between = faults.Position(1, 3547, 15120, "1F5", "in collective 1181: sharing the losses",
                              between=True)
    assert inside.describe() == "rank 1: action 3547/15120 (1F5) compute"
    assert between.describe() == ("rank 1: 3547/15120 actions done (next 1F5), in "
                                  "collective 1181: sharing the losses")
    assert faults.Position.from_json(between.to_json()) == between
    finished = faults.Position(0, 20, 20, "", "draining sends", between=True)
    assert finished.describe(rank=False) == "20/20 actions done, draining sends"
    board = faults.StatusBoard(0, 2)
    board.at(3547, 15120, "0F5", "between runs", between=True)
    topo = Topology.from_env(torchrun_env(0, 2, 1))
    line = report(board, topo, FakeStore({0: 1, 1: 1}), "SIGTERM", window=0.01)
    assert line.startswith("pipemare_lite: rank 0 (node 0) stops (SIGTERM) at 3547/15120 "
                           "actions done (next 0F5): "), line
