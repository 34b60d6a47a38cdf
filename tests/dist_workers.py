"""Process bodies for multi-process tests (importable by name, as :func:`launch` needs)."""

from __future__ import annotations

import os
import threading

import torch.distributed as dist

from pipemare_lite.executor.dist import dist_worker


def resources_after_each_job(info, jobs) -> list[dict]:
    """Run ``jobs`` one after another in this launch; after each, what the process holds.

    Per job: the Python threads alive (their names), the OS threads of the process (gloo's
    own threads included, Linux only) and whether the launch's process group is still the
    only one.
    """
    seen = []
    for job in jobs:
        dist_worker(info, [job])
        tasks = f"/proc/{os.getpid()}/task"
        seen.append({
            "threads": sorted(t.name for t in threading.enumerate()),
            "os_threads": len(os.listdir(tasks)) if os.path.isdir(tasks) else None,
            "default_group_alive": dist.is_initialized(),
        })
    return seen
