"""Exercises of chapter 11, real processes.

- ``ex11_1`` ``gpipe_comm_rows(P, N) -> list[list[str]]``: GPipe's rows with the
  point-to-point operations the transport posts, receives posted only when they are needed
  (``receives_ahead=0``), spelled as PyTorch spells them (``0SEND_F3``, ``1RECV_F3``,
  ``1SEND_B3``, ``0RECV_B3``).
- ``ex11_2`` ``utilization_from_trace(entries, num_ranks) -> float``: the utilization of a
  measured trace given as ``[rank, action, start, end]`` rows (seconds from the barrier).

The engine's answers are :func:`pipemare_lite.schedules.comm_rows.comm_rows` and
:func:`pipemare_lite.analysis.simulate.metrics`, which their ``engine_answers`` name. Torch-free: a
check imports no torch.
"""

from __future__ import annotations

import random

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import compare_float, compare_rows
from pipemare_lite.book.exercises.exercise import Exercise, Mistake

_ROWS = "pipemare_lite.schedules.comm_rows."
_ROWS_ANSWERS = (_ROWS + "comm_rows", _ROWS + "comm_row", _ROWS + "comm_row_strings")
# (not utilization_report: naming it would import torch in every check of ex11_2; it
# answers through metrics, which is named)
_UTILIZATION_ANSWERS = ("pipemare_lite.analysis.simulate.metrics",)


def _gpipe_rows_with(recv_after: bool = False, edges: bool = True, bare_update: bool = False):
    """GPipe's comm rows, optionally with a known mistake."""
    def rows(P, N):
        out = []
        for r in range(P):
            row = []
            for phase, kind in (("F", "F"), ("B", "B")):
                for m in range(N):
                    needs = r > 0 if kind == "F" else r < P - 1
                    sends = r < P - 1 if kind == "F" else r > 0
                    if not edges:
                        needs = sends = True
                    recv, action = f"{r}RECV_{phase}{m}", f"{r}{kind}{m}"
                    row += [action, recv] if recv_after and needs else (
                        [recv, action] if needs else [action])
                    if sends:
                        row.append(f"{r}SEND_{phase}{m}")
            out.append(row + ["U0" if bare_update else f"{r}U0"])
        return out

    return rows


_receive_after = _gpipe_rows_with(recv_after=True)
_no_edges = _gpipe_rows_with(edges=False)
_bare_update = _gpipe_rows_with(bare_update=True)  # a second-pass reader's first answer


def _busy(entries) -> float:
    return sum(end - start for _rank, _action, start, end in entries)


def _from_zero(entries, num_ranks):
    """Known mistake: the makespan taken from time 0, not from the first start."""
    return _busy(entries) / (num_ranks * max(e[3] for e in entries))


def _mean_of_own_spans(entries, num_ranks):
    """Known mistake: each rank's busy time over its own span, averaged."""
    shares = []
    for rank in range(num_ranks):
        mine = [e for e in entries if e[0] == rank]
        span = max(e[3] for e in mine) - min(e[2] for e in mine)
        shares.append(_busy(mine) / span)
    return sum(shares) / num_ranks


def _comm_cases() -> list[dict]:
    # first: the chapter's P = 2, then one microbatch, more ranks than microbatches, a
    # single rank (nothing to send), then seeded random sizes
    fixed = [(2, 4), (2, 1), (4, 2), (1, 3), (3, 3)]
    rng = random.Random(1101)
    drawn = [(rng.randint(2, 6), rng.randint(1, 6)) for _ in range(4)]
    return [{"P": P, "N": N} for P, N in fixed + drawn]


