"""PipeDream (weight stashing) and PipeDream-2BW: 1F1B without a flush (introduced in chapter 05).

Both run the 1F1B order across minibatch boundaries, so the pipeline never drains; they differ
only in which weights a backward reads (the executor's ``weight_mode``): PipeDream stashes
the version each forward used, 2BW keeps two versions and runs all of minibatch k on
version max(k-1, 0).
"""

from __future__ import annotations

from pipemare_lite.deprecation import accepts_old_keywords
from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.builders.common import make_schedule, microbatches_of
from pipemare_lite.schedules.builders.one_f_one_b import clamp_notes, one_f_one_b_order
from pipemare_lite.schedules.validation import ScheduleError, check_sizes


def flushed_warmup_order(stage: int, num_ranks: int, N: int, warmup: int) -> list:
    """The first ``warmup`` minibatches as flushed 1F1B (synchronous warm-up, PipeMare-W)."""
    order = []
    for k in range(warmup):
        order += [(kind, stage, m)
                  for kind, m in one_f_one_b_order(microbatches_of(k, N), num_ranks - 1 - stage)]
        order.append(("U", stage, k))
    return order


def no_flush_order(stage: int, num_ranks: int, N: int, K: int, warmup: int = 0) -> list:
    """1F1B over minibatches ``warmup .. K-1`` with no flush; U after each minibatch's last B.

    Stage s warms up with P-1-s forwards once, then alternates F and B forever; the update of
    minibatch k follows the B that completes it on this stage.
    """
    microbatches = list(range(warmup * N, K * N))
    order = []
    for kind, m in one_f_one_b_order(microbatches, num_ranks - 1 - stage):
        order.append((kind, stage, m))
        if kind == "B" and m % N == N - 1:
            order.append(("U", stage, m // N))
    return order


@accepts_old_keywords({"warmup_minibatches": "warmup"})
def pipedream(num_ranks: int, num_microbatches: int, num_minibatches: int = 1,
              warmup: int = 0) -> Schedule:
    """PipeDream: no flush, weight stashing (``weight_mode="stash"``).

    With ``num_microbatches=1`` this is PipeDream with an update per microbatch; stage s
    (0-indexed) then runs each forward on weights P-1-s updates older than its update.
    """
    return _no_flush_schedule("pipedream", "stash", num_ranks, num_microbatches,
                              num_minibatches, warmup)


@accepts_old_keywords({"warmup_minibatches": "warmup"})
def two_bw(num_ranks: int, num_microbatches: int, num_minibatches: int = 1,
           warmup: int = 0) -> Schedule:
    """PipeDream-2BW: the PipeDream order, two weight versions (``weight_mode="2bw"``).

    Every microbatch of minibatch k runs F and B on version max(k-1, 0), the version made by
    update k-2, so F(kN) on stage s must come after U(k-2), which follows B((k-1)N - 1). In the
    1F1B order stage s has run the backwards up to B(kN - 1 - (P-1-s)) before F(kN): the
    version is there iff N >= P-1-s, i.e. 2BW needs N >= P-1 (the paper asks N >= P). Two
    versions suffice: minibatch k's backwards all finish before U(k) makes version k+1. With
    warm-up, the first W minibatches are flushed and synchronous; which version the first
    asynchronous minibatch reads is the executor's choice (the order allows version W-1 or W).
    """
    P, N, K, W = num_ranks, num_microbatches, num_minibatches, warmup
    check_sizes("2bw", P, N, K, warmup=W)
    if N < P - 1:
        raise ScheduleError(
            f"2bw: num_microbatches={N} is too small for num_ranks={P}: 2BW keeps only two "
            f"weight versions, which needs num_microbatches >= P-1 = {P - 1} (allowed: {P - 1}..)"
        )
    return _no_flush_schedule("2bw", "2bw", P, N, K, W)


def _no_flush_schedule(name: str, weight_mode: str, P: int, N: int, K: int, W: int) -> Schedule:
    """The order both share: W flushed 1F1B minibatches, then 1F1B with no flush."""
    check_sizes(name, P, N, K, warmup=W)
    orders = [flushed_warmup_order(s, P, N, W) + no_flush_order(s, P, N, K, W) for s in range(P)]
    # notes on clamped warm-ups: in the flushed minibatches, and over the whole async run
    notes = clamp_notes(P, N) if W else []
    if K > W:
        notes += clamp_notes(P, (K - W) * N, "asynchronous microbatches")
    return make_schedule(name, P, N, orders, num_minibatches=K, weight_mode=weight_mode,
                         warmup=W, notes=notes)
