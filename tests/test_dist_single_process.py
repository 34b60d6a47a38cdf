"""The distributed executor's pieces without starting processes (fast).

- a one-rank process group (gloo, in this process): P = 1 schedules go through
  :class:`DistributedExecutor` (messages handed over in memory) and equal the local
  executor bitwise; bad input is refused with a message naming it;
- the fault primitives: a wait that never completes ends with OpTimeoutError naming what it
  waited for, an abort ends it with PeerFailedError, a failure report lands in the store.
"""

from __future__ import annotations

import datetime
import functools
import threading
import time

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.engine.distributed.executor import DistributedExecutor
from pipemare_lite.engine.distributed.fault_injection import Fault
from pipemare_lite.engine.distributed.faults import (
    OpTimeoutError,
    PeerFailedError,
    StatusBoard,
    Waiter,
    claim_abort,
    read_abort,
    read_failures,
    read_positions,
)
from pipemare_lite.methods import build_method_schedule, method_options
from pipemare_lite.schedules import build_schedule
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import PartitionedModel

OPTIMIZER = functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9)


@pytest.fixture(scope="module")
def one_rank_group():
    """A gloo process group of one rank in this process (torn down afterwards)."""
    if dist.is_initialized():
        pytest.skip("another process group is active in this process")
    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    yield store
    dist.destroy_process_group()


pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


def stages(depth: int = 3):
    return PartitionedModel(mlp, depth, kwargs=(("in_features", 5), ("hidden", 6),
                                                ("depth", depth), ("out_features", 4),
                                                ("seed", 2)))


def data(count: int):
    g = torch.Generator().manual_seed(5)
    return [(torch.randn(3, 5, generator=g), torch.randint(0, 4, (3,), generator=g))
            for _ in range(count)]


@pytest.mark.parametrize("method", ["gpipe", "pipedream", "pipemare"])
def test_one_rank_equals_the_local_executor(one_rank_group, method):
    # P = 1: the whole model is one stage; no message leaves the rank
    schedule = build_method_schedule(method, 1, 2, num_minibatches=3)
    options = method_options(method)
    recipe = stages(1)
    mbs = data(schedule.total_microbatches)
    dist_result = DistributedExecutor(schedule, recipe(), loss_fn=F.cross_entropy,
                                      optimizer_factory=OPTIMIZER, method_options=options,
                                      ).run(mbs)
    local = LocalExecutor(schedule, recipe(), loss_fn=F.cross_entropy,
                          optimizer_factory=OPTIMIZER, method_options=options)
    local_result = local.run(mbs)
    assert dist_result.loss_by_microbatch == local_result.loss_by_microbatch
    for name, value in local.workers[0].module.state_dict().items():
        assert torch.equal(dist_result.state_dicts[0][name], value)


def test_checkpoints_need_checkpoints_true_and_say_so(one_rank_group):
    schedule = build_method_schedule("gpipe", 1, 2, num_minibatches=1)
    with DistributedExecutor(schedule, stages(1)(), loss_fn=F.cross_entropy,
                             optimizer_factory=OPTIMIZER) as executor:
        with pytest.raises(NotImplementedError, match="create it with checkpoints=True"):
            executor.state_dict()


def test_every_parameter_groups_learning_rate_is_reported(one_rank_group):
    schedule = build_method_schedule("pipemare", 1, 2, num_minibatches=3)
    options = method_options("pipemare")

    def two_groups(params):
        return torch.optim.SGD([{"params": params[0::2], "lr": 0.1},
                                {"params": params[1::2], "lr": 0.01}])

    mbs = data(schedule.total_microbatches)
    with DistributedExecutor(schedule, stages(1)(), loss_fn=F.cross_entropy,
                             optimizer_factory=two_groups, method_options=options) as executor:
        rank = executor.run(mbs)
    local = LocalExecutor(schedule, stages(1)(), loss_fn=F.cross_entropy,
                          optimizer_factory=two_groups, method_options=options).run(mbs)
    assert rank.group_learning_rates[0] == local.group_learning_rates[0]
    assert [len(groups) for groups in rank.group_learning_rates[0]] == [2, 2, 2]


def test_stages_on_one_rank_hand_messages_over_in_memory(one_rank_group):
    # an interleaved schedule with P=1 and 3 chunks: three virtual stages on rank 0
    from pipemare_lite.schedules.builders.interleaved import interleaved

    schedule = interleaved(1, 2, 3, 2)
    mbs = data(schedule.total_microbatches)
    recipe = stages(3)
    executor = DistributedExecutor(schedule, recipe(), loss_fn=F.cross_entropy,
                                   optimizer_factory=OPTIMIZER)
    result = executor.run(mbs)
    local = LocalExecutor(schedule, recipe(), loss_fn=F.cross_entropy,
                          optimizer_factory=OPTIMIZER).run(mbs)
    assert result.loss_by_microbatch == local.loss_by_microbatch
    assert result.versions == local.trace.extra["versions"]


