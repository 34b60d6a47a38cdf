"""Training with the engine (chapters 01-12; fit() from chapter 07): the loop
(:mod:`~pipemare_lite.training.loop`), partitioning (any ``nn.Module`` through torch's own
splitter: :mod:`~pipemare_lite.training.split_module`), data (a ``DataLoader`` or any
iterable of batches: :mod:`~pipemare_lite.training.batches`), models, evaluation, history,
checkpoints; :mod:`~pipemare_lite.training.dist_fit` runs ``fit()`` over one process per rank
with the distributed executor (chapter 11).
"""

from pipemare_lite._lazy import lazy_exports

# (``partition`` is the front door's: here it would share its name with the module)
# imported on first use: the history, datasets and checkpoints modules load without torch's
# training loop (chapter figures read a History without torch)
_EXPORTS = {
    "fit": "pipemare_lite.training.loop",
    "FitConfig": "pipemare_lite.training.config",
    "History": "pipemare_lite.training.history",
    "DivergenceError": "pipemare_lite.training.history",
    "PartitionedModel": "pipemare_lite.training.partition",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
