"""Data as torch has it: ``fit()`` on a ``DataLoader`` or any iterable of batches
(introduced in chapter 07; issue 44).

``fit(model, data, ...)`` takes its training data in one of three forms:

- the book's :class:`~pipemare_lite.training.datasets.Dataset` (train and test tensors;
  shuffled each epoch by the run's seed, :mod:`pipemare_lite.training.data_feed`);
- a ``torch.utils.data.TensorDataset`` of ``(inputs, targets)``: samples, fed exactly like
  a ``Dataset``'s training split (``batch_size`` and ``seed`` choose the minibatches);
- an iterable of ``(inputs, targets)`` minibatches that can be iterated once per epoch and
  has a length (a ``DataLoader``, a list): each minibatch is one step, cut into
  ``num_microbatches`` equal microbatches (:class:`BatchMicrobatches`). Its order is the
  loader's own (``shuffle``, ``generator``), not the run's ``seed``.

Targets may be of any dtype: class labels for the default cross-entropy, floats for a
regression ``loss_fn`` (e.g. ``torch.nn.functional.mse_loss``).

Evaluation (``eval_data``): an iterable of ``(inputs, targets)`` batches, a function
``eval_data(model) -> dict`` of numbers (``model`` runs the stages in order:
:class:`StagesInOrder`), or None: a ``Dataset``'s test split, nothing otherwise.
:func:`evaluate_batches` measures batches: the loss is the cross-entropy when the targets are
class labels (integers, one per output row; the ``Dataset`` rule: runs compare on one
measure), else the run's ``loss_fn``; accuracy only for class labels, None otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from pipemare_lite.training.data_feed import RunMicrobatches
from pipemare_lite.training.datasets import Dataset, microbatches


def tensor_dataset_parts(data) -> tuple[torch.Tensor, torch.Tensor] | None:
    """``(inputs, targets)`` of a ``TensorDataset`` of two tensors; None for other data."""
    from torch.utils.data import TensorDataset

    if not isinstance(data, TensorDataset):
        return None
    if len(data.tensors) != 2:
        raise ValueError(f"a TensorDataset for fit() holds (inputs, targets): 2 tensors, got "
                         f"{len(data.tensors)}")
    return data.tensors


def check_batches(data, what: str = "data") -> int:
    """The number of minibatches per pass of ``data`` (an iterable of ``(inputs, targets)``
    batches with a length); refuse anything else, naming what is allowed."""
    from torch.utils.data import Dataset as TorchDataset
    from torch.utils.data import IterableDataset

    allowed = ("a pipemare_lite Dataset, a TensorDataset of (inputs, targets), or a "
               "DataLoader (any iterable of (inputs, targets) batches with a len(), which "
               "fit() iterates once per epoch)")
    if isinstance(data, TorchDataset) and not isinstance(data, IterableDataset):
        raise TypeError(f"{what} is a {type(data).__name__} (samples, not batches); wrap it "
                        f"in a torch.utils.data.DataLoader; allowed: {allowed}")
    if isinstance(data, torch.Tensor) or not hasattr(data, "__iter__"):
        raise TypeError(f"{what} must be {allowed}; got {type(data).__name__}")
    if iter(data) is data:
        raise TypeError(f"{what} is a one-pass iterator ({type(data).__name__}); give "
                        f"something fit() can iterate once per epoch: {allowed}")
    try:
        count = len(data)
    except TypeError as exc:
        raise TypeError(f"{what} ({type(data).__name__}) has no len(): fit() needs the number "
                        f"of minibatches per epoch to build the run's schedule; {allowed}"
                        ) from exc
    if count < 1:
        raise ValueError(f"{what} holds no batches")
    return count


def split_batch(batch, num_microbatches: int, where: str) -> list[tuple]:
    """Cut one ``(inputs, targets)`` minibatch into ``num_microbatches`` equal microbatches;
    a clear error names ``where`` the batch came from, its size and the microbatch count."""
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise ValueError(f"{where} is a {type(batch).__name__}"
                         f"{f' of {len(batch)}' if isinstance(batch, (tuple, list)) else ''}; "
                         "each batch must be (inputs, targets)")
    x, y = batch
    for name, value in (("inputs", x), ("targets", y)):
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{where}: its {name} are a {type(value).__name__}; the engine "
                             "passes one tensor of inputs and one of targets per batch")
    if len(x) != len(y):
        raise ValueError(f"{where}: {len(x)} inputs but {len(y)} targets")
    if len(x) % num_microbatches:
        raise ValueError(
            f"{where} has batch size {len(x)}, which does not split into {num_microbatches} "
            f"equal microbatches; use a batch size that is a multiple of {num_microbatches} "
            "(and drop_last=True for a DataLoader whose last batch is smaller)")
    return microbatches(x, y, num_microbatches)


def batch_size_of(data) -> int:
    """The samples per minibatch of ``data``: a DataLoader's ``batch_size``, else the first
    batch's length."""
    size = getattr(data, "batch_size", None)
    if isinstance(size, int) and size >= 1:
        return size
    batch = next(iter(data))
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise ValueError(f"the first batch of the data is a {type(batch).__name__}; each batch "
                         "must be (inputs, targets)")
    return len(batch[0])


