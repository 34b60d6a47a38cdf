"""The data a training run feeds the pipeline, microbatch by microbatch (chapter 07).

Every epoch the training set is shuffled (:func:`epoch_order`: a pure function of the seed
and the epoch number, so a resumed run sees the same order) and cut into minibatches of
``batch_size`` samples (a last partial minibatch is dropped), each minibatch into
``num_microbatches`` microbatches. :class:`EpochMicrobatches` numbers the microbatches of the
whole run globally, which is what an executor asks for: ``feed[m] -> (x, y)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pipemare_lite.training.datasets import Dataset, microbatches


def epoch_order(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    """The shuffled sample order of one epoch: a pure function of ``(seed, epoch)``."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(num_samples, generator=generator)


class RunMicrobatches(Sequence):
    """``feed[m] -> (x, y)`` over a run of ``epochs * steps_per_epoch`` steps of
    ``num_microbatches`` microbatches, indexed by global microbatch m (step ``m // N``);
    a subclass gives :meth:`step_microbatches`."""

    epochs: int
    steps_per_epoch: int
    num_microbatches: int

    def __len__(self) -> int:
        return self.epochs * self.steps_per_epoch * self.num_microbatches

    def __getitem__(self, m: int):
        if not 0 <= m < len(self):
            raise IndexError(f"microbatch {m} out of range 0..{len(self) - 1}")
        step, j = divmod(m, self.num_microbatches)
        return self.step_microbatches(step)[j]

    def step_microbatches(self, step: int) -> list[tuple]:
        """The N microbatches of ``step``."""
        raise NotImplementedError


class EpochMicrobatches(RunMicrobatches):
    """Lazy ``microbatches[m] -> (x, y)`` over the whole run, indexed by global microbatch.

    Microbatch m belongs to step ``k = m // N`` of epoch ``k // steps_per_epoch``; only the
    epoch's order is kept in memory.
    """

    def __init__(
        self, data: Dataset | tuple, batch_size: int, num_microbatches: int, seed: int,
        epochs: int,
    ) -> None:
        # a Dataset's training split, or (inputs, targets) tensors
        self.x, self.y = data if isinstance(data, tuple) else (data.x_train, data.y_train)
        self.batch_size, self.num_microbatches, self.seed = batch_size, num_microbatches, seed
        self.steps_per_epoch = len(self.x) // batch_size
        self.epochs = epochs
        self._order: tuple[int, torch.Tensor] | None = None  # (epoch, its sample order)
        self._step: tuple[int, list] | None = None  # (step, its microbatches)

    def step_microbatches(self, step: int) -> list[tuple]:
        """Step ``step``'s minibatch of the epoch's shuffled order, cut into microbatches."""
        if self._step is None or self._step[0] != step:
            epoch, position = divmod(step, self.steps_per_epoch)
            if self._order is None or self._order[0] != epoch:
                self._order = (epoch, epoch_order(len(self.x), self.seed, epoch))
            size = self.batch_size
            chosen = self._order[1][position * size : (position + 1) * size]
            # index_select: the same rows as x[chosen], a third of the time (every step)
            self._step = (step, microbatches(self.x.index_select(0, chosen),
                                             self.y.index_select(0, chosen), self.num_microbatches))
        return self._step[1]
