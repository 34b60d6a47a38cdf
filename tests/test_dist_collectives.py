"""The distributed path scales (issue 44): under ``fit(executor="dist")`` a step costs a
fixed number of collectives however long the run, and no weights travel per step.

Every torch.distributed collective is patched with a counter on two gloo ranks (loopback,
one job, bounded time), and so are the sends and receives of the runs' losses. Per step
the last stage's rank sends its losses to the other rank: one message, a tensor of their
values (which microbatches they belong to, every rank reads from the schedule; with NCCL
it is one broadcast), and no collective at all; the weights
and the other records are gathered only at evaluation, checkpoints and the end
(``DistributedExecutor.gather``: one all-gather of sizes and one of bytes), and the only
barrier is the one before the first run (the trace's common time origin)."""

from __future__ import annotations

import pytest

from pipemare_lite.engine.distributed.launch import launch
from tests.timeouts import hard_time_limit

pytestmark = [pytest.mark.dist, pytest.mark.usefixtures("one_thread")]

METHODS = ("1f1b", "pipemare")
SHORT, LONG = 3, 9  # steps: one epoch each, evaluated once at its end


@pytest.fixture(scope="module")
def counted():
    from tests.dist_workers import count_collectives_in_fit

    with hard_time_limit(240):
        ranks = launch(count_collectives_in_fit, 2, args=((SHORT, LONG), METHODS),
                       timeout=220)
    assert ranks[0].keys() == ranks[1].keys()
    return ranks


@pytest.mark.parametrize("method", METHODS)
def test_a_step_costs_one_losses_message_and_no_collective(counted, method):
    for rank, counts in enumerate(counted):
        short, _ = counts[(method, SHORT)]
        long, _ = counts[(method, LONG)]
        extra = {name: long.get(name, 0) - short.get(name, 0) for name in {*short, *long}}
        per_step = {name: calls / (LONG - SHORT) for name, calls in extra.items() if calls}
        # the losses' values: rank 1 (the last stage's) sends them, rank 0 receives them
        assert per_step == {"losses isend" if rank == 1 else "losses irecv": 1.0}, (short, long)
        # per run: the shape probe's broadcast (P - 1 = 1 stage), one barrier, and two
        # gathers (the evaluation and the end), each two all_gathers (sizes, bytes)
        assert long["barrier"] == 1
        assert long["all_gather"] == 4
        assert long["broadcast_object_list"] == 1
        assert not long.get("all_gather_object") and not long.get("gather_object")
        assert long["broadcast"] == 2  # broadcast_object_list's two (size, data)


@pytest.mark.parametrize("method", METHODS)
def test_every_rank_ends_with_the_same_history(counted, method):
    histories = [rank[(method, LONG)][1] for rank in counted]
    first = {k: v for k, v in histories[0].items() if k != "wall_seconds"}
    second = {k: v for k, v in histories[1].items() if k != "wall_seconds"}
    assert first == second
    assert len(first["loss"]) == LONG and len(first["stage_lr"][0]) == LONG
    assert len(first["stage_lr"]) == 2 and first["evals"][0]["step"] == LONG