def _trace_cases() -> list[dict]:
    """Traces shaped like measured ones: simulated with uneven costs, each rank falling
    behind by random waits, every time shifted by a start-up offset (never starting at 0)."""
    from pipemare_lite.analysis.simulate import OpCosts, simulate
    from pipemare_lite.schedules import build_schedule

    rng = random.Random(1102)
    cases = []
    for name, P, M in [("gpipe", 2, 4), ("1f1b", 2, 4), ("1f1b", 4, 4), ("gpipe", 3, 2),
                       ("pipedream", 2, 2), ("naive", 1, 2)]:
        costs = OpCosts(forward=rng.uniform(1, 3), backward=rng.uniform(2, 5),
                        update=rng.uniform(0.1, 0.5))
        offset = rng.uniform(0.5, 2.0)
        entries, late = [], {}
        for e in sorted(simulate(build_schedule(name, P, M), costs).entries,
                        key=lambda e: (e.rank, e.start)):
            late[e.rank] = late.get(e.rank, offset) + rng.uniform(0.0, 0.4)  # waits add up
            entries.append([e.rank, str(e.action), round((e.start + late[e.rank]) * 1e-3, 7),
                            round((e.end + late[e.rank]) * 1e-3, 7)])
        cases.append({"entries": entries, "num_ranks": P})
    return cases


EXERCISES = [
    Exercise(
        id="ex11_1",
        chapter=11,
        title="GPipe's rows with their sends and receives, in posting order",
        function_name="gpipe_comm_rows",
        signature="gpipe_comm_rows(P, N) -> list[list[str]]",
        hint=(
            "Each rank's row is GPipe's row with messages around the computations: which forward "
            "needs something from another rank first, and which produces something another rank "
            "needs?",
            "Start from GPipe's row of each rank (all F, then all B, then U). A forward on a "
            "rank r > 0 needs the activation from r - 1: post 'rRECV_Fm' just before 'rFm'; "
            "after 'rFm' on a rank r < P - 1 post 'rSEND_Fm'. The backward is the mirror: "
            "'rRECV_Bm' before 'rBm' on every rank but the last, 'rSEND_Bm' after it on every "
            "rank but the first. GPipe's pair order never forces a receive earlier.",
            "The whole method: for each rank r, go through the forwards m = 0 .. M - 1: add the "
            "receive of the forward's input (not on rank 0), the forward, then the send of its "
            "output (not on the last rank). Then the backwards m = 0 .. M - 1: the receive of the "
            "gradient (not on the last rank), the backward, then the send of the gradient (not on "
            "rank 0). End the row with the update r U 0.",
        ),
        cases=_comm_cases,
        reference=references.gpipe_just_in_time_rows,
        compare=compare_rows,
        mistakes=(
            Mistake("this posts each receive after the action that needs it: the action "
                    "would run on an empty buffer", _receive_after),
            Mistake("the first rank receives no activation and the last no gradient; nothing "
                    "leaves the ends of the pipeline", _no_edges),
            Mistake("the update is an action of a stage like the others: it is written with "
                    "its stage first, as in chapter 05's rows ('0U0' on rank 0)", _bare_update),
        ),
        engine_answers=_ROWS_ANSWERS,
    ),
    Exercise(
        id="ex11_2",
        chapter=11,
        title="Utilization read off a measured trace",
        function_name="utilization_from_trace",
        signature="utilization_from_trace(entries, num_ranks) -> float",
        hint=(
            "Utilization is busy time over the time the ranks were available: where does a "
            "measured trace begin and end?",
            "Utilization is all busy time over ranks times makespan. Busy time: the sum of "
            "end - start over every entry. The makespan runs from the first start of any rank "
            "to the last end of any rank: a measured trace does not begin at 0.",
            "The whole method: busy time is the sum of end - start over all entries (whatever "
            "their rank); the makespan is the latest end minus the earliest start over all "
            "entries. Return busy / (num_ranks * makespan).",
        ),
        cases=_trace_cases,
        reference=references.trace_utilization,
        compare=compare_float,
        mistakes=(
            Mistake("this measures the makespan from time 0; the first action starts later "
                    "(the processes' start-up)", _from_zero),
            Mistake("this averages each rank's busy share of its own span; all ranks share "
                    "one clock and one makespan", _mean_of_own_spans),
        ),
        engine_answers=_UTILIZATION_ANSWERS,
    ),
]
