"""Byte accounting per device: weights, stashed versions, T2's buffer, optimizer state and
in-flight activations (introduced in chapter 03 for activations, chapter 05 for stashes,
chapter 10 for the whole trade-off table).

The model walks each rank's actions in order, exactly as the staleness analysis does, and
reports the PEAK of every kind over the schedule. Definitions (the executor measures real
tensor bytes against these, so they are precise):

- ``weights``: one copy of every stage's parameters, ``param_bytes[s]``.
- ``optimizer``: optimizer state, ``states x param_bytes[s]`` rescaled from the parameter
  dtype to the state dtype; states = 0 for ``sgd``, 1 for ``momentum``, 2 for ``adam``.
- ``t2_buffer``: PipeMare's T2 keeps one weight-sized delta per stage, ``param_bytes[s]``
  (only with ``t2=True``, which needs an ``"async"`` schedule).
- ``stash``: at any moment a stage holds one copy, ``param_bytes[s]`` each, of every DISTINCT
  weight version other than the current one that some microbatch whose backward is not yet
  done still reads. A microbatch's backward is done after its ``B``, or after its ``W`` when
  the backward is split. Which versions are read comes from
  :func:`pipemare_lite.analysis.staleness.weight_versions`:
  ``"stash"`` (PipeDream): the forward's version, so exactly the in-flight microbatches
  (F done, B/W not done) count; ``"2bw"``: version ``max(k - 1, 0)`` for minibatch k, read by
  its forward and backward, so at most one extra version (the previous one), held from the
  update that retires it until the last backward that reads it (a copy cannot be brought back
  once dropped, so a forward that has not run yet also keeps it; an implementation that frees
  it only at the next update holds it a little longer with the same peak); ``"async"`` and
  ``"sync"``: the backward reads the current weights, so nothing is stashed.
- ``activations``: the activations of in-flight microbatches (F done, B/W not done),
  ``activation_bytes[s]`` each; the count is the simulator's ``peak_inflight``.

Memory is counted after every action of the rank. ``total`` is the sum of the per-kind
peaks (the height of a stacked bar, an upper bound); ``peak_total`` is the largest sum held
at one moment. :func:`memory_by_kind` is per device: with several virtual stages on a rank
(interleaved, ZB-V, DualPipeV) the rank's stages are held together and its peak is the
largest sum at one moment, at most the sum of their own peaks; :func:`memory_by_stage` is
the breakdown, each stage's own peaks. With one stage per rank the two coincide (fit's
history reports the same pair, measured: ``memory_bytes_by_rank`` and
``memory_bytes_by_stage``). Torch-free.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pipemare_lite.analysis.staleness import weight_versions
from pipemare_lite.schedules.actions import BACKWARD, FORWARD, UPDATE, WEIGHT_GRAD, Schedule
from pipemare_lite.schedules.weight_modes import STASH

#: Optimizer state size in parameter copies.
OPTIMIZER_STATES = {"sgd": 0, "momentum": 1, "adam": 2}

#: The kinds reported by :func:`memory_by_kind`, in stacking order.
KINDS = ("weights", "stash", "t2_buffer", "optimizer", "activations")


@dataclass(frozen=True)
class MemoryProfile:
    """Sizes that the memory model needs, per (virtual) stage.

    Attributes:
        param_bytes: bytes of one copy of each stage's parameters.
        activation_bytes: bytes each stage keeps for ONE in-flight microbatch.
        optimizer: ``"sgd"``, ``"momentum"`` or ``"adam"``.
        param_dtype_bytes: bytes per parameter element (4 for fp32).
        state_dtype_bytes: bytes per optimizer-state element (4 for fp32 state).
    """

    param_bytes: list[int]
    activation_bytes: list[int]
    optimizer: str = "sgd"
    param_dtype_bytes: int = 4
    state_dtype_bytes: int = 4

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZER_STATES:
            allowed = ", ".join(OPTIMIZER_STATES)
            raise ValueError(f"unknown optimizer {self.optimizer!r}; allowed: {allowed}")
        if len(self.param_bytes) != len(self.activation_bytes):
            raise ValueError(
                f"param_bytes has {len(self.param_bytes)} stages but activation_bytes has "
                f"{len(self.activation_bytes)}; give one number per stage in both"
            )
        for name in ("param_bytes", "activation_bytes"):
            bad = [x for x in getattr(self, name) if int(x) != x or x < 0]
            if bad:
                raise ValueError(f"{name} must be non-negative integers, got {bad[0]!r}")
        for name in ("param_dtype_bytes", "state_dtype_bytes"):
            if getattr(self, name) not in (1, 2, 4, 8):
                raise ValueError(f"{name} must be 1, 2, 4 or 8, got {getattr(self, name)!r}")

    @classmethod
    def from_counts(cls, param_counts: list[int], activation_counts: list[int],
                    optimizer: str = "sgd", dtype_bytes: int = 4) -> MemoryProfile:
        """A profile from element counts (parameters, activation elements per microbatch)."""
        return cls(param_bytes=[n * dtype_bytes for n in param_counts],
                   activation_bytes=[n * dtype_bytes for n in activation_counts],
                   optimizer=optimizer, param_dtype_bytes=dtype_bytes,
                   state_dtype_bytes=dtype_bytes)

    def optimizer_bytes(self, stage: int) -> int:
        """Optimizer state of one stage: states x elements x state dtype bytes."""
        elements = self.param_bytes[stage] // self.param_dtype_bytes
        return OPTIMIZER_STATES[self.optimizer] * elements * self.state_dtype_bytes


def memory_by_kind(schedule: Schedule, profile: MemoryProfile, *,
                   t2: bool = False) -> list[dict[str, int]]:
    """Peak bytes of each kind per rank (device), plus totals: a rank's stages held together.

    Each dict has the keys of :data:`KINDS` and ``total`` (sum of the peaks) and
    ``peak_total`` (the largest simultaneous sum). One stage per rank: the stage's peaks;
    several (interleaved, V): the largest sum over them at one moment, which can be less
    than the sum of :func:`memory_by_stage`'s. See the module docstring for definitions.
    """
    needed = _versions_needed(schedule, profile, t2)
    return [_rank_peaks(schedule, rank, profile, needed, t2) for rank in range(schedule.num_ranks)]


def memory_by_stage(schedule: Schedule, profile: MemoryProfile, *,
                    t2: bool = False) -> list[dict[str, int]]:
    """The breakdown of :func:`memory_by_kind`: each (virtual) stage's own peaks, as if it
    were alone on its rank (same keys). Equal to ``memory_by_kind`` with one stage per rank;
    with several, their sum is an upper bound of the rank's."""
    needed = _versions_needed(schedule, profile, t2)
    return [_rank_peaks(schedule, schedule.rank_of(s), profile, needed, t2, only=s)
            for s in range(schedule.num_virtual_stages)]


