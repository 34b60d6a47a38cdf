"""What this machine offers the book: torch version, devices, CPU threads (chapter 00).

``report()`` answers the questions a reader has before chapter 01: is torch importable, which
devices can the engine use, how many CPU threads will a chapter get, and what does having
no GPU, one GPU or several change. Torch is imported inside :func:`report`, so importing
this module stays cheap.
"""

from __future__ import annotations

import os
import platform
import sys
import textwrap
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnvReport:
    """The environment as the engine sees it; ``str()`` is the text the book prints."""

    python: str
    platform: str
    torch_version: str
    cuda_build: str | None
    cpu_count: int
    torch_threads: int
    gpus: list[str] = field(default_factory=list)
    mps: bool = False

    @property
    def gpu_count(self) -> int:
        """Number of CUDA devices visible to this process."""
        return len(self.gpus)

    @property
    def devices(self) -> list[str]:
        """Device strings the local executor can place stages on."""
        cuda = [f"cuda:{i}" for i in range(self.gpu_count)]
        return ["cpu", *cuda, *(["mps"] if self.mps else [])]

    def what_it_changes(self) -> str:
        """One paragraph: what the device count means for running the book."""
        if self.gpu_count == 0:
            return (
                "No GPU: every chapter runs on the CPU, as it was written to. Pipeline stages "
                "are placed on the CPU (several stages share it) and the distributed engine "
                "uses one process per stage with the gloo backend."
            )
        if self.gpu_count == 1:
            return (
                "One GPU: chapters still default to the CPU so that results match the book; "
                "you may put all stages on cuda:0, which is faster but not parallel across "
                "stages. Real pipelining across devices needs several GPUs (or processes)."
            )
        return (
            f"{self.gpu_count} GPUs: the local executor can place stage i on cuda:i, and "
            "`torchrun --nproc-per-node P -m pipemare_lite.training ...` runs one process per "
            "stage with NCCL. Chapters still default to the CPU so results match the book."
        )

    def lines(self) -> list[str]:
        """The report as ``label: value`` lines."""
        gpus = ", ".join(f"cuda:{i} {name}" for i, name in enumerate(self.gpus)) or "none"
        return [
            f"python        : {self.python} ({self.platform})",
            f"torch         : {self.torch_version}"
            + (f" (CUDA build {self.cuda_build})" if self.cuda_build else " (CPU build)"),
            f"CPU cores     : {self.cpu_count} (torch uses {self.torch_threads} threads)",
            f"CUDA devices  : {gpus}",
            f"Apple MPS     : {'available' if self.mps else 'no'}",
            f"engine devices: {', '.join(self.devices)}",
        ]

    def __str__(self) -> str:
        return "\n".join(self.lines() + ["", textwrap.fill(self.what_it_changes(), width=88)])


def report() -> EnvReport:
    """Inspect this process's environment. Needs torch; raises ImportError naming the fix."""
    try:
        import torch
    except ImportError as exc:  # the one thing the reader can act on
        raise ImportError(
            "torch is not importable in this kernel: run `bash scripts/bootstrap.sh` and pick "
            f"the kernel of .venv (python: {sys.executable})"
        ) from exc
    gpus = []
    if torch.cuda.is_available():
        gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    mps_backend = getattr(torch.backends, "mps", None)
    mps = bool(mps_backend and mps_backend.is_available())
    return EnvReport(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        torch_version=torch.__version__,
        cuda_build=torch.version.cuda,
        cpu_count=os.cpu_count() or 1,
        torch_threads=torch.get_num_threads(),
        gpus=gpus,
        mps=mps,
    )


if __name__ == "__main__":
    print(report())
