"""What each rank returns, and the one result gathered from all of them (chapter 11).

A rank's :class:`RankResult` holds only its own stages' values (picklable: CPU tensors and
Python values); :func:`merge_rank_results` joins every rank's into a
:class:`DistRunResult`, the local executor's :class:`~pipemare_lite.engine.local.RunResult`
with a measured trace.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pipemare_lite.analysis.timeline import Timeline
from pipemare_lite.engine.local import RunResult
from pipemare_lite.engine.recording import StepRecords
from pipemare_lite.engine.stage import BYTE_KINDS
from pipemare_lite.schedules.actions import Schedule


@dataclass
class RankResult(StepRecords):
    """What one rank returns (CPU tensors and Python values: picklable; chapter 11): the
    :class:`~pipemare_lite.engine.recording.StepRecords` of its own stages (the losses only
    on the rank of the last stage), plus :class:`DistRunResult`'s other fields for these
    stages as ``{stage: value}``. Also ``entries``, this rank's
    :class:`~pipemare_lite.analysis.timeline.TimedAction` in seconds from the common origin
    (the trace's entries as they are); ``versions``, ``{"1F3": 0, ...}`` the weight version
    each action used; ``peak_bytes_by_rank``, ``{kind: bytes}`` the largest sum over this
    rank's stages after any of its actions (what its device holds; empty when bytes are not
    recorded); ``wait_seconds``, this rank's time waiting for messages so far;
    ``traced``, whether the rank recorded a trace (entries and versions; see
    :mod:`pipemare_lite.engine.recording`).
    """

    rank: int = 0
    entries: list = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    state_dicts: dict = field(default_factory=dict)
    gradients: dict = field(default_factory=dict)
    peak_bytes: dict = field(default_factory=dict)
    peak_bytes_by_rank: dict = field(default_factory=dict)
    wait_seconds: float = 0.0
    posted: list = field(default_factory=list)
    traced: bool = True

    def extend(self, later: RankResult) -> None:
        """Add the same rank's next run: records and trace entries appended, byte peaks
        raised, the latest wait total kept (what the executor holds between the gathers of
        ``fit(executor="dist")``)."""
        StepRecords.extend(self, later)
        self.entries += later.entries
        self.versions.update(later.versions)
        self.state_dicts.update(later.state_dicts)
        for stage, applied in later.gradients.items():
            self.gradients.setdefault(stage, []).extend(applied)
        for stage, peaks in later.peak_bytes.items():
            _raise(self.peak_bytes.setdefault(stage, {}), peaks)
        _raise(self.peak_bytes_by_rank, later.peak_bytes_by_rank)
        self.wait_seconds = later.wait_seconds
        self.posted += later.posted
        self.traced = self.traced and later.traced


def _raise(peaks: dict, values: dict) -> None:
    """Raise each kind's peak in ``peaks`` to ``values``' where that is higher."""
    for kind, value in values.items():
        peaks[kind] = max(peaks.get(kind, 0), value)


@dataclass
class DistRunResult(RunResult):
    """A :class:`~pipemare_lite.engine.local.RunResult` gathered from every rank, plus:

    Attributes:
        state_dicts: ``state_dicts[stage]`` the stage module's state at the end.
        gradients: ``gradients[stage][k]`` the parameter gradients applied by update k
            (when ``record_gradients=True``).
        posted: ``posted[rank]`` the rank's actions and posted operations, in order (when
            ``record_posts=True``; compare with
            :func:`pipemare_lite.schedules.comm_rows.comm_row_strings`).
    """

    state_dicts: list = field(default_factory=list)
    gradients: list = field(default_factory=list)
    posted: list = field(default_factory=list)

def merge_rank_results(schedule: Schedule, results: Sequence[RankResult]) -> DistRunResult:
    """Gather every rank's :class:`RankResult` into one :class:`DistRunResult` (chapter 11).

    The step records merge as the stages' do in one process
    (:meth:`~pipemare_lite.engine.recording.StepRecords.merged`: no two ranks share a key);
    the state dicts, gradients and byte peaks become lists by stage. The trace is a
    :class:`~pipemare_lite.analysis.timeline.Timeline` with ``source="measured"`` and
    ``unit="s"``: the Gantt figure and :func:`pipemare_lite.analysis.simulate.metrics` read
    it like a simulated one; None when the ranks recorded none (a recording level without a
    trace).
    """
    by_rank = sorted(results, key=lambda r: r.rank)
    records = StepRecords.merged(by_rank)
    stages = range(schedule.num_virtual_stages)

    def by_stage(name: str, default) -> list:
        merged = {s: value for r in by_rank for s, value in getattr(r, name).items()}
        return [merged.get(s, default()) for s in stages]

    versions = {key: value for r in by_rank for key, value in r.versions.items()}
    entries = tuple(entry for r in by_rank for entry in r.entries)
    trace = Timeline(schedule, entries, unit="s", source="measured",
                     extra={"versions": versions, "distances": dict(records.distances),
                            "wait_seconds": [r.wait_seconds for r in by_rank]}
                     ) if all(r.traced for r in by_rank) else None
    peak_bytes = by_stage("peak_bytes", lambda: dict.fromkeys(BYTE_KINDS, 0)) if any(
        r.peak_bytes for r in by_rank) else []  # not recorded: as the local executor says it
    by_rank_peaks = [dict(r.peak_bytes_by_rank) for r in by_rank] if peak_bytes else []
    return DistRunResult(**vars(records), trace=trace, peak_bytes=peak_bytes,
                         peak_bytes_by_rank=by_rank_peaks,
                         state_dicts=by_stage("state_dicts", lambda: None),
                         gradients=by_stage("gradients", list),
                         posted=[r.posted for r in by_rank])
