"""The trade-off table: every method's memory by kind and utilization, side by side (chapter 10).

One row per method, for one memory profile (bytes per stage) and one P and N:

- ``memory``: peak bytes of every kind summed over the stages (the memory model,
  :func:`pipemare_lite.analysis.memory.memory_by_kind`, which the executor's bytes equal);
- ``device_peak``: the most one device holds at one moment (the largest ``peak_total``
  over the ranks): what a per-device memory budget must cover;
- ``utilization``: the simulated utilization (F = 1, B = 2; I = W = 1 for the split
  backwards) that the method keeps up over a long run: for a flushed method that of one
  more minibatch (the time a third minibatch adds to two: the whole minibatch for GPipe,
  1F1B and ZB-H1, whose next minibatch waits for the last rank; only the work for ZB-H2
  and ZB-V, whose next minibatch fills the previous one's slope), for an unflushed one the
  steady state (the one fill and drain of a whole run left out, as in the paper's
  comparison).

Beside the methods, the table has rows for the synchronous schedules that are not methods
of their own (:data:`SCHEDULE_ROWS`: ZB-H2, ZB-V, DualPipeV; chapter 04), asked for with
``tradeoff_table(..., methods=TRADEOFF_ROWS)``. The V-shaped ones
cut the model into 2P chunks: each stage of the profile is split into two halves (model
order), so they hold the same model.

:func:`pick_method` answers the chapter's question, which method for a memory budget:
the highest utilization among the methods that fit. Quality is not in the table: it is
measured by training (the stored experiment), not by the schedule. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipemare_lite.analysis.memory import KINDS, MemoryProfile, memory_by_kind
from pipemare_lite.analysis.simulate import OpCosts, simulate_and_measure, steady_state_utilization
from pipemare_lite.methods.registry import METHOD_TABLE
from pipemare_lite.schedules.registry import build_schedule, is_asynchronous

#: The methods of the table, in the book's order, and how the chapter names them.
TRADEOFF_METHODS = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "zb-h1": "ZB-H1",
    "pipedream": "PipeDream",
    "2bw": "2BW",
    "async": "async",
    "pipemare": "PipeMare",
}
#: method -> (schedule it runs, whether T2's buffer is kept), read from the one table
#: (:data:`pipemare_lite.methods.registry.METHOD_TABLE`, torch-free). PipeMare without
#: warm-up.
SCHEDULE_OF = {name: (schedule, t2) for name, schedule, _, t2, _ in METHOD_TABLE
               if name in TRADEOFF_METHODS}
#: Synchronous schedules with a row but no method entry (chapter 04): name -> label.
SCHEDULE_ROWS = {"zb-h2": "ZB-H2", "zb-v": "ZB-V", "dualpipev": "DualPipeV"}
#: Every row of the default table, in the book's order (the new schedules after ZB-H1).
TRADEOFF_ROWS = {**{m: TRADEOFF_METHODS[m] for m in ("gpipe", "1f1b", "zb-h1")},
                 **SCHEDULE_ROWS,
                 **{m: label for m, label in TRADEOFF_METHODS.items()
                    if m not in ("gpipe", "1f1b", "zb-h1")}}


def method_schedule(method: str, num_ranks: int, num_microbatches: int,
                    num_minibatches: int = 1):
    """The schedule ``method`` runs (PipeMare without warm-up) and whether T2 is on; a name
    of :data:`SCHEDULE_ROWS` is its own schedule, without T2."""
    if method in SCHEDULE_ROWS:
        return build_schedule(method, num_ranks, num_microbatches,
                              num_minibatches=num_minibatches), False
    if method not in SCHEDULE_OF:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(TRADEOFF_ROWS)}")
    name, t2 = SCHEDULE_OF[method]
    return build_schedule(name, num_ranks, num_microbatches,
                          num_minibatches=num_minibatches), t2


@dataclass(frozen=True)
class TradeoffRow:
    """One method's line of the table (see the module docstring).

    Attributes:
        method: the registry name (``"zb-h1"``); ``label`` how the book names it.
        memory: peak bytes per kind, summed over stages (keys of :data:`KINDS`).
        device_peak: the most bytes one device holds at one moment.
        device_memory: the per-kind peaks of that device (the rank with ``device_peak``).
        utilization: simulated utilization the method sustains, or None when not possible.
        not_possible: why the method cannot run at this P and N (None when it can).
    """

    method: str
    label: str
    memory: dict
    device_peak: int
    utilization: float | None
    not_possible: str | None = None
    device_memory: dict | None = None


def long_enough(num_ranks: int, num_microbatches: int) -> int:
    """Minibatches after which every stage's stash and activations have reached their peak.

    The slowest to fill is stage 0 of the asynchronous pipeline: a microbatch's round trip
    is 2P-1 ticks, ceil((2P-1)/N) minibatches; two more make sure the peak is seen.
    """
    return -(-(2 * num_ranks - 1) // num_microbatches) + 2


def split_profile(profile: MemoryProfile, chunks: int) -> MemoryProfile:
    """``profile`` with every stage cut into ``chunks`` consecutive pieces (model order), its
    bytes shared out so that each stage's pieces add up to it exactly."""
    def pieces(values):
        return [value // chunks + (c < value % chunks) for value in values for c in range(chunks)]

    return replace(profile, param_bytes=pieces(profile.param_bytes),
                   activation_bytes=pieces(profile.activation_bytes))


def tradeoff_row(method: str, profile: MemoryProfile, num_microbatches: int) -> TradeoffRow:
    """The table's row for ``method`` (or schedule of :data:`SCHEDULE_ROWS`) on ``profile``
    (one stage per profile entry)."""
    if method not in TRADEOFF_ROWS:
        raise ValueError(f"unknown method {method!r}; allowed: {', '.join(TRADEOFF_ROWS)}")
    P, N = len(profile.param_bytes), num_microbatches
    flushed = method in SCHEDULE_ROWS or not is_asynchronous(SCHEDULE_OF[method][0])
    try:
        schedule, t2 = method_schedule(method, P, N, 2 if flushed else long_enough(P, N))
    except ValueError as error:  # a ScheduleError too: the method cannot run at this P and N
        return TradeoffRow(method, TRADEOFF_ROWS[method], dict.fromkeys(KINDS, 0), 0, None,
                           str(error), dict.fromkeys(KINDS, 0))
    if schedule.chunks > 1:  # the same model, cut into P * v chunks
        profile = split_profile(profile, schedule.chunks)
    peaks = memory_by_kind(schedule, profile, t2=t2)
    memory = {kind: sum(d[kind] for d in peaks) for kind in KINDS}
    costs = OpCosts(forward=1.0, backward=2.0)
    if flushed:  # what one more minibatch costs (see the module docstring)
        utilization = steady_state_utilization(lambda k: method_schedule(method, P, N, k)[0],
                                               costs, minibatches=2)
    else:
        utilization = simulate_and_measure(schedule, costs)[1].full_pipeline_utilization
    device = max(peaks, key=lambda d: d["peak_total"])  # the first such rank on a tie
    return TradeoffRow(method, TRADEOFF_ROWS[method], memory, device["peak_total"],
                       utilization, None, {kind: device[kind] for kind in KINDS})


def tradeoff_table(profile: MemoryProfile, num_microbatches: int,
                   methods=tuple(TRADEOFF_METHODS)) -> list[TradeoffRow]:
    """One :class:`TradeoffRow` per method, in the order given; ``methods=TRADEOFF_ROWS``
    adds the schedule rows (ZB-H2, ZB-V, DualPipeV) after ZB-H1."""
    return [tradeoff_row(m, profile, num_microbatches) for m in methods]


def fits(row: TradeoffRow, budget_bytes: float) -> bool:
    """Whether ``row``'s method runs and its device peak is within ``budget_bytes``."""
    return row.not_possible is None and row.device_peak <= budget_bytes


def pick_method(rows: list[TradeoffRow], budget_bytes: float,
                candidates=None) -> str | None:
    """The method with the highest utilization whose device peak fits ``budget_bytes``.

    ``candidates`` (method names) limits the choice, e.g. to the methods whose trained
    quality the reader accepts; None allows every row. Ties (equal utilization) go to the
    smaller device peak, then to the earlier row. None when no method fits.
    """
    if not budget_bytes >= 0:
        raise ValueError(f"budget_bytes={budget_bytes!r}: allowed: a number >= 0")
    if candidates is not None:
        unknown = sorted(set(candidates) - {row.method for row in rows})
        if unknown:
            raise ValueError(f"candidates {unknown} are not rows of the table; rows: "
                             f"{', '.join(row.method for row in rows)}")
    best = None
    for row in rows:
        if candidates is not None and row.method not in candidates:
            continue
        if fits(row, budget_bytes) and (
                best is None or (row.utilization, -row.device_peak)
                > (best.utilization, -best.device_peak)):
            best = row
    return None if best is None else best.method
