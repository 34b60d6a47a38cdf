"""GPipe: all forwards, then all backwards, then a flush (introduced in chapter 02)."""

from __future__ import annotations

from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.builders.common import flushed_schedule
from pipemare_lite.schedules.validation import check_sizes


def gpipe(num_ranks: int, num_microbatches: int, num_minibatches: int = 1) -> Schedule:
    """All-forward-all-backward (AFAB) with one update per minibatch.

    Stage s runs F(0..M-1), then B(0..M-1), then U. The pipeline fills and drains once per
    minibatch, which leaves devices idle (the "bubble", measured and derived in chapter 02),
    and every stage holds the activations of all M microbatches at the peak.
    """
    check_sizes("gpipe", num_ranks, num_microbatches, num_minibatches)
    minibatch = [[(kind, stage, m) for kind in "FB" for m in range(num_microbatches)]
                 for stage in range(num_ranks)]
    return flushed_schedule("gpipe", num_ranks, num_microbatches, minibatch, num_minibatches)
