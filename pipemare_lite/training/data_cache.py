"""A cache of generated arrays, so a CLI run does not pay for them twice (chapter 07).

``digits()`` imports scikit-learn and decodes its data file, about a second, for 1797 small
images; the CLI calls it on every run. :func:`cached_arrays` keeps such arrays in one
``.npz`` file per key under :func:`cache_dir` and reads them back with
``allow_pickle=False``: loading never executes code. The key names everything the arrays
depend on (e.g. the scikit-learn version); a file that cannot be read is rebuilt, and a
cache that cannot be written is skipped (the arrays are still returned).
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np


def cache_dir() -> Path:
    """``$PIPEMARE_CACHE``, else ``$XDG_CACHE_HOME/pipemare-lite``, else ``~/.cache/...``."""
    if os.environ.get("PIPEMARE_CACHE"):
        return Path(os.environ["PIPEMARE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pipemare-lite"


def cached_arrays(
    key: str, build: Callable[[], dict[str, np.ndarray]], names: tuple[str, ...] | None = None
) -> dict[str, np.ndarray]:
    """``build()``'s arrays, read from the cache file ``<key>.npz`` when it exists.

    ``names``: the arrays ``build()`` returns; a cache file holding other arrays (written by
    another version, or by hand) is rebuilt rather than failing every run. Set
    ``PIPEMARE_CACHE=off`` to always build.
    """
    if os.environ.get("PIPEMARE_CACHE") == "off":
        return build()
    path = cache_dir() / f"{key}.npz"
    try:
        with np.load(path, allow_pickle=False) as stored:
            if names is None or sorted(stored.files) == sorted(names):
                return {name: stored[name] for name in stored.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):  # missing or damaged: rebuild
        pass
    arrays = build()
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
        with os.fdopen(handle, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, path)  # atomic: a concurrent reader sees all or nothing
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return arrays
