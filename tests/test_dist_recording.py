"""Recording levels on the distributed executor (issue #35): ``fit(executor="dist",
record=...)`` trains the same numbers bitwise at every level (and the same as the local
executor); a level records only what it asks for. Two gloo ranks on loopback, launched
once for every case, bounded time, every process ended (launch() joins them)."""

from __future__ import annotations

import pytest
import torch

from pipemare_lite.engine.distributed.launch import launch
from pipemare_lite.engine.recording import RECORDINGS
from tests.dist_workers import fit_at_every_recording_level
from tests.timeouts import hard_time_limit

pytestmark = [pytest.mark.dist, pytest.mark.usefixtures("one_thread")]

METHODS = ("1f1b", "pipemare")


def _same_bits(a, b) -> bool:
    return len(a) == len(b) and all(torch.equal(x.view(torch.int32), y.view(torch.int32))
                                    for x, y in zip(a, b))


@pytest.fixture(scope="module")
def runs():
    with hard_time_limit(300):
        ranks = launch(fit_at_every_recording_level, 2, args=(METHODS,), timeout=280)
    return ranks[0], ranks[1]


@pytest.mark.parametrize("method", METHODS)
def test_every_level_trains_the_same_numbers_bitwise(runs, method):
    first, second = runs
    full, full_weights = first[(method, "full")]
    assert len(full["loss"]) == 8 and not full["diverged"]
    for level in RECORDINGS:
        for rank_runs in runs:  # every rank gathered the same history and weights
            history, weights = rank_runs[(method, level)]
            for key in ("loss", "evals", "stage_lr_by_group", "forward_delay",
                        "forward_delay_max"):
                assert history[key] == full[key], (level, key)
            assert _same_bits(weights, full_weights), level
    history = first[(method, "history")][0]  # the default: what the history shows
    assert history["stage_update_norm"] == full["stage_update_norm"]
    assert history["memory_bytes_by_stage"] == full["memory_bytes_by_stage"]
    assert full["memory_bytes"]["activations"] > 0
    cheapest = first[(method, "losses")][0]
    assert cheapest["memory_bytes"] == {}
    assert all(not norms for norms in cheapest["stage_update_norm"])


@pytest.mark.parametrize("method", METHODS)
def test_the_distributed_levels_equal_the_local_executor(runs, method):
    from pipemare_lite import fit
    from pipemare_lite.training.datasets import Dataset, digits
    from pipemare_lite.training.models import mlp

    d = digits(seed=0)
    data = Dataset("digits-small", d.x_train[:128], d.y_train[:128], d.x_test[:32],
                   d.y_test[:32], 10, d.input_shape, d.provenance)
    model = mlp(64, 16, 4, 10, seed=3)
    local = fit(model, data, method=method, num_stages=2, num_microbatches=4, batch_size=32,
                epochs=2, lr=0.05, momentum=0.9, lr_schedule="cosine", eval_every=3,
                record="losses", progress=False).to_dict()
    history, weights = runs[0][(method, "losses")]
    assert history["loss"] == local["loss"] and history["evals"] == local["evals"]
    assert _same_bits(weights, [t.detach() for t in model.state_dict().values()])
