"""Communication as rows (:mod:`pipemare_lite.schedules.comm_rows`), checked three ways.

1. As a program, without processes: the rows keep the schedule's compute order, post every
   crossing message once at each end (a send after the action that made it, a receive
   before the action that needs it), in the pair's ``seq`` order on both ranks, and run to
   the end on the in-order (NCCL-like) network model of ``test_dist_transport.py``. One
   small case is also written out by hand.
2. Against PyTorch's own lowering (``_add_send_recv``, what ``_PipelineScheduleRuntime``
   runs as ``pipeline_order_with_comms``): with no receives posted ahead, GPipe's rows are
   identical; for every flushed schedule the sends sit in the same places and each rank
   receives in the same order; only where a receive is posted may differ.
3. Against a real run: the operations the distributed executor's transport posted on gloo
   (``record_posts=True``), in order, equal the rows, for 2 and 4 ranks and every method
   family; ``p2p_verbose=True`` prints the same operations as a text trace.
"""

from __future__ import annotations

import functools
import re

import pytest

from pipemare_lite.schedules import build_schedule
from pipemare_lite.schedules.actions import Action
from pipemare_lite.schedules.comm_plan import plan_communication
from pipemare_lite.schedules.comm_rows import (
    RECV,
    SEND,
    CommOp,
    comm_op,
    comm_row_strings,
    comm_rows,
    compute_only,
    format_comm_rows,
    pair_streams,
)
from tests.test_dist_transport import CASES, InOrderNetwork


def _schedule(name, P, M, v, K, W):
    return build_schedule(name, P, M, chunks=v, num_minibatches=K, warmup=W)


def run_rows_on_network(rows, plan) -> None:
    """Execute the rows as written: a comm item posts, an action waits for its receives."""
    net = InOrderNetwork()
    pc = [0] * len(rows)
    while True:
        moved = False
        for rank, row in enumerate(rows):
            while pc[rank] < len(row):
                item = row[pc[rank]]
                if isinstance(item, CommOp):
                    net.post(rank, item.message)
                else:
                    position = len(compute_only(row[: pc[rank]]))
                    needed = [m for m in plan.consumes.get((rank, position), [])
                              if m.src != m.dst]
                    if any(m.key not in net.done for m in needed):
                        break
                pc[rank] += 1
                moved = True
        moved = net.progress() or moved
        if not moved:
            break
    crossing = sum(m.src != m.dst for m in plan.messages.values())
    assert all(pc[r] == len(rows[r]) for r in range(len(rows))), f"stuck at {pc}"
    assert len(net.done) == crossing


@pytest.mark.parametrize("ahead", [0, 2])
@pytest.mark.parametrize("name,P,M,v,K,W", CASES)
def test_rows_are_the_schedule_plus_each_message_at_both_ends(name, P, M, v, K, W, ahead):
    schedule = _schedule(name, P, M, v, K, W)
    plan = plan_communication(schedule)
    rows = comm_rows(schedule, receives_ahead=ahead)
    for rank, row in enumerate(rows):
        assert compute_only(row) == list(schedule.ranks[rank])
    for message in plan.messages.values():
        if message.src == message.dst:
            continue
        sender, receiver = rows[message.src], rows[message.dst]
        send = [i for i, x in enumerate(sender) if x == CommOp(SEND, message)]
        recv = [i for i, x in enumerate(receiver) if x == CommOp(RECV, message)]
        assert len(send) == 1 and len(recv) == 1, str(message)
        produced_at = sender.index(_producer(schedule, message))
        consumed_at = receiver.index(_consumer(schedule, message))
        assert produced_at < send[0], f"{message} sent before it exists"
        assert recv[0] < consumed_at, f"{message} received after it is needed"
    for row in rows:  # rule 2: a pair's operations in seq order
        for peer in range(P):
            seqs = [x.message.seq for x in row if isinstance(x, CommOp) and x.peer == peer]
            assert seqs == sorted(seqs)
    run_rows_on_network(rows, plan)


def _producer(schedule, message) -> Action:
    kind = "F" if message.kind == "activation" else ("I" if schedule.split_backward else "B")
    return Action(message.stage, kind, message.microbatch)