def _versions_needed(schedule: Schedule, profile: MemoryProfile, t2: bool):
    """Check the profile and ``t2``; return ``[stage][microbatch]``, the version each
    backward reads, in the modes that stash (None: backwards read the current weights)."""
    if len(profile.param_bytes) != schedule.num_virtual_stages:
        raise ValueError(
            f"the profile has {len(profile.param_bytes)} stages but schedule {schedule.name!r} "
            f"has {schedule.num_virtual_stages} (virtual) stages"
        )
    if t2 and not schedule.mode.has_discrepancy:
        raise ValueError(
            f"t2=True needs an 'async' schedule (T2 corrects the no-stash discrepancy); "
            f"schedule {schedule.name!r} has weight_mode {schedule.weight_mode!r}"
        )
    stashes = schedule.mode.backward_reads_forwards
    return weight_versions(schedule).version_at_forward if stashes else None


def _rank_peaks(schedule, rank, profile, needed, t2, only: int | None = None) -> dict[str, int]:
    """Walk one rank's actions and keep the peak of every kind (``only``: that stage's)."""
    stages = schedule.stages_of(rank) if only is None else [only]
    weights = sum(profile.param_bytes[s] for s in stages)  # one copy; T2's delta is as big
    fixed = {"weights": weights, "t2_buffer": weights if t2 else 0,
             "optimizer": sum(profile.optimizer_bytes(s) for s in stages)}
    current = {s: 0 for s in stages}
    # microbatches whose backward is not done, counted by the version they read (per stage)
    readers = {s: Counter() for s in stages}
    # stash: a forward adds a reader of its version; 2bw: a version must survive until its
    # last reader, all known before any forward runs
    stash_mode = needed is not None and not schedule.mode.readers_known_up_front
    if needed is not None and schedule.mode.readers_known_up_front:
        for s in stages:
            readers[s].update(v for v in needed[s] if v is not None)
    param, activation = profile.param_bytes, profile.activation_bytes
    # stash = sum over stages of param_bytes x (distinct versions in readers older than the
    # current one), kept up to date as versions enter, leave, or become old (one per update)
    stash = activations = peak_activations = peak_stash = peak_varying = 0
    for action in schedule.ranks[rank]:
        s, kind = action.stage, action.kind
        if s not in current:  # another stage of the rank (memory_by_stage)
            continue
        if kind == UPDATE:
            if current[s] in readers[s]:  # the version this update retires is still read
                stash += param[s]
            current[s] += 1
        elif kind == FORWARD:
            activations += activation[s]
            if stash_mode:  # it reads the current version: one more reader, nothing old
                readers[s][current[s]] += 1
        elif kind == BACKWARD or kind == WEIGHT_GRAD:  # the microbatch's last backward action
            activations -= activation[s]
            if needed is not None:  # one reader of its version is done
                version = needed[s][action.index]
                readers[s][version] -= 1
                if not readers[s][version]:  # its last: forget the version
                    del readers[s][version]
                    if version < current[s]:
                        stash -= param[s]
        peak_activations = max(peak_activations, activations)
        peak_stash = max(peak_stash, stash)
        peak_varying = max(peak_varying, activations + stash)
    peaks = dict(fixed, stash=peak_stash, activations=peak_activations)
    peaks = {kind: peaks[kind] for kind in KINDS}
    return dict(peaks, total=sum(peaks.values()), peak_total=sum(fixed.values()) + peak_varying)


