"""What a run did, action by action: times, weight versions, bytes (chapters 03-11).

Both executors keep one :class:`Recorder` per ``run()`` and call :meth:`Recorder.record`
after every action the :class:`~pipemare_lite.engine.interpreter.Interpreter` ran::

    recorder = Recorder(interpreter, meter)
    for each action:  start, end = interpreter.step(action)
                      recorder.record(rank, action, start, end)
    recorder.timed_actions()   -> TimedAction entries for the Timeline (a rank's, or all)
    recorder.versions          -> {"2F5": version the action used}
    recorder.meter             -> BytesMeter: peaks per stage and per rank, bytes over time

Times are seconds from ``recorder.origin`` (set by :meth:`Recorder.start`, which the
distributed executor calls as every rank leaves the barrier: a common origin).

A run that records no trace (:mod:`pipemare_lite.engine.recording`) keeps no Recorder; its
executor asks the :class:`BytesMeter` alone, which then reads a stage only after the actions
that can raise a peak.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from pipemare_lite.analysis.timeline import TimedAction
from pipemare_lite.engine.stage import BYTE_KINDS, StageWorker
from pipemare_lite.methods.hooks import MethodHooks
from pipemare_lite.schedules.actions import FORWARD, UPDATE, Action


class Recorder:
    """Trace entries, versions and (optionally) bytes of one run.

    Args:
        interpreter: answers which version an action used (``version_of``).
        meter: a :class:`BytesMeter` read after every action, or None (not tracked).
    """

    def __init__(self, interpreter, meter: BytesMeter | None = None) -> None:
        self.interpreter = interpreter
        self.meter = meter
        self.entries: list[tuple[int, Action, float, float]] = []
        self.versions: dict[str, int] = {}
        self.origin = time.perf_counter()

    def start(self) -> None:
        """Take the time origin now."""
        self.origin = time.perf_counter()

    def record(self, rank: int, action: Action, start: float, end: float) -> None:
        """Note ``action`` of ``rank``'s row, which ran from ``start`` to ``end``
        (``time.perf_counter``), right after it ran."""
        origin = self.origin
        self.entries.append((rank, action, start - origin, end - origin))
        self.versions[str(action)] = self.interpreter.version_of(action)
        if self.meter is not None:
            self.meter.after_action(rank, action, end - origin)

    def timed_actions(self) -> list[TimedAction]:
        """The entries as :class:`~pipemare_lite.analysis.timeline.TimedAction` (for a Timeline)."""
        return [TimedAction(*entry) for entry in self.entries]


class BytesMeter:
    """Peaks of every byte kind per stage and per rank, read after each action.

    Args:
        workers: ``{stage: StageWorker}`` being measured.
        stages_of: ``{rank: [its stages]}`` of the ranks whose actions are recorded.
        every_action: read after every action and keep ``over_time``; False reads a stage
            only after the actions that can raise one of its peaks, with the same peaks
            (a stage's bytes grow only at F, its activations, and at U, a stashed copy and
            the optimizer state; a stage with hooks of its own, or sharing its rank with
            others, whose sum needs every stage's bytes now, is read after every action).
    """

    def __init__(self, workers: Mapping[int, StageWorker],
                 stages_of: Mapping[int, Sequence[int]], *, every_action: bool = True) -> None:
        self.workers = workers
        self.every_action = every_action
        self.always = {s for s, w in workers.items() if type(w.hooks) is not MethodHooks}
        self.always.update(s for stages in stages_of.values() if len(stages) > 1 for s in stages)
        self.now = {s: w.bytes_held() for s, w in workers.items()}
        self.stages_of = dict(stages_of)
        self.peaks = {s: dict.fromkeys(BYTE_KINDS, 0) for s in workers}
        # ranks holding several virtual stages (interleaved) sum them after each action;
        # a rank with one stage has that stage's peaks
        self.shared_peaks = {r: dict.fromkeys(BYTE_KINDS, 0)
                             for r, stages in self.stages_of.items() if len(stages) > 1}
        self.over_time: list[tuple[float, int, dict[str, int]]] = []

    def after_action(self, rank: int, action: Action, seconds: float = 0.0) -> None:
        """Read the bytes of ``action``'s stage after it ran (at ``seconds``); update the
        peaks."""
        stage = action.stage
        if not self.every_action:
            if action.kind != FORWARD and action.kind != UPDATE and stage not in self.always:
                return  # nothing grew
            held = self.now[stage] = self.workers[stage].bytes_held()
        else:
            held = self.now[stage] = self.workers[stage].bytes_held()
            self.over_time.append((seconds, stage, held))
        _raise_peaks(self.peaks[stage], held)
        if rank in self.shared_peaks:
            stages = self.stages_of[rank]
            _raise_peaks(self.shared_peaks[rank],
                         {kind: sum(self.now[s].get(kind, 0) for s in stages) for kind in held})

    def rank_peaks(self) -> dict[int, dict[str, int]]:
        """``{rank: {kind: bytes}}``: the largest sum over the rank's stages after any of
        its actions."""
        return {r: self.shared_peaks[r] if r in self.shared_peaks else dict(self.peaks[stages[0]])
                for r, stages in self.stages_of.items()}


def _raise_peaks(peaks: dict[str, int], values: dict[str, int]) -> None:
    """Raise each kind's peak to its value now where that is higher (a method's hooks may
    add kinds of their own)."""
    for kind, value in values.items():
        if value > peaks.get(kind, 0):
            peaks[kind] = value