def check_last_batch(data, num_microbatches: int, executor: str = "local") -> None:
    """Refuse, before training, a ``DataLoader`` whose smaller last batch (``drop_last``
    off) would not split into ``num_microbatches`` microbatches, or which the distributed
    executor would refuse (it sends one shape of activations for the whole run); other
    iterables are checked batch by batch as they are read (:func:`split_batch`)."""
    size, dataset = getattr(data, "batch_size", None), getattr(data, "dataset", None)
    if not isinstance(size, int) or getattr(data, "drop_last", True) or dataset is None:
        return
    try:
        last = len(dataset) % size
    except TypeError:  # a dataset without a length
        return
    if last and executor == "dist":
        raise ValueError(
            f"the DataLoader's last batch has {last} samples ({len(dataset)} in batches of "
            f"{size}); executor 'dist' needs batches of one size: pass drop_last=True")
    if last % num_microbatches:
        raise ValueError(
            f"the DataLoader's last batch has batch size {last} ({len(dataset)} samples in "
            f"batches of {size}), which does not split into {num_microbatches} equal "
            "microbatches; pass drop_last=True or a batch size that divides the data")


class BatchMicrobatches(RunMicrobatches):
    """``feed[m] -> (x, y)`` over the whole run, from an iterable of minibatches.

    Global microbatch m belongs to step ``k = m // N``, which is minibatch ``k % len(data)``
    of epoch ``k // len(data)`` (one fresh ``iter(data)`` per epoch). Minibatches are read
    in order and the last ``keep_steps`` steps are kept (a rank holding both the first and
    the last stage reads a target steps after its input; ``fit()`` keeps enough); asking
    for an older step replays the data from the start, which gives the same microbatches
    when the loader's order is fixed (no shuffle). A resumed run finds its place the same
    way, reading from the first batch: bitwise the run that never stopped when the loader
    is built afresh with a fixed order or its own seeded ``generator``.
    """

    def __init__(self, data, num_microbatches: int, epochs: int, keep_steps: int = 4) -> None:
        self.data, self.num_microbatches, self.epochs = data, num_microbatches, epochs
        self.steps_per_epoch = check_batches(data)
        self.keep_steps = max(1, keep_steps)
        self._cache: dict[int, list] = {}
        self._next_step = 0
        self._iterator = None

    def step_microbatches(self, step: int) -> list[tuple]:
        """Step ``step``'s minibatch, read in order (or replayed), cut into microbatches."""
        if step not in self._cache:
            self._read_to(step)
        return self._cache[step]

    def _read_to(self, step: int) -> None:
        if step < self._next_step:  # dropped already: replay from the first minibatch
            self._cache, self._next_step, self._iterator = {}, 0, None
        while self._next_step <= step:
            k = self._next_step
            epoch, position = divmod(k, self.steps_per_epoch)
            if position == 0:
                self._iterator = iter(self.data)
            where = f"batch {position} of epoch {epoch}"
            try:
                batch = next(self._iterator)
            except StopIteration:
                raise ValueError(f"the data gave {position} batches in epoch {epoch} but its "
                                 f"len() is {self.steps_per_epoch}") from None
            self._cache[k] = split_batch(batch, self.num_microbatches, where)
            self._cache.pop(k - self.keep_steps, None)
            self._next_step += 1


