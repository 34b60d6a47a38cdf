"""Eager 1F1B: 1F1B whose stages run twice as many forwards before their first backward
(a researcher's schedule, written through the public API only; docs/write-a-schedule.md).

Plain 1F1B runs ``P-1-s`` warm-up forwards on stage ``s``; eager 1F1B runs ``2(P-1-s)``
(at most N), so a stage has a forward ready while it waits for a backward (what lets a real
network overlap sending with computing). It flushes every minibatch (weight mode ``sync``):
the same numbers as 1F1B, with more activations in flight. P=3, N=4, one minibatch::

    rank 0:  0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3          warm-up 4 = min(2*(3-1-0), 4)
    rank 1:  1F0 1F1 1F2 1B0 1F3 1B1 1B2 1B3          warm-up 2 = 2*(3-1-1)
    rank 2:  2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3          warm-up 0

Registered as ``eager-1f1b`` on import: ``--plugin docs.examples.eager_1f1b`` on the command
line, ``imports=[...]`` for launch(), ``PIPEMARE_PLUGINS`` for torchrun.
"""

from __future__ import annotations

from pipemare_lite.schedules.builders.one_f_one_b import one_f_one_b_order
from pipemare_lite.schedules.registry import register_schedule


def eager_1f1b_rows(num_ranks, num_microbatches, *, num_minibatches, chunks, warmup):
    """One row of action strings per rank; the updates are added after each minibatch."""
    rows = []
    for stage in range(num_ranks):
        row = []
        for k in range(num_minibatches):
            mbs = list(range(k * num_microbatches, (k + 1) * num_microbatches))
            warmup = min(2 * (num_ranks - 1 - stage), num_microbatches)
            row += [f"{stage}{kind}{m}" for kind, m in one_f_one_b_order(mbs, warmup)]
        rows.append(row)
    return rows


register_schedule("eager-1f1b", eager_1f1b_rows, weight_mode="sync")
