"""One memory cgroup per grading jail: the jail's processes *together* are capped.

An rlimit on address space (``RLIMIT_AS``) is per process: a fork bomb of big allocations
gives every child its own ``--memory-mb`` (issue 46's hostile pass: 5.3 GB resident against
a 4 GiB setting). A cgroup caps what all of its processes hold together, page cache and the
jail's tmpfs included, and the kernel's OOM killer ends one of them when they reach it.

Where the grader may make a child of its own cgroup with the memory controller (cgroup v2:
``memory`` in the grader's cgroup's ``cgroup.subtree_control``, or enabled there by the
grader; cgroup v1: the ``memory`` hierarchy, writable: typical for root, in a container
too), :func:`create` makes ``pipemare-jail-<pid>-<n>`` there; the worker's command enters
it before bubblewrap starts (:meth:`JailCgroup.command`), so nothing of the jail runs
outside it. Its limit starts at the worker's allowance plus ``--memory-mb``
(:data:`WORKER_ALLOWANCE_BYTES`); once the worker has loaded what it preloads, and before
any student code runs, the grader sets it to what the jail then uses plus ``--memory-mb``
(:meth:`JailCgroup.tighten`). Swap is off for it. When the jail ends the grader kills
whatever is left in the cgroup and removes it (:meth:`JailCgroup.close`).

Where no such cgroup can be made, :func:`available` says why, and the worker caps the
number of processes more tightly instead (``worker.FALLBACK_PROCESSES``), so the jail's
total stays below that many times ``--memory-mb`` (docs/instructors.md). Torch-free.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

#: What the worker may use before it reports ready (an interpreter, numpy, torch when an
#: exercise needs it, nbformat): the limit until the grader tightens it.
WORKER_ALLOWANCE_BYTES = 2 * 2**30
#: Name of the cgroups this grader makes (one per jail).
PREFIX = "pipemare-jail-"
_made = itertools.count()


def _mountinfo() -> list[tuple[str, str, str]]:
    """``(mount point, file system type, super options)`` of every mount."""
    found = []
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return found
    for line in text.split("\n"):
        if " - " not in line:
            continue
        left, right = line.split(" - ", 1)
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3:
            found.append((fields[4].replace("\\040", " "), tail[0], tail[2]))
    return found


def _own_cgroups() -> dict[str, str]:
    """Controller list (``""`` for v2) -> this process's cgroup path."""
    found = {}
    try:
        text = Path("/proc/self/cgroup").read_text()
    except OSError:
        return found
    for line in text.split("\n"):
        parts = line.split(":", 2)
        if len(parts) == 3:
            found[parts[1]] = parts[2]
    return found


def _candidates() -> list[tuple[int, Path]]:
    """Where a child cgroup with the memory controller could go: ``(version, folder)``."""
    own, mounts, found = _own_cgroups(), _mountinfo(), []
    if "" in own:
        for point, kind, _options in mounts:
            if kind == "cgroup2":
                found.append((2, Path(point) / own[""].lstrip("/")))
    for controllers, path in own.items():
        if "memory" in controllers.split(","):
            for point, kind, options in mounts:
                if kind == "cgroup" and "memory" in options.split(","):
                    found.append((1, Path(point) / path.lstrip("/")))
    return found


def _v2_has_memory(parent: Path) -> bool:
    """True when children of ``parent`` get the memory controller (enabled here if need be)."""
    try:
        if "memory" not in (parent / "cgroup.controllers").read_text().split():
            return False
        if "memory" in (parent / "cgroup.subtree_control").read_text().split():
            return True
        (parent / "cgroup.subtree_control").write_text("+memory")  # fails when it has processes
        return True
    except OSError:
        return False


@lru_cache(maxsize=1)
def _place() -> tuple[int, Path] | str:
    """``(version, parent folder)`` where a jail's cgroup can be made, else why not."""
    reasons = []
    for version, parent in _candidates():
        if version == 2 and not _v2_has_memory(parent):
            reasons.append(f"cgroup v2 at {parent}: no memory controller for its children")
            continue
        probe = parent / f"{PREFIX}probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            reasons.append(f"cgroup v{version} at {parent}: {exc.strerror or exc}")
            continue
        return version, parent
    return "; ".join(reasons) or "no cgroup file system with a memory controller is mounted"


