"""A torchrun worker that loses a peer says which rank it lost, then exits (chapter 11).

When a machine of a multi-machine ``torchrun`` job dies (power, a kill, the network), the
ranks on the other machines only see the symptoms: a link that broke, a collective that
failed, the side-channel store that stopped answering, or their own torchrun agent sending
SIGTERM because *its* rendezvous broke. This module turns the symptoms into one line on
stderr that names the lost rank(s) and the evidence, for example::

    pipemare_lite: rank 0 (node 0) stops (PeerConnectionError): lost rank 1 (node 1): the
    link to it broke while waiting for gradient of stage 1 microbatch 3 (...)

Evidence, in order of strength:

1. a point-to-point wait on rank r failed (the board's ``lost``, noted by the waits);
2. the side-channel store (hosted by torchrun's agent on node 0, ``MASTER_ADDR``) is
   unreachable: node 0's ranks are lost (or this node's agent, when this is node 0);
3. a rank's heartbeat (the count of its status publications, one every 0.1 s) did not
   advance for :data:`HEARTBEAT_WINDOW` seconds while its status says it is neither done
   nor failed.

:func:`pipemare_lite.engine.distributed.torchrun.install` hooks :func:`report` into the ways such
a worker stops (an uncaught exception, SIGTERM from the agent, the watchdog's backstop), and
:func:`~pipemare_lite.engine.distributed.torchrun.report_failure` prints it after a failure the
command line caught.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pipemare_lite.engine.distributed import faults

#: Seconds the report watches the heartbeats when no direct evidence names a lost rank.
HEARTBEAT_WINDOW = 1.5


@dataclass(frozen=True)
class Topology:
    """Which node (machine) each rank lives on, as torchrun assigned them.

    torchrun gives the ranks of node (group rank) g the contiguous block
    ``g * L ... g * L + L - 1`` when every node runs ``L = --nproc-per-node`` workers, and
    its node-0 agent hosts the store at ``MASTER_ADDR:MASTER_PORT``.

    Attributes:
        rank, world_size: this rank and the number of ranks.
        local_world_size: ranks per node (L).
        node: this rank's node (torchrun's ``GROUP_RANK``).
        store_node: the node whose agent hosts the side-channel store (None: unknown).
        store_address: ``MASTER_ADDR:MASTER_PORT``.
    """

    rank: int
    world_size: int
    local_world_size: int
    node: int
    store_node: int | None
    store_address: str

    @classmethod
    def from_env(cls, environ=None) -> Topology:
        """Read torchrun's environment variables (defaults: one node holding every rank)."""
        env = os.environ if environ is None else environ
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env.get("LOCAL_WORLD_SIZE", world))
        node = int(env.get("GROUP_RANK", rank // max(local, 1)))
        agent_store = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        return cls(rank, world, local, node, 0 if agent_store else None,
                   f"{env.get('MASTER_ADDR', '?')}:{env.get('MASTER_PORT', '?')}")

    def node_of(self, rank: int) -> int | None:
        """The node of ``rank`` (None when the ranks do not split evenly into nodes)."""
        if self.local_world_size < 1 or self.world_size % self.local_world_size:
            return None
        return rank // self.local_world_size

    def ranks_of(self, node: int) -> list[int]:
        """The ranks of ``node``."""
        return [r for r in range(self.world_size) if self.node_of(r) == node]

    def label(self, rank: int) -> str:
        """``"rank 1 (node 1)"``."""
        node = self.node_of(rank)
        return f"rank {rank}" + ("" if node is None else f" (node {node})")


def diagnose(board: faults.StatusBoard, topology: Topology, store,
             window: float = HEARTBEAT_WINDOW) -> dict[int, str]:
    """``lost rank -> evidence`` (see the module docstring for the order of evidence).

    ``store`` is a client of the side-channel store (None: only direct evidence). Takes at
    most ``window`` seconds (plus the store's answers) and never raises.
    """
    if board.lost:
        return dict(board.lost)
    stalled = []
    if not board.store_lost and store is not None:
        try:
            stalled = faults.stalled_ranks(store, topology.world_size, window,
                                           exclude=(topology.rank,))
        except Exception:
            board.store_lost = True
    if board.store_lost:  # the store's host is gone: its node's ranks, unless that is us
        if topology.store_node is None or topology.store_node == topology.node:
            return {}
        why = (f"the side-channel store at {topology.store_address}, hosted by torchrun's "
               f"agent on node {topology.store_node}, is unreachable")
        return {r: why for r in topology.ranks_of(topology.store_node)}
    return {r: f"its heartbeat stopped for {window:g} s" for r in stalled}


def report(board: faults.StatusBoard, topology: Topology, store, cause: str,
           window: float = HEARTBEAT_WINDOW) -> str:
    """The one-line report: who stops, why, and which rank(s) it lost (with evidence)."""
    lost = diagnose(board, topology, store, window)
    p = board.position
    where = p.where() if p.index >= 0 else "its start"
    head = f"pipemare_lite: {topology.label(topology.rank)} stops ({cause}) at {where}"
    parts = [f"lost {topology.label(r)}: {why}" for r, why in sorted(lost.items())]
    reason = board.abort_reason
    if reason is None and store is not None and not board.store_lost:
        try:  # a peer failed (not lost) a moment before our watchdog's next look
            reason = faults.read_abort(store)
        except Exception:
            reason = None
    return f"{head}: " + ("; ".join(parts) or reason or "no peer found lost")

