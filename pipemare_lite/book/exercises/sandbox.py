"""One jail per submission: the command line that starts a grading worker inside bubblewrap.

:mod:`~pipemare_lite.book.exercises.grading` starts one worker per submission (and again
after an answer that timed out or crashed it). Outside a sandbox a worker is a process
boundary only: the student's code runs as the grader's user and can write into the package,
the virtual environment, the reports or a classmate's folder. Inside, it sees::

    /usr, /bin, /lib*          read-only (the system's programs and libraries)
    <python>, <venv>           read-only, at their own paths (the interpreter and its packages)
    /opt/pipemare/pipemare_lite  read-only: the package without the exercise definitions
                               (registry, references, chNN.py ... are empty files here),
                               and with the engine files that define a graded exercise's
                               answer (and their compiled copies) empty too: the worker
                               gets their text through its stdin, imports them and drops
                               the text before any student code runs (:func:`locked_sources`)
    /sandbox                   the only writable place: one tmpfs of ``disk_mb`` MiB holding
                               /sandbox/work (the working directory), /sandbox/tmp
                               (``$TMPDIR``; /tmp points there) and /sandbox/notebooks (the
                               worker's: each notebook, sent to it through its stdin, is
                               copied there afresh, read-only, before each exercise loads it)
    /proc, /dev                its own (a new pid namespace; null, zero, random ...)

and nothing else: not the repository (so not ``chapters/``, which holds the solutions), not
the grader's home, not the other students, not the reports. No network (a new network
namespace), a new pid, IPC and UTS namespace, a minimal environment, ``/`` read-only. The
worker starts as root *inside* the jail (with only CAP_SETUID, CAP_SETGID, CAP_CHOWN and
CAP_KILL, :data:`WORKER_CAPABILITIES`: bubblewrap started by root keeps all capabilities
unless told to drop them, so it is told, ``--cap-drop ALL``) and stays so, running no
student code; each exercise runs in a process forked from
it that drops for good, before any student code runs, to a uid and gid of its own
(:func:`worker_uid`: no other process on the machine has it), and caps its memory, CPU time,
file size and processes (:mod:`~pipemare_lite.book.exercises.worker`). A uid of its own
matters for the process cap: the kernel counts RLIMIT_NPROC per uid over the whole machine,
so with one shared uid (65534, ``nobody``, as before) a fork bomb in one jail used up the
cap of every other jail, and a classmate graded beside it could not fork.
When the grader is not root, bubblewrap maps the grader's uid to 65534 in a new user
namespace instead (same mounts); the kernel (5.14 and later) counts the process cap per
user namespace and uid, so there too it counts this jail's processes only.

Rlimits are per process; the jail's memory as a whole is capped by a cgroup of its own
where the machine allows one (:mod:`~pipemare_lite.book.exercises.memory_cgroup`: the
grader starts this command inside it). The whole process tree dies with the worker:
bubblewrap's init is pid 1 of the namespace, and when the worker exits (or the grader
kills bubblewrap, ``--die-with-parent``), the kernel kills everything left in it, a
double-forked daemon included.

Bubblewrap is Debian's ``bubblewrap`` package (``apt-get install bubblewrap``; ``.ci/run``
installs it). Without it :func:`sandbox_available` says why, and grading refuses untrusted
work unless the instructor passes ``--no-sandbox`` (docs/instructors.md). Torch-free.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

import pipemare_lite

#: Where the package is mounted inside the jail (``PYTHONPATH``).
PACKAGE_ROOT = "/opt/pipemare"
#: The worker's working directory and temporary directory inside the jail.
WORK_DIR, TMP_DIR = "/sandbox/work", "/sandbox/tmp"
#: Where the worker copies a notebook before each exercise's load: the worker's own folder,
#: read-only to the student's uid.
SHELF_DIR = "/sandbox/notebooks"
#: Default size of the jail's only writable file system, in MiB (the total disk cap).
DISK_MB = 256
#: The uid and gid student code runs as when the grader is not root (``nobody``, mapped in
#: a user namespace of its own).
SANDBOX_UID = 65534
#: The only capabilities the worker holds in a jail started by root (bubblewrap drops the
#: rest); an exercise's process, once it has taken the jail's uid, holds none.
WORKER_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_KILL")
#: Where the uids of jails started by root begin (:func:`worker_uid`): far above any user's.
JAIL_UID_BASE = 1_000_000_000
_jails_started = itertools.count()


def worker_uid() -> int:
    """A uid (and gid) for the next jail this grader starts as root: its student's code runs
    as it. Different for every jail alive at once on the machine (the grader's pid, below
    2**22, and a counter of its jails, 256 before one repeats; one grader runs its jails one
    after another), unused by any account, and below 2**31."""
    return JAIL_UID_BASE + (os.getpid() % 2**22) * 2**8 + next(_jails_started) % 2**8

#: Files of ``pipemare_lite/book/exercises`` that hold exercise definitions, cases or
#: answers: empty inside the jail (the worker cannot import them either).
HIDDEN_FILES = (
    "registry.py", "references.py", "grading.py", "hidden.py", "assign.py", "handout.py",
    "formats.py", "student_adapter.py", "compare.py",
) + tuple(f"ch{n:02d}.py" for n in range(100))


class SandboxUnavailable(RuntimeError):
    """Bubblewrap is missing or cannot start a jail here; the message says why."""


def bwrap_executable() -> str | None:
    """The ``bwrap`` command, or None."""
    return shutil.which("bwrap")


@lru_cache(maxsize=1)
def _probe() -> str | None:
    """None when a trivial jail starts, else why not (cached per process)."""
    bwrap = bwrap_executable()
    if bwrap is None:
        return (
            "bubblewrap (bwrap) is not installed: `apt-get install bubblewrap` (Debian/Ubuntu; "
            ".ci/run does it) or your distribution's bubblewrap package"
        )
    command = _bwrap_prefix(bwrap, disk_mb=1) + [sys.executable, "-c", "pass"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start a jail: {exc}"
    if done.returncode != 0:
        return f"bubblewrap could not start a jail: {done.stderr.strip()[-400:] or done.returncode}"
    return None


def sandbox_available() -> tuple[bool, str]:
    """``(True, "")`` when a jail starts on this machine, else ``(False, why)``."""
    why = _probe()
    return why is None, why or ""


def _system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    for name in ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf"):
        if os.path.exists(name):
            args += ["--ro-bind", name, name]
    return args


def _python_mounts() -> list[str]:
    """The interpreter's installation and the virtual environment, read-only."""
    places = {os.path.realpath(sys.base_prefix), sys.prefix, os.path.realpath(sys.prefix)}
    places.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    args: list[str] = []
    for place in sorted(p for p in places if not p.startswith("/usr")):
        args += ["--ro-bind", place, place]
    return args