def _consumer(schedule, message) -> Action:
    kind = "F" if message.kind == "activation" else ("I" if schedule.split_backward else "B")
    return Action(message.consumer_stage, kind, message.microbatch)


def test_zero_bubble_sends_gradients_after_the_input_gradient():
    schedule = build_schedule("zb-h1", 2, 4)
    rows = comm_row_strings(schedule, receives_ahead=0)
    row = rows[1]
    between = row[row.index("1I0") + 1: row.index("1SEND_B0")]
    assert between and all("_" in x for x in between)  # only posts (rule 2), no 1W0


def test_one_f_one_b_rows_written_by_hand():
    # P=2, M=4. Messages in seq order (one execution of the schedule): 0F0, 0F1, then rank 1
    # runs 1B0 and 1B1 before rank 0's 0F2, so rank 0 must post RECV_B1 before SEND_F2.
    rows = comm_row_strings(build_schedule("1f1b", 2, 4), receives_ahead=0)
    assert rows[0] == ["0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0F2",
                       "0RECV_B1", "0SEND_F2", "0B1", "0F3", "0SEND_F3", "0RECV_B2", "0B2",
                       "0RECV_B3", "0B3", "0U0"]
    assert rows[1] == ["1RECV_F0", "1F0", "1B0", "1RECV_F1", "1SEND_B0", "1F1", "1B1",
                       "1SEND_B1", "1RECV_F2", "1F2", "1B2", "1RECV_F3", "1SEND_B2", "1F3",
                       "1B3", "1SEND_B3", "1U0"]
    ahead = comm_row_strings(build_schedule("1f1b", 2, 4), receives_ahead=2)
    assert ahead[0][:6] == ["0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0RECV_B1"]


def test_pair_streams_match_op_for_op():
    schedule = build_schedule("pipedream", 4, 4, num_minibatches=2)
    for a in range(3):
        streams = pair_streams(schedule, a, a + 1)
        assert [seq for seq, _, _ in streams] == sorted(seq for seq, _, _ in streams)
        for _seq, x, y in streams:
            assert x.message == y.message and {x.kind, y.kind} == {SEND, RECV}
        assert len(streams) == 2 * schedule.total_microbatches


def test_spelling_and_errors():
    plan = plan_communication(build_schedule("gpipe", 2, 1))
    message = plan.messages[("activation", 0, 0)]
    assert str(comm_op(message, 0)) == "0SEND_F0" and str(comm_op(message, 1)) == "1RECV_F0"
    gradient = plan.messages[("gradient", 1, 0)]
    assert str(comm_op(gradient, 1)) == "1SEND_B0" and str(comm_op(gradient, 0)) == "0RECV_B0"
    with pytest.raises(ValueError, match="rank 5"):
        comm_op(message, 5)
    with pytest.raises(ValueError, match="receives_ahead"):
        comm_rows(build_schedule("gpipe", 2, 1), receives_ahead=-1)
    text = format_comm_rows(comm_rows(build_schedule("gpipe", 2, 2)), per_line=4)
    assert text.splitlines()[0].split() == ["rank", "0:", "0F0", "0SEND_F0", "0F1", "0SEND_F1"]


# --- against PyTorch's lowering -----------------------------------------------------------

TORCH_CASES = [("gpipe", 2, 4, 1), ("gpipe", 4, 3, 1), ("1f1b", 2, 4, 1), ("1f1b", 4, 8, 1),
               ("1f1b", 3, 2, 1), ("interleaved", 2, 4, 2), ("zb-h1", 3, 6, 1)]


