"""Recording levels (pipemare_lite.engine.recording): what a run records never changes what it
trains. Every method is trained under every level and compared bitwise (losses, learning
rates, final weights); what two levels both record is equal, bitwise."""

import dataclasses

import pytest
import torch

from pipemare_lite import fit
from pipemare_lite.engine import LocalExecutor
from pipemare_lite.engine.recording import RECORDINGS, Recording, recording
from pipemare_lite.schedules import build_schedule
from pipemare_lite.training.datasets import digits
from pipemare_lite.training.models import mlp, small_resnet
from pipemare_lite.training.partition import partition

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons

LEVELS = tuple(RECORDINGS)  # losses, history, full

#: every weight mode and every PipeMare switch (T1, T2, warm-up), plus interleaving (a rank
#: with two stages), the split backward (zb-h1) and methods with hooks of their own
CASES = {
    "gpipe": {}, "1f1b": {}, "interleaved": {}, "zb-h1": {},
    "pipedream": {}, "2bw": {}, "async": {},
    "async+T1": {"method": "async", "t1": True},
    "async+T2": {"method": "async", "t2": True},
    "pipemare": {},
    "pipemare-W": {"method": "pipemare", "warmup": 3},
    "wpred": {}, "dc": {},
}


def _small_digits():
    data = digits()
    return dataclasses.replace(data, x_train=data.x_train[:192], y_train=data.y_train[:192])


DATA = _small_digits()


def _train(case: str, record: str, model=None, lr=0.05):
    options = dict(CASES[case])
    method = options.pop("method", case)
    model = model if model is not None else mlp(64, 32, 4, 10, seed=3)
    history = fit(model, DATA, method=method, num_stages=2, num_microbatches=4, batch_size=32,
                  epochs=2, lr=lr, momentum=0.9, lr_schedule="cosine", progress=False,
                  eval_every=5, record=record, **options)
    weights = [t.detach().clone() for t in model.state_dict().values()]
    return history, weights


def _same_bits(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x.view(torch.int32), y.view(torch.int32))
                                    if x.dtype == torch.float32 else torch.equal(x, y)
                                    for x, y in zip(a, b))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_level_trains_the_same_numbers_bitwise(case):
    runs = {level: _train(case, level) for level in LEVELS}
    full, full_weights = runs["full"]
    assert full.steps == 12 and not full.diverged
    for level, (history, weights) in runs.items():
        assert history.loss == full.loss, level  # floats compared exactly
        assert history.stage_lr_by_group == full.stage_lr_by_group, level
        assert history.evals == full.evals, level
        assert history.forward_delay == full.forward_delay, level
        assert history.forward_delay_max == full.forward_delay_max, level
        assert _same_bits(weights, full_weights), level
    history = runs["history"][0]  # the default keeps what the history shows, exactly
    assert history.stage_update_norm == full.stage_update_norm
    assert history.memory_bytes == full.memory_bytes
    assert history.memory_bytes_by_stage == full.memory_bytes_by_stage
    assert full.memory_bytes["activations"] > 0
    cheapest = runs["losses"][0]
    assert cheapest.memory_bytes == {} and all(not n for n in cheapest.stage_update_norm)


@pytest.mark.parametrize("method", ["1f1b", "async"])
def test_levels_agree_on_a_resnet(method):
    """Conv2d and GroupNorm save their weights themselves (Linear a view): the same there."""
    runs = {level: _train(method, level, small_resnet(4, 2, seed=1)) for level in LEVELS}
    full, weights = runs["full"]
    for level, (history, other) in runs.items():
        assert history.loss == full.loss and _same_bits(other, weights), level
    assert runs["history"][0].memory_bytes == full.memory_bytes
    assert runs["history"][0].stage_update_norm == full.stage_update_norm


@pytest.mark.parametrize("case", ["async", "pipemare"])
def test_a_diverging_run_stops_in_the_same_state_at_every_level(case):
    runs = {level: _train(case, level, lr=40.0) for level in LEVELS}
    full, weights = runs["full"]
    assert full.diverged
    for level, (history, other) in runs.items():
        assert history.divergence == full.divergence, level
        # repr: every float exactly, and nan equal to nan
        assert repr((history.loss, history.evals)) == repr((full.loss, full.evals)), level
        assert _same_bits(other, weights), level  # NaN weights: compared as bits
    assert repr(runs["history"][0].stage_update_norm) == repr(full.stage_update_norm)


def test_the_executor_records_what_its_level_asks():
    schedule = build_schedule("1f1b", 2, 2, num_minibatches=3)
    mbs = [(torch.randn(4, 8), torch.randint(0, 3, (4,))) for _ in range(6)]
    results = {}
    for level in LEVELS:
        stages = partition(mlp(8, 8, 2, 3, seed=0), 2)
        executor = LocalExecutor(schedule, stages, loss_fn=torch.nn.functional.cross_entropy,
                                 optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=0.1),
                                 record=level)
        results[level] = executor.run(mbs)
    full, history, cheapest = results["full"], results["history"], results["losses"]
    assert full.trace is not None and len(full.trace.entries) == 2 * (2 * 2 + 1) * 3
    assert full.bytes_over_time and full.forward_versions
    assert history.trace is None and not history.bytes_over_time
    assert history.peak_bytes == full.peak_bytes and history.update_norms == full.update_norms
    assert history.peak_bytes_by_rank == full.peak_bytes_by_rank
    assert cheapest.peak_bytes == [] and cheapest.update_norms == {0: [], 1: []}
    for result in results.values():
        assert result.losses == full.losses
        assert result.forward_delays == full.forward_delays == {0: [0] * 6, 1: [0] * 6}


def test_a_checkpoint_between_forward_and_backward_needs_saved_tensors():
    """A sync forward run without hooks kept no saved tensors: saving it then is refused
    with a message saying what to record; the default level ("full") can."""
    schedule = build_schedule("gpipe", 2, 2, num_minibatches=1)
    mbs = [(torch.randn(4, 8), torch.randint(0, 3, (4,))) for _ in range(2)]
    lean = Recording(trace=False, saved_tensors=False)
    executor = LocalExecutor(schedule, partition(mlp(8, 8, 2, 3, seed=0), 2),
                             loss_fn=torch.nn.functional.cross_entropy,
                             optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=0.1),
                             record=lean)
    executor.workers[0].forward(0, mbs[0][0])  # the first forward of a shape keeps them
    executor.workers[0].forward(1, mbs[1][0])  # later ones do not
    with pytest.raises(RuntimeError, match=r"microbatch\(es\) \[1\].*saved_tensors=True"):
        executor.state_dict()


def test_levels_by_name():
    assert recording("full") == Recording()
    assert recording(RECORDINGS["losses"]) is RECORDINGS["losses"]
    with pytest.raises(ValueError, match="losses, history, full"):
        recording("everything")
    with pytest.raises(ValueError, match="unknown recording level"):
        fit(mlp(64, 8, 2, 10), DATA, method="1f1b", num_stages=2, num_microbatches=2,
            batch_size=32, epochs=1, lr=0.1, record="all")
