"""What a training run records, step by step: :class:`History` (introduced in chapter 07).

:func:`pipemare_lite.training.loop.fit` returns a :class:`History`; the figures of chapters 07-10
(:mod:`pipemare_lite.figures.viz.curves`) draw it. A :class:`HistoryRecorder` fills it from what the
executor reports after each step:

- the **loss** of a step is the mean over its microbatches, each computed with the weights
  its forward saw; a step counts once all of its microbatches have reported;
- the **learning rate** of every stage at every update (T1 lowers the stale stages');
- the **update norm** of every stage at every update, ``||w after - w before||_2`` (where
  an asynchronous pipeline goes wrong first: chapter 07);
- the **forward delay** of every stage, measured from the executed trace by
  :class:`ForwardDelayMeter` (never taken from a formula);
- the **peak bytes** each stage held, by kind (weights, stash, T2 buffer, optimizer,
  activations).

A non-finite loss ends a run; :func:`divergence_report` says when and where in one sentence.
Everything here is plain Python (no torch), so a history can be drawn anywhere.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: this module loads no torch
    from pipemare_lite.engine.local import RunResult


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss; the message says at which step and stage.

    Raised by ``fit(..., on_divergence="raise")`` (introduced in chapter 07); ``history``
    is the :class:`History` up to the divergence (None when raised without one), so a
    caller can still save the loss curve that led there.
    """

    def __init__(self, message: str, history: History | None = None) -> None:
        super().__init__(message)
        self.history = history