def torch_lowering(schedule) -> list[list[str]]:
    """PyTorch's ``_add_send_recv`` on the schedule's compute rows (one flushed minibatch)."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    from pipemare_lite.interop.torch_notation import to_torch_rows

    P = schedule.num_ranks
    compute = {r: [schedules._Action.from_str(x) for x in row]
               for r, row in enumerate(to_torch_rows(schedule))}
    lowered = schedules._add_send_recv(compute, stage_to_rank=lambda s: s % P,
                                       num_stages=schedule.num_virtual_stages)
    return [[str(a) for a in lowered[r]] for r in range(P)]


@pytest.mark.parametrize("name,P,M,v", TORCH_CASES)
def test_sends_and_receive_order_agree_with_pytorch(name, P, M, v):
    schedule = build_schedule(name, P, M, chunks=v)
    theirs = torch_lowering(schedule)
    ours = [[x for x in row if not re.fullmatch(r"\d+U\d+", x)]  # PyTorch has no U
            for row in comm_row_strings(schedule, receives_ahead=0)]
    for rank, (mine, torch_row) in enumerate(zip(ours, theirs)):
        def without_receives(row):
            return [x for x in row if "RECV" not in x]

        def receives(row):
            return [x for x in row if "RECV" in x]

        assert without_receives(mine) == without_receives(torch_row), f"rank {rank} sends"
        assert receives(mine) == receives(torch_row), f"rank {rank} receive order"
    if name == "gpipe":
        assert ours == theirs  # every receive in the same place too


def test_one_f_one_b_differs_from_pytorch_only_where_rule_2_moves_a_receive():
    schedule = build_schedule("1f1b", 2, 4)
    theirs = torch_lowering(schedule)[0]
    ours = [x for x in comm_row_strings(schedule, receives_ahead=0)[0] if x != "0U0"]
    # PyTorch posts 0SEND_F2 before 0RECV_B1; the engine's seq order has 1B1's gradient first
    assert theirs.index("0SEND_F2") < theirs.index("0RECV_B1")
    assert ours.index("0RECV_B1") < ours.index("0SEND_F2")
    moved = [x for x in ours if ours.index(x) != theirs.index(x)]
    assert set(moved) == {"0RECV_B1", "0SEND_F2"}


# --- against a real run -------------------------------------------------------------------

DIST_METHODS = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1),
                ("pipedream", 1), ("async", 1), ("pipemare", 1)]


@pytest.fixture(scope="module", params=[2, 4], ids=lambda p: f"P{p}")
def posted_runs(request):
    import torch
    import torch.nn.functional as F

    from pipemare_lite.engine.distributed.jobs import DistJob, run_distributed_jobs
    from pipemare_lite.methods import build_method_schedule, method_options
    from pipemare_lite.training.models import mlp
    from pipemare_lite.training.partition import PartitionedModel

    P = request.param
    g = torch.Generator().manual_seed(5)
    jobs = []
    for method, chunks in DIST_METHODS:
        options = method_options(method, warmup=1 if method == "pipemare" else 0)
        M = 2 * P if chunks > 1 else 4
        schedule = build_method_schedule(method, P, M, num_minibatches=2, chunks=chunks,
                                         options=options)
        S = schedule.num_virtual_stages
        stages = PartitionedModel(mlp, S, kwargs=(("in_features", 4), ("hidden", 4),
                                                  ("depth", S), ("out_features", 3),
                                                  ("seed", 1)))
        data = [(torch.randn(2, 4, generator=g), torch.randint(0, 3, (2,), generator=g))
                for _ in range(schedule.total_microbatches)]
        jobs.append(DistJob(schedule, stages, data, F.cross_entropy,
                            functools.partial(torch.optim.SGD, lr=0.1), options,
                            record_posts=True))
    return jobs, run_distributed_jobs(jobs, timeout=240, op_timeout=60)


@pytest.mark.dist
@pytest.mark.slow
def test_the_transport_posts_exactly_the_rows(posted_runs):
    jobs, results = posted_runs
    for job, result in zip(jobs, results):
        assert result.posted == comm_row_strings(job.schedule), job.schedule.name


@pytest.mark.dist
@pytest.mark.slow
def test_p2p_verbose_is_an_argument_and_prints_the_posts():
    from pipemare_lite.engine.distributed.launch import launch
    from tests.dist_workers import verbose_gpipe_output

    for via_env in (False, True):  # the argument, or the environment variable as before
        outputs = launch(verbose_gpipe_output, 2, args=(via_env,), timeout=120)
        assert "[rank 0] post send activation of stage 0 microbatch 1" in outputs[0]
        assert "[rank 1] received activation of stage 0 microbatch 0" in outputs[1]
        assert "[rank 1] post send gradient of stage 1 microbatch 0" in outputs[1]
        assert "[rank 0] post recv gradient of stage 1 microbatch 1" in outputs[0]
