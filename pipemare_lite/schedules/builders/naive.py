"""Naive model parallelism: one microbatch in flight at a time (introduced in chapter 01).

The model is split across P devices, but a microbatch must come all the way back before the
next one starts, so at every moment exactly one device works.
"""

from __future__ import annotations

from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.builders.common import flushed_schedule
from pipemare_lite.schedules.validation import check_sizes


def naive(num_ranks: int, num_microbatches: int, num_minibatches: int = 1) -> Schedule:
    """Each stage runs F(m) then B(m) for one microbatch before it touches the next.

    Because stage s's B(m) waits for the backward of every later stage, and stage 0's F(m+1)
    comes after its B(m), only one microbatch is ever in the pipeline.
    """
    check_sizes("naive", num_ranks, num_microbatches, num_minibatches)
    minibatch = [[(kind, stage, m) for m in range(num_microbatches) for kind in "FB"]
                 for stage in range(num_ranks)]
    # flush: each stage updates once its minibatch is done, then the next one starts
    return flushed_schedule("naive", num_ranks, num_microbatches, minibatch, num_minibatches)
