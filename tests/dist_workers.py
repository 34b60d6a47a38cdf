"""Process bodies for multi-process tests (importable by name, as :func:`launch` needs)."""

from __future__ import annotations

import contextlib
import functools
import io
import os
import threading
import time

import torch.distributed as dist

from pipemare_lite.engine.distributed.jobs import dist_worker


def resources_after_each_job(info, jobs) -> list[dict]:
    """Run ``jobs`` one after another in this launch; after each, what the process holds.

    Per job: the Python threads alive (their names), the OS threads of the process (gloo's
    own threads included, Linux only) and whether the launch's process group is still
    initialized. A thread that was just joined may still be listed by the OS for a moment,
    so the OS count is the smallest of several reads over a fifth of a second: a thread that
    stays (a leak) is in every read.
    """
    seen = []
    for job in jobs:
        dist_worker(info, [job])
        seen.append({
            "threads": sorted(t.name for t in threading.enumerate()),
            "os_threads": _settled_os_threads(),
            "default_group_alive": dist.is_initialized(),
        })
    return seen


def _settled_os_threads(reads: int = 10, pause: float = 0.02) -> int | None:
    """The fewest OS threads of this process over ``reads`` reads (None off Linux)."""
    tasks = f"/proc/{os.getpid()}/task"
    if not os.path.isdir(tasks):
        return None
    counts = []
    for _ in range(reads):
        counts.append(len(os.listdir(tasks)))
        time.sleep(pause)
    return min(counts)


def verbose_gpipe_output(info, via_env: bool = False) -> str:
    """Run a tiny P=2 GPipe with ``p2p_verbose=True`` and the environment variable unset, or
    (``via_env``) with the argument left at None and ``PIPEMARE_P2P_VERBOSE=1``; return what
    this rank printed."""
    import torch
    import torch.nn.functional as F

    from pipemare_lite.engine.distributed.executor import DistributedExecutor
    from pipemare_lite.schedules import build_schedule
    from pipemare_lite.training.models import mlp
    from pipemare_lite.training.partition import partition

    if via_env:
        os.environ["PIPEMARE_P2P_VERBOSE"] = "1"
    else:
        os.environ.pop("PIPEMARE_P2P_VERBOSE", None)
    schedule = build_schedule("gpipe", 2, 2)
    stages = partition(mlp(in_features=4, hidden=4, depth=2, out_features=3, seed=0), 2)
    data = [(torch.ones(2, 4), torch.zeros(2, dtype=torch.long)) for _ in range(2)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), DistributedExecutor(
        schedule, stages, loss_fn=F.cross_entropy,
        optimizer_factory=functools.partial(torch.optim.SGD, lr=0.1), rank=info.rank,
        board=info.board, p2p_verbose=None if via_env else True,
    ) as executor:
        executor.run(data)
    return printed.getvalue()


