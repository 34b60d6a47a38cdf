"""Exercises of chapter 04, interleaving and zero-bubble.

- ``ex04_1`` ``p2p_messages_per_microbatch(P, v) -> int``: point-to-point messages between
  ranks (forward activations plus backward gradients) for one microbatch with v chunks per
  rank, P >= 2; derive it (it is 2 * (v * P - 1)) and the check counts the hops in the
  engine's interleaved schedule.
- ``ex04_2`` ``interleaved_idle_fraction(P, M, v) -> float``: the idle fraction of the
  interleaved 1F1B schedule with P ranks, M microbatches and v chunks per rank, as the
  engine's simulator measures it (M a multiple of P, as the engine requires).
- ``ex04_3`` ``count_p2p_messages(schedule) -> int``: the messages between ranks that any
  schedule of the engine implies (a forward whose input comes from another rank, a backward
  whose output-gradient does), checked against :func:`pipemare_lite.analysis.simulate.p2p_messages`
  on schedules of every family, the V placements of ZB-V and DualPipeV included (so an
  answer that assumes round robin, or counts every stage boundary, fails).
- ``ex04_4`` ``v_messages_per_microbatch(P, v) -> int``: the same count as ``ex04_1`` when
  the v chunks of each rank are placed in a zig-zag (v = 2: the V of ZB-V and DualPipeV,
  rank r holding chunks r and 2P-1-r), P >= 1; the check counts the hops that change rank
  in the engine's zig-zag placement (:func:`pipemare_lite.schedules.v_placement`).
"""

from __future__ import annotations

import random

from pipemare_lite.book.exercises import references
from pipemare_lite.book.exercises.compare import compare_float, compare_int
from pipemare_lite.book.exercises.exercise import Exercise, Mistake


def _interleaved_cases(seed: int) -> list[dict]:
    # v = 1 is plain 1F1B; M = P is the smallest M the interleaved builder takes
    fixed = [(4, 8, 2), (4, 4, 2), (2, 2, 1), (2, 2, 2), (4, 8, 3), (2, 6, 4)]
    rng = random.Random(seed)
    drawn = []
    for _ in range(3):
        P = rng.randint(2, 4)
        drawn.append((P, P * rng.randint(1, 3), rng.randint(1, 3)))
    return [{"P": P, "M": M, "v": v} for P, M, v in fixed + drawn]


def _schedule_cases(seed: int) -> list[dict]:
    from pipemare_lite.schedules import build_schedule

    built = [
        build_schedule("interleaved", 4, 8, chunks=2),
        build_schedule("gpipe", 3, 2),
        build_schedule("zb-h1", 4, 4),
        build_schedule("interleaved", 2, 4, chunks=3),
        build_schedule("naive", 1, 1),
        build_schedule("1f1b", 4, 6, num_minibatches=2),
        build_schedule("pipedream", 3, 3, num_minibatches=2),
        # the V: rank r holds chunks r and 2P-1-r, so the turn at the bottom sends nothing;
        # an answer that assumes round robin (s % P) or counts every boundary fails here
        build_schedule("zb-v", 4, 8),
        build_schedule("dualpipev", 4, 8),
        build_schedule("zb-v", 3, 2, num_minibatches=2),
    ]
    # then schedules drawn from ``seed``: the grader redraws them from its secret
    # (pipemare_lite.book.exercises.hidden), so a table of the fixed ones earns nothing
    rng = random.Random(seed)
    for _ in range(3):
        family = rng.choice(["gpipe", "1f1b", "zb-h1", "interleaved", "pipedream", "2bw",
                             "zb-v", "dualpipev"])
        P = rng.randint(2, 5)
        if family == "dualpipev":  # DualPipeV needs M >= 2P
            built.append(build_schedule(family, P, 2 * P + rng.randint(0, 2)))
        elif family == "interleaved":  # M a multiple of P, as the builder requires
            built.append(build_schedule(family, P, P * rng.randint(1, 2),
                                        chunks=rng.randint(2, 3)))
        else:  # 2BW needs M >= P - 1 (two weight versions)
            M = rng.randint(P - 1 if family == "2bw" else 1, 6)
            built.append(build_schedule(family, P, M, num_minibatches=rng.randint(1, 2)))
    return [{"schedule": schedule} for schedule in built]


