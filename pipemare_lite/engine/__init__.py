"""Executors: run a schedule with real tensors and record a trace (chapters 02-11).

:mod:`~pipemare_lite.engine.stage` holds one stage's behaviour (:class:`StageWorker`;
its checkpoint and replay are :mod:`~pipemare_lite.engine.replay`'s), shared by the local
executor (:mod:`~pipemare_lite.engine.local`) and the distributed one
(:mod:`~pipemare_lite.engine.distributed.executor`, chapter 11), both built by
:mod:`~pipemare_lite.engine.build_worker`. Both run actions with one
:mod:`~pipemare_lite.engine.interpreter` (only the transport differs: dicts in one
process, :mod:`~pipemare_lite.engine.distributed.transport` across processes) and note them with a
:mod:`~pipemare_lite.engine.recorder`; :mod:`~pipemare_lite.engine.recording` chooses what a run
records (a run that asks for no trace pays for none). :mod:`~pipemare_lite.analysis.utilization`
compares a measured trace with the simulator; :mod:`~pipemare_lite.engine.trace` prints a
measured trace as text.
"""

from pipemare_lite._lazy import lazy_exports
from pipemare_lite.engine.local import LocalExecutor, RunResult
from pipemare_lite.engine.stage import BYTE_KINDS, StageWorker
from pipemare_lite.engine.trace import trace_rows, trace_text

__all__ = ["LocalExecutor", "RunResult", "StageWorker", "BYTE_KINDS", "trace_rows", "trace_text",
           "DistributedExecutor"]


# the distributed engine (chapter 11) loads on first use: it imports torch.distributed,
# which a one-process run never needs
__getattr__, __dir__ = lazy_exports(
    __name__, {"DistributedExecutor": "pipemare_lite.engine.distributed.executor"})