def watch_abort(info, seconds: float) -> str:
    """Check the side channel's abort flag for ``seconds`` (as every wait on a message
    does); raises PeerFailedError when the run is aborted, else returns "finished"."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        info.board.check()
        time.sleep(0.05)
    return "finished"


def hung_sender(info) -> str:
    """Rank 1 hangs (never sends); rank 0 waits for its message as the transport does."""
    import torch

    from pipemare_lite.engine.distributed.faults import Waiter

    if info.rank == 1:
        time.sleep(60)
        return "rank 1 woke up"
    waiter = Waiter(info.board, info.op_timeout, polling=False)
    waiter.wait(dist.irecv(torch.zeros(1), src=1), "a tensor from rank 1", peer=1)
    return "received"


def fit_with_a_rank_hanging_in_evaluation(info, hung: int = 1, note=None) -> dict:
    """``fit(executor="dist")`` on every rank; rank ``hung`` hangs in its first evaluation
    (outside the schedule, between two runs), as a stuck data loader or a deadlock would,
    after writing ``time.time()`` to the file ``note`` (when given)."""
    from pathlib import Path

    from pipemare_lite.training import loop

    if info.rank == hung:
        def evaluate(self):
            if note is not None:
                Path(note).write_text(repr(time.time()))
            time.sleep(300)  # ended by the watchdog's backstop or the launcher

        loop.TrainingRun.evaluate = evaluate
    return _small_dist_fit(info)


def _small_dist_fit(info) -> dict:
    """1F1B on 64 digits, 3 epochs, one stage per rank, executor dist: the history."""
    from pipemare_lite.training import loop
    from pipemare_lite.training.datasets import Dataset, digits
    from pipemare_lite.training.models import mlp

    d = digits(seed=0)
    data = Dataset("digits-small", d.x_train[:64], d.y_train[:64], d.x_test[:16],
                   d.y_test[:16], 10, d.input_shape, d.provenance)
    history = loop.fit(mlp(64, 8, 2, 10), data, method="1f1b", num_stages=info.world_size,
                       num_microbatches=2, batch_size=16, epochs=3, lr=0.1, executor="dist",
                       progress=False)
    return history.to_dict()


def fit_at_every_recording_level(info, methods) -> dict:
    """``fit(executor="dist")`` of each method under each recording level, in one job;
    ``{(method, level): (history dict, final weights)}`` (the same on every rank)."""
    from pipemare_lite.engine.recording import RECORDINGS
    from pipemare_lite.training import loop
    from pipemare_lite.training.datasets import Dataset, digits
    from pipemare_lite.training.models import mlp

    d = digits(seed=0)
    data = Dataset("digits-small", d.x_train[:128], d.y_train[:128], d.x_test[:32],
                   d.y_test[:32], 10, d.input_shape, d.provenance)
    found = {}
    for method in methods:
        for level in RECORDINGS:
            model = mlp(64, 16, 4, 10, seed=3)
            history = loop.fit(model, data, method=method, num_stages=info.world_size,
                               num_microbatches=4, batch_size=32, epochs=2, lr=0.05,
                               momentum=0.9, lr_schedule="cosine", eval_every=3,
                               executor="dist", record=level, progress=False)
            weights = [t.detach().clone() for t in model.state_dict().values()]
            found[(method, level)] = (history.to_dict(), weights)
    return found


#: torch.distributed's collectives (each counted where torch defines it, so a collective
#: that calls another, e.g. broadcast_object_list's broadcasts, counts both)
COLLECTIVES = ("barrier", "broadcast", "all_reduce", "reduce", "all_gather",
               "all_gather_into_tensor", "gather", "scatter", "reduce_scatter", "all_to_all",
               "all_gather_object", "gather_object", "broadcast_object_list",
               "scatter_object_list")


def count_collectives_in_fit(info, lengths, methods) -> dict:
    """``fit(executor="dist")`` of each method for each number of steps in ``lengths``
    (one epoch, evaluated at its end), with every torch.distributed collective counted;
    ``{(method, steps): ({collective: calls}, history dict)}``."""
    from unittest import mock

    from torch.distributed import distributed_c10d

    from pipemare_lite.training import loop
    from pipemare_lite.training.datasets import Dataset, digits
    from pipemare_lite.training.models import mlp

    counts: dict[str, int] = {}

    def counting(name, real):
        def call(*args, **kwargs):
            counts[name] = counts.get(name, 0) + 1
            return real(*args, **kwargs)
        return call

    def counting_losses(name, real):
        from pipemare_lite.engine.distributed.transport import P2PTransport

        def call(*args, tag=0, **kwargs):
            if tag > P2PTransport.LOSSES_TAG - (1 << 24):
                counts[f"losses {name}"] = counts.get(f"losses {name}", 0) + 1
            return real(*args, tag=tag, **kwargs)
        return call

    d = digits(seed=0)
    found = {}
    for method in methods:
        for steps in lengths:
            data = Dataset("digits-small", d.x_train[:16 * steps], d.y_train[:16 * steps],
                           d.x_test[:32], d.y_test[:32], 10, d.input_shape, d.provenance)
            counts.clear()
            with contextlib.ExitStack() as patches:
                for name in COLLECTIVES:
                    real = getattr(distributed_c10d, name, None)
                    if real is None:
                        continue
                    wrapper = counting(name, real)
                    patches.enter_context(mock.patch.object(distributed_c10d, name, wrapper))
                    patches.enter_context(mock.patch.object(dist, name, wrapper))
                for name in ("isend", "irecv"):  # the runs' losses, tagged from the top down
                    patches.enter_context(mock.patch.object(
                        dist, name, counting_losses(name, getattr(dist, name))))
                history = loop.fit(mlp(64, 16, 4, 10, seed=3), data, method=method,
                                   num_stages=info.world_size, num_microbatches=2,
                                   batch_size=16, epochs=1, lr=0.05, executor="dist",
                                   progress=False)
            found[(method, steps)] = (dict(counts), history.to_dict())
    return found


def rendezvous_port(info) -> tuple[str, str]:
    """The address and port this rank's process group met on (``MASTER_ADDR``/``PORT``)."""
    return os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]


def fit_with_a_rank_killed_between_actions(info, inside: str, at_call: int,
                                           killed: int = 1) -> dict:
    """``fit(executor="dist")`` on every rank; rank ``killed`` dies by SIGKILL between two
    actions, inside its ``at_call``-th send of a run's losses (``inside="losses"``) or
    ``dist.all_gather`` (``"all_gather"``: the gather before an evaluation, a collective),
    half a second after entering it, so its watchdog has published that it is there (issue
    47: the killed rank's last position read "action 3547/15120 ... in collective 1181")."""
    import signal

    from pipemare_lite.engine.distributed.transport import P2PTransport

    if info.rank == killed:
        name = "isend" if inside == "losses" else inside
        real, calls = getattr(dist, name), []

        def call(*args, **kwargs):
            if inside != "losses" or kwargs.get("tag", 0) > P2PTransport.LOSSES_TAG - (1 << 24):
                calls.append(None)
                if len(calls) == at_call:
                    time.sleep(0.5)  # the watchdog publishes the position every 0.1 s
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        setattr(dist, name, call)
    return _small_dist_fit(info)
