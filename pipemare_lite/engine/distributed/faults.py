"""Faults in a multi-process pipeline: who failed, where everyone was (introduced in chapter 11).

A pipeline is a chain of blocking waits: if one rank dies, its neighbours wait for a tensor
that never comes, their neighbours wait for them, and the whole job hangs. This module makes
every failure end the job quickly and say what happened:

- each rank keeps a :class:`StatusBoard`: the main thread notes where it is in its schedule
  (action index, action string, what it waits for) in a plain Python attribute, and a
  daemon thread publishes that note to a side channel (a ``torch.distributed`` key-value
  store) every tenth of a second (so a killed rank's last known place is at most that old),
  with a count of its publications: the rank's heartbeat;
- a rank that raises writes ``failed/<rank>`` and, unless its error is only the echo of
  another rank's failure (told by its origin: an abort it saw, or the communication
  library failing in a wait on a peer, :class:`PeerConnectionError`), claims the ``abort``
  key; the launcher claims ``abort`` when a child dies without a word (e.g. SIGKILL) or
  the run times out;
- the same thread polls ``abort``; every wait on a message (:class:`Waiter`) checks the
  flag and its own per-operation deadline, so the other ranks raise :class:`PeerFailedError`
  or :class:`OpTimeoutError` instead of hanging;
- the collectives between two runs (the losses shared after a run, the gather before an
  evaluation, a checkpoint or the end) are waited for the same way
  (``DistributedExecutor._collective``): a rank that hangs outside
  the schedule (evaluating, between steps) is named by the ranks that wait for it within
  ``op_timeout`` + 0.3 s (:func:`absent_ranks`: its heartbeat stopped, or its position
  is elsewhere), and it is the cause the launcher reports;
- a backstop: when the main thread does not stop within ``exit_grace`` seconds of an
  abort (stuck in compute or in a blocking collective), the thread ends the process;
- a wait whose link to its peer breaks notes that peer as lost: under torchrun,
  :mod:`pipemare_lite.engine.distributed.lost` reads that and the heartbeats to name the rank a
  worker lost (a machine that died) before it exits.

::

    rank 0 ──wait(act 1F3)──────────X PeerFailedError("rank 1 failed ...")
    rank 1 ──1F2──boom! ── failed/1, abort ──▶ store ◀── polled by every rank
    rank 2 ──wait(act 2F2)──────────X PeerFailedError("rank 1 failed ...")

Keys live under the prefix ``pml/`` of the store that the process group was built on, so
they never collide with torch's own keys.

That store has no authentication, and torch's listens on every interface (torchrun's too,
``--standalone`` included): anyone who can reach its port can read and write any key. So
every value this module writes is signed with a secret of the job (:class:`SignedStore`:
an HMAC over key and value), and a value that does not verify is treated as absent: a
stranger can still *read* positions, and can still disturb the job as torch's own keys
allow, but cannot make the ranks stop with a text of theirs as the cause. :func:`launch`
makes a fresh secret per job and hands it to its ranks with their arguments; under
torchrun it is ``PIPEMARE_JOB_TOKEN`` (the same on every machine), or, when every rank is
on one machine, a random key the first rank writes to an owner-only file in a folder only
this user can write (:func:`torchrun_secret`, :func:`private_key_folder`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import queue
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

#: Prefix of every key this module writes.
KEY_PREFIX = "pml/"
#: Seconds between two publications of a rank's status (and two polls of ``abort``).
PUBLISH_INTERVAL = 0.1


class PipelineFault(RuntimeError):
    """Base class: a pipeline rank could not finish its schedule."""


class PeerFailedError(PipelineFault):
    """Another rank (or the launcher) aborted the run; the message says who and why."""


class OpTimeoutError(PipelineFault):
    """A wait on a message took longer than the per-operation timeout.

    ``peer``: the rank the message was to come from (None: not a point-to-point wait). A
    rank that reports this timeout names that peer, not itself, as the cause.
    """

    def __init__(self, message: str, peer: int | None = None) -> None:
        super().__init__(message)
        self.peer = peer


class PeerConnectionError(PipelineFault):
    """The communication library failed while this rank waited for a peer (a message or a
    collective): the connection broke, almost always because that peer failed first.

    Raised, from the library's own error, by the waits of :class:`Waiter` and inside
    :func:`communication` blocks. Its type, not its words, marks a failure as the echo of
    another rank's (:func:`is_communication_error`).
    """


@dataclass
class Position:
    """Where a rank is in its schedule, as published on the side channel.

    Attributes:
        rank: the rank.
        index: position of the current action in the rank's action list (-1 before the first).
        total: number of actions in the rank's list (0 when not known yet).
        action: the current action as a string (``"1F3"``), or "" before the first.
        state: what the rank is doing: ``setup``, ``compute``, ``wait <what>``, ``done``,
            ``failed: <error>``.
        beat: how many times the rank's watchdog published its position (the heartbeat:
            it stops when the rank is gone; 0 in what the main thread writes itself).
        between: True when the rank is between two actions (between runs, in a collective
            such as sharing the losses): ``index`` actions are done and ``action`` is
            the next one, not begun (issue 47: "action 3547/15120 (1F5) in collective
            1181" read as if the rank were inside 1F5).
    """

    rank: int
    index: int = -1
    total: int = 0
    action: str = ""
    state: str = "setup"
    beat: int = 0
    between: bool = False

    def where(self) -> str:
        """Where the rank is in its row, without its state: ``action 5/20 (1F2)`` inside an
        action, ``5/20 actions done (next 1F2)`` between two, ``before its first action``."""
        if self.index < 0:
            return "before its first action"
        if self.between:
            upcoming = f" (next {self.action})" if self.action else ""
            return f"{self.index}/{self.total} actions done{upcoming}"
        return f"action {self.index}/{self.total} ({self.action})"

    def describe(self, *, rank: bool = True) -> str:
        """One line for an error message: ``rank 1: action 5/20 (1F2) failed: ...``, or
        ``rank 1: 5/20 actions done (next 1F2), in collective 3: ...`` between two actions
        (without ``rank 1: `` when ``rank`` is False)."""
        head = f"rank {self.rank}: " if rank else ""
        if self.index < 0:
            return f"{head}before its first action ({self.state})"
        return f"{head}{self.where()}{',' if self.between else ''} {self.state}"

    def to_json(self) -> str:
        """Serialize for the store."""
        return json.dumps(self.__dict__)

    @classmethod
    def from_json(cls, text: str | bytes) -> Position:
        """Inverse of :meth:`to_json`."""
        return cls(**json.loads(text))


def _key(name: str) -> str:
    return KEY_PREFIX + name


#: Environment variable holding the job's secret under torchrun (every machine the same).
TOKEN_ENV = "PIPEMARE_JOB_TOKEN"


class SignedStore:
    """A store client whose values carry an HMAC-SHA256 of (key, value) under ``secret``.

    ``set`` and ``compare_set`` sign; ``get`` returns the value without its signature and
    raises KeyError for one that does not verify; ``check`` answers True only for keys
    whose values verify, so a value a stranger wrote reads as absent. ``add`` (counters)
    passes through unsigned. ``clone`` keeps the secret.
    """

    def __init__(self, store, secret: bytes) -> None:
        self.store, self.secret = store, secret

    def _mac(self, key: str, value: bytes) -> bytes:
        import hashlib
        import hmac

        return hmac.new(self.secret, key.encode() + b"\0" + value, hashlib.sha256
                        ).hexdigest().encode()

    def _sign(self, key: str, value) -> bytes:
        value = value.encode() if isinstance(value, str) else bytes(value)
        return self._mac(key, value) + b"|" + value

    def _open(self, key: str, raw: bytes) -> bytes | None:
        import hmac

        mac, sep, value = bytes(raw).partition(b"|")
        return value if sep and hmac.compare_digest(mac, self._mac(key, value)) else None

    def set(self, key: str, value) -> None:
        self.store.set(key, self._sign(key, value))

    def get(self, key: str) -> bytes:
        value = self._open(key, self.store.get(key))
        if value is None:
            raise KeyError(f"{key}: the value does not carry this job's signature")
        return value

    def check(self, keys) -> bool:
        if not self.store.check(list(keys)):
            return False
        return all(self._open(k, self.store.get(k)) is not None for k in keys)

    def compare_set(self, key: str, expected, desired) -> bytes:
        signed = self._sign(key, desired)
        held = self.store.compare_set(key, expected, signed)
        value = self._open(key, held)
        if value is None:  # a stranger's value sits there: ours replaces it
            self.store.set(key, signed)
            return self._open(key, signed)
        return value

    def add(self, key: str, amount: int) -> int:
        return self.store.add(key, amount)

    def clone(self) -> SignedStore:
        return SignedStore(self.store.clone(), self.secret)

    def __getattr__(self, name):
        return getattr(self.store, name)


def new_secret() -> bytes:
    """A fresh random job secret (what :func:`launch` hands its ranks)."""
    import secrets

    return secrets.token_hex(32).encode()


def signed(store, secret: bytes | None):
    """``store`` as a :class:`SignedStore` under ``secret`` (None or no store: unchanged)."""
    return store if store is None or secret is None else SignedStore(store, secret)


#: Where the job key's folder is made when ``XDG_RUNTIME_DIR`` is not set (under home).
KEY_FOLDER_UNDER_HOME = (".cache", "pipemare-lite", "jobs")


def private_key_folder():
    """A folder only this user can write, for job keys, made with mode 0700 if needed.

    ``$XDG_RUNTIME_DIR/pipemare-lite`` (systemd's per-user runtime folder, itself 0700), else
    ``~/.cache/pipemare-lite/jobs``. Accepted only when the folder is a real folder (not a
    link) owned by this user with no access for group or others, and every folder above it
    is owned by this user or root and writable by nobody else (or sticky, as /tmp is):
    then no other user can create,
    replace or read a file in it, so a key file's predictable name gives a stranger nothing
    (in the shared temporary folder a local user could create the file first and stop the
    job: issue 47, F4). Raises ValueError (the command's one line, exit status 2) naming
    each place tried and why, and saying to set ``PIPEMARE_JOB_TOKEN`` instead.
    """
    import stat
    from pathlib import Path

    places = []
    if os.environ.get("XDG_RUNTIME_DIR"):
        places.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "pipemare-lite")
    places.append(Path.home().joinpath(*KEY_FOLDER_UNDER_HOME))
    uid, problems = os.getuid(), []
    for folder in places:
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            mine = folder.lstat()
            # an ancestor others may write (without the sticky bit) lets them move ours away
            loose = [(a, a.stat()) for a in folder.resolve().parents]
        except OSError as exc:
            problems.append(f"{folder}: {exc.strerror or exc}")
            continue
        loose = [(a, st) for a, st in loose if st.st_uid not in (uid, 0) or (
            st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX)]
        if not stat.S_ISDIR(mine.st_mode):
            problems.append(f"{folder} is not a folder (a link or a file)")
        elif mine.st_uid != uid or mine.st_mode & 0o077:
            problems.append(f"{folder} is owned by uid {mine.st_uid} with mode "
                            f"{oct(mine.st_mode & 0o777)} (needed: uid {uid}, 0700)")
        elif loose:
            where, st = loose[0]
            problems.append(f"{where} is writable by others (uid {st.st_uid}, mode "
                            f"{oct(st.st_mode & 0o7777)})")
        else:
            return folder
    raise ValueError(
        f"no private folder for the job key ({'; '.join(problems)}); set {TOKEN_ENV} to the "
        "same secret in every rank's environment (e.g. export "
        f"{TOKEN_ENV}=$(python -c 'import secrets; print(secrets.token_hex(32))'))")


def _torchrun_secret_path():
    """The job key's file: in :func:`private_key_folder`, named after torchrun's agent (this
    process's parent) and the run id, which every rank of the job shares."""
    import hashlib

    run = hashlib.sha256(os.environ.get("TORCHELASTIC_RUN_ID", "").encode()).hexdigest()[:16]
    return private_key_folder() / f"pipemare-job-{os.getppid()}-{run}.key"


def forget_torchrun_secret() -> None:
    """Remove the key file of :func:`torchrun_secret` (once every rank has read it)."""
    with contextlib.suppress(OSError, ValueError):  # (no private folder: no file)
        _torchrun_secret_path().unlink()


def torchrun_secret(wait: float = 30.0) -> bytes | None:
    """The job's secret under torchrun: ``PIPEMARE_JOB_TOKEN`` when set; else, when every
    rank runs on this machine (``LOCAL_WORLD_SIZE == WORLD_SIZE``), a random key in an
    owner-only file in this user's private folder (:func:`private_key_folder`; none:
    ValueError asking for the token), named after torchrun's agent (this process's
    parent) and run id, which the first rank to get there writes and the others read; else
    None (several machines and no token: the side channel stays unsigned, and rank 0 says
    so)."""
    import secrets

    token = os.environ.get(TOKEN_ENV)
    if token:
        return token.encode()
    if os.environ.get("LOCAL_WORLD_SIZE") != os.environ.get("WORLD_SIZE"):
        return None
    path = _torchrun_secret_path()
    if not path.exists():
        mine = path.with_name(f"{path.name}.{os.getpid()}")
        fd = os.open(mine, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
        try:
            os.link(mine, path)  # atomic, and fails when another rank was first
        except FileExistsError:
            pass
        finally:
            os.unlink(mine)
    deadline = time.monotonic() + wait
    while True:
        try:
            if path.stat().st_uid == os.getuid() and (path.stat().st_mode & 0o077) == 0:
                return path.read_bytes().strip()
            raise PermissionError(f"{path} is not an owner-only file of this user")
        except FileNotFoundError:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


def _read_all(store, world_size: int, name: str, parse) -> dict:
    """``rank -> parse(value of pml/<name>/<rank>)`` for every rank that wrote the key."""
    keys = {rank: _key(f"{name}/{rank}") for rank in range(world_size)}
    return {rank: parse(store.get(key)) for rank, key in keys.items() if store.check([key])}


def read_positions(store, world_size: int) -> dict[int, Position]:
    """The last published position of every rank (a rank that published nothing is left out)."""
    return _read_all(store, world_size, "status", Position.from_json)


def read_failures(store, world_size: int) -> dict[int, str]:
    """``rank -> error text`` for every rank that reported a failure."""
    return _read_all(store, world_size, "failed", bytes.decode)


def read_abort(store) -> str | None:
    """The reason of the run's abort, or None when nobody aborted."""
    key = _key("abort")
    return store.get(key).decode() if store.check([key]) else None


def claim_abort(store, reason: str) -> str:
    """Set the run's abort reason unless one is set already; returns the reason that holds."""
    # compare_set with expected "" sets the key only when it is absent.
    return store.compare_set(_key("abort"), "", reason).decode()


def _where_is(store, rank: int) -> str:
    """``rank``'s last published position, for a message (never raises)."""
    try:
        key = _key(f"status/{rank}")
        if store.check([key]):
            return f"last seen: {Position.from_json(store.get(key)).describe()}"
    except Exception:
        pass
    return "no status published"


def format_positions(positions: dict[int, Position], world_size: int) -> str:
    """Every rank's position on its own line (ranks with no report say so)."""
    return "\n".join(f"  {positions[r].describe()}" if r in positions
                     else f"  rank {r}: no status reported" for r in range(world_size))


#: Types whose failure reports are echoes of another rank's failure, not causes.
ECHO_TYPES = (PeerFailedError, PeerConnectionError)


def is_communication_error(exc: BaseException) -> bool:
    """True for errors that are a consequence of another rank's failure, not a cause.

    Told by where the error came from: an abort seen on the side channel
    (:class:`PeerFailedError`) or the communication library failing inside a wait on a peer
    (:class:`PeerConnectionError`). Any other error, whatever its text, is a cause.
    """
    return isinstance(exc, ECHO_TYPES)


def is_communication_error_text(report: str) -> bool:
    """:func:`is_communication_error` for a failure report read from the store.

    A report starts with the error's type name (``"PeerConnectionError: ..."``, written by
    :meth:`StatusBoard.fail`), which is what is checked.
    """
    return report.partition(":")[0] in {t.__name__ for t in ECHO_TYPES}


@contextlib.contextmanager
def communication(what: str):
    """Turn an error of the communication library inside the block (a collective such as a
    barrier or a broadcast) into :class:`PeerConnectionError` naming ``what``."""
    try:
        yield
    except RuntimeError as exc:  # gloo and NCCL raise RuntimeError (or subclasses)
        raise PeerConnectionError(f"{what}: {type(exc).__name__}: {exc}") from exc


class StatusBoard:
    """One rank's link to the side channel: its position, the abort flag, a watchdog.

    Introduced in chapter 11. ``store`` is a ``torch.distributed.Store`` (the main thread and
    the watchdog thread each use their own client: the thread's is ``store.clone()``).
    Without a store (``store=None``) the board still records the position locally and
    :class:`Waiter` still enforces per-operation timeouts.

    Args:
        rank, world_size: this rank and the number of ranks.
        store: the store for the main thread's writes (failure reports), or None.
        launcher_pid: when set, the watchdog ends this process if that process disappears
            (so a killed notebook kernel leaves no orphan workers), or, once
            ``exit_with_parent`` is set, as soon as this process's parent is no longer that
            process (a torchrun worker whose agent was killed: the agent's pid may linger as
            a zombie; the exit message then names torchrun's agent).

    ``exit_grace`` (10 s) is how long the main thread gets to stop on its own after an
    abort, before the watchdog ends the process.

    The watchdog's heartbeat (:attr:`Position.beat`) tells which peers stopped
    (:func:`stalled_ranks`); ``lost`` collects direct evidence (a broken link to a peer);
    ``before_exit``, when set, is called with the reason just before the watchdog ends the
    process.
    """

    def __init__(self, rank: int, world_size: int, store=None, *,
                 launcher_pid: int | None = None) -> None:
        self.rank = rank
        self.world_size = world_size
        self.store = store
        self.launcher_pid = launcher_pid
        self.exit_with_parent = False  # torchrun.install: the launcher is our parent
        self.exit_grace = 10.0
        self.lost: dict[int, str] = {}
        self.store_lost = False  # the watchdog found the side-channel store unreachable
        self.before_exit: Callable[[str], None] | None = None
        self.position = Position(rank)
        self.abort_reason: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- main thread ------------------------------------------------------------------
    def at(self, index: int, total: int, action: str, state: str = "compute", *,
           between: bool = False) -> None:
        """Note the current action, or with ``between`` the next one while the rank is
        between two (cheap: no I/O; the watchdog thread publishes it)."""
        self.position = Position(self.rank, index, total, action, state, between=between)

    def note(self, state: str) -> None:
        """Change only the state of the current position (``wait act 1F3 from rank 0``)."""
        p = self.position  # (dataclasses.replace costs several times more: every wait)
        self.position = Position(p.rank, p.index, p.total, p.action, state, p.beat, p.between)

    def note_lost(self, peer: int, why: str) -> None:
        """Record evidence that ``peer`` is gone (the first piece of evidence is kept)."""
        self.lost.setdefault(peer, why)

    def check(self) -> None:
        """Raise :class:`PeerFailedError` when the run was aborted."""
        if self.abort_reason is not None:
            raise PeerFailedError(f"rank {self.rank} stops: {self.abort_reason}")

    def fail(self, exc: BaseException) -> None:
        """Report this rank's failure: ``failed/<rank>``, the position, and ``abort``."""
        # "rank 1 failed at action 4/9 (1B1) compute", "... failed with 5/20 actions done
        # (next 1F2), in collective 3", "... failed before its first action (setup)"
        where = self.position.describe(rank=False)
        if self.position.index >= 0:
            where = ("with " if self.position.between else "at ") + where
        text = f"{type(exc).__name__}: {exc}"
        self.note(f"failed: {text}")
        if self.store is None:
            return
        # the store may be gone too; the launcher still sees the exit code
        with contextlib.suppress(Exception):
            self.store.set(_key(f"status/{self.rank}"), self.position.to_json())
            detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self.store.set(_key(f"failed/{self.rank}"), f"{text}\n{detail}")
            if isinstance(exc, OpTimeoutError) and exc.peer is not None:
                # the rank that did not send is the suspect, not the one that waited
                claim_abort(self.store, f"rank {exc.peer} did not answer within the "
                            f"per-operation timeout ({_where_is(self.store, exc.peer)}): "
                            f"rank {self.rank} {text}")
            elif not is_communication_error(exc):
                claim_abort(self.store, f"rank {self.rank} failed {where}: {text}")

    def finish(self) -> None:
        """Mark this rank done (unless it failed: that stays its last word) and stop the
        watchdog thread."""
        if not self.position.state.startswith("failed"):
            self.note("done")
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * PUBLISH_INTERVAL + 1.0)
        if self.store is not None:
            with contextlib.suppress(Exception):
                self.store.set(_key(f"status/{self.rank}"), self.position.to_json())

    # -- watchdog thread --------------------------------------------------------------
    def start(self) -> StatusBoard:
        """Start the daemon thread that publishes the position and polls ``abort``."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, daemon=True,
                                            name=f"pml-watchdog-{self.rank}")
            self._thread.start()
        return self

    def _watch(self) -> None:
        store = None
        with contextlib.suppress(Exception):
            store = self.store.clone() if self.store is not None else None
        abort_seen_at = None
        beat = 0
        while not self._stop.wait(PUBLISH_INTERVAL):
            if self._launcher_gone():
                # nobody will collect our result, and the launcher's store is gone too (each
                # failed call would print a C++ stack trace): one line, then exit
                launcher = "torchrun's agent" if self.exit_with_parent else "its launcher"
                gone = f"{launcher} (pid {self.launcher_pid}) is gone"
                with contextlib.suppress(OSError):
                    os.write(2, f"rank {self.rank}: {gone}; stopping "
                                f"({self.position.describe()})\n".encode())
                self._exit(3, gone)
            if store is None:
                continue
            try:
                beat += 1
                position = dataclasses.replace(self.position, beat=beat)
                store.set(_key(f"status/{self.rank}"), position.to_json())
                reason = self.abort_reason or read_abort(store)
            except Exception:
                # The store's host died (the launcher or torchrun's agent): stop waiting.
                self.store_lost = True
                reason = self.abort_reason or "the side-channel store is unreachable"
            if reason is not None and abort_seen_at is None:  # the first sign of an abort
                self.abort_reason, abort_seen_at = reason, time.monotonic()
            if (abort_seen_at is not None and not self._stop.is_set()
                    and time.monotonic() - abort_seen_at > self.exit_grace):
                # backstop: the main thread is stuck outside any wait
                self._exit(4, f"stopped {self.exit_grace:g} s after the abort "
                           f"({self.abort_reason}) without its main thread noticing")

    def _launcher_gone(self) -> bool:
        pid = self.launcher_pid
        return pid is not None and ((self.exit_with_parent and os.getppid() != pid)
                                    or not _pid_alive(pid))

    def _exit(self, code: int, reason: str) -> None:
        """End the process from the watchdog thread, after ``before_exit`` had its say."""
        if self.before_exit is not None:
            with contextlib.suppress(BaseException):
                self.before_exit(reason)
        os._exit(code)


def stalled_ranks(store, world_size: int, window: float, *, exclude=()) -> list[int]:
    """Ranks whose heartbeat did not advance during ``window`` seconds, leaving out
    ``exclude`` and ranks whose last status says they finished or failed (their watchdog
    stopped on purpose). Raises what the store raises when it is unreachable."""
    before = read_positions(store, world_size)
    time.sleep(window)
    after = read_positions(store, world_size)
    ended = {r for r, p in after.items() if p.state == "done" or p.state.startswith("failed")}
    return [r for r in range(world_size)
            if r not in exclude and r not in ended and after.get(r) == before.get(r)]


def absent_ranks(store, world_size: int, here: str, *, exclude=(),
                 window: float = 3 * PUBLISH_INTERVAL) -> list[int]:
    """The ranks that did not reach the collective this rank waits in, most suspect first.

    ``here`` is the state every rank notes when it enters that collective (a waiting
    rank's state is ``wait <here>``). First the ranks whose heartbeat stopped during
    ``window`` seconds (a frozen or dead process: its last state may be stale), then the
    ranks whose published state does not end with ``here`` (stuck outside the collective:
    evaluating, say, or in a loop of their own). Empty when nothing can be read (no
    store, or it is gone).
    """
    try:
        stalled = stalled_ranks(store, world_size, window, exclude=exclude)
        positions = read_positions(store, world_size)
    except Exception:
        return []
    elsewhere = [r for r in range(world_size) if r not in exclude and r not in stalled
                 and (r not in positions or not positions[r].state.endswith(here))]
    return stalled + elsewhere


def _pid_alive(pid: int) -> bool:
    """True if a process with this id exists (zombies included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Pending:
    """One Work being waited for: polled (NCCL: ``is_completed()`` tells the truth) or, with
    ``jobs``, handed to a helper thread that blocks in ``wait()`` (gloo)."""

    def __init__(self, work, jobs=None) -> None:
        self.work, self.error = work, None
        # held until the helper has waited (a bare lock: cheaper than an Event per message)
        self.lock = None if jobs is None else threading.Lock()
        if jobs is not None:
            self.lock.acquire()
            jobs.put(self)

    def done(self, pause: float) -> bool:
        """True when complete; else wait up to ``pause`` seconds and return False."""
        if self.lock is not None:
            if not self.lock.acquire(pause > 0, pause if pause > 0 else -1):
                return False
            self.lock.release()  # stays done for later calls
            return True
        if self.work.is_completed():
            return True
        if pause:
            time.sleep(pause)
        return False

    def finish(self) -> None:
        """Raise the communication error of a completed Work, if any."""
        if self.lock is None:
            self.work.wait()
        elif self.error is not None:
            raise self.error


class Waiter:
    """Abortable waits on ``torch.distributed`` Works, for gloo and NCCL (chapter 11).

    A blocking ``work.wait()`` cannot be interrupted, gloo's timed wait closes the connection
    when it expires, and gloo's ``is_completed()`` stays False until someone waits. So with
    gloo a helper thread does the blocking ``wait()`` and the main thread waits on an event
    in slices of 50 ms, checking the abort flag and the deadline in between. Sends go to a
    second thread, so their buffers are freed as they complete (two threads: a send only
    completes after its peer posted the matching receive, which may depend on a receive of
    ours). With NCCL (``polling=True``) the main thread polls ``is_completed()``, sleeping
    from 20 us up to 1 ms, so short waits stay short and long ones cost little CPU.

    The helper threads belong to one run: :meth:`close` stops them (the transport's and the
    executor's ``close`` call it), so a process that runs many jobs holds no more threads
    after the last than after the first.

    Args:
        board: the rank's status board (abort flag, position), or None (a board of its
            own, rank -1, without a side channel).
        timeout: seconds any single wait may take.
        polling: True for NCCL (poll ``is_completed``), False for gloo (helper threads).

    ``wait_seconds`` adds up the time spent in :meth:`wait` (the trace's waiting time).
    """

    SLICE = 0.05

    def __init__(self, board: StatusBoard | None, timeout: float, *, polling: bool) -> None:
        self.board = board if board is not None else StatusBoard(-1, 1)
        self.timeout = timeout
        self.polling = polling
        self.wait_seconds = 0.0
        self._sends: list = []  # (pending, tensor kept alive until sent, what, peer)
        self._helpers: dict = {}  # helper thread name -> (thread, its job queue)

    def _pending(self, work, name: str) -> _Pending:
        if self.polling:
            return _Pending(work)
        if name not in self._helpers:
            jobs = queue.SimpleQueue()

            def serve():
                while (job := jobs.get()) is not None:  # None: close(), no more work
                    try:
                        job.work.wait()
                    except BaseException as exc:  # handed to the main thread
                        job.error = exc
                    job.lock.release()

            thread = threading.Thread(target=serve, name=name, daemon=True)
            thread.start()
            self._helpers[name] = (thread, jobs)
        return _Pending(work, self._helpers[name][1])

    def _await(self, pending: _Pending, what: str, peer: int | None) -> None:
        """Wait for ``pending``, checking the abort flag and the deadline; raise
        :class:`PeerConnectionError` from the library's error if its Work failed. With the
        ``peer`` of a point-to-point message, the board notes the broken link as evidence
        that this peer was lost (:meth:`StatusBoard.note_lost`)."""
        board = self.board
        pause = 2e-5 if self.polling else self.SLICE
        if not pending.done(0.0 if self.polling else pause):
            before = board.position.state
            board.note(f"wait {what}")
            deadline = time.monotonic() + self.timeout
            while not pending.done(pause):
                board.check()
                if time.monotonic() > deadline:
                    raise OpTimeoutError(f"waited more than {self.timeout:g} s for {what} "
                                         f"({board.position.describe()})", peer=peer)
                if self.polling:
                    pause = min(pause * 2, 1e-3)
            board.note(before)
        try:
            pending.finish()
        except Exception as exc:  # the library's own error (the Work's wait raised it)
            self._broken(exc, what, peer)

    def _broken(self, exc: Exception, what, peer: int | None):
        """Raise :class:`PeerConnectionError` from the library's error ``exc`` (a Work's
        wait raised it); with a peer, the board notes the broken link as evidence that this
        peer was lost (:meth:`StatusBoard.note_lost`)."""
        first = (str(exc).strip().splitlines() or [""])[0][:200]  # gloo's messages run long
        if peer is not None:
            self.board.note_lost(peer, f"the link to it broke while waiting for {what} ({first})")
        raise PeerConnectionError(f"waiting for {what}: {type(exc).__name__}: {exc}") from exc

    def wait(self, work, what, peer: int | None = None) -> None:
        """Block until ``work`` is done; raise on abort, timeout or a communication error.

        ``what``: what is waited for (a string, or an object such as a message, formatted
        only when the wait is noted or fails); ``peer``: the rank at the other end (noted
        as lost when the link to it breaks)."""
        start = time.perf_counter()
        try:
            self._await(self._pending(work, "pml-recv-waiter"), what, peer)
        finally:
            self.wait_seconds += time.perf_counter() - start

    def finish_matched(self, work, what, peer: int | None = None) -> None:
        """Wait on this thread for a send whose receive the peer has already posted (it has
        since sent us a later message of the pair: see
        :meth:`~pipemare_lite.engine.distributed.transport.P2PTransport.recv`). Such a wait
        lasts only as long as the transfer, so it needs no helper thread, no abort check
        and no deadline; a broken link still raises :class:`PeerConnectionError`. ``what``
        is formatted only for an error."""
        try:
            work.wait()
        except Exception as exc:
            self._broken(exc, f"{what} to be received", peer)

    def wait_here(self, work, what, peer: int | None = None) -> None:
        """Wait on this thread, with the library's own timed wait, for a message that comes
        soon or not at all (a run's losses, whose receive is posted before the run: see
        :meth:`~pipemare_lite.engine.distributed.transport.P2PTransport.send_losses`). No
        hand-over to a helper thread, which costs more than such a wait. After ``timeout``
        seconds: :class:`OpTimeoutError` naming ``peer`` (gloo's timed wait then closes
        the link, the run fails anyway). No abort check while it waits: a peer that stops
        closes its links, which ends the wait; an abort found then is reported as such."""
        self.board.note(f"wait {what}")
        start = time.perf_counter()
        try:
            work.wait(timedelta(seconds=self.timeout))
        except Exception as exc:
            self.board.check()  # aborted meanwhile: that is the story to tell
            if "Timed out" in str(exc):
                raise OpTimeoutError(f"waited more than {self.timeout:g} s for {what} "
                                     f"({self.board.position.describe()})", peer=peer) from exc
            self._broken(exc, what, peer)
        finally:
            self.wait_seconds += time.perf_counter() - start

    def reap(self, work, keep_alive, what: str, peer: int | None = None) -> None:
        """Let a send complete in the background; ``keep_alive`` (its tensor) lives until then."""
        pending = self._pending(work, "pml-send-waiter")
        self._sends = [s for s in self._sends if not s[0].done(0.0)]
        self._sends.append((pending, keep_alive, what, peer))

    def drain(self) -> None:
        """Wait until every reaped send is complete (the end of a run)."""
        for pending, _tensor, what, peer in self._sends:
            self._await(pending, f"{what} to be received", peer)
        self._sends = []

    def close(self, wait: float = 5.0) -> None:
        """Stop the helper threads; safe to call twice (a later wait starts new ones).

        Each thread first finishes the waits already handed to it, so with every send
        complete (after :meth:`drain`) it ends at once. ``wait`` bounds the seconds spent
        joining them (0 after a failure: a thread blocked on a dead peer's message must not
        delay the error report; it is a daemon and ends with the process). A thread still
        alive after the bound is reported with a warning, not left silently.
        """
        threads, self._helpers = list(self._helpers.values()), {}
        for _thread, jobs in threads:
            jobs.put(None)
        if wait <= 0:
            return
        deadline = time.monotonic() + wait
        for thread, _jobs in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [thread.name for thread, _jobs in threads if thread.is_alive()]
        if alive:
            warnings.warn(f"rank {self.board.rank}: helper thread(s) "
                          f"{alive} still wait on a message after {wait:g} s (a send nobody "
                          "received); they end with the process", RuntimeWarning, stacklevel=2)
