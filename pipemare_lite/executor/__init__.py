"""Executors: run a schedule with real tensors and record a trace (chapters 02-11).

:mod:`~pipemare_lite.executor.stage` holds one stage's behaviour (:class:`StageWorker`),
shared by the local executor (:mod:`~pipemare_lite.executor.local`) and the distributed one.
"""

from pipemare_lite.executor.local import LocalExecutor, RunResult
from pipemare_lite.executor.stage import BYTE_KINDS, StageWorker

__all__ = ["LocalExecutor", "RunResult", "StageWorker", "BYTE_KINDS"]
