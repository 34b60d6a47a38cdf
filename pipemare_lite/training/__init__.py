"""Training with the engine (chapters 01-12; fit() from chapter 07): partitioning,
data, models, evaluation, history, checkpoints.
"""
