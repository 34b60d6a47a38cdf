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
from pipemare_lite.engine.stage import BYTE_KINDS
from pipemare_lite.schedules.actions import Schedule


@dataclass
class RankResult:
    """What one rank returns (CPU tensors and Python values: picklable; chapter 11).

    :class:`DistRunResult`'s fields for this rank's stages: per-stage values as ``{stage:
    value}``, versions and distances as ``{(stage, microbatch): int}``, the losses only on
    the rank of the last stage. Also ``entries``, this rank's
    :class:`~pipemare_lite.analysis.timeline.TimedAction` in seconds from the common origin
    (the trace's entries as they are); ``versions``, ``{"1F3": 0, ...}`` the weight version
    each action used; ``wait_seconds``, this rank's time waiting for messages so far;
    ``traced``, whether the rank recorded a trace (entries and versions; see
    :mod:`pipemare_lite.engine.recording`).
    """

    rank: int
    entries: list
    loss_by_microbatch: dict
    versions: dict
    forward_versions: dict
    backward_versions: dict
    distances: dict
    learning_rates: dict
    state_dicts: dict
    gradients: dict = field(default_factory=dict)
    peak_bytes: dict = field(default_factory=dict)
    wait_seconds: float = 0.0
    group_learning_rates: dict = field(default_factory=dict)
    update_norms: dict = field(default_factory=dict)
    forward_delays: dict = field(default_factory=dict)
    posted: list = field(default_factory=list)
    traced: bool = True


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

#: RankResult fields keyed by (stage, microbatch), action or microbatch: merged by update.
_BY_KEY = ("versions", "forward_versions", "backward_versions", "distances",
           "loss_by_microbatch")
#: RankResult fields keyed by stage -> the default of a stage that no rank reported.
_BY_STAGE = {"learning_rates": lambda: None, "group_learning_rates": lambda: None,
             "update_norms": list, "forward_delays": list, "state_dicts": lambda: None,
             "gradients": list,
             "peak_bytes": lambda: dict.fromkeys(BYTE_KINDS, 0)}


def merge_rank_results(schedule: Schedule, results: Sequence[RankResult]) -> DistRunResult:
    """Gather every rank's :class:`RankResult` into one :class:`DistRunResult` (chapter 11).

    The trace is a :class:`~pipemare_lite.analysis.timeline.Timeline` with
    ``source="measured"`` and ``unit="s"``: the Gantt figure and
    :func:`pipemare_lite.analysis.simulate.metrics` read it like a simulated one; None
    when the ranks recorded none (a recording level without a trace).
    """
    by_rank = sorted(results, key=lambda r: r.rank)
    # each field's {key: value} of every rank in one dict (no two ranks share a key) ...
    merged = {name: {key: value for r in by_rank for key, value in getattr(r, name).items()}
              for name in (*_BY_KEY, *_BY_STAGE)}
    for name, default in _BY_STAGE.items():  # ... and a list by stage for the per-stage ones
        merged[name] = [merged[name].get(s, default()) for s in range(schedule.num_virtual_stages)]
    versions, by_mb = merged.pop("versions"), dict(sorted(merged.pop("loss_by_microbatch").items()))
    if not any(r.peak_bytes for r in by_rank):  # not recorded: as the local executor says it
        merged["peak_bytes"] = []
    entries = tuple(entry for r in by_rank for entry in r.entries)
    trace = Timeline(schedule, entries, unit="s", source="measured",
                     extra={"versions": versions, "distances": dict(merged["distances"]),
                            "wait_seconds": [r.wait_seconds for r in by_rank]}
                     ) if all(r.traced for r in by_rank) else None
    # the other merged fields are DistRunResult's, under the same names
    return DistRunResult(list(by_mb.values()), by_mb, trace, **merged,
                         posted=[r.posted for r in by_rank])
