"""Deliberate failures, to see what a distributed job does (introduced in chapter 11).

A :class:`Fault` makes one rank raise, die or hang just before a chosen action of its row;
:mod:`.faults` is what the other ranks and the launcher then do about it.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

#: Kinds of :class:`Fault`.
FAULT_KINDS = ("raise", "kill", "hang")


@dataclass(frozen=True)
class Fault:
    """A deliberate failure, to see what the job does (chapter 11 and the tests).

    Attributes:
        rank: the rank that fails.
        position: index of the action in that rank's list before which it fails.
        kind: ``raise`` (an exception), ``kill`` (SIGKILL to itself: no goodbye) or
            ``hang`` (sleeps forever without sending anything).
    """

    rank: int
    position: int
    kind: str = "raise"

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; allowed: {', '.join(FAULT_KINDS)}")
        if self.position < 0 or self.rank < 0:
            raise ValueError(f"fault rank and position must be >= 0, got {self.rank}, "
                             f"{self.position}")

    def trigger(self, action) -> None:
        """Fail in the chosen way (called just before the action at ``position``)."""
        if self.kind == "raise":
            raise RuntimeError(f"injected fault on rank {self.rank} before action "
                               f"{self.position} ({action})")
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:  # hang: like a rank stuck in a kernel; only a kill ends it
            time.sleep(1.0)