def _forward_messages(schedule) -> int:
    """A known mistake: only the activations, not the gradients coming back."""
    return sum(
        action.kind == "F" and action.stage > 0 and schedule.rank_of(action.stage - 1) != rank
        for rank, _, action in schedule.actions()
    )


def _round_robin(schedule) -> int:
    """A known mistake: virtual stage s taken to live on rank s % P, whatever the placement."""
    last, P = schedule.num_virtual_stages - 1, schedule.num_ranks
    return sum(
        (action.kind == "F" and action.stage > 0 and (action.stage - 1) % P != rank)
        or (action.kind in ("B", "I") and action.stage < last and (action.stage + 1) % P != rank)
        for rank, _, action in schedule.actions()
    )


def _boundaries(schedule) -> int:
    """A known mistake: every stage boundary counted, whether or not it changes rank."""
    last = schedule.num_virtual_stages - 1
    return sum(
        (action.kind == "F" and action.stage > 0)
        or (action.kind in ("B", "I") and action.stage < last)
        for _, _, action in schedule.actions()
    )


def _p2p_cases(seed: int) -> list[dict]:
    fixed = [(4, 2), (4, 3), (2, 1), (2, 2), (4, 1), (8, 2)]
    rng = random.Random(seed)
    drawn = [(rng.randint(2, 8), rng.randint(1, 4)) for _ in range(3)]
    return [{"P": P, "v": v} for P, v in fixed + drawn]


def _v_cases(seed: int) -> list[dict]:
    # v = 2 is the V of the chapter; v = 1 has no turn; P = 1 holds every chunk on one rank
    fixed = [(4, 2), (2, 2), (8, 2), (1, 2), (4, 1), (3, 3), (4, 4)]
    rng = random.Random(seed)
    drawn = [(rng.randint(1, 8), rng.randint(1, 4)) for _ in range(3)]
    return [{"P": P, "v": v} for P, v in fixed + drawn]


