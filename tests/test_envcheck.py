"""The environment check of chapter 00: what torch sees, and what the device count changes."""

from __future__ import annotations

import os

import torch

from pipemare_lite.book.envcheck import EnvReport, report


def _report(gpus: list[str], mps: bool = False) -> EnvReport:
    return EnvReport(
        python="3.11.0",
        platform="Linux x86_64",
        torch_version="2.13.0",
        cuda_build="12.8" if gpus else None,
        cpu_count=8,
        torch_threads=4,
        gpus=gpus,
        mps=mps,
    )


def test_report_matches_what_torch_and_the_os_say():
    env = report()
    assert env.torch_version == torch.__version__
    assert env.cuda_build == torch.version.cuda
    assert env.cpu_count == os.cpu_count()
    assert env.torch_threads == torch.get_num_threads()
    assert env.gpu_count == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert env.devices[0] == "cpu"


def test_device_list_follows_the_gpus_seen():
    assert _report([]).devices == ["cpu"]
    assert _report(["A", "B"], mps=False).devices == ["cpu", "cuda:0", "cuda:1"]
    assert _report([], mps=True).devices == ["cpu", "mps"]


def test_what_changes_depends_on_the_gpu_count():
    none, one, two = (_report(g).what_it_changes() for g in ([], ["A"], ["A", "B"]))
    assert len({none, one, two}) == 3
    assert "gloo" in none and "No GPU" in none
    assert "cuda:0" in one
    assert "2 GPUs" in two and "torchrun --nproc-per-node P" in two


def test_printed_report_names_every_fact():
    text = str(_report(["NVIDIA H200"]))
    for fact in ("3.11.0", "2.13.0 (CUDA build 12.8)", "8 (torch uses 4 threads)",
                 "cuda:0 NVIDIA H200", "engine devices: cpu, cuda:0"):  # fmt: skip
        assert fact in text, fact
    assert "(CPU build)" in str(_report([]))
    assert max(len(line) for line in text.splitlines()) <= 88
