"""1F1B (PipeDream-Flush): warm-up, one-forward-one-backward, cool-down (chapter 03).

Introduced in chapter 03: the same bubble as GPipe with far fewer activations in flight.
"""

from __future__ import annotations

from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.builders.common import flushed_schedule
from pipemare_lite.schedules.validation import check_sizes


def one_f_one_b_order(microbatches: list[int], warmup: int) -> list[tuple[str, int]]:
    """The 1F1B order of one stage over ``microbatches`` as ``(kind, microbatch)`` pairs.

    warm-up: ``warmup`` forwards; steady state: F of the next microbatch, then B of the oldest
    one in flight; cool-down: the backwards still owed.
    """
    warmup = min(warmup, len(microbatches))
    order = [("F", m) for m in microbatches[:warmup]]
    for i, m in enumerate(microbatches[warmup:]):
        order += [("F", m), ("B", microbatches[i])]
    order += [("B", m) for m in microbatches[len(microbatches) - warmup :]]
    return order


def clamp_notes(num_ranks: int, microbatches: int, what: str = "M") -> list[str]:
    """The note a builder adds when 1F1B's warm-up of P-1-s forwards has to be clamped."""
    if microbatches >= num_ranks - 1:
        return []
    return [
        f"{what}={microbatches} < P-1={num_ranks - 1}: warm-up clamped to min(P-1-s, {what}) "
        "forwards (as Megatron does), so early stages run all their forwards first"
    ]


def one_f_one_b(num_ranks: int, num_microbatches: int, num_minibatches: int = 1) -> Schedule:
    """1F1B with a flush after every minibatch (Megatron's default schedule).

    Stage s runs min(P-1-s, M) warm-up forwards, then alternates F and B, then drains.
    Same bubble as GPipe, but stage s holds at most min(P-s, M) microbatches' activations.
    """
    check_sizes("1f1b", num_ranks, num_microbatches, num_minibatches)
    notes = clamp_notes(num_ranks, num_microbatches)
    mbs = list(range(num_microbatches))
    minibatch = [[(kind, stage, m) for kind, m in one_f_one_b_order(mbs, num_ranks - 1 - stage)]
                 for stage in range(num_ranks)]  # P-1-s forwards before the first B
    return flushed_schedule("1f1b", num_ranks, num_microbatches, minibatch, num_minibatches,
                            notes=notes)