@dataclass
class History:
    """What a :func:`~pipemare_lite.training.loop.fit` run did, step by step (chapter 07).

    All plain values, JSON-ready.

    Attributes:
        config: the arguments of the run.
        loss: training loss per step (mean over the step's microbatches).
        stage_lr: ``stage_lr[s][k]``, learning rate of stage s at its update k (its
            optimizer's first param group).
        stage_lr_by_group: ``stage_lr_by_group[s][g][k]``, the same for every param group
            g (one group for sgd/adam/adamw; ``muon`` has a Muon and an AdamW group).
        stage_update_norm: ``stage_update_norm[s][k]``, ``||w after - w before||_2`` of
            stage s's update k (float64; non-finite from the update that left a non-finite
            weight on; JSON writes it as null).
        evals: ``{"epoch", "step", "loss", "accuracy"}`` on the test set, after each epoch
            (accuracy None where it means nothing: targets that are no class labels).
        diverged: True when a non-finite loss stopped the run.
        divergence: the readable report when diverged, else None.
        divergence_step: the step (from 1) of the first non-finite loss, else None.
        forward_delay: per stage, mean measured forward delay in updates.
        forward_delay_max: per stage, largest measured forward delay.
        memory_bytes: peak bytes by kind (weights, stash, t2_buffer, optimizer,
            activations, and any kind a method's hooks declare, e.g. ``prediction``), each
            the sum over ranks of that rank's peak (:attr:`memory_bytes_by_rank`): what the
            P devices need together, each holding its rank's stages. With one stage per rank
            it is the sum of the stage peaks; with several (interleaved, ZB-V, DualPipeV) it
            is at most that, since a rank's stages do not all peak at once.
        memory_bytes_by_rank: ``[rank][kind]``, the peak of one device: the largest sum over
            the rank's stages, measured after each of its actions (a run that recorded no
            bytes, or a history written before this field, has it empty).
        memory_bytes_by_stage: ``[stage][kind]``, the breakdown: each (virtual) stage's own
            peak (a rank's stages summed overstate its peak: they need not peak together).
        wall_seconds: wall time spent in training and evaluation (summed over resumes).
        provenance: the code that ran (:func:`pipemare_lite.training.provenance.run_provenance`):
            ``environment`` (Python, torch, numpy, pipemare_lite versions, the git commit or
            "not a checkout", the platform), ``plugins`` (``{module: "sha256:..."}`` of
            each plugin's source) and ``schedule`` (``"sha256:..."`` of the rows run); after
            a resume on other software, ``resumed_from`` holds the earlier environment.
    """

    config: dict = field(default_factory=dict)
    loss: list[float] = field(default_factory=list)
    stage_lr: list[list[float]] = field(default_factory=list)
    stage_lr_by_group: list[list[list[float]]] = field(default_factory=list)
    stage_update_norm: list[list[float]] = field(default_factory=list)
    evals: list[dict] = field(default_factory=list)
    diverged: bool = False
    divergence: str | None = None
    divergence_step: int | None = None
    forward_delay: list[float] = field(default_factory=list)
    forward_delay_max: list[int] = field(default_factory=list)
    memory_bytes: dict[str, int] = field(default_factory=dict)
    memory_bytes_by_stage: list[dict[str, int]] = field(default_factory=list)
    wall_seconds: float = 0.0
    memory_bytes_by_rank: list[dict[str, int]] = field(default_factory=list)
    provenance: dict = field(default_factory=dict)

    @property
    def steps(self) -> int:
        """How many steps (minibatches) finished."""
        return len(self.loss)

    @property
    def final_loss(self) -> float:
        """Test loss at the last evaluation (NaN if there was none)."""
        return self.evals[-1]["loss"] if self.evals else math.nan

    @property
    def final_accuracy(self) -> float | None:
        """Test accuracy at the last evaluation (NaN if there was none; None for targets
        that are no class labels, e.g. a regression)."""
        return self.evals[-1]["accuracy"] if self.evals else math.nan

    def summary(self) -> dict:
        """The numbers the CLI prints with ``--json``."""
        return {
            "final_loss": self.final_loss,
            "final_accuracy": self.final_accuracy,
            "final_train_loss": self.loss[-1] if self.loss else math.nan,
            "diverged": self.diverged,
            "divergence": self.divergence,
            "divergence_step": self.divergence_step,
            "steps": self.steps,
            "forward_delay": self.forward_delay,
            "forward_delay_max": self.forward_delay_max,
            "memory_bytes": self.memory_bytes,
            "memory_bytes_by_stage": self.memory_bytes_by_stage,
            "memory_bytes_by_rank": self.memory_bytes_by_rank,
            "wall_seconds": self.wall_seconds,
            "evals": self.evals,
        }

    def __repr__(self) -> str:
        """One screen, however long the run: the settings, the loss's first and last
        values, the last evaluation, the delays, the memory, the time (the lists in full:
        the fields, :meth:`summary`, :meth:`to_dict`)."""
        c = self.config
        lines = [f"History(method={c.get('method')!r}, stages={c.get('num_stages')}, "
                 f"microbatches={c.get('num_microbatches')}, executor={c.get('executor')!r}, "
                 f"steps={self.steps})"]
        if self.loss:
            low = min(range(len(self.loss)), key=lambda k: _sortable(self.loss[k]))
            lines.append(f"  loss: {self.loss[0]:.4g} at step 1 -> {self.loss[-1]:.4g} at step "
                         f"{self.steps} (lowest {self.loss[low]:.4g} at step {low + 1})")
        if self.evals:
            last = self.evals[-1]
            extra = ", ".join(f"{k} {_short(v)}" for k, v in last.items()
                              if k not in ("epoch", "step"))
            lines.append(f"  evaluations: {len(self.evals)}, the last after step "
                         f"{last['step']}: {extra}")
        if self.diverged:
            lines.append(f"  diverged: {_clip(str(self.divergence), 200)}")
        if self.forward_delay:
            lines.append(f"  forward delay per stage (updates): {_few(self.forward_delay)}")
        if self.stage_lr and self.stage_lr[0]:
            lines.append(f"  lr per stage at the last update: "
                         f"{_few([rates[-1] for rates in self.stage_lr if rates])}")
        if self.memory_bytes:
            lines.append("  peak bytes: " + ", ".join(f"{k} {v:,}" for k, v in
                                                       self.memory_bytes.items()))
        lines.append(f"  wall time: {self.wall_seconds:.3g} s")
        return "\n".join(_clip(line, 100) for line in lines)

    def to_dict(self) -> dict:
        """All fields as plain values (for checkpoints and JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> History:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)

    @classmethod
    def read_json(cls, path: str | os.PathLike) -> History:
        """The history in a ``pipemare-lite train --out`` file (its other keys are skipped).

        Values the file stores as null because they were NaN or inf stay None.
        """
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


class ForwardDelayMeter:
    """Forward delay per stage, measured from executed traces (introduced in chapter 05).

    For each stage, walking its executed actions in order: F(m) records the version its
    forward read; the first U after B(m) (or W(m)) applies m's gradient to version v, and
    the delay is v - version_at_forward. Traces may come in pieces (one per step): a
    microbatch whose update has not run yet waits for the next piece. The executors measure
    the same delays as they run (their results' ``forward_delays``, recorded even without
    a trace), which :meth:`add` takes.
    """

    def __init__(self, num_stages: int) -> None:
        self.forward_version: list[dict[int, int]] = [{} for _ in range(num_stages)]
        self.waiting: list[list[int]] = [[] for _ in range(num_stages)]
        self.delays: list[list[int]] = [[] for _ in range(num_stages)]

    def feed(self, trace) -> None:
        """Read one executed trace (a Timeline whose ``extra["versions"]`` names versions)."""
        versions = trace.extra["versions"]
        by_stage: dict[int, list] = {}
        for entry in sorted(trace.entries, key=lambda e: (e.rank, e.start)):
            by_stage.setdefault(entry.action.stage, []).append(entry.action)
        for s, actions in by_stage.items():
            for action in actions:
                if action.kind == "F":
                    self.forward_version[s][action.index] = versions[str(action)]
                elif action.kind in ("B", "W"):
                    self.waiting[s].append(action.index)
                elif action.kind == "U":
                    applied = versions[str(action)]
                    for m in self.waiting[s]:
                        self.delays[s].append(applied - self.forward_version[s].pop(m))
                    self.waiting[s] = []

    def add(self, stage: int, delays) -> None:
        """Add delays measured elsewhere (an executor's ``forward_delays[stage]``)."""
        self.delays[stage].extend(int(d) for d in delays)

    def mean(self) -> list[float]:
        """Per stage, the mean delay in updates (0.0 where nothing was measured)."""
        return [sum(d) / len(d) if d else 0.0 for d in self.delays]

    def max(self) -> list[int]:
        """Per stage, the largest delay in updates (0 where nothing was measured)."""
        return [max(d) if d else 0 for d in self.delays]

    def state(self) -> dict:
        """Plain values for a checkpoint (str keys)."""
        return {
            "forward_version": [{str(k): v for k, v in d.items()} for d in self.forward_version],
            "waiting": self.waiting,
            "delays": self.delays,
        }

    def load(self, state: dict) -> None:
        """Continue from what :meth:`state` returned."""
        self.forward_version = [{int(k): v for k, v in d.items()} for d in state["forward_version"]]
        self.waiting = [list(w) for w in state["waiting"]]
        self.delays = [list(d) for d in state["delays"]]


class HistoryRecorder:
    """Folds each executor ``run()`` result into a :class:`History` (chapter 07).

    Args:
        history: the history to fill (a fresh one, or one read back from a checkpoint).
        num_microbatches: N, microbatches per step.
        num_stages: how many stage modules hold bytes (one byte peak each).
        num_virtual_stages: how many stages the schedule names (one delay each).
        num_ranks: how many devices (one byte peak each, their stages held together);
            default ``num_stages``, one stage per rank.
    """

    def __init__(
        self, history: History, num_microbatches: int, num_stages: int, num_virtual_stages: int,
        num_ranks: int | None = None,
    ) -> None:
        self.history = history
        self.num_ranks = num_stages if num_ranks is None else num_ranks
        self.rank_peaks: list[dict[str, int]] = [{} for _ in range(self.num_ranks)]
        self.num_microbatches = num_microbatches
        self.delays = ForwardDelayMeter(num_virtual_stages)
        #: losses of microbatches whose step has not finished on every stage yet
        self.pending_losses: dict[int, float] = {}
        self.peaks: list[dict[str, int]] = [{} for _ in range(num_stages)]

    def record(self, result: RunResult) -> None:
        """Fold one ``run()`` result in: losses of complete steps, lrs, update norms, byte
        peaks, delays (its :class:`~pipemare_lite.engine.recording.StepRecords`, whose
        per-stage fields are in stage order, and its byte peaks)."""
        history = self.history
        self.add_losses(result.loss_by_microbatch)
        by_update = list(result.group_learning_rates.values())  # [stage][update][group]
        if not history.stage_lr:
            history.stage_lr = [[] for _ in by_update]
        if not history.stage_lr_by_group:
            history.stage_lr_by_group = [[] for _ in by_update]
        for rates, groups, updates in zip(history.stage_lr, history.stage_lr_by_group, by_update):
            for update in updates:
                if not groups:
                    groups.extend([] for _ in update)
                for group, rate in zip(groups, update):
                    group.append(float(rate))
                rates.append(float(update[0]))
        norms = list(result.update_norms.values())
        if any(norms) and not history.stage_update_norm:
            history.stage_update_norm = [[] for _ in norms]
        for stage_norms, new in zip(history.stage_update_norm, norms):
            stage_norms.extend(float(v) for v in new)
        for stage_peak, new in zip(self.peaks, result.peak_bytes):
            _raise(stage_peak, new)
        by_rank = getattr(result, "peak_bytes_by_rank", None)  # registered executors may lack it
        if not by_rank and self.num_ranks == len(self.peaks):  # one stage per rank: the same
            by_rank = result.peak_bytes
        for rank_peak, new in zip(self.rank_peaks, by_rank or ()):
            _raise(rank_peak, new)
        for s, stage_delays in result.forward_delays.items():
            self.delays.add(s, stage_delays)

    def add_losses(self, loss_by_microbatch: dict[int, float]) -> None:
        """Fold in losses (``microbatch -> loss``): every step whose microbatches have all
        reported gets its mean appended to the history's ``loss``, in step order."""
        n, history = self.num_microbatches, self.history
        self.pending_losses.update(loss_by_microbatch)
        while True:
            k = len(history.loss)
            wanted = range(k * n, (k + 1) * n)
            if not all(m in self.pending_losses for m in wanted):
                break
            history.loss.append(sum(self.pending_losses.pop(m) for m in wanted) / n)

    def finish(self) -> History:
        """Write the measured delays and byte peaks into the history; return it."""
        history, peaks = self.history, self.peaks
        history.forward_delay = self.delays.mean()
        history.forward_delay_max = self.delays.max()
        history.memory_bytes_by_stage = [dict(p) for p in peaks]
        ranks = self.rank_peaks if any(self.rank_peaks) else []
        history.memory_bytes_by_rank = [dict(p) for p in ranks]
        # the devices' peaks summed (with one stage per rank: the stages' peaks summed)
        summed = ranks or peaks
        kinds = sorted({k for p in summed for k in p})
        history.memory_bytes = {k: sum(p.get(k, 0) for p in summed) for k in kinds}
        return history

    def state(self) -> dict:
        """Plain values for a checkpoint: the history and what is still being measured."""
        return {
            "history": self.history.to_dict(),
            "delays": self.delays.state(),
            "pending_losses": {str(k): v for k, v in self.pending_losses.items()},
            "peaks": self.peaks,
            "rank_peaks": self.rank_peaks,
        }

    def load(self, state: dict) -> None:
        """Continue from what :meth:`state` returned."""
        self.history = History.from_dict(state["history"])
        self.delays.load(state["delays"])
        self.pending_losses = {int(k): v for k, v in state["pending_losses"].items()}
        self.peaks = state["peaks"]
        # a checkpoint written before rank peaks: the stages' when each rank holds one,
        # else measured from here on
        self.rank_peaks = state.get("rank_peaks", [
            dict(p) for p in self.peaks] if self.num_ranks == len(self.peaks) else [
            {} for _ in range(self.num_ranks)])


def _sortable(value: float) -> float:
    """``value``, with NaN sorted last (the lowest loss of a run that diverged)."""
    return math.inf if value != value else value


def _short(value) -> str:
    """A number in 4 significant digits, anything else as it prints."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _few(values: list, keep: int = 8) -> str:
    """At most ``keep`` values, the rest counted: ``[1, 2, ... (+6 more)]``."""
    shown = ", ".join(_short(v) for v in values[:keep])
    return f"[{shown}{f', ... (+{len(values) - keep} more)' if len(values) > keep else ''}]"


def _clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters (an ellipsis marks the cut)."""
    return text if len(text) <= width else text[:width - 3] + "..."


def _raise(peaks: dict[str, int], values: dict) -> None:
    """Raise each kind's peak in ``peaks`` to ``values``' where that is higher."""
    for kind, value in values.items():
        peaks[kind] = max(peaks.get(kind, 0), int(value))


def divergence_report(
    microbatch: int,
    loss: float,
    num_microbatches: int,
    steps_per_epoch: int,
    completed_steps: int,
    non_finite_stages: list[int],
    num_stages: int,
) -> str:
    """One readable sentence: when, which microbatch's loss, which stages' weights (chapter 07).

    One step convention throughout: steps count minibatches from 1, and microbatch ``m``
    (the global, 0-indexed microbatch number) belongs to step ``m // N + 1``; the epoch (from
    1) is that step's. In an asynchronous pipeline forwards run ahead of the updates, so a
    loss may turn non-finite in a step later than the last completed one: the sentence then
    also says how many updates every stage had made (the steps whose updates completed);
    not when the step's own update is done too (a flushed step: found as it ended).
    ``non_finite_stages`` are the stages whose
    weights hold a NaN or inf (none: the loss itself overflowed on the last stage).
    """
    step = microbatch // num_microbatches + 1
    epoch = (step - 1) // steps_per_epoch + 1
    position = microbatch % num_microbatches + 1
    what = (f"loss {loss} on microbatch {microbatch} "
            f"(number {position} of {num_microbatches} in step {step})")
    if completed_steps < step - 1:  # (a flushed step's own update may be done: not ahead)
        what += f", computed ahead: every stage had made only {completed_steps} updates"
    if non_finite_stages:
        where = f"non-finite weights on stage(s) {', '.join(map(str, non_finite_stages))}"
    else:
        where = (
            f"all weights still finite: the loss overflowed on the last stage ({num_stages - 1})"
        )
    return (
        f"diverged at step {step} (epoch {epoch}): {what}; {where}. "
        "Try a smaller lr, T1 (lr rescheduling) or warm-up."
    )
