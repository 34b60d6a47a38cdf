"""What a run record needs so that a paper can cite it (introduced in chapter 07's fit;
issue 48): the software (Python, torch, numpy and this package's versions, the git commit),
the code of every plugin that ran, and a digest of the schedule's rows.

- :func:`environment`: versions and ``git_commit`` (the checkout's HEAD, with
  ``git_dirty`` when tracked files differ from it), or ``"not a checkout"``;
- :func:`plugin_sources`: ``{module: "sha256:..."}`` of each plugin module's source file:
  the modules imported as plugins (:mod:`pipemare_lite.plugins`) and those that registered
  the run's schedule, method or executor (in a long-lived process, a notebook or a test
  session, "imported as plugins" includes those an earlier run of the process loaded);
- :func:`schedule_digest`: ``"sha256:..."`` over the schedule's name, sizes, weight mode,
  placement and every rank's actions in order (made as the rows are read, so a long run's
  periodic rows are never held whole);
- :func:`run_provenance`: the three together, as fit's history keeps them
  (``history.provenance``), and :func:`changed_code`, what a resume refuses.

Torch-free: torch's version is read from the installed distribution unless torch is imported.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import platform
import subprocess
import sys
from pathlib import Path

#: What :func:`environment` says outside a git checkout (an installed package, a tarball).
NOT_A_CHECKOUT = "not a checkout"
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the checkout (or site-packages)
_GIT: dict[str, object] = {}  # the commit is read once per process


def _version(module: str) -> str | None:
    """``module.__version__`` when it is imported, else its installed distribution's version
    (read without importing it), or None when it is not installed."""
    if module in sys.modules:
        return str(getattr(sys.modules[module], "__version__", None))
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return None


def git_commit() -> dict:
    """``{"git_commit": sha, "git_dirty": bool}`` of the checkout this package runs from, or
    ``{"git_commit": "not a checkout"}`` (no git, or not inside a repository)."""
    if not _GIT:
        def git(*args: str) -> str:
            return subprocess.run(["git", "-C", str(_PACKAGE_ROOT), *args], capture_output=True,
                                  text=True, timeout=10, check=True).stdout.strip()
        try:
            sha = git("rev-parse", "HEAD")
            dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
            _GIT.update(git_commit=sha, git_dirty=dirty)
        except (OSError, subprocess.SubprocessError):
            _GIT.update(git_commit=NOT_A_CHECKOUT)
    return dict(_GIT)


def environment() -> dict:
    """Python, torch, numpy and pipemare_lite versions, the git commit (see
    :func:`git_commit`) and the platform."""
    from pipemare_lite import __version__

    return {"python": platform.python_version(), "torch": _version("torch"),
            "numpy": _version("numpy"), "pipemare_lite": __version__, **git_commit(),
            "platform": platform.platform()}


def source_hash(module: str) -> str:
    """``"sha256:<hex>"`` of ``module``'s source file; ``"no source file: ..."`` for a module
    without one (code typed in a notebook: its hash cannot be taken)."""
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None)
    if path is None:
        spec = importlib.util.find_spec(module) if module != "__main__" else None
        path = spec.origin if spec is not None else None
    if not path or not Path(path).is_file():
        return f"no source file: {module} (defined interactively?)"
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_plugins(schedule: str | None = None, method: str | None = None,
                executor: str | None = None) -> list[str]:
    """The plugin modules of a run: every module imported as a plugin, then the modules
    that registered its schedule, method and executor when those are not the package's."""
    from pipemare_lite.plugins import loaded_plugins

    modules = list(loaded_plugins())
    if schedule is not None:
        from pipemare_lite.schedules.registry import REGISTERED_BY

        modules.append(REGISTERED_BY.get(schedule))
    if method is not None:
        from pipemare_lite.methods.registry import METHODS

        spec = METHODS.get(method)
        modules.append(spec.module if spec is not None else None)
    if executor is not None:
        from pipemare_lite.training.executors import EXECUTORS

        modules.append(getattr(EXECUTORS.get(executor), "__module__", None))
    own = __name__.split(".")[0]
    return list(dict.fromkeys(m for m in modules
                              if m and m != own and not m.startswith(own + ".")))


def plugin_sources(modules) -> dict[str, str]:
    """``{module: source_hash(module)}`` for ``modules``."""
    return {module: source_hash(module) for module in modules}


def schedule_digest(schedule) -> str:
    """``"sha256:<hex>"`` of the schedule's name, sizes, weight mode, placement and every
    rank's actions in order (a long run's periodic rows are read action by action, never
    held whole). Equal rows give equal digests, however they were made."""
    digest = hashlib.sha256()
    head = (schedule.name, schedule.num_ranks, schedule.num_microbatches,
            schedule.num_minibatches, schedule.chunks, schedule.weight_mode,
            schedule.warmup, tuple(schedule.placement))
    digest.update(repr(head).encode())
    for rank in range(schedule.num_ranks):
        digest.update(b"\n")
        digest.update(",".join(map(str, schedule.row(rank))).encode())
    return "sha256:" + digest.hexdigest()


def run_provenance(schedule, *, schedule_name: str | None = None, method: str | None = None,
                   executor: str | None = None) -> dict:
    """What fit's history records about the code that ran: ``environment`` (versions, git
    commit), ``plugins`` (``{module: source hash}``) and ``schedule`` (its digest)."""
    modules = run_plugins(schedule_name, method, executor)
    return {"environment": environment(), "plugins": plugin_sources(modules),
            "schedule": schedule_digest(schedule)}


def changed_code(saved: dict, now: dict) -> list[str]:
    """What differs between two :func:`run_provenance` records in the code a run ran: each
    plugin whose source changed, appeared or went, and the schedule's rows. Versions and
    the git commit are not compared (a resume on an updated machine is allowed)."""
    problems = []
    before, after = saved.get("plugins", {}), now.get("plugins", {})
    for module in sorted(set(before) | set(after)):
        if before.get(module) != after.get(module):
            problems.append(f"plugin {module}: source {before.get(module, 'not loaded')} "
                            f"then, {after.get(module, 'not loaded')} now")
    if saved.get("schedule") not in (None, now.get("schedule")):
        problems.append(f"schedule rows: {saved['schedule']} then, {now.get('schedule')} now")
    return problems