def peak_stash_copies(schedule: Schedule) -> list[int]:
    """Largest number of stashed weight copies each (virtual) stage holds at one moment."""
    if schedule.chunks != 1:
        raise ValueError(
            f"peak_stash_copies counts per stage; it needs chunks == 1, got {schedule.chunks}"
        )
    stages = schedule.num_ranks
    ones = MemoryProfile([1] * stages, [0] * stages, "sgd", param_dtype_bytes=1)
    return [d["stash"] for d in memory_by_kind(schedule, ones)]


def stash_over_pipemare_ratio(profile: MemoryProfile, schedule_pipedream: Schedule,
                              schedule_async: Schedule) -> float:
    """Weight memory of PipeDream's stashing over PipeMare's, summed over all stages.

    PipeDream: weights + stash + optimizer state (peaks); PipeMare: weights + optimizer state +
    T2's delta buffer (no stash). Activations are left out: they depend on the schedule, not
    on how the method handles weights (chapter 10 shows them separately).
    """
    if schedule_pipedream.mode is not STASH:
        raise ValueError(f"schedule_pipedream must stash weights (weight_mode 'stash'), "
                         f"got {schedule_pipedream.weight_mode!r}")
    stashing = memory_by_kind(schedule_pipedream, profile)
    pipemare = memory_by_kind(schedule_async, profile, t2=True)
    numerator = sum(d["weights"] + d["stash"] + d["optimizer"] for d in stashing)
    denominator = sum(d["weights"] + d["optimizer"] + d["t2_buffer"] for d in pipemare)
    if denominator == 0:
        raise ValueError("the profile has no parameter bytes; the ratio is undefined")
    return numerator / denominator
