"""pipemare-lite: the engine and helpers of a textbook on pipeline-parallel training.

Torch-free modules (schedules, simulate, staleness, memory, viz) import without torch; the
modules that run tensors (partition, methods, executor, models, datasets, train) import it.
Nothing here imports torch at package import time.
"""

__version__ = "0.1.0"
