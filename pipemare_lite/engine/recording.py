"""What a run records: the recording levels, and one record type from a stage to the history
(chapters 03-11).

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

What was recorded travels as one type, :class:`StepRecords`, declared once: a stage writes
its own as it runs, an executor merges its stages' at the end of each run, a rank returns
its stages' (:class:`~pipemare_lite.engine.distributed.results.RankResult` is one), the
ranks' merge into the run's (:class:`~pipemare_lite.engine.local.RunResult` is one), and
:class:`~pipemare_lite.training.history.HistoryRecorder` folds each run's into the history.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields


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


@dataclass(kw_only=True)
class StepRecords:
    """What some stages did in one run, keyed so that records merge by updating dicts: one
    stage's, one rank's stages', every rank's (see the module docstring).

    Attributes:
        loss_by_microbatch: ``microbatch -> unscaled loss`` (from the last stage).
        forward_versions: ``(stage, microbatch) -> weight version its forward read`` (with a
            trace).
        backward_versions: ``(stage, microbatch) -> version its backward used`` (with a
            trace; for T2 runs the current version, ``distances`` gives d).
        distances: ``(stage, microbatch) -> backward version - forward version``.
        group_learning_rates: ``stage -> [update][group]``, the lr of every parameter group
            at each update (several groups: e.g. ``muon``'s Muon and AdamW parts).
        update_norms: ``stage -> [update]``, ``||w after - w before||_2`` (float64;
            non-finite once the update left a non-finite weight; only when recorded).
        forward_delays: ``stage -> list``: per update, the updates between the forward and
            that update of each microbatch whose gradient it applied, in the order their
            backwards finished (recorded at every level).
    """

    loss_by_microbatch: dict[int, float] = field(default_factory=dict)
    forward_versions: dict[tuple[int, int], int] = field(default_factory=dict)
    backward_versions: dict[tuple[int, int], int] = field(default_factory=dict)
    distances: dict[tuple[int, int], int] = field(default_factory=dict)
    group_learning_rates: dict[int, list[list[float]]] = field(default_factory=dict)
    update_norms: dict[int, list[float]] = field(default_factory=dict)
    forward_delays: dict[int, list[int]] = field(default_factory=dict)

    @classmethod
    def for_stage(cls, stage: int) -> StepRecords:
        """Empty records of one stage (its per-update lists ready to append to)."""
        return cls(group_learning_rates={stage: []}, update_norms={stage: []},
                   forward_delays={stage: []})

    @classmethod
    def merged(cls, parts: Iterable[StepRecords]) -> StepRecords:
        """One record of several stages' (no key in common: the merge is a dict update),
        every field sorted by its key (stage, then microbatch), as the results show them."""
        parts = list(parts)
        return cls(**{name: dict(sorted(item for part in parts
                                        for item in getattr(part, name).items()))
                      for name in STEP_RECORD_FIELDS})

    def extend(self, later: StepRecords) -> None:
        """Append ``later``'s records (the same stages' next run) to these: per-update lists
        extended, per-microbatch entries added (the distributed executor holds a rank's
        records this way between the gathers of ``fit()``)."""
        for name in STEP_RECORD_FIELDS:
            mine, new = getattr(self, name), getattr(later, name)
            if name in _PER_UPDATE:
                for stage, values in new.items():
                    mine.setdefault(stage, []).extend(values)
            else:
                mine.update(new)

    @property
    def losses(self) -> list[float]:
        """The losses in microbatch order."""
        by_microbatch = self.loss_by_microbatch
        return [by_microbatch[m] for m in sorted(by_microbatch)]

    @property
    def learning_rates(self) -> dict[int, list[float]]:
        """``stage -> [update]``: the first parameter group's lr at each update."""
        return {s: [groups[0] for groups in updates]
                for s, updates in self.group_learning_rates.items()}


#: The fields of :class:`StepRecords`, in order.
STEP_RECORD_FIELDS = tuple(f.name for f in fields(StepRecords))
#: The fields holding ``stage -> [update]`` lists (extended, not replaced, run after run).
_PER_UPDATE = ("group_learning_rates", "update_norms", "forward_delays")
