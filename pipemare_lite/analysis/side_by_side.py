"""Every synchronous schedule side by side: utilization and peak activations (chapter 04).

One row per synchronous schedule of the book (GPipe, 1F1B, interleaved with v = 2, ZB-H1,
ZB-H2, ZB-V, DualPipeV) at one P and M, all measured by the simulator on the same model and
the same work per device: a whole stage costs F = I = W = 1 (B = I + W = 2), and a schedule
with v chunks per rank pays 1/v of that per chunk action. Columns:

- ``utilization``: busy / (P x makespan) of one flushed minibatch;
- ``steady``: what one more minibatch adds, its work over the time it adds (makespan of 3
  minibatches minus that of 2,
  :func:`~pipemare_lite.analysis.simulate.steady_state_utilization`): equal to the first
  for schedules whose next minibatch waits for the last rank, higher where it fills the
  previous one's slope (ZB-H2, ZB-V);
- ``peak``: per rank, the most activations held at once in whole stages' worth (a chunk
  holds 1/v of a stage's activations, so the simulator's (chunk, microbatch) count / v).

:func:`side_by_side_text` prints the table; the closing note of issue 34 shows it for
P = 4 and 8. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipemare_lite.analysis.simulate import OpCosts, simulate_and_measure, steady_state_utilization
from pipemare_lite.schedules.registry import build_schedule
from pipemare_lite.schedules.validation import ScheduleError

#: The synchronous schedules, in the book's order, with their chunks per rank and label.
SYNC_SCHEDULES = (("gpipe", 1, "GPipe"), ("1f1b", 1, "1F1B"),
                  ("interleaved", 2, "interleaved v=2"), ("zb-h1", 1, "ZB-H1"),
                  ("zb-h2", 1, "ZB-H2"), ("zb-v", 2, "ZB-V"), ("dualpipev", 2, "DualPipeV"))


@dataclass(frozen=True)
class SideBySideRow:
    """One schedule's line (see the module docstring); numbers None when ``not_possible``."""

    name: str
    label: str
    utilization: float | None
    steady: float | None
    peak: tuple[float, ...] | None
    not_possible: str | None = None


def chunk_costs(chunks: int) -> OpCosts:
    """F = I = W = 1 per whole stage, shared by its ``chunks`` pieces."""
    return OpCosts(forward=1 / chunks, backward=2 / chunks, input_grad=1 / chunks,
                   weight_grad=1 / chunks)


def side_by_side_row(name: str, chunks: int, label: str, P: int, M: int) -> SideBySideRow:
    """The row of schedule ``name`` (v = ``chunks``) at P ranks and M microbatches."""
    costs = chunk_costs(chunks)
    def build(k):
        return build_schedule(name, P, M, chunks=chunks, num_minibatches=k)

    try:
        one = simulate_and_measure(build(1), costs)[1]
        steady = steady_state_utilization(build, costs, minibatches=2)
    except ScheduleError as error:  # e.g. DualPipeV with M < 2P
        return SideBySideRow(name, label, None, None, None, str(error))
    peak = tuple(count / chunks for count in one.peak_inflight)
    return SideBySideRow(name, label, one.utilization, steady, peak)


def sync_side_by_side(P: int, M: int) -> list[SideBySideRow]:
    """Every row of :data:`SYNC_SCHEDULES` at P ranks and M microbatches."""
    return [side_by_side_row(name, v, label, P, M) for name, v, label in SYNC_SCHEDULES]


def side_by_side_text(P: int, M: int) -> str:
    """The table of :func:`sync_side_by_side` as text, rounded (a chapter's checked output)."""
    lines = [f"P={P}, M={M}; F=I=W=1 per stage (B=2), a chunk 1/v of it",
             f"{'schedule':>16} {'utilization':>11} {'steady':>7}   peak activations per rank "
             "(stages' worth)"]
    for row in sync_side_by_side(P, M):
        if row.not_possible is not None:
            lines.append(f"{row.label:>16}   not possible: {row.not_possible}")
            continue
        peak = " ".join(f"{x:g}" for x in row.peak)
        lines.append(f"{row.label:>16} {row.utilization:>11.4f} {row.steady:>7.4f}   {peak}")
    return "\n".join(lines)
