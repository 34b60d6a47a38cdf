"""Weight modes as objects: which weights a forward and a backward read (chapters 02-09).

A schedule's ``weight_mode`` names one of four rules (the design's semantics table):

==========  ===================  ========================  =======================  =======
mode        forward reads        backward reads            kept per stage           flushes
==========  ===================  ========================  =======================  =======
``sync``    the current version  the current version       one version              yes
``stash``   the current version  the forward's version     a copy per old version   no
                                                           a forward still needs
``2bw``     version max(k-1, 0)  the forward's version     two versions             no
            (minibatch k)
``async``   the current version  the current version       one version              no
==========  ===================  ========================  =======================  =======

Every consumer (staleness, memory, validation, the executor's stages) asks the
:class:`WeightMode` these questions instead of comparing names. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

#: What a forward or a backward may read.
CURRENT = "current"  # the stage's live weights at that moment
PREVIOUS_MINIBATCH = "previous minibatch"  # 2BW: minibatch k reads version max(k - 1, 0)
FORWARDS = "forward's"  # the version this microbatch's forward read


@dataclass(frozen=True)
class WeightMode:
    """One weight mode's rule, a row of the module's table: ``name`` as schedules and the CLI
    spell it; ``forward_reads`` :data:`CURRENT` or :data:`PREVIOUS_MINIBATCH`;
    ``backward_reads`` :data:`CURRENT` or :data:`FORWARDS`; ``versions_kept`` per stage at
    most (None: as many as its in-flight forwards need); ``flushes``: every minibatch
    finishes before the next starts (no update between a microbatch's F and B)."""

    name: str
    forward_reads: str
    backward_reads: str
    versions_kept: int | None
    flushes: bool
    description: str = ""

    def __str__(self) -> str:
        return self.name

    @property
    def forward_reads_current(self) -> bool:
        """True when a forward reads the live weights (all modes but 2bw)."""
        return self.forward_reads == CURRENT

    @property
    def backward_reads_forwards(self) -> bool:
        """True when a backward reads the version its forward read (stash, 2bw)."""
        return self.backward_reads == FORWARDS

    @property
    def readers_known_up_front(self) -> bool:
        """True when every microbatch's version is fixed by its minibatch before it runs
        (2bw), so copies are counted for forwards not yet run; else at each forward."""
        return self.forward_reads == PREVIOUS_MINIBATCH

    @property
    def has_discrepancy(self) -> bool:
        """True when a backward may read other weights than its forward (async): the
        discrepancy PipeMare's T2 corrects."""
        return not self.flushes and self.backward_reads == CURRENT

    def version_at_forward(self, current: int, minibatch: int) -> int:
        """The version a forward of ``minibatch`` reads when the stage holds ``current``."""
        return current if self.forward_reads_current else max(minibatch - 1, 0)

    def version_at_backward(self, current: int, forward: int) -> int:
        """The version a backward reads: ``current`` or its forward's version ``forward``."""
        return forward if self.backward_reads_forwards else current


SYNC = WeightMode("sync", CURRENT, CURRENT, 1, True,
                  "flushed: F and B see the same version, no update in between")
STASH = WeightMode("stash", CURRENT, FORWARDS, None, False,
                   "PipeDream: B uses the copy stashed at F")
TWO_BW = WeightMode("2bw", PREVIOUS_MINIBATCH, FORWARDS, 2, False,
                    "PipeDream-2BW: minibatch k runs F and B on version max(k-1, 0)")
ASYNC = WeightMode("async", CURRENT, CURRENT, 1, False,
                   "no stash: B uses whatever is current at B (PipeMare's T2 acts on top)")

#: Every weight mode by name, in the book's order.
MODES: dict[str, WeightMode] = {m.name: m for m in (SYNC, STASH, TWO_BW, ASYNC)}

#: The names (what ``Schedule.weight_mode`` holds and ``--weight-mode`` accepts).
WEIGHT_MODES = tuple(MODES)


def get_weight_mode(mode: str | WeightMode) -> WeightMode:
    """The :class:`WeightMode` called ``mode`` (a WeightMode is returned as is).

    Raises ValueError naming the bad value and the allowed names.
    """
    if isinstance(mode, WeightMode):
        return mode
    found = MODES.get(mode) if isinstance(mode, str) else None
    if found is None:
        raise ValueError(f"unknown weight mode {mode!r}; allowed: {', '.join(WEIGHT_MODES)}")
    return found
