"""Start one process per rank, from Python or a notebook, or join a ``torchrun`` job (chapter 11).

From Python (a notebook included)::

    from pipemare_lite.engine.distributed.launch import launch
    results = launch(my_worker, world_size=4, args=(config,), timeout=120)

``my_worker(info, *args)`` runs in every process with the process group already initialized
(``info`` is a :class:`RankInfo`); its return values come back as a list indexed by rank.
The worker must live in an importable module (not in the notebook itself): children are
started with ``forkserver`` (``spawn`` where that is missing), which pickles the function by
name. ``torch`` and this package are preloaded into the fork server once, so a launch costs
a fork, not a fresh ``import torch`` per rank. What the parent registered (a method, a
schedule) is not there: ``imports=["my_methods"]`` imports those modules in every rank
before the worker runs, as do the modules named in ``PIPEMARE_PLUGINS``
(:mod:`pipemare_lite.plugins`).

What :func:`launch` guarantees:

- loopback only by default (``master_addr="127.0.0.1"``); the rendezvous port is chosen by
  the operating system at run time (the launcher hosts a ``TCPStore`` on port 0), so
  concurrent launches never collide, and a port another program holds (even one named in
  ``MASTER_PORT``, which is not read) is never tried;
- gloo on CPU, NCCL when CUDA has a device per rank (``backend=None``); rank r uses
  ``cuda:r`` with NCCL;
- the launcher hosts the side-channel store (:mod:`pipemare_lite.engine.distributed.faults`), so it
  can still read where every rank was after one of them died;
- it always cleans up: on an error, a dead child or the timeout it sets the ``abort`` key,
  gives the ranks a few seconds to stop and report, then terminates and finally kills every
  child that is still alive. No orphans: a child also exits when the launcher disappears;
- a hang, not only a death: a child stopped by a signal (SIGSTOP, SIGTSTP) for half the op
  timeout (at most :data:`STOPPED_LIMIT` s) stops the run with that rank named as the
  cause and its last position (:func:`_supervise`); a rank that hangs while running is
  named by its peers within the op timeout + 0.3 s (:mod:`.faults`).

From a shell, the same training runs under ``torchrun`` (one process per rank; the
``--executor dist`` option of ``pipemare_lite.training.loop`` calls :func:`init_from_env`)::

    # one machine, 4 ranks
    torchrun --nnodes 1 --nproc-per-node 4 --rdzv-backend c10d \\
        --rdzv-endpoint 127.0.0.1:0 -m pipemare_lite.training --executor dist ...

    # two machines with 4 ranks each: run on both, with the first machine's address and
    # the same PIPEMARE_JOB_TOKEN (a secret) in both environments
    torchrun --nnodes 2 --nproc-per-node 4 --node-rank 0 \\
        --rdzv-backend c10d --rdzv-endpoint 10.0.0.1:29500 --rdzv-id job42 \\
        -m pipemare_lite.training --executor dist ...
    # (--node-rank 1 on the second machine; --max-restarts 0 keeps failures visible)

torchrun's store, unlike :func:`launch`'s, listens on every interface whatever address it
is given, without authentication: anyone reaching its port can read and write it. The
ranks sign the side channel (:class:`~pipemare_lite.engine.distributed.faults.SignedStore`), so a
stranger's text never becomes a reported cause; torch's own keys stay unprotected (README,
"What torch's store does not protect").

The two-machine form is tested as two torchrun "nodes" on one host
(``tests/test_multinode.py``). Under torchrun a worker exits with its agent (its parent),
and when a peer disappears it prints which rank it lost before it exits
(:mod:`pipemare_lite.engine.distributed.lost`). Devices and backend come from
:mod:`pipemare_lite.engine.placement`.

``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT``; :func:`init_from_env` reads them.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import math
import multiprocessing as mp
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pipemare_lite.engine import placement
from pipemare_lite.engine.distributed import faults
from pipemare_lite.engine.distributed import torchrun as under_torchrun
from pipemare_lite.engine.distributed.rank import RankInfo, connect_store, make_current
from pipemare_lite.engine.placement import choose_backend  # noqa: F401  (chapter 11)
from pipemare_lite.plugins import env_plugins, load_plugins

#: Seconds the ranks get to stop on their own after an abort, before terminate/kill.
ABORT_GRACE = 5.0
#: Addresses for which the children's gloo sockets are kept on the loopback interface.
LOOPBACK = ("127.0.0.1", "localhost", "::1")
#: Seconds the launcher waits after a failed exit before naming the cause, and the most it
#: waits when every failure so far is only the echo of another (a closed connection).
SETTLE, SETTLE_MAX = 0.3, 3.0
#: Modules imported once into the fork server. torch._dynamo is what the first optimizer
#: constructor imports (several seconds per process otherwise).
PRELOAD = ("torch", "torch.distributed", "torch.optim", "torch._dynamo",
           "pipemare_lite.engine.distributed.executor")


class LaunchError(RuntimeError):
    """A launched job failed: names the failed rank(s) and where every rank was.

    Attributes:
        failed_ranks: ranks that raised, died or timed out (the cause first when known).
        positions: ``rank -> Position`` as last published.
        errors: ``rank -> error text`` (type, message, then traceback) for ranks that
            reported one (:meth:`~pipemare_lite.engine.distributed.faults.StatusBoard.fail`).
        exit_codes: ``rank -> exit code`` (negative: killed by that signal).
        pids: ``rank -> process id`` (all ended when the error is raised).
    """

    def __init__(self, message, *, failed_ranks, positions, errors, exit_codes, pids):
        super().__init__(message)
        self.failed_ranks, self.positions, self.errors = failed_ranks, positions, errors
        self.exit_codes, self.pids = exit_codes, pids


def _join(backend: str, rank: int, world_size: int, local_rank: int, local_world_size: int,
          op_timeout: float, num_threads: int | None, board: faults.StatusBoard,
          store=None) -> RankInfo:
    """Place this rank (:func:`pipemare_lite.engine.placement.plan`: gloo computes on the
    CPU, NCCL on ``cuda:<local rank>``, made the current device), init its process group (on
    ``store`` under the prefix ``pg/`` when given, else from torchrun's environment);
    returns its :class:`RankInfo`, now :func:`current`."""
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    where = placement.plan(rank, local_rank, local_world_size, backend=backend,
                           device="cuda" if backend == "nccl" else "cpu")
    device = torch.device(where.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    group = {"device_id": device} if backend == "nccl" else {}
    if store is not None:
        group.update(store=dist.PrefixStore("pg/", store), rank=rank, world_size=world_size)
    # gloo's own timeout is a second line of defence behind the Waiter's deadline.
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=op_timeout + 30.0),
                            **group)
    return make_current(
        RankInfo(rank, world_size, local_rank, backend, device, board, op_timeout, where))


def _child_main(rank: int, world_size: int, addr: str, port: int, backend: str,
                worker_fn: Callable, args: tuple, kwargs: dict, result_dir: str,
                launcher_pid: int, op_timeout: float, num_threads: int | None,
                imports: tuple = (), secret: bytes | None = None) -> None:
    """Body of one child process: init, import the plugins, run the worker, write the
    result, exit."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      MASTER_ADDR=addr, MASTER_PORT=str(port))
    if backend == "gloo" and sys.platform == "linux" and addr in LOOPBACK:
        # gloo binds to the address the host name resolves to unless told an interface
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    store = _connect_while_launcher_lives(addr, port, launcher_pid)
    store.set_timeout(datetime.timedelta(seconds=60))  # connected in 2 s attempts; calls may wait
    # the side channel signed with the job's secret (it came with our arguments, not over
    # the network): a value a stranger writes into the store reads as absent
    board = faults.StatusBoard(rank, world_size, faults.signed(store, secret),
                               launcher_pid=launcher_pid).start()
    code = 0
    _thread_lock_for_progress_bars()
    try:
        info = _join(backend, rank, world_size, rank, world_size, op_timeout, num_threads,
                     board, store)
        load_plugins(imports)  # the parent's PIPEMARE_PLUGINS travel in ``imports``
        _write(Path(result_dir) / f"rank{rank}.pkl", worker_fn(info, *args, **kwargs))
        finish(info)
    except BaseException as exc:  # report everything, KeyboardInterrupt included
        code = 1
        board.fail(exc)  # the error and its traceback go to the launcher's store
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: no atexit hooks, no joins on communication threads that may hang after a
    # failure; everything worth keeping is already in the result file and the store.
    os._exit(code)


def _thread_lock_for_progress_bars() -> None:
    """Give tqdm a thread lock in this rank. Its default is a multiprocessing lock (a named
    semaphore), which only a normal exit unregisters; a rank ends with ``os._exit``, and
    Python's resource tracker then warned of "leaked semaphore objects" when the launcher
    exited. A rank's bars are written by its own threads only."""
    import threading

    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def _connect_while_launcher_lives(addr: str, port: int, launcher_pid: int, patience=60.0):
    """Connect to the launcher's store in short attempts; exit at once if it is gone.

    A single long connect would keep an orphan alive for its whole timeout when the
    launcher dies while this child is still starting.
    """
    deadline = time.monotonic() + patience
    while True:
        if not faults._pid_alive(launcher_pid):
            os._exit(3)
        try:
            return connect_store(addr, port, 2)
        except Exception:
            if time.monotonic() > deadline:
                raise


def _write(path: Path, result) -> None:
    """Pickle a worker's result to ``path`` (renamed into place: a file there is whole)."""
    try:
        data = pickle.dumps(result)
    except Exception as exc:  # an unpicklable result is the worker's bug: say so
        raise TypeError(f"the worker's result could not be pickled: {exc!r}") from exc
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.rename(path)


def _context(start_method: str | None):
    methods = mp.get_all_start_methods()
    method = start_method or ("forkserver" if "forkserver" in methods else "spawn")
    if method not in methods:
        raise ValueError(f"start_method {method!r} not available here; allowed: {methods}")
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(list(PRELOAD))
    return ctx


def launch(worker_fn: Callable, world_size: int, *, args: tuple = (), kwargs: dict | None = None,
           timeout: float = 600.0, op_timeout: float = 120.0, backend: str | None = None,
           master_addr: str = "127.0.0.1", start_method: str | None = None,
           num_threads: int | None = 1, grace: float = ABORT_GRACE,
           imports: Sequence[str] = ()) -> list:
    """Run ``worker_fn(info, *args, **kwargs)`` in ``world_size`` processes; return the results.

    Introduced in chapter 11.

    Args:
        worker_fn: a module-level function (picklable by name).
        world_size: number of processes (ranks), >= 1.
        timeout: seconds for the whole job; then every rank is stopped.
        op_timeout: seconds any single wait on a message may take (see
            :class:`pipemare_lite.engine.distributed.faults.Waiter`).
        backend: "gloo", "nccl" or None (NCCL when CUDA has a device per rank).
        master_addr: address the rendezvous store binds to (loopback by default).
        start_method: multiprocessing start method; default forkserver (spawn if missing).
        num_threads: ``torch.set_num_threads`` in each child (1: bitwise-reproducible CPU
            math, and no oversubscription); None leaves torch's default.
        grace: seconds the ranks get to stop and report after an abort, before the
            launcher terminates (then kills) them.
        imports: modules every rank imports before ``worker_fn`` runs (plugins that
            register methods, schedules ...), after those in this process's
            ``PIPEMARE_PLUGINS``. Each is imported here first, so a typo fails at once.

    Returns:
        ``[result of rank 0, result of rank 1, ...]``.

    Raises:
        MainGuardError: called at the top level of a script, outside
            ``if __name__ == "__main__":`` (:mod:`pipemare_lite.engine.distributed.main_guard`).
        LaunchError: a rank raised, died or timed out; the message names it and lists every
            rank's last position in its schedule. No child is alive when it is raised.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if timeout <= 0 or op_timeout <= 0:
        raise ValueError(f"timeouts must be > 0, got timeout={timeout}, op_timeout={op_timeout}")
    if isinstance(imports, str):
        raise ValueError(f"imports is a list of module names, got the string {imports!r}")
    load_plugins(imports)  # here first: a module that does not import fails before any fork
    # the children get the environment's plugins explicitly: a fork server started earlier
    # would hand them an older environment
    imports = tuple(env_plugins()) + tuple(imports)

    from pipemare_lite.engine.distributed.main_guard import check_main_guard

    ctx = _context(start_method)
    check_main_guard("launch()", ctx.get_start_method())  # before any child re-imports
    if ctx.get_start_method() != "fork":  # the arguments travel pickled: refuse before starting
        _check_picklable(worker_fn, args, kwargs or {})
    backend = choose_backend(world_size, backend)
    listener = _listen(master_addr)
    port = listener.getsockname()[1]
    store = dist.TCPStore(
        master_addr, port, is_master=True, wait_for_workers=False,
        timeout=datetime.timedelta(seconds=60), master_listen_fd=listener.detach(),
    )  # the store owns the socket from here on and closes it
    result_dir = _result_dir()
    secret = faults.new_secret()  # signs the side channel (faults.SignedStore)
    common = (world_size, master_addr, port, backend, worker_fn, args, kwargs or {}, result_dir,
              os.getpid(), op_timeout, num_threads, imports, secret)  # after the rank
    side = faults.signed(store, secret)
    procs = []
    try:
        for rank in range(world_size):
            procs.append(ctx.Process(target=_child_main, args=(rank, *common),
                                     name=f"pipemare-rank{rank}", daemon=True))
            procs[-1].start()
        reason = _supervise(procs, side, timeout, grace,
                            stopped_after=min(op_timeout / 2, STOPPED_LIMIT))
        return _collect(procs, side, result_dir, reason)
    finally:
        _stop_all(procs)
        shutil.rmtree(result_dir, ignore_errors=True)


def _check_picklable(worker_fn: Callable, args: tuple, kwargs: dict) -> None:
    """Refuse, before any process starts, a worker or argument that cannot travel to the ranks
    (a lambda, a function defined inside another): pickling failed in a child's start-up
    with a bare PicklingError before."""
    parts = [("worker_fn", worker_fn), *((f"args[{i}]", a) for i, a in enumerate(args)),
             *((f"kwargs[{k!r}]", v) for k, v in kwargs.items())]
    for what, value in parts:
        try:
            pickle.dumps(value)
        except Exception as exc:
            raise ValueError(
                f"launch(): {what} cannot be sent to the ranks ({type(exc).__name__}: {exc}); "
                "every function a rank runs (a loss, an optimizer factory, a worker) must be "
                "picklable: a module-level function or functools.partial of one, not a lambda "
                "or a function defined inside another") from exc


#: The results folder of a launch: ``<tmp>/pipemare-launch-<launcher pid>-<random>``.
RESULT_DIR_PREFIX = "pipemare-launch-"


def _result_dir() -> str:
    """A fresh folder for the ranks' results, named after this launcher's pid.

    A launcher killed outright (SIGKILL, or SIGTERM, which runs no ``finally``) cannot
    remove its folder; the next launch on the machine removes those whose launcher is gone.
    """
    base = Path(tempfile.gettempdir())
    for old in base.glob(f"{RESULT_DIR_PREFIX}*-*"):
        pid = old.name[len(RESULT_DIR_PREFIX):].split("-", 1)[0]
        try:
            mine = old.is_dir() and old.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and pid.isdigit() and not faults._pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{RESULT_DIR_PREFIX}{os.getpid()}-")


def _listen(address: str, port: int = 0) -> socket.socket:
    """A listening socket on ``address`` and ``port`` (0: a free port the OS picks).

    Handed to the store (``master_listen_fd``): by itself a TCPStore listens on every
    interface, whatever host name it is given; this way loopback means loopback.
    """
    family, kind, proto, _, sockaddr = socket.getaddrinfo(
        address, port, type=socket.SOCK_STREAM)[0]
    listener = socket.socket(family, kind, proto)
    listener.bind(sockaddr)
    listener.listen(128)
    return listener


def _process_state(pid: int) -> str | None:
    """The one-letter state of process ``pid`` (``T``: stopped by a signal) from
    ``/proc/<pid>/stat``; None where it cannot be read (gone, or no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError, UnicodeDecodeError):
        return None


def _stopped_rank(procs, since: dict, now: float, after: float) -> int | None:
    """The first rank whose process has been stopped by a signal (SIGSTOP, SIGTSTP: state
    ``T``, not a debugger's ``t``) for ``after`` seconds; ``since`` (rank -> when first seen
    stopped) is updated in place."""
    for rank, p in enumerate(procs):
        if p.pid is None or p.exitcode is not None or _process_state(p.pid) != "T":
            since.pop(rank, None)
            continue
        if now - since.setdefault(rank, now) >= after:
            return rank
    return None


#: Seconds between two looks at the children's process states (the stopped-rank watchdog).
STATE_POLL = 0.25
#: A rank stopped by a signal for half the op timeout, or this many seconds if less, stops
#: the run with it named (its peers would otherwise wait the whole op timeout).
STOPPED_LIMIT = 10.0


def _supervise(procs, store, timeout: float, grace: float,
               stopped_after: float = math.inf) -> str | None:
    """Wait for every child; on a failure or the timeout, abort and give the ranks ``grace``
    seconds to stop. Returns the abort reason (None when no child failed).

    A watchdog on progress, not only on death: a child stopped by a signal (SIGSTOP,
    SIGTSTP; state ``T`` in ``/proc``) for ``stopped_after`` seconds (launch: half the op
    timeout, at most :data:`STOPPED_LIMIT`) is named as the cause, with its last position;
    once every other child has exited, the stopped ones are not waited for.

    When a child dies, its neighbours fail a moment later (their connection to it closed),
    and the launcher may see their exits first. So after a failed exit it waits
    :data:`SETTLE` seconds, and as long as every failure it knows of is only such an echo,
    up to :data:`SETTLE_MAX` (or until every child exited), before it names the cause
    (:func:`_exit_cause`).
    """
    deadline = time.monotonic() + timeout
    first_failure = abort_deadline = reason = None
    stopped_since, next_look = {}, 0.0
    while True:
        exit_codes = {r: p.exitcode for r, p in enumerate(procs) if p.exitcode is not None}
        now, everyone_exited = time.monotonic(), len(exit_codes) == len(procs)
        if reason is None and now >= next_look:
            next_look = now + STATE_POLL
            stopped = _stopped_rank(procs, stopped_since, now, stopped_after)
            if stopped is not None:
                reason = faults.claim_abort(store, (
                    f"rank {stopped} is stopped (process {procs[stopped].pid} in state T: "
                    f"SIGSTOP or SIGTSTP) for {now - stopped_since[stopped]:.1f} s "
                    f"({faults._where_is(store, stopped)})"))
        if first_failure is None and any(exit_codes.values()):  # a non-zero exit code
            first_failure = now
        if reason is None and first_failure is not None and (
                everyone_exited or now >= first_failure + SETTLE):
            reason = faults.read_abort(store)
            if reason is None:
                final = everyone_exited or now >= first_failure + SETTLE_MAX
                cause = _exit_cause(exit_codes, store, len(procs), final=final)
                reason = cause and faults.claim_abort(store, cause)
        if reason is None and now > deadline:
            reason = faults.claim_abort(store, f"the launch timed out after {timeout:g} s")
        if reason is not None and abort_deadline is None:
            abort_deadline = now + grace
        if everyone_exited or (abort_deadline is not None and now > abort_deadline):
            return reason
        if stopped_since and reason is not None and all(
                p.exitcode is not None or r in stopped_since for r, p in enumerate(procs)):
            return reason  # the rest exited; a stopped rank reports nothing
        time.sleep(0.02)


def _suspicion(rank: int, exit_codes: dict, reports: dict, reason: str | None = None) -> int:
    """How likely ``rank``'s failure is the cause of the run's (0: most likely).

    0: the abort reason names it; 1: killed by a signal; 2: exited without a failure report;
    3: reported a real error; 4: reported only the echo of another rank's failure (a
    closed connection, an abort:
    :func:`~pipemare_lite.engine.distributed.faults.is_communication_error`).
    """
    if reason is not None and reason.startswith(f"rank {rank} "):
        return 0
    if (exit_codes.get(rank) or 0) < 0:
        return 1
    if rank not in reports:
        return 2
    return 4 if faults.is_communication_error_text(reports[rank]) else 3


def _exit_cause(exit_codes: dict[int, int], store, world_size: int, *, final: bool):
    """The abort reason for failed exits nobody explained, or None to wait a little longer.

    The most suspicious failed rank (:func:`_suspicion`); ranks that only report another's
    failure are named only when ``final`` (nothing better turned up).
    """
    reports = faults.read_failures(store, world_size)
    failed = sorted(r for r, code in exit_codes.items() if code != 0)
    rank = min(failed, key=lambda r: _suspicion(r, exit_codes, reports), default=None)
    if rank is None or (not final and _suspicion(rank, exit_codes, reports) == 4):
        return None  # no failure yet, or only echoes of one so far
    code = exit_codes[rank]
    if code < 0:
        return f"rank {rank} was killed by signal {-code}"
    return f"rank {rank} exited with code {code}"


def _stop_all(procs) -> None:
    """Terminate, then kill, every child still alive; join them all (a child whose start
    failed, e.g. its arguments could not be pickled, is skipped: the start's error stands)."""
    procs = [p for p in procs if p.pid is not None]
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.terminate()
        with contextlib.suppress(OSError):  # a stopped child acts on SIGTERM once continued
            os.kill(p.pid, signal.SIGCONT)
    end = time.monotonic() + 2.0
    for p in alive:
        p.join(timeout=max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(timeout=5.0)


def _failed_ranks_line(failed: list[int], exit_codes: dict, errors: dict, reason) -> str:
    """``failed rank(s): 1 (the cause), 0 (stopped by rank 1's failure)``: ``failed`` with
    the cause first; a rank that reported only the echo of another's failure (a closed
    link, the abort: :func:`_suspicion` 4) is marked as stopped by the cause."""
    if len(failed) < 2:
        return "failed rank(s): " + ", ".join(str(r) for r in failed)
    cause, *others = failed
    echoes = [_suspicion(r, exit_codes, errors, reason) == 4 for r in others]
    parts = [f"{cause} ({'the cause' if all(echoes) else 'the likeliest cause'})"]
    parts += [f"{r} (stopped by rank {cause}'s failure)" if echo else str(r)
              for r, echo in zip(others, echoes)]
    return "failed rank(s): " + ", ".join(parts)


def _collect(procs, store, result_dir, reason) -> list:
    """Stop every child; the results in rank order, or :class:`LaunchError` naming the
    failed ranks (the cause first: :func:`_suspicion`) and where every rank was."""
    _stop_all(procs)
    world_size, exit_codes = len(procs), {r: p.exitcode for r, p in enumerate(procs)}
    paths = [Path(result_dir) / f"rank{rank}.pkl" for rank in range(world_size)]
    if all(path.exists() for path in paths) and all(c == 0 for c in exit_codes.values()):
        return [pickle.loads(path.read_bytes()) for path in paths]
    positions = faults.read_positions(store, world_size)
    errors = faults.read_failures(store, world_size)  # what each failed rank reported
    failed = [r for r in range(world_size) if exit_codes.get(r) != 0 or r in errors]
    cause = min(failed, key=lambda r: _suspicion(r, exit_codes, errors, reason), default=None)
    failed.sort(key=lambda r: r != cause)  # the cause first, the others in rank order
    lines = [f"distributed run failed: {reason or 'a rank did not return a result'}",
             _failed_ranks_line(failed, exit_codes, errors, reason), "where each rank was:",
             faults.format_positions(positions, world_size)]
    lines += [f"rank {r} error: {errors[r].strip().splitlines()[-1]}" if r in errors
              else f"rank {r}: no error report (exit code {exit_codes.get(r)})" for r in failed]
    if cause in errors:  # the cause's traceback: where in the worker (a method's hook ...)
        detail = errors[cause].split("\n", 1)[-1].rstrip()
        lines += [f"rank {cause} traceback:", *("  " + line for line in detail.splitlines())]
    raise LaunchError(
        "\n".join(lines), failed_ranks=failed, positions=positions, errors=errors,
        exit_codes=exit_codes, pids={r: p.pid for r, p in enumerate(procs)},
    )


#: Environment variable giving :func:`init_from_env`'s default ``op_timeout`` (seconds); the
#: command line's ``--op-timeout`` sets it.
OP_TIMEOUT_ENV = "PIPEMARE_OP_TIMEOUT"


def init_from_env(
    *, backend: str | None = None, op_timeout: float | None = None, num_threads: int | None = 1
) -> RankInfo:
    """Join a job started by ``torchrun``: read its environment, init the process group.

    Introduced in chapter 11. Connects a second client to torchrun's store
    (``MASTER_ADDR``/``MASTER_PORT``) for the side channel. Ranks started by hand with the
    same variables (torch's ``env://`` convention: ``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``) work too: rank 0 then hosts the store on that address
    and port, and the others connect to it. Returns this rank's
    :class:`RankInfo`. Call :func:`finish` at the end. ``num_threads`` is set with
    ``torch.set_num_threads`` as :func:`launch` does (one thread: bitwise-reproducible CPU
    sums, and P processes do not fight over the cores); None leaves torch's default.
    """
    if op_timeout is None:  # PIPEMARE_OP_TIMEOUT (the command line's --op-timeout), else 120 s
        text = os.environ.get(OP_TIMEOUT_ENV, "120")
        try:
            op_timeout = float(text)
        except ValueError:
            op_timeout = -1.0
        if not 0 < op_timeout < float("inf"):
            raise ValueError(f"{OP_TIMEOUT_ENV}={text!r}; allowed: a positive number of seconds")
    needed = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    missing = [k for k in needed if k not in os.environ]
    if missing:
        raise ValueError(
            f"not started by torchrun: environment variables {missing} are not set; run "
            "`torchrun --nproc-per-node P -m pipemare_lite.training --executor dist ...`, or from "
            "Python launch(pipemare_lite.training.dist_fit.fit_worker, P, args=(...,))")
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    # torchrun's agent hosts the job's store at MASTER_PORT. Variables set by hand (torch's
    # env:// convention) mean that rank 0 hosts it: it used to connect as a client first
    # and waited twice 30 s for a store nobody had started. By hand, every rank then forms
    # its group on that store, as launch()'s ranks do.
    by_hand = not under_torchrun.under_torchrun()
    if by_hand:
        store = _host_or_reach_store(addr, port, rank)
    else:
        try:
            store = connect_store(addr, port, 30)
        except Exception:  # no side channel: per-operation timeouts still apply
            store = None
    # torchrun's store listens on every interface, unauthenticated: sign the side channel
    secret = faults.torchrun_secret() if not by_hand else (
        os.environ.get(faults.TOKEN_ENV, "").encode() or None)
    under_torchrun.SECRET = secret
    if secret is None and rank == 0 and world_size > 1:
        print(f"pipemare-lite: the side channel is not signed (ranks on several machines and "
              f"no {faults.TOKEN_ENV}): anyone who reaches {os.environ['MASTER_ADDR']}:"
              f"{os.environ['MASTER_PORT']} can stop the job with a text of theirs; set "
              f"{faults.TOKEN_ENV} to the same secret on every machine", file=sys.stderr)
    board = faults.StatusBoard(rank, world_size, faults.signed(store, secret))
    info = _join(choose_backend(local_world_size, backend), rank, world_size, local_rank,
                 local_world_size, op_timeout, num_threads, board, store if by_hand else None)
    if local_rank == 0 and not os.environ.get(faults.TOKEN_ENV):
        faults.forget_torchrun_secret()  # every rank read it before the group formed
    # under torchrun: exit with the agent (our parent) and say which rank was lost or where
    # every rank was when it stops us (torchrun.py, lost.py)
    under_torchrun.install(board)
    board.start()
    # Tear down before the interpreter does: a watchdog thread still inside a store call, or
    # a process group destroyed during finalization, can abort the process at exit (seen as
    # a flaky SIGABRT of rank 0 under load after its work was done).
    atexit.register(finish, info)
    return info


def _host_or_reach_store(addr: str, port: int, rank: int):
    """The job's store when no torchrun started the ranks: rank 0 hosts it on
    ``addr:port`` (listening on that address only), the other ranks connect to it; a clear
    error when the port is taken or rank 0's store cannot be reached."""
    if rank == 0:
        try:
            listener = _listen(addr, port)
        except OSError as exc:
            raise ValueError(f"MASTER_ADDR={addr} MASTER_PORT={port}: rank 0 hosts the job's "
                             f"store there (no torchrun), but cannot listen: {exc}; allowed: "
                             "a free port on an address of this machine") from exc
        return dist.TCPStore(addr, port, is_master=True, wait_for_workers=False,
                             timeout=datetime.timedelta(seconds=60),
                             master_listen_fd=listener.detach())
    try:
        return connect_store(addr, port, 60)
    except Exception as exc:
        raise RuntimeError(f"rank {rank}: rank 0's store at {addr}:{port} did not answer "
                           f"within 60 s ({type(exc).__name__}); start rank 0 with the same "
                           "MASTER_ADDR and MASTER_PORT, or start the job with torchrun") from exc


def finish(info: RankInfo) -> None:
    """Mark the rank done and tear down the process group (end of a torchrun worker).

    Safe to call twice: :func:`init_from_env` also registers it to run at exit.
    """
    info.board.finish()
    if dist.is_initialized():
        dist.destroy_process_group()


def ping(info: RankInfo, payload: Any = None, *, sleep: float = 0.0,
         fail_rank: int | None = None) -> dict:
    """A worker that checks the job works: all-reduces the ranks and returns what it saw.

    ``launch(ping, 4)`` returns, per rank, ``{"rank", "world_size", "backend", "rank_sum",
    "pid", "master", "payload"}`` with ``rank_sum == 0 + 1 + ... + (world_size - 1)`` and
    ``master`` the rendezvous ``address:port``. For chapter
    11's "what if" cells: ``sleep`` seconds before the all-reduce (try a launch timeout
    shorter than that), ``fail_rank`` raises on that rank.
    """
    if info.rank == fail_rank:
        raise RuntimeError(f"ping: rank {info.rank} fails on purpose (fail_rank={fail_rank})")
    time.sleep(sleep)
    value = torch.tensor([float(info.rank)], device=info.device)
    with faults.communication("ping's all-reduce"):
        dist.all_reduce(value)
    return dict(rank=info.rank, world_size=info.world_size, backend=info.backend,
                rank_sum=int(value.item()), pid=os.getpid(), payload=payload,
                master=f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}")
