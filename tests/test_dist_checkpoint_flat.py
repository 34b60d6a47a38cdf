"""Checkpoints of a long distributed run stay as small as the run's state (issue 44, item 3).

A checkpointing distributed executor keeps a lazy schedule lazy and plans its messages as
it goes (a RollingPlan), as one without checkpoints does: nothing it holds, and nothing a
checkpoint holds, grows with the run's planned length. Two gloo ranks on loopback, one
thread each, every process ended (launch()); pipemare (async, T2: messages in transit at
every cut) on a lazy schedule of 40 and of 400 minibatches:

- the executor keeps the lazy schedule it was given (its rows are not tuples) and its plan
  is a RollingPlan;
- a checkpoint after the same number of updates has the same size (a few bytes for the
  length itself) at 40 and 400 minibatches (the whole rows, recorded before, made it 4x);
- resumed in a fresh job, it ends where an uninterrupted local run ends, bitwise; and so
  does the same checkpoint written as the distributed executor wrote it before (the whole
  rows as its schedule's record).
"""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.engine.distributed.launch import launch
from pipemare_lite.schedules.repeat import materialized, schedule_key
from tests.dist_checkpoint_workers import lazy_run, lazy_setup, sgd
from tests.test_dist_checkpoint import as_bytes, merged, same_weights
from tests.timeouts import hard_time_limit

pytestmark = [pytest.mark.dist, pytest.mark.usefixtures("one_thread")]

SHORT, LONG, STOP = 40, 400, 5


def test_a_checkpointing_dist_run_stays_lazy_and_its_checkpoint_does_not_grow():
    with hard_time_limit(300):
        saved = {K: launch(lazy_run, 2, args=(K, STOP), timeout=240, num_threads=1)
                 for K in (SHORT, LONG)}
    for K, ranks in saved.items():
        for rank in ranks:
            assert rank["same_schedule"] and not rank["row_is_tuple"], K
            assert rank["plan"] == "RollingPlan", K
            assert rank["in_flight"] <= 8, K  # what PeerProgress holds: the pipeline's depth
    short, long = (saved[K][0]["state"] for K in (SHORT, LONG))
    assert short["activations"] or short["gradients"]  # the cut has messages in transit
    assert abs(len(as_bytes(long)) - len(as_bytes(short))) <= 16
    whole_rows = dict(long, schedule=schedule_key(materialized(lazy_setup(LONG)[0])))
    assert len(as_bytes(whole_rows)) > 3 * len(as_bytes(short))  # what it was before

    schedule, options, stages, mbs = lazy_setup(SHORT)
    assert not isinstance(schedule.ranks[0], (tuple, list))  # lazy: made as it is read
    full = LocalExecutor(schedule, stages, loss_fn=nn.functional.cross_entropy,
                         optimizer_factory=sgd, method_options=options)
    expected = full.run(mbs).loss_by_microbatch
    final = {s: w.module.state_dict() for s, w in enumerate(full.workers)}
    head = merged(saved[SHORT], "losses")
    old_format = dict(short, schedule=schedule_key(materialized(schedule)))
    for state in (short, old_format):
        with hard_time_limit(300):
            resumed = launch(lazy_run, 2, args=(SHORT, None, as_bytes(state)), timeout=240,
                             num_threads=1)
        tail = merged(resumed, "losses")
        assert {**head, **tail} == expected and not set(head) & set(tail)
        same_weights(merged(resumed, "weights"), final)


def test_a_checkpoint_of_another_schedule_is_still_refused():
    """The old-format comparison is no loophole: other rows are refused."""
    state = torch.load(io.BytesIO(as_bytes({"schedule": ("pipemare", [["0F0"], ["1F0"]])})),
                       weights_only=True)
    from pipemare_lite.engine.distributed.checkpoint import same_schedule

    schedule = lazy_setup(SHORT)[0]
    assert not same_schedule(state["schedule"], schedule)
    rows = schedule_key(materialized(schedule))
    assert same_schedule(rows, schedule)
    rows[1][1][-1] = "1U0"
    assert not same_schedule(rows, schedule)