def available() -> tuple[bool, str]:
    """``(True, where)`` when each jail can get a memory cgroup here, else ``(False, why)``."""
    place = _place()
    if isinstance(place, str):
        return False, place
    return True, f"cgroup v{place[0]} under {place[1]}"


@dataclass
class JailCgroup:
    """One jail's memory cgroup: made by :func:`create`, removed by :meth:`close`."""

    path: Path
    version: int
    memory_bytes: int
    tightened: bool = False

    def command(self, command: list[str]) -> list[str]:
        """``command``, started from a shell that first moves itself into this cgroup (the
        write of ``$$`` to ``cgroup.procs``) and then becomes ``command`` (``exec``)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.path),
                *command]

    def _write(self, name: str, value: int | str) -> None:
        (self.path / name).write_text(str(value))

    def set_limit(self, limit: int) -> None:
        """Cap the cgroup's memory at ``limit`` bytes, swap included."""
        if self.version == 2:
            self._write("memory.max", limit)
            if (self.path / "memory.swap.max").exists():
                self._write("memory.swap.max", 0)
        else:  # v1: memory+swap may never be below memory alone
            lowering = limit < self.limit()
            if not lowering:
                self._try_write("memory.memsw.limit_in_bytes", limit)
            self._write("memory.limit_in_bytes", limit)
            self._try_write("memory.memsw.limit_in_bytes", limit)

    def _try_write(self, name: str, value: int) -> None:
        try:
            self._write(name, value)
        except OSError:  # no swap accounting in this kernel
            pass

    def limit(self) -> int:
        """The cap now, in bytes."""
        text = (self.path / ("memory.max" if self.version == 2 else
                             "memory.limit_in_bytes")).read_text().strip()
        return 2**63 - 1 if text == "max" else int(text)

    def usage(self) -> int:
        """Bytes its processes hold now."""
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return int((self.path / name).read_text().strip())

    def peak(self) -> int | None:
        """Most bytes its processes held at once (None where the kernel does not say)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        try:
            return int((self.path / name).read_text().strip())
        except (OSError, ValueError):
            return None

    def tighten(self) -> None:
        """Once, when the worker is ready (no student code has run): the cap becomes what
        the jail uses now plus ``memory_bytes``."""
        if not self.tightened:
            self.tightened = True
            self.set_limit(min(self.limit(), self.usage() + self.memory_bytes))

    def out_of_memory_kills(self) -> int:
        """How many processes the kernel killed for reaching the cap."""
        try:
            if self.version == 2:
                text = (self.path / "memory.events").read_text()
            else:
                text = (self.path / "memory.oom_control").read_text()
        except OSError:
            return 0
        for line in text.split("\n"):
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def processes(self) -> list[int]:
        """Pids in the cgroup now."""
        try:
            text = (self.path / "cgroup.procs").read_text()
        except OSError:
            return []
        return [int(p) for p in text.split() if p.isdigit()]

    def close(self) -> None:
        """Kill every process left in the cgroup (``cgroup.kill`` where the kernel has it,
        else one by one until none is left) and remove the cgroup."""
        if (self.path / "cgroup.kill").exists():
            try:
                self._write("cgroup.kill", 1)
            except OSError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = self.processes()
            if not left:
                try:
                    self.path.rmdir()
                    return
                except FileNotFoundError:
                    return
                except OSError:  # the last ones are still being reaped
                    pass
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)


def create(memory_bytes: int) -> JailCgroup | None:
    """A fresh cgroup for one jail, capped at the worker's allowance plus ``memory_bytes``;
    None where :func:`available` says no cgroup can be made."""
    place = _place()
    if isinstance(place, str):
        return None
    version, parent = place
    path = parent / f"{PREFIX}{os.getpid()}-{next(_made)}"
    try:
        path.mkdir()
    except OSError:
        return None
    cgroup = JailCgroup(path, version, memory_bytes)
    try:
        cgroup.set_limit(WORKER_ALLOWANCE_BYTES + memory_bytes)
    except OSError:
        cgroup.close()
        return None
    return cgroup
