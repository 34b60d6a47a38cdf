"""Placement decisions (pipemare_lite/engine/placement.py), checked with fake device counts.

No GPU is needed: every decision takes the machine's CUDA device count as an argument, so
these tests state what a GPU machine will do; `scripts/gpu_check.sh` confirms it there.
"""

from __future__ import annotations

import pytest

from pipemare_lite.engine import placement
from pipemare_lite.engine.placement import (
    choose_backend,
    local_stage_devices,
    message_device,
    pin_messages,
    plan,
)


@pytest.mark.parametrize("local_rank", [0, 1, 3])
def test_one_gpu_per_local_rank_gives_nccl_on_that_gpu(local_rank):
    p = plan(4 + local_rank, local_rank, 4, cuda_devices=4)
    assert (p.backend, p.device) == ("nccl", f"cuda:{local_rank}")
    assert p.weights == p.optimizer_state == p.messages == f"cuda:{local_rank}"
    assert p.pinned_messages is False  # NCCL reads GPU memory: nothing goes through the host


@pytest.mark.parametrize("gpus", [0, 1, 3])
def test_fewer_gpus_than_local_ranks_stays_on_the_cpu(gpus):
    p = plan(1, 1, 4, cuda_devices=gpus)
    assert (p.backend, p.device, p.messages, p.pinned_messages) == ("gloo", "cpu", "cpu", False)
    assert p.weights == p.optimizer_state == "cpu"
    assert choose_backend(4, cuda_devices=gpus) == "gloo"
    assert choose_backend(gpus or 1, cuda_devices=gpus) == ("nccl" if gpus else "gloo")


def test_gloo_with_cuda_compute_stages_messages_through_pinned_cpu_buffers():
    p = plan(0, 0, 2, device="cuda", backend="gloo", cuda_devices=2)
    assert (p.device, p.weights, p.optimizer_state) == ("cuda:0", "cuda:0", "cuda:0")
    assert (p.messages, p.pinned_messages) == ("cpu", True)
    # "auto" with gloo asked for keeps the CPU: pinned copies only where CUDA computes
    assert plan(0, 0, 2, backend="gloo", cuda_devices=2).device == "cpu"


def test_message_buffers_follow_the_backend():
    assert message_device("nccl", "cuda:1") == "cuda:1"
    assert message_device("gloo", "cuda:1") == "cpu"
    assert message_device("gloo", "cpu") == "cpu"
    assert pin_messages("gloo", "cuda:0") and not pin_messages("gloo", "cpu")
    assert not pin_messages("nccl", "cuda:0")


def test_local_executor_stages_go_round_robin_over_the_gpus():
    assert local_stage_devices(4, cuda_devices=2) == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert local_stage_devices(3, cuda_devices=1) == ["cuda:0"] * 3
    assert local_stage_devices(2, cuda_devices=0) == ["cpu", "cpu"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"device": "tpu"}, "device 'tpu' is not supported"),
        ({"backend": "mpi"}, "backend 'mpi' is not supported"),
        ({"device": "cuda", "cuda_devices": 1}, "has 1 for 2 local rank"),
        ({"backend": "nccl", "cuda_devices": 0}, "backend 'nccl' needs CUDA devices"),
        ({"device": "cpu", "backend": "nccl", "cuda_devices": 2}, "needs CUDA devices"),
    ],
)
def test_impossible_placements_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        plan(1, 1, 2, **kwargs)


def where_this_rank_computes(info) -> tuple:
    """A launched worker: its placement as the launcher made it."""
    return info.placement.device, str(info.device), info.placement.messages


def test_this_machine_and_the_launcher_agree():
    from pipemare_lite.engine.distributed.launch import choose_backend as launch_choice
    from pipemare_lite.engine.distributed.launch import launch

    count = placement.cuda_device_count()
    assert launch_choice(2) == choose_backend(2, cuda_devices=count)
    placed = launch(where_this_rank_computes, 2, backend="gloo", timeout=120)
    assert placed == [("cpu", "cpu", "cpu")] * 2
    with pytest.raises(ValueError, match="num_stages must be >= 1, got 0"):
        local_stage_devices(0)