class StagesInOrder(nn.Module):
    """The stages as one model, ``model(x)``: each stage on its own device, in order (what
    an evaluation function ``eval_data(model)`` receives)."""

    def __init__(self, stages: Sequence[nn.Module]) -> None:
        super().__init__()
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run ``x`` through every stage, moving it to each stage's device."""
        from pipemare_lite.training.evaluation import forward_through

        return forward_through(list(self.stages), x)


def _class_labels(out: torch.Tensor, y: torch.Tensor) -> bool:
    """Whether ``y`` are class labels of ``out``'s rows (integers, one per row of logits)."""
    return (not y.dtype.is_floating_point and not y.is_complex() and y.dtype != torch.bool
            and out.dim() >= 2 and tuple(out.shape[:-1]) == tuple(y.shape))


@torch.no_grad()
def evaluate_batches(stages: Sequence[nn.Module], batches, loss_fn: Callable | None) -> dict:
    """``{"loss", "accuracy"}`` over ``batches`` of ``(inputs, targets)``, sample-weighted.

    The loss is the cross-entropy when the targets are class labels, else ``loss_fn``
    (a mean over the batch, weighted here by the batch's size); the accuracy is the share of
    correct argmax predictions for class labels and None otherwise (it means nothing for a
    regression).
    """
    from pipemare_lite.training.evaluation import forward_through

    total, correct, count, labels = 0.0, 0, 0, True
    check_batches(batches, "eval_data")
    for i, batch in enumerate(batches):
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise ValueError(f"eval_data batch {i} is a {type(batch).__name__}; each batch "
                             "must be (inputs, targets)")
        x, y = batch
        out = forward_through(list(stages), x).cpu()
        if _class_labels(out, y):
            logits, targets = out.reshape(-1, out.shape[-1]), y.reshape(-1)
            total += float(F.cross_entropy(logits, targets, reduction="sum"))
            correct += int((logits.argmax(-1) == targets).sum())
            count += targets.numel()
        else:
            if loss_fn is None:
                raise ValueError(f"eval_data batch {i}: targets of dtype {y.dtype} and shape "
                                 f"{tuple(y.shape)} are no class labels of outputs "
                                 f"{tuple(out.shape)}; give fit() a loss_fn to measure them")
            labels = False
            total += float(loss_fn(out, y)) * len(y)
            count += len(y)
    if count == 0:
        raise ValueError("eval_data holds no samples")
    return {"loss": total / count, "accuracy": correct / count if labels else None}


def run_evaluation(stages: Sequence[nn.Module], data, eval_data, loss_fn) -> dict | None:
    """What one evaluation of ``fit()`` records: on ``eval_data`` (batches or a function),
    else a ``Dataset``'s test split, else nothing (None)."""
    if callable(eval_data) and not hasattr(eval_data, "__iter__"):
        with torch.no_grad():
            measured = eval_data(StagesInOrder(stages))
        if not isinstance(measured, dict):
            raise TypeError(f"eval_data(model) must return a dict of numbers, got "
                            f"{type(measured).__name__}")
        return {"loss": math.nan, "accuracy": None, **measured}
    if eval_data is not None:
        return evaluate_batches(stages, eval_data, loss_fn)
    if isinstance(data, Dataset):
        from pipemare_lite.training.evaluation import evaluate

        x, y = data.x_test, data.y_test
        if loss_fn is not None and y.dtype.is_floating_point:  # a regression Dataset
            return evaluate_batches(
                stages, [(x[i : i + 512], y[i : i + 512]) for i in range(0, len(x), 512)],
                loss_fn)
        return evaluate(stages, x, y)
    return None


def check_eval_data(eval_data) -> None:
    """Refuse an ``eval_data`` that is neither batches nor a function, before training."""
    if eval_data is None:
        return
    if callable(eval_data) and not hasattr(eval_data, "__iter__"):
        return
    check_batches(eval_data, "eval_data")