EXERCISES = [
    Exercise(
        id="ex04_1",
        chapter=4,
        title="Messages between ranks per microbatch with interleaving",
        function_name="p2p_messages_per_microbatch",
        signature="p2p_messages_per_microbatch(P, v) -> int",
        hint=(
            "A microbatch passes through v*P virtual stages and virtual stage s lives on rank "
            "s % P. Count the hops that change rank on the way forward, then on the way back.",
            "The whole method: going forward, a microbatch walks virtual stages 0, 1, ..., v P - "
            "1; each of the v P - 1 steps from stage s to s + 1 moves from rank s % P to rank (s "
            "+ 1) % P, which is always another rank when P > 1. The backward walks the same steps "
            "in reverse. So count the forward hops that change rank and double them.",
        ),
        cases=lambda: _p2p_cases(402),
        reference=references.p2p_messages_counted,
        compare=compare_int,
        mistakes=(
            Mistake("you counted the activations going forward only; each one's gradient "
                    "comes back too", lambda P, v: v * P - 1),
            Mistake("between two passes through the ranks a microbatch also goes from the "
                    "last rank back to rank 0", lambda P, v: 2 * v * (P - 1)),
            Mistake("v does not appear: with v pieces per rank the microbatch passes through "
                    "the ranks v times", lambda P, v: 2 * (P - 1)),
        ),
        engine_answers=(
            "pipemare_lite.schedules.builders.interleaved.interleaved",
        ),
    ),
    Exercise(
        id="ex04_2",
        chapter=4,
        title="Idle fraction of interleaved 1F1B",
        function_name="interleaved_idle_fraction",
        signature="interleaved_idle_fraction(P, M, v) -> float",
        hint=(
            "With v chunks per rank each forward and backward is v times shorter, but the "
            "pipeline still has to fill and drain through the P ranks. Start from GPipe's "
            "idle fraction and ask what v changes.",
            "The whole method: count in slots of one chunk's forward (or backward). Each rank now "
            "does v times M chunk forwards and as many backwards, while filling and draining the "
            "pipeline still takes P - 1 slots, now of the short chunk kind. So the busy part is v "
            "M slots of a makespan of v M + P - 1: take GPipe's idle fraction with M replaced by "
            "v M.",
        ),
        cases=lambda: _interleaved_cases(401),
        reference=lambda P, M, v: references.simulated_metrics(
            "interleaved", P, M, chunks=v
        ).idle_fraction,
        compare=compare_float,
        mistakes=(
            Mistake("your answer does not depend on v: this is plain 1F1B's idle fraction",
                    lambda P, M, v: (P - 1) / (M + P - 1)),
            Mistake("this is the bubble ratio (idle / busy), not the idle fraction",
                    lambda P, M, v: (P - 1) / (v * M)),
        ),
        engine_answers=(
            "pipemare_lite.analysis.simulate.simulate",
            "pipemare_lite.analysis.simulate.metrics",
            "pipemare_lite.analysis.formulas.idle_fraction_interleaved",
            "pipemare_lite.analysis.formulas.makespan_interleaved",
        ),
    ),
    Exercise(
        id="ex04_3",
        chapter=4,
        title="Count the messages a schedule sends",
        function_name="count_p2p_messages",
        signature="count_p2p_messages(schedule) -> int",
        hint=(
            "Walk every action of every rank (schedule.actions()). Which kinds need something "
            "computed by another stage, and is that stage on another rank "
            "(schedule.rank_of)? Split backwards (I, W) and updates (U) need care.",
            "The whole method: for every action of every rank, a forward F of virtual stage s > 0 "
            "receives its input from stage s - 1, and a backward B or input-gradient I of a stage "
            "s below the last receives its gradient from stage s + 1; count one message each time "
            "that other stage lives on a different rank (compare schedule.rank_of of the two "
            "stages). Weight gradients W and updates U need nothing from another stage and count "
            "nothing. Sum over all actions.",
        ),
        cases=lambda: _schedule_cases(403),
        reference=lambda schedule: __import__(
            "pipemare_lite.analysis.simulate", fromlist=["p2p_messages"]
        ).p2p_messages(schedule),
        compare=compare_int,
        points=2,
        mistakes=(
            Mistake("you counted the activations going forward only; each backward receives "
                    "a gradient from the next stage too", _forward_messages),
            Mistake("a boundary between two stages on the same rank sends no message",
                    _boundaries),
            Mistake("not every schedule places its chunks round robin (stage s on rank s % P): "
                    "ask the schedule which rank holds a stage", _round_robin),
        ),
        # depends_on is a building block, not the answer: it may be used
        engine_answers=("pipemare_lite.analysis.simulate.p2p_messages",),
    ),
    Exercise(
        id="ex04_4",
        chapter=4,
        title="Messages between ranks per microbatch on a V",
        function_name="v_messages_per_microbatch",
        signature="v_messages_per_microbatch(P, v) -> int",
        hint=(
            "Walk a microbatch through the v*P chunks in model order: down the ranks, back "
            "up, down again. Which hops stay on the same rank? Then remember the way back.",
            "The whole method: on the V the chunks run down ranks 0 .. P - 1, then the next chunk "
            "starts on the same last rank and runs back up, then down again, v chunks of P stages "
            "each. Along one pass every one of the P - 1 hops changes rank; where a pass turns (v "
            "- 1 times) the next chunk sits on the same rank, so no message. Count the forward "
            "hops that change rank that way and double them for the way back.",
        ),
        cases=lambda: _v_cases(404),
        reference=references.v_messages_counted,
        compare=compare_int,
        mistakes=(
            Mistake("that is the count of the round-robin layout (exercise 1): on a V the "
                    "two chunks at each turn live on the same rank",
                    lambda P, v: 2 * (v * P - 1)),
            Mistake("you counted the activations going forward only; each one's gradient "
                    "comes back too", lambda P, v: v * (P - 1)),
            Mistake("v does not appear: the microbatch passes through the ranks v times",
                    lambda P, v: 2 * (P - 1)),
        ),
        # p2p_messages is the chapter's instrument by then (exercise 3): it may be used
        engine_answers=(
            "pipemare_lite.schedules.builders.zero_bubble_v.zb_v",
            "pipemare_lite.schedules.builders.dualpipe.dualpipe_v",
        ),
    ),
]
