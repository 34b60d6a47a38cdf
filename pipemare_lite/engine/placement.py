"""Where everything lives: the device of each rank, the backend, and what moves where.

One place for the decisions the launcher and the executors used to make each on their own
(chapter 11). The decisions depend only on a few facts (how many CUDA devices this
machine shows, which local rank this process is, what was asked for), passed in
explicitly, so tests check them on a CPU machine with a fake device count and a GPU run
only confirms them.

=================  =============================  =====================================
what               CPU (gloo)                     CUDA (NCCL, one process per GPU)
=================  =============================  =====================================
compute device     ``cpu``                        ``cuda:<local rank>``
backend            ``gloo``                       ``nccl``
stage weights      CPU                            the rank's GPU (moved at build)
optimizer state    CPU                            the rank's GPU (made lazily, next to
                                                  the weights it belongs to)
sent tensors       CPU buffers                    GPU buffers (NCCL reads GPU memory)
pinned staging     no (plain memory is as fast)   no (nothing goes through the host)
=================  =============================  =====================================

One mixed case is allowed: ``backend="gloo"`` with CUDA compute (a GPU machine without a
working NCCL). Gloo's point-to-point sends take CPU tensors, so messages go through page-
locked (pinned) CPU buffers, the one place pinning helps: the device-to-host copy is a
single DMA and can overlap compute. NCCL without CUDA is refused.

The local executor (one process) puts stage s on ``cuda:(s mod G)`` with G GPUs
(:func:`local_stage_devices`): several stages per GPU when there are fewer GPUs than stages.
"""

from __future__ import annotations

from dataclasses import dataclass

#: What a caller may ask for.
DEVICE_REQUESTS = ("auto", "cpu", "cuda")
BACKENDS = ("gloo", "nccl")


@dataclass(frozen=True)
class Placement:
    """One rank's placement decisions (see the module docstring's table).

    Attributes:
        rank, local_rank: the rank, and its index on its machine.
        backend: ``"gloo"`` or ``"nccl"``.
        device: where the rank computes (``"cpu"`` or ``"cuda:<i>"``).
        weights, optimizer_state: where the stage weights and the optimizer state live.
        messages: where send and receive buffers live.
        pinned_messages: receive and send through pinned CPU buffers (gloo with CUDA only).
    """

    rank: int
    local_rank: int
    backend: str
    device: str
    weights: str
    optimizer_state: str
    messages: str
    pinned_messages: bool

    def to_dict(self) -> dict:
        """Plain values (for a report)."""
        return dict(self.__dict__)


def cuda_device_count() -> int:
    """CUDA devices this process sees (0 without CUDA: the CPU build never touches CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _check_backend(backend: str | None) -> None:
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not supported; allowed: 'gloo', 'nccl', None")


def choose_backend(local_world_size: int, backend: str | None = None,
                   cuda_devices: int | None = None) -> str:
    """``backend`` if given; else NCCL when this machine has a CUDA device per local rank,
    else gloo. ``cuda_devices`` defaults to what torch sees."""
    _check_backend(backend)
    count = cuda_device_count() if cuda_devices is None else cuda_devices
    return backend or ("nccl" if count >= max(local_world_size, 1) else "gloo")


def plan(rank: int, local_rank: int, local_world_size: int, *, device: str = "auto",
         backend: str | None = None, cuda_devices: int | None = None) -> Placement:
    """Decide one rank's placement.

    Args:
        rank, local_rank, local_world_size: as torchrun sets them.
        device: ``"auto"`` (CUDA when there is a device per local rank, else CPU),
            ``"cpu"`` or ``"cuda"``.
        backend: ``"gloo"``, ``"nccl"`` or None (NCCL with CUDA, gloo on CPU).
        cuda_devices: CUDA devices on this machine (default: what torch sees; tests pass
            a number to check the decisions without a GPU).

    Raises:
        ValueError: an unknown request, CUDA asked for where there is none (or fewer
            devices than local ranks), or NCCL without CUDA.
    """
    if device not in DEVICE_REQUESTS:
        raise ValueError(f"device {device!r} is not supported; allowed: {DEVICE_REQUESTS}")
    _check_backend(backend)
    count = cuda_device_count() if cuda_devices is None else cuda_devices
    enough = count >= max(local_world_size, 1) and local_rank < count
    if device == "cuda" and not enough:
        raise ValueError(f"device 'cuda' needs a CUDA device per local rank: this machine "
                         f"has {count} for {local_world_size} local rank(s)")
    use_cuda = enough and backend != "gloo" if device == "auto" else device == "cuda"
    if backend == "nccl" and not use_cuda:
        raise ValueError(f"backend 'nccl' needs CUDA devices (found {count} for "
                         f"{local_world_size} local rank(s)); use 'gloo' on the CPU")
    backend = backend or ("nccl" if use_cuda else "gloo")
    where = f"cuda:{local_rank}" if use_cuda else "cpu"
    return Placement(rank, local_rank, backend, where, weights=where, optimizer_state=where,
                     messages=message_device(backend, where),
                     pinned_messages=pin_messages(backend, where))


def _kind(device) -> str:
    return getattr(device, "type", str(device).split(":")[0])  # "cuda:1" -> "cuda"


def message_device(backend: str, device) -> str:
    """Where a rank's send and receive buffers live: the compute device, except with gloo
    (CPU buffers)."""
    return "cpu" if backend == "gloo" or _kind(device) == "cpu" else str(device)


def pin_messages(backend: str, device) -> bool:
    """True when messages should go through pinned CPU buffers (gloo with a CUDA device)."""
    return backend == "gloo" and _kind(device) == "cuda"


def local_stage_devices(num_stages: int, cuda_devices: int | None = None) -> list[str]:
    """Devices for the local executor's stages: ``cuda:(s mod G)`` with G GPUs, else CPU."""
    if num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {num_stages}")
    count = cuda_device_count() if cuda_devices is None else cuda_devices
    if count < 1:
        return ["cpu"] * num_stages
    return [f"cuda:{s % count}" for s in range(num_stages)]
