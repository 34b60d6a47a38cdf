"""Memory per device (rank) in fit's history, each stage's peak kept as a breakdown (issue 48).

What is compared: for every rank r and byte kind, ``history.memory_bytes_by_rank[r][kind]``
equals the largest value, over every action of rank r in a run of the same schedule on the
same data, of the SUM over r's stages of what each stage holds of that kind right after
that action (a stage not yet run holds its weights only). That sum is rebuilt here from the
executor's ``bytes_over_time`` (what each stage holds after each of its actions, in
execution order), not from the executor's own per-rank peaks. For a V the sum of the stage
peaks overstates a rank's peak (its two stages do not hold activations at their peaks at
the same moment); with one stage per rank rank and stage peaks coincide.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pipemare_lite.engine import LocalExecutor
from pipemare_lite.schedules import build_schedule
from pipemare_lite.training.data_feed import EpochMicrobatches
from pipemare_lite.training.datasets import Dataset, digits
from pipemare_lite.training.loop import fit
from pipemare_lite.training.models import mlp
from pipemare_lite.training.partition import partition

pytestmark = pytest.mark.usefixtures("one_thread")
P, N, BATCH, SAMPLES = 2, 4, 16, 64


@pytest.fixture(scope="module")
def small_data() -> Dataset:
    d = digits(seed=0)
    return Dataset("digits-small", d.x_train[:SAMPLES], d.y_train[:SAMPLES], d.x_test[:40],
                   d.y_test[:40], 10, d.input_shape, d.provenance)


def _rank_peaks_from_bytes_over_time(schedule, stages, over_time):
    """``[rank][kind]``: the largest sum over the rank's stages after any of its actions."""
    now = {s: {"weights": sum(p.numel() * p.element_size() for p in stage.parameters())}
           for s, stage in enumerate(stages)}  # before its first action: weights only
    peaks = [{} for _ in range(schedule.num_ranks)]
    for _, stage, held in over_time:
        now[stage] = dict(held)
        rank = schedule.rank_of(stage)
        for kind in held:
            total = sum(now[s].get(kind, 0) for s in schedule.stages_of(rank))
            peaks[rank][kind] = max(peaks[rank].get(kind, 0), total)
    return peaks


@pytest.mark.parametrize("name", ["zb-v", "dualpipev", "interleaved", "1f1b"])
def test_history_memory_per_rank_is_the_peak_of_the_ranks_stages_held_together(
        name, small_data):
    model = mlp(64, 16, 4, 10, seed=0)
    history = fit(model, small_data, schedule=name, num_stages=P, num_microbatches=N,
                  batch_size=BATCH, epochs=1, lr=0.1, momentum=0.9)
    steps = SAMPLES // BATCH
    chunks = history.config["chunks"]
    # the same run again, every byte recorded after every action
    schedule = build_schedule(name, P, N, chunks=chunks, num_minibatches=steps)
    stages = partition(mlp(64, 16, 4, 10, seed=0), P * chunks)
    run = LocalExecutor(schedule, stages, loss_fn=F.cross_entropy, record="full",
                        optimizer_factory=lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)
                        ).run(EpochMicrobatches(small_data, BATCH, N, 0, 1))
    assert list(run.loss_by_microbatch.values())[-N:] and history.steps == steps
    want = _rank_peaks_from_bytes_over_time(schedule, stages, run.bytes_over_time)
    assert history.memory_bytes_by_rank == want
    assert history.memory_bytes == {k: sum(r[k] for r in want) for k in want[0]}
    by_stage = history.memory_bytes_by_stage
    assert len(by_stage) == P * chunks and len(history.memory_bytes_by_rank) == P
    summed = {k: sum(s[k] for s in by_stage) for k in by_stage[0]}
    if chunks == 1:  # rank and stage coincide
        assert history.memory_bytes == summed and history.memory_bytes_by_rank == by_stage
    else:  # weights add up; activations need not peak together (zb-v: they do not)
        assert history.memory_bytes["weights"] == summed["weights"]
        assert history.memory_bytes["activations"] <= summed["activations"]
        if name == "zb-v":
            assert history.memory_bytes["activations"] < summed["activations"]


def test_a_history_without_rank_peaks_still_reads(small_data):
    """Histories and checkpoints written before the field read back (empty / the stages')."""
    from pipemare_lite.training.history import History, HistoryRecorder

    old = History().to_dict()
    old.pop("memory_bytes_by_rank")
    assert History.from_dict(old).memory_bytes_by_rank == []
    recorder = HistoryRecorder(History(), 2, 2, 2)
    state = recorder.state()
    state.pop("rank_peaks")
    state["peaks"] = [{"weights": 4}, {"weights": 8}]
    recorder.load(state)
    assert recorder.finish().memory_bytes_by_rank == [{"weights": 4}, {"weights": 8}]
