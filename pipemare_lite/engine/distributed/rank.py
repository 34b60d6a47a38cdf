"""This process's place in a distributed job, and its way to the job's store (chapter 11).

:func:`current` tells a worker (and ``fit(..., executor="dist")``) which rank it is, on which
device, with which status board; the launcher (:mod:`.launch`) and torchrun's support
(:mod:`.torchrun`) both set it and both reach the job's key-value store with
:func:`connect_store`, so neither imports the other for it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from pipemare_lite.engine.distributed import faults


@dataclass
class RankInfo:
    """What a worker function knows about its place in the job.

    Attributes:
        rank, world_size, local_rank: as in ``torch.distributed`` / ``torchrun``.
        backend: "gloo" or "nccl".
        device: ``torch.device("cpu")`` with gloo, ``cuda:<local_rank>`` with NCCL.
        board: this rank's :class:`~pipemare_lite.engine.distributed.faults.StatusBoard`.
        op_timeout: seconds any single wait on a message may take.
        placement: the rank's :class:`~pipemare_lite.engine.placement.Placement`
            (device, backend, where weights, optimizer state and messages live).
    """

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: Any
    board: faults.StatusBoard
    op_timeout: float
    placement: Any = None


_CURRENT: RankInfo | None = None


def current() -> RankInfo | None:
    """This process's :class:`RankInfo` when it was started by
    :func:`~pipemare_lite.engine.distributed.launch.launch` or joined a ``torchrun`` job with
    :func:`~pipemare_lite.engine.distributed.launch.init_from_env`; None otherwise."""
    return _CURRENT


def make_current(info: RankInfo) -> RankInfo:
    """Record ``info`` as this process's place in its job (the launcher's and torchrun's
    join call this once the process group exists); returns it."""
    global _CURRENT
    _CURRENT = info
    return info


def connect_store(addr: str, port: int, seconds: float):
    """A client of the job's ``TCPStore`` at ``addr:port`` (connect timeout ``seconds``)."""
    return dist.TCPStore(addr, port, is_master=False,
                         timeout=datetime.timedelta(seconds=seconds))