class CountedStage(torch.nn.Module):
    """A stage that counts its forward calls; ``mode`` picks what its forward does."""

    def __init__(self, mode: str):
        super().__init__()
        self.linear = torch.nn.Linear(6, 6)
        self.mode, self.calls = mode, 0

    def forward(self, x):
        type(self).calls += 1  # on the class: the probe runs copies of the module
        if self.mode == "bug":
            raise ValueError("a bug in the user's stage")
        y = self.linear(x)
        if self.mode == "reads values" and y.sum() > 1e9:  # data-dependent Python control
            return y * 0.5
        if self.mode == "cpu constant":
            return y + torch.ones(6)  # made in forward, on the CPU, not on the input's device
        return y


def interleaved_with(stage: torch.nn.Module):
    """Three virtual stages on rank 0; ``stage`` is the middle one."""
    from pipemare_lite.schedules.builders.interleaved import interleaved

    modules = stages(3)()
    modules[1] = stage
    return interleaved(1, 2, 3, 2), modules


def test_an_error_in_a_stage_surfaces_from_the_shape_probe_naming_it(one_rank_group):
    CountedStage.calls = 0
    schedule, modules = interleaved_with(CountedStage("bug"))
    executor = DistributedExecutor(schedule, modules, loss_fn=F.cross_entropy,
                                   optimizer_factory=OPTIMIZER)
    with pytest.raises(RuntimeError, match=r"stage 1 on rank 0.*\(3, 6\) torch.float32 input"
                                           r".*ValueError: a bug in the user's stage") as info:
        executor.run(data(schedule.total_microbatches))
    assert isinstance(info.value.__cause__, ValueError)
    assert CountedStage.calls == 1  # not re-run on a CPU copy fed with zeros


@pytest.mark.parametrize("mode, calls", [("reads values", 2), ("cpu constant", 1)])
def test_the_shape_probe_handles_what_meta_tensors_cannot_do(one_rank_group, mode, calls):
    # reading values: no meta kernel can, so a CPU copy runs on zeros (randomness restored);
    # a constant made on the CPU inside forward is moved to meta: the probe stays on meta
    CountedStage.calls = 0
    schedule, modules = interleaved_with(CountedStage(mode))
    mbs = data(schedule.total_microbatches)
    executor = DistributedExecutor(schedule, modules, loss_fn=F.cross_entropy,
                                   optimizer_factory=OPTIMIZER)
    state = torch.get_rng_state()
    table = executor.probe_shapes(mbs)
    assert torch.equal(state, torch.get_rng_state())  # the probe draws no random number
    assert table[(0, ((3, 5), torch.float32))] == ((3, 6), torch.float32)  # into stage 1
    assert table[(1, ((3, 5), torch.float32))] == ((3, 6), torch.float32)  # out of stage 1
    assert CountedStage.calls == calls
    result = executor.run(mbs)
    assert len(result.loss_by_microbatch) == schedule.total_microbatches


def test_stop_and_continue_gives_the_same_numbers(one_rank_group):
    schedule = build_schedule("async", 1, 2, num_minibatches=4)
    mbs = data(schedule.total_microbatches)
    whole = DistributedExecutor(schedule, stages(1)(), loss_fn=F.cross_entropy,
                                optimizer_factory=OPTIMIZER).run(mbs)
    parts = DistributedExecutor(schedule, stages(1)(), loss_fn=F.cross_entropy,
                                optimizer_factory=OPTIMIZER)
    losses = {}
    for k in (1, 2, 4):
        step = parts.run(mbs, stop_after_updates=k)
        assert parts.workers[0].versions.version == k
        losses.update(step.loss_by_microbatch)
    assert parts.finished
    assert losses == whole.loss_by_microbatch


def test_bad_input_is_refused_with_a_message(one_rank_group):
    two_ranks = build_schedule("gpipe", 2, 2)
    with pytest.raises(ValueError, match="2 ranks but the process group has 1"):
        DistributedExecutor(two_ranks, stages(2)(), loss_fn=F.cross_entropy,
                            optimizer_factory=OPTIMIZER)
    one_rank = build_schedule("gpipe", 1, 2, num_minibatches=2)
    with pytest.raises(ValueError, match="1 virtual stages, got 2 stage modules"):
        DistributedExecutor(one_rank, stages(2)(), loss_fn=F.cross_entropy,
                            optimizer_factory=OPTIMIZER)
    executor = DistributedExecutor(one_rank, stages(1)(), loss_fn=F.cross_entropy,
                                   optimizer_factory=OPTIMIZER)
    with pytest.raises(ValueError, match="needs 4 microbatches, got 3"):
        executor.run(data(3))
    with pytest.raises(ValueError, match="unknown fault kind 'explode'"):
        Fault(0, 1, "explode")


