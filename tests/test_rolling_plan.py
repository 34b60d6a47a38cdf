"""The rolling message plan (issue 44): one rank's messages planned as it goes, from a long
schedule (periodic rows), are the whole plan's (same seq) and are posted in the same order;
what it holds stays bounded however long the run. Torch-free bookkeeping, checked against
plan_communication and comm_row on every built-in schedule."""

from __future__ import annotations

import pytest

from pipemare_lite.schedules.comm_plan import (
    PostingOrder,
    RollingPlan,
    _message_keys,
    plan_communication,
    stream_order,
)
from pipemare_lite.schedules.comm_rows import comm_op, comm_row
from pipemare_lite.schedules.registry import build_schedule
from pipemare_lite.schedules.repeat import is_long_run, long_schedule, materialized
from pipemare_lite.schedules.validation import execution_order

CASES = [("gpipe", 3, 2), ("1f1b", 4, 4), ("interleaved", 2, 4), ("zb-h1", 3, 3),
         ("zb-v", 2, 4), ("dualpipev", 2, 4), ("pipedream", 3, 2), ("2bw", 2, 2),
         ("async", 4, 4)]


def _lazy(name, P, N, K=24):
    schedule = long_schedule(lambda k: build_schedule(name, P, N, num_minibatches=k), K)
    assert is_long_run(schedule), name
    return schedule


def _rolling_row(schedule, rank, receives_ahead=2):
    """comm_row's lowering, with the transport's calls on a RollingPlan: each action's
    received messages, the action, its sent messages (looked up, used, forgotten)."""
    plan = RollingPlan(schedule, rank)
    order = PostingOrder(plan, rank)
    row, held = [], 0

    def post(message, received):
        if message.src != message.dst:
            row.extend(comm_op(op, rank) for op in order.to_post_for(message))
            row.extend(comm_op(op, rank) for op in order.receives_ahead(receives_ahead))
        if received or message.src != message.dst:  # as the transport forgets them
            plan.forget(message.key)

    for action in schedule.row(rank):
        sends, needs = _message_keys(schedule, action, schedule.split_backward)
        for key in needs:
            post(plan.message(key), True)
        row.append(action)
        for key in sends:
            post(plan.message(key), False)
        held = max(held, len(plan.messages) + sum(map(len, plan.pair_order.values()))
                   + len(order.posted))
    return row, held


@pytest.mark.parametrize(("name", "P", "N"), CASES)
def test_the_stream_is_the_execution_order(name, P, N):
    lazy = _lazy(name, P, N)
    whole = materialized(lazy)
    expected = [(r, whole.ranks[r][p]) for r, p in execution_order(whole)]
    assert list(stream_order(lazy)) == expected
    assert list(stream_order(whole)) == expected


@pytest.mark.parametrize(("name", "P", "N"), CASES)
def test_each_rank_posts_what_the_whole_plan_posts(name, P, N):
    lazy = _lazy(name, P, N)
    whole = plan_communication(materialized(lazy))
    for rank in range(P):
        rolling, _ = _rolling_row(lazy, rank)
        assert [str(x) for x in rolling] == [str(x) for x in comm_row(whole, rank)]
        seqs = {op.message.key: op.message.seq for op in rolling if hasattr(op, "message")}
        assert all(whole.messages[key].seq == seq for key, seq in seqs.items())


@pytest.mark.parametrize(("name", "P", "N"), [("1f1b", 4, 4), ("async", 3, 2)])
def test_what_a_rank_holds_does_not_grow_with_the_run(name, P, N):
    short = max(_rolling_row(_lazy(name, P, N, K=40), r)[1] for r in range(P))
    long = max(_rolling_row(_lazy(name, P, N, K=400), r)[1] for r in range(P))
    assert long == short


def _cut(schedule, fraction):
    """Every rank's position after the first ``fraction`` of an execution of the schedule:
    a cut the run can stand at (every action before it has its dependencies before it)."""
    order = execution_order(schedule)
    positions = [0] * schedule.num_ranks
    for rank, _ in order[:int(fraction * len(order))]:
        positions[rank] += 1
    return positions


@pytest.mark.parametrize(("name", "P", "N"), CASES)
def test_a_plan_started_at_a_cut_plans_what_is_left_alike_on_both_ends(name, P, N):
    """A resume's plan: from every rank's position at a cut and the messages in transit
    there, the stream is a valid execution of every action left (each rank's in row order,
    each after the messages it needs), and each pair's two ends plan the same messages in
    the same order: those produced after the cut, none sent before it."""
    lazy = _lazy(name, P, N)
    whole_schedule = materialized(lazy)
    whole = plan_communication(whole_schedule)
    cut = _cut(whole_schedule, 0.43)  # inside a minibatch: messages in transit
    before = {m.key for (rank, position), made in whole.produces.items() for m in made
              if position < cut[rank]}
    used = {m.key for (rank, position), needed in whole.consumes.items() for m in needed
            if position < cut[rank]}
    in_transit = before - used
    assert in_transit
    available, read = set(in_transit), [[] for _ in range(P)]
    for rank, action in stream_order(lazy, cut, in_transit):
        sends, needs = _message_keys(lazy, action, lazy.split_backward)
        assert available >= set(needs), (rank, action)
        available = (available - set(needs)) | set(sends)
        read[rank].append(action)
    assert read == [list(row[p:]) for row, p in zip(whole_schedule.ranks, cut)]
    planned = {}
    for rank in range(P):
        plan = RollingPlan(lazy, rank, start=cut, in_transit=in_transit)
        for r, peer in plan.pair_order:
            planned[(r, peer)] = [(m.key, m.seq) for m in plan.planned(r, peer, 10**9)]
    for (r, peer), order in planned.items():
        assert order == planned[(peer, r)]
        keys = {key for key, _ in order}
        assert keys == {m.key for m in whole.pair_order[(r, peer)]} - before
