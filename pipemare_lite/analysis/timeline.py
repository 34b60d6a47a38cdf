"""Timelines: when each action ran. One type for the simulator's plan and an executor's trace.

The simulator (:mod:`pipemare_lite.analysis.simulate`) produces a :class:`Timeline` in cost units;
the
local and distributed executors record one in seconds. The Gantt figure
(:mod:`pipemare_lite.figures.viz`) draws either, so a chapter can put "planned" and "measured" side
by side (chapters 02 and 11). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from pipemare_lite.schedules.actions import Action, Schedule


class TimedAction(NamedTuple):
    """One action on one rank, with its start and end time (a record: a simulated
    timeline holds one per action, hundreds of thousands for large schedules)."""

    rank: int
    action: Action
    start: float
    end: float

    @property
    def duration(self) -> float:
        """end - start."""
        return self.end - self.start


@dataclass(frozen=True)
class Timeline:
    """Every action of a schedule with its start and end.

    Attributes:
        schedule: the schedule that was simulated or executed.
        entries: all timed actions, in no particular order across ranks.
        unit: "cost units" for a simulation, "s" for a measured trace.
        source: "simulated" or "measured".
    """

    schedule: Schedule
    entries: tuple[TimedAction, ...]
    unit: str = "cost units"
    source: str = "simulated"
    extra: dict = field(default_factory=dict)

    @property
    def makespan(self) -> float:
        """Time from the first start to the last end."""
        if not self.entries:
            return 0.0
        return max(e.end for e in self.entries) - min(e.start for e in self.entries)

    def for_rank(self, rank: int) -> list[TimedAction]:
        """The rank's entries sorted by start time."""
        return sorted((e for e in self.entries if e.rank == rank), key=lambda e: e.start)