def test_an_injected_fault_raises_at_its_position(one_rank_group):
    schedule = build_schedule("gpipe", 1, 2)
    board = StatusBoard(0, 1)
    executor = DistributedExecutor(schedule, stages(1)(), loss_fn=F.cross_entropy,
                                   optimizer_factory=OPTIMIZER, board=board,
                                   fault=Fault(0, 2, "raise"))
    with pytest.raises(RuntimeError, match=r"injected fault on rank 0 before action 2 \(0B0\)"):
        executor.run(data(2))
    assert board.position.index == 2 and board.position.action == "0B0"


class NeverDone:
    """A Work that never completes until released (what a lost message looks like)."""

    def __init__(self):
        self.released = threading.Event()

    def is_completed(self):
        return self.released.is_set()

    def wait(self, timeout=None):
        self.released.wait()
        return True


@pytest.mark.parametrize("polling", [True, False], ids=["nccl-style", "gloo-style"])
def test_a_wait_that_never_ends_times_out_naming_what_it_waited_for(polling):
    board = StatusBoard(3, 4)
    board.at(7, 20, "3F2")
    work = NeverDone()
    start = time.monotonic()
    with pytest.raises(OpTimeoutError, match=r"waited more than 0.3 s for activation X "
                                             r"\(rank 3: action 7/20 \(3F2\)"):
        Waiter(board, 0.3, polling=polling).wait(work, "activation X")
    assert 0.3 <= time.monotonic() - start < 5.0
    work.released.set()  # let the helper thread finish


@pytest.mark.parametrize("polling", [True, False], ids=["nccl-style", "gloo-style"])
def test_an_abort_ends_a_wait(polling):
    board = StatusBoard(1, 2)
    work = NeverDone()
    threading.Timer(0.2, lambda: setattr(board, "abort_reason", "rank 0 failed at X")).start()
    with pytest.raises(PeerFailedError, match="rank 1 stops: rank 0 failed at X"):
        Waiter(board, 30.0, polling=polling).wait(work, "gradient Y")
    work.released.set()


def test_failure_reports_land_in_the_store():
    store = dist.HashStore()
    board = StatusBoard(2, 3, store)
    board.at(4, 9, "2B1")
    board.fail(ValueError("bad value 7"))
    assert read_abort(store) == "rank 2 failed at action 4/9 (2B1) compute: " \
                                "ValueError: bad value 7"
    assert "ValueError: bad value 7" in read_failures(store, 3)[2]
    assert read_positions(store, 3)[2].state == "failed: ValueError: bad value 7"
    # the first reason holds: a later failure does not overwrite it
    assert claim_abort(store, "rank 0 failed too") == read_abort(store)


def test_a_failure_reads_as_a_sentence_wherever_the_rank_was():
    """Before, or between two actions, the position read "rank 1 failed at before its
    first action"; each place now takes its own word."""
    def abort_after(where) -> str:
        store = dist.HashStore()
        board = StatusBoard(1, 2, store)
        where(board)
        board.fail(ValueError("bad"))
        return read_abort(store)

    assert abort_after(lambda b: None) == \
        "rank 1 failed before its first action (setup): ValueError: bad"
    assert abort_after(lambda b: b.at(5, 20, "1F2", "in collective 3", between=True)) == \
        "rank 1 failed with 5/20 actions done (next 1F2), in collective 3: ValueError: bad"
    assert abort_after(lambda b: b.at(5, 20, "1F2")) == \
        "rank 1 failed at action 5/20 (1F2) compute: ValueError: bad"


class BrokenWork:
    """A Work whose wait fails the way the transport fails when a peer is gone."""

    def __init__(self, text: str):
        self.text = text

    def is_completed(self):
        return True

    def wait(self, timeout=None):
        raise RuntimeError(self.text)


def test_an_error_is_an_echo_by_where_it_came_from_not_by_its_words():
    from pipemare_lite.engine.distributed import faults

    # a stage's own error is a cause even when its text mentions NCCL or a closed connection
    for text in ("NCCL is not what failed here", "Connection reset by peer (my own check)"):
        store = dist.HashStore()
        board = StatusBoard(1, 3, store)
        board.fail(RuntimeError(text))
        assert read_abort(store).startswith("rank 1 failed before its first action")
        assert not faults.is_communication_error_text(read_failures(store, 3)[1])
    # what the transport raises while waiting for a message is the echo of a peer's failure,
    # whatever the library's words
    for polling in (True, False):
        for text in ("Connection reset by peer", "pair.cc:537 Read error"):
            store = dist.HashStore()
            board = StatusBoard(2, 3, store)
            waiter = Waiter(board, 5.0, polling=polling)
            with pytest.raises(faults.PeerConnectionError, match=text) as info:
                waiter.wait(BrokenWork(text), "activation of stage 1 microbatch 0")
            assert isinstance(info.value.__cause__, RuntimeError)
            assert faults.is_communication_error(info.value)
            board.fail(info.value)
            assert read_abort(store) is None  # an echo does not claim the abort
            assert faults.is_communication_error_text(read_failures(store, 3)[2])
            waiter.close()
