"""The message plan and its posting order, checked without processes.

An in-order network model stands in for NCCL's strictest behaviour: each rank has one
stream per peer (both directions), runs it in posting order, and an operation completes only
when the peer's stream has the matching operation at its head. Every schedule of the book
must run to the end under this model with the transport's posting rule; a naive rule (post
each receive only when it is needed, sends at once) is shown to deadlock on a small case, so
the model is not trivially permissive.
"""

from __future__ import annotations

import pytest

from pipemare_lite.schedules import ScheduleError, build_schedule
from pipemare_lite.schedules.actions import Action, Schedule
from pipemare_lite.schedules.comm_plan import (
    ACTIVATION,
    GRADIENT,
    PostingOrder,
    plan_communication,
)


class InOrderNetwork:
    """Per (rank, peer) FIFO streams; heads of a pair's two streams must be the same message."""

    def __init__(self):
        self.streams: dict = {}
        self.done: set = set()

    def post(self, rank, message):
        peer = message.dst if message.src == rank else message.src
        self.streams.setdefault((rank, peer), []).append(message)

    def progress(self) -> bool:
        moved = False
        for (rank, peer), stream in list(self.streams.items()):
            other = self.streams.get((peer, rank), [])
            if stream and other:
                a, b = stream[0], other[0]
                if a.key != b.key:  # NCCL would hang (two sends) or mix up tensors
                    raise RuntimeError(f"pair {rank}-{peer} streams disagree: {a} vs {b}")
                stream.pop(0)
                other.pop(0)
                self.done.add(a.key)
                moved = True
        return moved


def run_model(schedule: Schedule, posting: str = "planned", ahead: int = 0) -> None:
    """Run every rank's program against :class:`InOrderNetwork`; raise on deadlock."""
    plan = plan_communication(schedule)
    net = InOrderNetwork()
    orders = [PostingOrder(plan, r) for r in range(schedule.num_ranks)]
    naive_posted = [set() for _ in range(schedule.num_ranks)]
    pc = [0] * schedule.num_ranks
    rows = schedule.ranks

    def post_for(rank, message):
        if posting == "planned":
            for op in orders[rank].to_post_for(message):
                net.post(rank, op)
            for op in orders[rank].receives_ahead(ahead):
                net.post(rank, op)
        elif message.key not in naive_posted[rank]:
            naive_posted[rank].add(message.key)
            net.post(rank, message)

    while True:
        moved = False
        for rank in range(schedule.num_ranks):
            while pc[rank] < len(rows[rank]):
                position = pc[rank]
                needed = [m for m in plan.consumes.get((rank, position), []) if m.src != rank]
                for m in needed:
                    post_for(rank, m)
                if any(m.key not in net.done for m in needed):
                    break
                for m in plan.produces.get((rank, position), []):
                    if m.dst != rank:
                        post_for(rank, m)
                pc[rank] += 1
                moved = True
        moved = net.progress() or moved
        if not moved:
            break
    finished = all(pc[r] == len(rows[r]) for r in range(schedule.num_ranks))
    if not finished or len(net.done) != sum(m.src != m.dst for m in plan.messages.values()):
        stuck = {r: str(rows[r][pc[r]]) for r in range(schedule.num_ranks) if pc[r] < len(rows[r])}
        raise RuntimeError(f"deadlock in the in-order model; stuck ranks: {stuck}")


CASES = [
    ("gpipe", 2, 4, 1, 1, 0),
    ("gpipe", 4, 3, 1, 2, 0),
    ("1f1b", 3, 6, 1, 2, 0),
    ("1f1b", 4, 2, 1, 1, 0),
    ("interleaved", 2, 4, 2, 1, 0),
    ("interleaved", 3, 6, 2, 2, 0),
    ("interleaved", 4, 8, 3, 1, 0),
    ("zb-h1", 3, 6, 1, 2, 0),
    ("pipedream", 3, 2, 1, 4, 0),
    ("pipedream", 4, 4, 1, 3, 1),
    ("2bw", 3, 4, 1, 3, 0),
    ("async", 2, 1, 1, 6, 0),
    ("async", 4, 2, 1, 4, 1),
    ("naive", 3, 2, 1, 1, 0),
]


@pytest.mark.parametrize("ahead", [0, 2], ids=["just-in-time", "2-ahead"])
@pytest.mark.parametrize("name,P,M,v,K,W", CASES)
def test_every_schedule_runs_under_in_order_network(name, P, M, v, K, W, ahead):
    schedule = build_schedule(
        name, P, M, chunks=v, num_minibatches=K, warmup=W
    )
    run_model(schedule, ahead=ahead)


@pytest.mark.parametrize("name,P,M,v,K,W", CASES)
def test_plan_lists_each_crossing_tensor_once(name, P, M, v, K, W):
    s = build_schedule(name, P, M, chunks=v, num_minibatches=K, warmup=W)
    plan = plan_communication(s)
    S, T = s.num_virtual_stages, s.total_microbatches
    # independent count: an activation leaves every stage but the last, a gradient every
    # stage but the first, for every microbatch
    assert len(plan.messages) == 2 * (S - 1) * T
    for (kind, stage, _mb), m in plan.messages.items():
        assert m.src == s.rank_of(stage)
        assert m.dst == s.rank_of(stage + 1 if kind == ACTIVATION else stage - 1)
    seqs = sorted(m.seq for m in plan.messages.values())
    assert seqs == list(range(len(seqs)))
    # both ranks of a pair see the same list
    for (a, b), order in plan.pair_order.items():
        assert [m.key for m in order] == [m.key for m in plan.pair_order[(b, a)]]
    # each rank sends in its own action order
    for rank in range(P):
        produced = [
            m.seq for pos in range(len(s.ranks[rank]))
            for m in plan.produces.get((rank, pos), []) if m.dst != rank
        ]
        assert produced == sorted(produced)


def test_naive_posting_deadlocks_in_the_model():
    # 1F1B, P=2, M=2: rank 0 sends 0F1 while rank 1 sends the gradient of 1B0; with each
    # receive posted only when needed, both streams start with a send and never match.
    s = build_schedule("1f1b", 2, 4)
    with pytest.raises(RuntimeError, match="deadlock|disagree"):
        run_model(s, posting="naive")
    run_model(s)  # the planned order runs


def test_message_order_example():
    s = build_schedule("1f1b", 2, 2)
    plan = plan_communication(s)
    kinds = [(m.kind, m.stage, m.microbatch) for m in plan.pair_order[(0, 1)]]
    # every activation of a microbatch precedes its gradient
    assert sum(kind == GRADIENT for kind, _, _ in kinds) == 2
    for kind, _stage, mb in kinds:
        if kind == GRADIENT:
            assert kinds.index((ACTIVATION, 0, mb)) < kinds.index((GRADIENT, 1, mb))


def test_plan_rejects_a_deadlocked_schedule():
    # rank 0 waits for 1B0 before it sends 0F0: nobody can move
    rows = (
        (Action(0, "B", 0), Action(0, "F", 0), Action(0, "U", 0)),
        (Action(1, "F", 0), Action(1, "B", 0), Action(1, "U", 0)),
    )
    s = Schedule("custom", 2, 1, rows)
    with pytest.raises(ScheduleError, match="deadlock"):
        plan_communication(s)
