"""DistributedExecutor's options are one object, DistOptions, or its fields as keywords
(issue 44, item 6): the keywords replace the object's, an unknown one is refused naming the
allowed ones (before any process group is needed)."""

from __future__ import annotations

import pytest
import torch

from pipemare_lite.engine.distributed import DistOptions, DistributedExecutor
from pipemare_lite.schedules import build_schedule


def test_an_unknown_option_is_refused_naming_the_allowed_ones():
    schedule = build_schedule("1f1b", 2, 2)
    with pytest.raises(TypeError, match="unknown options recrod; allowed: board, checkpoints"):
        DistributedExecutor(schedule, [torch.nn.Linear(2, 2)] * 2, loss_fn=None,
                            optimizer_factory=None, recrod="full")
    with pytest.raises(TypeError, match="options must be a DistOptions, got"):
        DistOptions.of({"record": "full"}, {})


def test_keywords_replace_the_objects_fields():
    base = DistOptions(op_timeout=5.0, record="history")
    merged = DistOptions.of(base, {"record": "losses", "rank": 1})
    assert (merged.op_timeout, merged.record, merged.rank) == (5.0, "losses", 1)
    assert DistOptions.of(None, {}) == DistOptions()
    assert base.record == "history"  # frozen: the object given is left alone
