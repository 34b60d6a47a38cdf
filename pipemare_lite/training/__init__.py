"""Training with the engine (chapters 01-12; fit() from chapter 07): partitioning,
data, models, evaluation, history, checkpoints; :mod:`~pipemare_lite.training.dist_fit` runs
``fit()`` over one process per rank with the distributed executor (chapter 11).
"""
