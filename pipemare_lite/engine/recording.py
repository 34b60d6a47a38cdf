"""What a run records besides its losses: recording levels (chapters 03-11).

Measuring is not free: reading a stage's bytes after every action, timing every action,
taking the norm of every update and keeping every forward's saved tensors cost more, on a
tiny model, than the arithmetic itself. So a run says what it wants recorded, and a run that
does not ask for a record does not pay for it. **Training is the same whatever is
recorded**: the recording level changes what is measured, never a weight, a loss or the
order of any floating-point operation (tested bitwise for every method).

=========  ============================================================================
level      records (besides losses, learning rates and measured forward delays)
=========  ============================================================================
losses     nothing more: the cheapest run
history    what :class:`~pipemare_lite.training.history.History` holds: the update norm of
           every update and the peak bytes per stage and kind (``fit()``'s default)
full       also the trace: every action's start and end, the weight version it used, the
           bytes after every action, and every forward's saved tensors
           (the executors' default: the chapters draw it)
=========  ============================================================================

Both executors take ``record=`` (the local one and, one process per rank, the distributed
one; ``fit(record=...)`` passes it to either); without a trace a run's ``trace`` is None.

How the cheaper levels save:

- a synchronous stage (no update between a forward and its backward) runs its forward
  without saved-tensor hooks unless the run keeps saved tensors; its activation bytes are
  measured with the hooks on the first forward of each input shape and reused (a module
  whose saved tensors depend on its input's *values*, not its shape, needs ``full``);
- bytes are read only after the actions that can raise a peak (see
  :class:`~pipemare_lite.engine.recorder.BytesMeter`);
- the update norm is skipped, or computed with fused multi-tensor kernels.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recording:
    """What a run records (see the module docstring).

    Attributes:
        update_norms: ``||w after - w before||_2`` of every update (float64).
        peak_bytes: the peak bytes per stage (and per rank) and kind.
        trace: every action's times and weight version, and the bytes after every action.
        saved_tensors: keep every forward's saved tensors (exact bytes per forward, and
            checkpoints of microbatches between their forward and backward); off, a
            synchronous stage runs its forwards without saved-tensor hooks.
    """

    update_norms: bool = True
    peak_bytes: bool = True
    trace: bool = True
    saved_tensors: bool = True


#: The named levels, cheapest first.
RECORDINGS = {
    "losses": Recording(update_norms=False, peak_bytes=False, trace=False, saved_tensors=False),
    "history": Recording(update_norms=True, peak_bytes=True, trace=False, saved_tensors=False),
    "full": Recording(),
}


def recording(value: str | Recording) -> Recording:
    """The :class:`Recording` named ``value`` (one of :data:`RECORDINGS`), or ``value``."""
    if isinstance(value, Recording):
        return value
    if value not in RECORDINGS:
        raise ValueError(f"unknown recording level {value!r}; allowed: "
                         f"{', '.join(RECORDINGS)} or a Recording")
    return RECORDINGS[value]
