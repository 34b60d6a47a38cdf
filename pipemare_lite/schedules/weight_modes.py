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


@dataclass(frozen=True)
class WeightMode:
    """One weight mode's rule, a row of the module's table: ``name`` as schedules and the CLI
    spell it; ``forward_reads_current``: a forward reads the live weights (else 2bw's rule,
    version max(k-1, 0) for minibatch k); ``backward_reads_forwards``: a backward reads the
    version its forward read (else the live weights); ``versions_kept`` per stage at most
    (None: as many as its in-flight forwards need); ``flushes``: every minibatch finishes
    before the next starts (no update between a microbatch's F and B)."""

    name: str
    forward_reads_current: bool
    backward_reads_forwards: bool
    versions_kept: int | None
    flushes: bool

    def __str__(self) -> str:
        return self.name

    @property
    def readers_known_up_front(self) -> bool:
        """True when every microbatch's version is fixed by its minibatch before it runs
        (2bw), so copies are counted for forwards not yet run; else at each forward."""
        return not self.forward_reads_current

    @property
    def has_discrepancy(self) -> bool:
        """True when a backward may read other weights than its forward (async): the
        discrepancy PipeMare's T2 corrects."""
        return not self.flushes and not self.backward_reads_forwards

    def version_at_forward(self, current: int, minibatch: int) -> int:
        """The version a forward of ``minibatch`` reads when the stage holds ``current``."""
        return current if self.forward_reads_current else max(minibatch - 1, 0)

    def version_at_backward(self, current: int, forward: int) -> int:
        """The version a backward reads: ``current`` or its forward's version ``forward``."""
        return forward if self.backward_reads_forwards else current


# flushed: F and B see the same version, no update in between
SYNC = WeightMode("sync", forward_reads_current=True, backward_reads_forwards=False,
                  versions_kept=1, flushes=True)
# PipeDream: B uses the copy stashed at F
STASH = WeightMode("stash", forward_reads_current=True, backward_reads_forwards=True,
                   versions_kept=None, flushes=False)
# PipeDream-2BW: minibatch k runs F and B on version max(k-1, 0)
TWO_BW = WeightMode("2bw", forward_reads_current=False, backward_reads_forwards=True,
                    versions_kept=2, flushes=False)
# no stash: B uses whatever is current at B (PipeMare's T2 acts on top)
ASYNC = WeightMode("async", forward_reads_current=True, backward_reads_forwards=False,
                   versions_kept=1, flushes=False)

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
