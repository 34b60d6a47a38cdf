"""A torchrun worker's failures, as readable as ``launch()``'s (chapter 11).

Under ``torchrun`` the agent, not our launcher, watches the ranks. When one rank dies the
agent sends SIGTERM to the others, which used to end them without a word about where
anyone was; when the agent itself dies, the ranks kept writing to its store, which was
gone, and every failed write printed a C++ stack trace (about 190 in the 10 s before the
watchdog's backstop). Here:

- :func:`install` (called by
  :func:`~pipemare_lite.engine.distributed.launch.init_from_env`) makes the watchdog watch
  the agent's process (the rank's parent): when it disappears the rank says so in one line
  and exits (:meth:`StatusBoard._watch`), before touching the dead store. It hooks the one
  line of :mod:`pipemare_lite.engine.distributed.lost` naming the lost rank into the three
  ways such a worker stops: an uncaught exception (the traceback, then the line,
  then ``os._exit(1)``: no atexit teardown that could wait on a dead peer), the agent's
  SIGTERM (first every rank's position, printed by the first rank to claim it, the others
  printing one line each; then the line; exit 143, as for SIGTERM) and the watchdog's
  backstop;
- :func:`report_failure` gives the command line (``python -m pipemare_lite.training``) a rank's
  pipeline failure (an abort, a broken connection to a dead peer, a timeout) as a message
  with every rank's position instead of a traceback, then the line naming the lost rank.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

from pipemare_lite.engine.distributed import faults, lost
from pipemare_lite.engine.distributed.rank import connect_store, current

#: Seconds the SIGTERM report may wait for the store (the agent that hosts it is stopping).
STORE_TIMEOUT = 3.0
#: Longest line of a report (gloo's errors run to several hundred characters).
LINE_LIMIT = 160
#: Exit status after SIGTERM (128 + 15, what a shell reports for a terminated process).
SIGTERM_EXIT = 143

#: The job's side-channel secret (:func:`pipemare_lite.engine.distributed.faults.torchrun_secret`),
#: set by :func:`~pipemare_lite.engine.distributed.launch.init_from_env`; None: unsigned.
SECRET: bytes | None = None
_reported = False  # this rank already printed its report: the agent's SIGTERM adds nothing
_name_lost = None  # once :func:`install` ran: prints the line naming the lost rank (once)


def under_torchrun() -> bool:
    """True in a process that torchrun's agent started (it sets ``TORCHELASTIC_RUN_ID``)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def install(board: faults.StatusBoard) -> None:
    """Under torchrun (main thread only): watch the agent (this process's parent), and
    print the line naming the lost rank (:func:`pipemare_lite.engine.distributed.lost.report`) on
    an uncaught exception, the agent's SIGTERM (after every rank's position:
    :func:`_sigterm_report`) and the watchdog's backstop. An uncaught exception also goes to
    :meth:`StatusBoard.fail`, so a rank that fails for a reason of its own claims the abort
    and its peers stop with its name."""
    if not under_torchrun():
        return
    global _name_lost
    board.launcher_pid = os.getppid()
    board.exit_with_parent = True  # a killed agent may stay a zombie: watch the parent
    topology = lost.Topology.from_env()
    once = threading.Lock()  # taken by the first line, never released: one per process

    def name_lost(cause: str, *, use_store: bool = True) -> None:
        if once.acquire(blocking=False):
            store = board.store if use_store else None
            print(lost.report(board, topology, store, cause), file=sys.stderr, flush=True)

    _name_lost = name_lost
    previous_hook = sys.excepthook

    def on_exception(kind, value, tb):
        previous_hook(kind, value, tb)
        try:
            board.fail(value)
            name_lost(kind.__name__)
        finally:
            sys.stderr.flush()
            os._exit(1)  # no atexit teardown: destroying a group with a dead peer can block

    def on_sigterm(signum, frame):
        global _reported
        if not _reported:
            _reported = True
            _write(_sigterm_report(board))
        if once.locked():
            return  # a line is on its way (its writer exits); the agent kills after 30 s
        try:
            board.note("failed: SIGTERM from torchrun's agent")
            name_lost("SIGTERM from torchrun's agent")
        finally:
            os._exit(SIGTERM_EXIT)

    sys.excepthook = on_exception
    if threading.current_thread() is threading.main_thread():  # signals go to the main thread
        signal.signal(signal.SIGTERM, on_sigterm)
    # the watchdog thread must not share the main thread's store client: direct evidence only
    board.before_exit = lambda reason: name_lost(reason, use_store=False)


def _write(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr closed: nothing to tell
        print(text, file=sys.stderr, flush=True)


def _store():
    raw = connect_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), STORE_TIMEOUT)
    return faults.signed(raw, SECRET)


def _short(text: str) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= LINE_LIMIT else line[: LINE_LIMIT - 3] + "..."


def _with_positions(head: str, store, world_size: int, intro: str = "") -> str:
    """``head``, then every rank's position (:func:`faults.format_positions`), each line cut
    to :data:`LINE_LIMIT` characters."""
    lines = faults.format_positions(faults.read_positions(store, world_size), world_size)
    return "\n".join([head, f"{intro}where each rank was:",
                      *(_short(line) for line in lines.splitlines())])


def _sigterm_report(board: faults.StatusBoard) -> str:
    """The first rank to claim it: every rank's position; the others: their own line."""
    own = f"rank {board.rank}: stopped by torchrun (SIGTERM) ({board.position.describe()})"
    try:
        store = _store()
        store.set(faults._key(f"status/{board.rank}"), board.position.to_json())
        if store.add(faults._key("sigterm_report"), 1) != 1:
            return own
        return _with_positions(own, store, board.world_size, "torchrun stops every rank when "
                               "one exits (its summary names which); ")
    except Exception:  # the store went with the agent
        return own + " (the other ranks' positions are not readable)"


def report_failure(exc: BaseException, prog: str) -> bool:
    """Print this rank's pipeline failure with every rank's position, as ``prog: rank r
    stopped: ...``, then, under torchrun, the line naming the lost rank (False, printing
    nothing: not a pipeline failure, or not a distributed run: keep the traceback).

    The agent's SIGTERM may come while the report is being written (the dead peer's exit
    reaches the agent as fast as its broken link reaches us): a stand-in handler holds it
    until the report is out, then it is raised again, so a rank never stops with half a
    report. Call from the main thread (signal handlers live there), as the command line does.
    """
    info = current()
    if info is None or not isinstance(exc, faults.PipelineFault):
        return False
    global _reported
    deferred = []  # a SIGTERM that came while the report was being written
    previous = signal.signal(signal.SIGTERM, lambda *_: deferred.append(True))
    try:
        info.board.fail(exc)
        text = _short(f"rank {info.rank} stopped: {type(exc).__name__}: {exc}")
        with contextlib.suppress(Exception):  # the store went with the agent: the head line alone
            text = _with_positions(text, _store(), info.world_size)
        _write(f"{prog}: {text}")
        _reported = True
    finally:
        signal.signal(signal.SIGTERM, previous)
    if deferred:
        signal.raise_signal(signal.SIGTERM)
    if _name_lost is not None:  # the command line caught it: the excepthook never sees it
        _name_lost(type(exc).__name__)
    return True
