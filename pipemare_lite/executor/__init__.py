"""Executors: run a schedule with real tensors and record a trace (chapters 02-11).

:mod:`~pipemare_lite.executor.stage` holds one stage's behaviour (:class:`StageWorker`;
its checkpoint and replay are :mod:`~pipemare_lite.executor.replay`'s), shared by the local
executor (:mod:`~pipemare_lite.executor.local`) and the distributed one
(:mod:`~pipemare_lite.executor.dist`, chapter 11), both built by
:mod:`~pipemare_lite.executor.setup`. Both run actions with one
:mod:`~pipemare_lite.executor.interpreter` (only the transport differs: dicts in one
process, :mod:`~pipemare_lite.executor.transport` across processes) and note them with a
:mod:`~pipemare_lite.executor.recorder`. :mod:`~pipemare_lite.executor.dist_fit` runs ``fit()``
over processes; :mod:`~pipemare_lite.executor.utilization` compares a measured trace with
the simulator; :mod:`~pipemare_lite.executor.trace` prints a measured trace as text.
"""

from pipemare_lite.executor.local import LocalExecutor, RunResult
from pipemare_lite.executor.stage import BYTE_KINDS, StageWorker
from pipemare_lite.executor.trace import trace_rows, trace_text

__all__ = ["LocalExecutor", "RunResult", "StageWorker", "BYTE_KINDS", "trace_rows", "trace_text"]