def _package_dir() -> Path:
    return Path(pipemare_lite.__file__).resolve().parent


def _defining_file(obj) -> str | None:
    """The file that defines a function, method or class (None for anything else)."""
    if isinstance(obj, type):
        return getattr(sys.modules.get(obj.__module__), "__file__", None)
    function = getattr(obj, "__func__", obj)
    while hasattr(function, "__wrapped__"):  # functools.wraps / lru_cache
        function = function.__wrapped__
    code = getattr(function, "__code__", None)
    return code.co_filename if code is not None else None


def locked_sources(names: Iterable[str]) -> dict[str, dict]:
    """The package files that define the engine functions ``names`` (an exercise's
    ``engine_answers``), as ``module name -> {"path", "source", "package"}``.

    Inside the jail these files and their compiled copies are empty
    (:func:`worker_command`'s ``locked``): the worker gets their text in its job, imports
    them and forgets the text before any student code runs, so an answer can neither
    ``exec`` the file's source nor unmarshal its ``.pyc`` to get a copy of an engine function
    that was never switched off. A name that does not resolve is skipped (the worker leaves
    it alone too).
    """
    from pipemare_lite.book.exercises.originality import resolve

    root = _package_dir()
    found: dict[str, dict] = {}
    for name in sorted(set(names)):
        try:
            filename = _defining_file(resolve(name))
        except ImportError:
            continue
        if not filename or not filename.endswith(".py"):
            continue
        path = Path(filename).resolve()
        if root not in path.parents:
            continue  # not the package's (never the case for an engine answer)
        relative = path.relative_to(root)
        package = relative.name == "__init__.py"
        parts = relative.parent.parts if package else relative.with_suffix("").parts
        module = ".".join(("pipemare_lite", *parts))
        found[module] = {"path": f"{PACKAGE_ROOT}/pipemare_lite/{relative.as_posix()}",
                         "source": path.read_text(encoding="utf-8"), "package": package}
    return found


def _locked_mounts(locked: Iterable[str]) -> list[str]:
    """``/dev/null`` over each locked file (a path inside the jail) and its ``.pyc`` files."""
    root, args = _package_dir(), []
    prefix = f"{PACKAGE_ROOT}/pipemare_lite/"
    for inside in sorted(set(locked)):
        if not inside.startswith(prefix):
            raise ValueError(f"a locked file must be in the package ({prefix}...), got {inside!r}")
        relative = Path(inside[len(prefix):])
        args += ["--ro-bind", "/dev/null", inside]
        cache = root / relative.parent / "__pycache__"
        if cache.is_dir():
            for compiled in sorted(cache.glob(relative.stem + ".*.pyc")):
                args += ["--ro-bind", "/dev/null",
                         f"{prefix}{relative.parent.as_posix()}/__pycache__/{compiled.name}"]
    return args


