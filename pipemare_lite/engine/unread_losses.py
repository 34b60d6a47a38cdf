"""Losses kept on their device across runs, read to the host in one go (issue 44; introduced
with the executors in chapter 03).

By default each ``run()`` of an executor reads its losses to the host at its end: one
``tolist()`` a run, so one device-to-host sync a training step on a GPU. A run called with
``read_losses=False`` reads nothing: the last stage's loss tensors wait here, and the
executor's ``read_losses()`` later turns every waiting run's losses into floats with ONE
read (the distributed executor first broadcasts them as one tensor)::

    run 1 (read_losses=False)  losses [l0 l1]   -- kept on the device, no sync
    run 2 (read_losses=False)  losses [l2 l3]   -- kept
    read_losses()              cat -> [l0 l1 l2 l3].tolist()  -- the one sync
                               -> [RunLosses(run 1), RunLosses(run 2)]

Each run's values are those an immediate read gives, bitwise (the same float32 values,
read by the same ``tolist``). What a late read cannot see any more is the state of the
weights when a run ended, which a divergence report names; so every deferred run also
keeps, per stage of this process, a 0-d boolean tensor "every weight finite" (computed on
the device: no sync) and its update count, read only when a run turns out to have
diverged (:meth:`UnreadLosses.health`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from pipemare_lite.engine.stage import StageWorker

__all__ = ["RunLosses", "UnreadLosses"]


@dataclass
class RunLosses:
    """One run whose losses were read late.

    Attributes:
        losses: ``microbatch -> loss``, in the order the run computed them (the order an
            immediate read gives ``loss_by_microbatch``).
        finite: ``stage -> 0-d bool tensor`` for this process's stages: every parameter
            finite when the run ended.
        updates: ``stage -> updates made`` by the run's end, for this process's stages.
    """

    losses: dict[int, float]
    finite: dict[int, torch.Tensor]
    updates: dict[int, int]


class UnreadLosses:
    """The runs of one executor (or rank) whose losses have not been read yet.

    Args:
        workers: this process's stage workers, ``{stage: worker}``.
        last_stage: the last stage's index (its worker holds the loss tensors, when it is
            one of ``workers``).
    """

    def __init__(self, workers: Mapping[int, StageWorker], last_stage: int) -> None:
        self.workers = workers
        self.last = workers.get(last_stage)
        self._values: list[torch.Tensor] = []  # one 1-D tensor per run (the last stage's)
        self._runs: list[tuple[list[int], dict, dict]] = []

    def __len__(self) -> int:
        """How many runs wait to be read."""
        return len(self._runs)

    def count(self) -> int:
        """How many losses wait to be read (over every waiting run)."""
        return sum(len(microbatches) for microbatches, _, _ in self._runs)

    def add_run(self, expected: list[int] | None = None) -> None:
        """Keep what the run that just ended left unread (call after each such run).

        ``expected``: the microbatches whose losses the run computed, as a process without
        the last stage knows them (from the schedule); the last stage's process checks its
        own against it.
        """
        microbatches = expected
        if self.last is not None:
            taken = self.last.take_unread_losses()
            computed = [m for m, _ in taken]
            if expected is not None and computed != expected:
                raise RuntimeError(f"this run computed the losses of microbatches {computed}, "
                                   f"the schedule says {expected}")
            microbatches = computed
            if taken:
                self._values.append(torch.stack([t.reshape(()) for _, t in taken]))
        finite = {s: _all_finite(w.module) for s, w in self.workers.items()}
        updates = {s: w.versions.version for s, w in self.workers.items()}
        self._runs.append((list(microbatches or ()), finite, updates))

    def values(self) -> torch.Tensor | None:
        """Every waiting loss as one 1-D tensor on the last stage's device (None: this
        process holds no loss, or none waits)."""
        if not self._values:
            return None
        return self._values[0] if len(self._values) == 1 else torch.cat(self._values)

    def take(self, values: list[float]) -> list[RunLosses]:
        """Split ``values`` (the read of :meth:`values`, or its broadcast) into the waiting
        runs, in run order; then forget them."""
        if len(values) != self.count():
            raise ValueError(f"{len(values)} loss values for {self.count()} waiting losses")
        runs, start = [], 0
        for microbatches, finite, updates in self._runs:
            end = start + len(microbatches)
            runs.append(RunLosses(dict(zip(microbatches, values[start:end])), finite, updates))
            start = end
        self._values, self._runs = [], []
        return runs

    @staticmethod
    def health(run: RunLosses, num_stages: int, device: torch.device) -> torch.Tensor:
        """``run``'s stage states as one float64 tensor on ``device``: ``[s]`` 1 where stage
        s held a non-finite weight at the run's end, ``[num_stages + s]`` its update count;
        zeros for stages of other processes (so a sum over processes fills it in)."""
        vector = torch.zeros(2 * num_stages, dtype=torch.float64, device=device)
        for s, finite in run.finite.items():
            vector[s] = (~finite).to(vector)
        for s, updates in run.updates.items():
            vector[num_stages + s] = updates
        return vector

    @staticmethod
    def read_health(vector: torch.Tensor, num_stages: int) -> tuple[list[int], dict[int, int]]:
        """The stages with a non-finite weight and every stage's update count, from
        :meth:`health`'s tensor (one host read)."""
        values = vector.cpu().tolist()
        non_finite = [s for s in range(num_stages) if values[s]]
        return non_finite, {s: int(values[num_stages + s]) for s in range(num_stages)}


def _all_finite(module: torch.nn.Module) -> torch.Tensor:
    """A 0-d bool tensor: every parameter of ``module`` finite (the same test as fit's scan
    of the weights at a divergence, kept on the device: two small kernels a parameter and
    two more, no sync)."""
    flags = [torch.isfinite(p.detach()).all() for p in module.parameters()]
    return torch.stack(flags).all() if flags else torch.ones((), dtype=torch.bool)
