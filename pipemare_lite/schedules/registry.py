"""One entry point for every schedule: :func:`build_schedule` (introduced in chapter 02)."""

from __future__ import annotations

from pipemare_lite.schedules._build import gc_paused
from pipemare_lite.schedules.actions import Schedule
from pipemare_lite.schedules.async_pipeline import async_pipeline
from pipemare_lite.schedules.gpipe import gpipe
from pipemare_lite.schedules.interleaved import interleaved
from pipemare_lite.schedules.naive import naive
from pipemare_lite.schedules.one_f_one_b import one_f_one_b
from pipemare_lite.schedules.pipedream import pipedream, two_bw
from pipemare_lite.schedules.validate import ScheduleError
from pipemare_lite.schedules.zero_bubble import zb_h1

#: Every schedule the book builds, in the order the chapters introduce them.
SCHEDULE_NAMES = ("naive", "gpipe", "1f1b", "interleaved", "zb-h1", "pipedream", "2bw", "async")

#: Other accepted spellings: PipeMare's order is the async pipeline (T1/T2 are executor options).
ALIASES = {"pipemare": "async"}

#: Schedules with no flush, which accept ``warmup_minibatches``.
ASYNC_NAMES = ("pipedream", "2bw", "async")


def build_schedule(
    name: str,
    num_stages: int,
    num_microbatches: int,
    *,
    chunks: int = 1,
    num_minibatches: int = 1,
    warmup_minibatches: int = 0,
) -> Schedule:
    """Build schedule ``name`` with P=``num_stages`` and M=``num_microbatches`` per minibatch.

    ``chunks`` (v) only applies to "interleaved" (with v=1 it is 1F1B);
    ``warmup_minibatches`` only to the asynchronous schedules (pipedream, 2bw, async);
    ``num_minibatches`` (K) repeats flushed schedules K times and runs asynchronous ones for
    K updates per stage. "pipemare" builds the "async" schedule (its name stays "async").
    """
    key = ALIASES.get(name, name)
    if key not in SCHEDULE_NAMES:
        allowed = ", ".join(SCHEDULE_NAMES + tuple(ALIASES))
        raise ScheduleError(f"unknown schedule name {name!r}; allowed: {allowed}")
    if chunks != 1 and key != "interleaved":
        raise ScheduleError(f"{name}: chunks={chunks!r} only applies to 'interleaved'; allowed: 1")
    if warmup_minibatches and key not in ASYNC_NAMES:
        raise ScheduleError(
            f"{name}: warmup_minibatches={warmup_minibatches!r} only applies to "
            f"{', '.join(ASYNC_NAMES)}; allowed: 0"
        )
    with gc_paused():
        return _build(
            key, num_stages, num_microbatches, chunks, num_minibatches, warmup_minibatches
        )


def _build(key: str, P: int, M: int, v: int, K: int, W: int) -> Schedule:
    if key == "naive":
        return naive(P, M, K)
    if key == "gpipe":
        return gpipe(P, M, K)
    if key == "1f1b":
        return one_f_one_b(P, M, K)
    if key == "interleaved":
        return interleaved(P, M, v, K)
    if key == "zb-h1":
        return zb_h1(P, M, K)
    if key == "pipedream":
        return pipedream(P, M, K, W)
    if key == "2bw":
        return two_bw(P, M, K, W)
    return async_pipeline(P, M, K, W)
