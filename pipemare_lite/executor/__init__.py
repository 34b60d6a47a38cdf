"""Executors: run a schedule with real tensors and record a trace (chapters 02-11).

:mod:`~pipemare_lite.executor.stage` holds one stage's behaviour (:class:`StageWorker`),
shared by the local executor (:mod:`~pipemare_lite.executor.local`) and the distributed one;
:mod:`~pipemare_lite.executor.trace` prints a measured trace as text.
"""

from pipemare_lite.executor.local import LocalExecutor, RunResult
from pipemare_lite.executor.stage import BYTE_KINDS, StageWorker
from pipemare_lite.executor.trace import trace_rows, trace_text

__all__ = ["LocalExecutor", "RunResult", "StageWorker", "BYTE_KINDS", "trace_rows", "trace_text"]
