"""The action interpreter both executors share (pipemare_lite/engine/interpreter.py).

The interpreter is checked against two independent references: the communication plan
(every tensor it hands on is one of the plan's messages, each exactly once, none missing),
and the local executor itself, which must give the same numbers bitwise when the same
actions are run in another dependency-respecting order (``execution_order``, not the
executor's round-robin).
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.engine.build_worker import build_stage_worker
from pipemare_lite.engine.interpreter import InProcessTransport, Interpreter
from pipemare_lite.methods.registry import MethodOptions
from pipemare_lite.schedules import build_schedule
from pipemare_lite.schedules.actions import BACKWARD, FORWARD, INPUT_GRAD, UPDATE, WEIGHT_GRAD
from pipemare_lite.schedules.comm_plan import plan_communication
from pipemare_lite.schedules.validation import execution_order
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import partition

OPTIMIZER = functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9)


def _data(count: int):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g))
            for _ in range(count)]


class _SpyTransport(InProcessTransport):
    """The in-process transport, noting every message it is handed."""

    def __init__(self, workers) -> None:
        super().__init__(workers)
        self.delivered: list[tuple[str, int, int]] = []

    def deliver(self, action, message) -> None:
        if message is not None:
            self.delivered.append(message[:3])
        super().deliver(action, message)


def _by_hand(schedule, stages, mbs):
    """Run every action through one Interpreter in ``execution_order``'s order."""
    workers = [build_stage_worker(schedule, s, m, loss_fn=F.cross_entropy,
                                  optimizer_factory=OPTIMIZER, options=MethodOptions(),
                                  delays=None)
               for s, m in enumerate(stages)]
    transport = _SpyTransport(workers)
    transport.microbatches = mbs
    interpreter = Interpreter(workers, len(workers) - 1, transport)
    for rank, position in execution_order(schedule):
        start, end = interpreter.step(schedule.ranks[rank][position])
        assert start <= end
    return workers, transport


def test_the_table_has_a_handler_for_every_action_kind():
    interpreter = Interpreter([], 0, None)
    assert set(interpreter.table) == {FORWARD, BACKWARD, INPUT_GRAD, WEIGHT_GRAD, UPDATE}


@pytest.mark.parametrize("name", ["1f1b", "async", "zb-h1", "interleaved"])
def test_interpreter_sends_exactly_the_plans_messages_and_matches_the_executor(name):
    torch.set_num_threads(1)
    P, N, K = 2, 4, 2
    extra = {"chunks": 2} if name == "interleaved" else {}
    schedule = build_schedule(name, P, N, num_minibatches=K, **extra)
    S = schedule.num_virtual_stages
    model = mlp(6, 8, 2 * S, 3, seed=0)
    mbs = _data(schedule.total_microbatches)

    workers, transport = _by_hand(schedule, partition(model, S), mbs)
    plan = plan_communication(schedule)
    assert sorted(transport.delivered) == sorted(plan.messages)  # each once, none missing
    assert not transport.activations and not transport.gradients and not transport.targets

    executor = LocalExecutor(schedule, partition(mlp(6, 8, 2 * S, 3, seed=0), S),
                             loss_fn=F.cross_entropy, optimizer_factory=OPTIMIZER)
    result = executor.run(mbs)
    # the last stage keeps its losses as tensors until its records are taken (issue 44)
    by_hand = workers[-1].take_records().loss_by_microbatch
    assert by_hand and result.loss_by_microbatch == dict(sorted(by_hand.items()))
    for ours, theirs in zip(workers, executor.workers):
        for a, b in zip(ours.params, theirs.params):
            assert torch.equal(a, b)