def _package_mounts() -> list[str]:
    source = _package_dir()
    args = ["--ro-bind", str(source), f"{PACKAGE_ROOT}/pipemare_lite"]
    exercises = source / "book" / "exercises"
    inside = f"{PACKAGE_ROOT}/pipemare_lite/book/exercises"
    for name in HIDDEN_FILES:
        if (exercises / name).exists():
            args += ["--ro-bind", "/dev/null", f"{inside}/{name}"]
    if (exercises / "__pycache__").is_dir():  # compiled copies of the definitions
        args += ["--tmpfs", f"{inside}/__pycache__"]
    return args


def _parent_dirs(mounts: list[str]) -> list[str]:
    """``--perms 0755 --dir`` for every folder above a mount point (bubblewrap would make
    them 0700, which the student's uid cannot enter)."""
    destinations = [mounts[i + 2] for i, a in enumerate(mounts) if a == "--ro-bind"]
    parents = sorted({str(p) for d in destinations for p in Path(d).parents if str(p) != "/"},
                     key=lambda p: p.count("/"))
    args: list[str] = []
    for parent in parents:
        if not any(parent == d or parent.startswith(d + "/") for d in destinations):
            args += ["--perms", "0755", "--dir", parent]
    return args


def _bwrap_prefix(bwrap: str, disk_mb: int, locked: Iterable[str] = ()) -> list[str]:
    as_root = os.geteuid() == 0
    args = [bwrap, "--die-with-parent", "--new-session",
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try"]
    if as_root:  # the worker drops to its own uid itself, after writing the notebooks
        # (CAP_KILL: the worker, still root, ends what an exercise's process left behind).
        # Started by root, bubblewrap keeps every capability unless told to drop them:
        # --cap-add alone only adds to all of them
        args += ["--cap-drop", "ALL"]
        for capability in WORKER_CAPABILITIES:
            args += ["--cap-add", capability]
    else:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    mounts = _system_mounts() + _python_mounts() + _package_mounts() + _locked_mounts(locked)
    destinations = [mounts[i + 2] for i, a in enumerate(mounts) if a == "--ro-bind"]
    python_in_tmp = any(d == "/tmp" or d.startswith("/tmp/") for d in destinations)
    sandbox_mb = disk_mb
    if python_in_tmp:  # a checkout or venv under /tmp: bubblewrap cannot link /tmp over
        # the folders it binds there, so /tmp is a tmpfs of its own around them, with a
        # quarter of the disk cap (the two together stay within disk_mb)
        tmp_mb = max(1, disk_mb // 4)
        sandbox_mb = max(1, disk_mb - tmp_mb)
        args += ["--size", str(tmp_mb * 2**20), "--perms", "1777", "--tmpfs", "/tmp"]
    args += _parent_dirs(mounts) + mounts
    args += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(sandbox_mb * 2**20), "--perms", "0755", "--tmpfs", "/sandbox",
             "--dir", WORK_DIR, "--dir", TMP_DIR,
             *([] if python_in_tmp else ["--symlink", TMP_DIR, "/tmp"]),
             "--size", str(16 * 2**20), "--tmpfs", "/dev/shm",
             "--remount-ro", "/", "--chdir", WORK_DIR, "--clearenv"]
    environment = {
        "PATH": "/usr/bin:/bin", "HOME": WORK_DIR, "TMPDIR": TMP_DIR, "LANG": "C.UTF-8",
        "PYTHONPATH": PACKAGE_ROOT, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
        "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1",
    }
    for key, value in environment.items():
        args += ["--setenv", key, value]
    return args


def worker_command(fd: int, disk_mb: int = DISK_MB, locked: Iterable[str] = ()) -> list[str]:
    """The command that runs the grading worker in a jail, reporting on ``fd``; ``locked``:
    paths inside the jail (``path`` of :func:`locked_sources`) that are empty there.

    Raises:
        SandboxUnavailable: bubblewrap is missing or cannot start a jail here.
        ValueError: a locked path is not in the package.
    """
    why = _probe()
    if why is not None:
        raise SandboxUnavailable(why)
    prefix = _bwrap_prefix(bwrap_executable(), disk_mb, locked)
    return prefix + [sys.executable, "-s", "-m", "pipemare_lite.book.exercises.worker",
                     str(fd), "--sandboxed"]
